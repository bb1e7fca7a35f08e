#include "xinfer/backend/cuda/kernels/attention/paged_decode_attention.h"

#include <cfloat>
#include <cmath>
#include <cstdint>

#include <cuda_fp16.h>

#include "xinfer/backend/cuda/cuda_check.h"
#include "xinfer/backend/cuda/kernels/attention/attention_dispatch.cuh"
#include "xinfer/backend/cuda/kernels/attention/attention_mma.cuh"
#include "xinfer/backend/cuda/kernels/attention/attention_plan.h"
#include "xinfer/backend/cuda/kernels/attention/kv_block_index.cuh"
#include "xinfer/backend/cuda/kernels/attention/kv_fp8.cuh"
#include "xinfer/backend/cuda/kernels/cp_async.cuh"
#include "xinfer/backend/cuda/kernels/device_launch.h"
#include "xinfer/backend/cuda/kernels/pdl.cuh"
#include "xinfer/backend/cuda/kernels/rope/rope_rotate.cuh"

namespace xinfer::cuda {
namespace {

// Fragment conventions (PTX mma.m16n8k16, bf16): lane = 4 * g + t4. A (16x16, row-major): a0 (g, 2t4..),
// a1 (g + 8, 2t4..), a2 (g, 2t4 + 8..), a3 (g + 8, 2t4 + 8..). B (16x8, "col"): b0 (k 2t4.., n g),
// b1 (k 2t4 + 8.., n g). C (16x8): c0, c1 (g, 2t4, 2t4 + 1), c2, c3 (g + 8, same columns).
//
// S = Q K^T: M = 8 query heads (rows 8..15 zero), N = 8 tokens, K = head dims. Lane (g, t4) loads 16
// bytes of token row g: dims 32c + 8t4 .. +7 for chunk c. Word w of that load holds dims 32c + 8t4 + 2w
// (+1); taking words 2s, 2s + 1 as b0, b1 of k-step (c, s) orders the head dims of the dot product
// differently from memory, and Q's A fragment (loaded the same way) follows the same order, so the sum
// is unchanged.
//
// O^T = V^T P^T: M = 16 head dims, N = 8 query heads, K = 16 tokens. P^T's B fragment is S's C fragment
// (c0, c1 of the two 8-token n-tiles) converted to bf16. V^T's A fragment comes from the same 16-byte
// row loads: word q of lane (g, t4) is element (row g, cols 2t4..) of an 8x8 matrix whose column 2t4 + e
// is dim 32c + 8t4 + 2q + e; movmatrix.trans turns it into (row g, cols 2t4..) of the transpose, i.e.
// dim 32c + 8(g / 2) + 2q + (g % 2) at tokens 2t4, 2t4 + 1. m-tile (c, qp) takes q = 2qp as rows 0..7
// and q = 2qp + 1 as rows 8..15, so accumulator element (mt = 2c + qp, 2hi + e) of lane (g, t4) is
// O[head 2t4 + e][dim 32c + 8(g / 2) + 4qp + 2hi + (g % 2)].
//
// FP8 caches (kFp8): a row is kD bytes, and lane (g, t4) loads 16 codes per 16-byte load: dims
// 64u + 16t4 .. + 15 for load u. They become two bf16 chunks in registers (exact, kv_fp8.cuh) right before
// the MMAs: chunk c = 2u + half holds dims 64(c / 2) + 16t4 + 8(c % 2) .. + 7, i.e. chunk_dim(c) + 16t4
// instead of 32c + 8t4. Q is loaded in that order too, and O's dims follow the same substitution:
// chunk_dim(c) + 16(g / 2) + 4qp + 2hi + (g % 2). The K and V scales: qk_scale_of / v_scale_of (kv_fp8.cuh).
template <int kD, int kW>
struct DecodeConfig {
  static constexpr int kHeadDim = kD;
  static constexpr int kWarps = kW;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kCtasPerSm = decode_ctas_per_sm(kW);
  static constexpr int kTile = kDecodeTileTokens;
  static constexpr int kHeads = kDecodeHeadsPerCta;
  static constexpr int kChunks = kD / 32;   // 16-byte loads per lane per token row
  static constexpr int kMTiles = kD / 16;   // m16 tiles of O^T
  static constexpr int kStride = kD + 1;    // shared-memory row of O: conflict-free scattered stores
  static_assert(kD % 32 == 0, "head_dim must be a multiple of 32");
  static_assert(kTile == 16 && kHeads == 8, "fragment mapping assumes 16-token tiles and 8-head CTAs");
};

// Merge counters sit at a fixed place, [0, kMaxSplitSlots) of the workspace, whatever the step's grid: a
// step with more slots than the last must find zeros there, never an earlier step's partials. Split grids
// fit one wave (slots * parts <= kDecodeCtasPerSm * num_sms, parts >= 2), far below this bound.
constexpr size_t kMaxSplitSlots = 4096;
constexpr size_t kCounterFloats = kMaxSplitSlots;

__device__ __forceinline__ uint32_t transpose8x8(uint32_t x) {
  uint32_t y;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
  return y;
}

__device__ __forceinline__ uint32_t word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// Grid (partition, KV head * head_tiles + head tile, decode index); Cfg::kThreads threads.
// kRope (launch_paged_decode_attention_rope): q in qkv is not rotated yet and the newest row (position
// kv_len - 1) is not in the cache yet. Every CTA rotates its q heads; the CTAs of the last partition build
// the newest k (rotated) and v from qkv in shared memory and use them in place of that cache row (never
// read back: a CTA's own global writes are not visible through the read-only path), and head tile 0 of
// them writes both to the cache at the token's slot. A negative slot (padding) writes nothing and attends
// to the cache's row, as the unfused pair does. `rope` is unused without kRope.
template <typename Cfg, bool kRope, bool kFp8, bool kF16 = false>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kCtasPerSm)
    paged_decode_kernel(PagedAttentionParams p, AttentionPlanView plan, DecodeRopeParams rope,
                        int partition_size, int head_tiles, float* workspace) {
  constexpr int kD = Cfg::kHeadDim, kC = Cfg::kChunks, kW = Cfg::kWarps, kH = Cfg::kHeads, kT = Cfg::kTile;
  constexpr int kMT = Cfg::kMTiles, kS = Cfg::kStride, kThreads = Cfg::kThreads;
  static_assert(!(kRope && kFp8), "the fused RoPE path writes bf16 caches only");
  static_assert(kFp8 || !kF16, "the f16 variant reads FP8 caches");
  // Tensor-core operand type: bf16, or f16 for the kF16 variant (Q, K, V and P all in f16 there).
  auto mma = [](float(&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1) {
    mma_16816<kF16>(c, a0, a1, a2, a3, b0, b1);
  };
  auto pack_p = [](float lo, float hi) { return pack_operand<kF16>(lo, hi); };
  constexpr int kRowBytes = kD * (kFp8 ? 1 : 2);
  constexpr int kL = kRowBytes / 64;      // 16-byte loads per lane per token row (kC for bf16, kC / 2 for fp8)
  constexpr int kLaneDims = kFp8 ? 16 : 8;  // dims between the chunks of lanes t4 and t4 + 1
  // First dim of chunk c (of the lane-quad t4 = 0); see the FP8 note above.
  auto chunk_dim = [](int c) { return kFp8 ? 64 * (c >> 1) + 8 * (c & 1) : 32 * c; };
  // Chunk c of n-tile nt of a K or V tile in registers, as 8 bf16.
  auto chunk = [](const uint4 (&r)[2][kL], int nt, int c) -> uint4 {
    if constexpr (kF16)
      return e4m3x16_half_to_f16x8(r[nt][c >> 1], c & 1);
    else if constexpr (kFp8)
      return e4m3x16_half_to_bf16x8(r[nt][c >> 1], c & 1);
    else
      return r[nt][c];
  };
  const unsigned char* k_base = reinterpret_cast<const unsigned char*>(p.k_cache);
  const unsigned char* v_base = reinterpret_cast<const unsigned char*>(p.v_cache);
  constexpr int kV = kD / 8;  // 16-byte chunks of a head row
  static_assert(kV <= 16 && kC % 2 == 0,
                "kRope: a warp builds the newest k (lanes < kV / 2) and v (lanes 16..)");
  __shared__ float s_o[kW][kH][kS];     // per-warp O, scaled to the CTA max
  __shared__ float s_m[kW][kH], s_l[kW][kH];
  __shared__ float s_max[kH], s_sum[kH];  // CTA (max, sum) per head
  __shared__ int s_last;
  // kRope: the RoPE row of the newest position (cos | sin), and that token's k (rotated) and v in chunks.
  __shared__ __align__(16) float s_cs[kRope ? kD : 1];
  __shared__ uint4 s_new[2][kRope ? kV : 1];

  // PDL (pdl.cuh): until pdl_wait() this CTA may run alongside the kernels before it (rope + KV write, and
  // since rope releases before it waits, possibly the qkv projection), so before it only memory none of
  // them touches is read: the step's plan and block tables (uploaded before the forward) and the K/V rows
  // of earlier positions. The newest row, position kv_len - 1, is written by the rope kernel: a tile
  // holding it is loaded again after the wait, and q is read after it. The next kernel (the o projection)
  // may launch once every CTA has started: it loads its first weights while this one runs and waits for
  // its results itself. kRope: the kernel before is the qkv projection (or qk_norm); before the wait it
  // also reads the token's slot and its RoPE row (constant); qkv only after, and it writes the cache only
  // after.
  pdl_release();
  const int di = blockIdx.z;
  const int seq = plan.decode_seqs[di];
  const int kv_len = plan.decode_lens[di];
  const int part = blockIdx.x;
  const int begin = part * partition_size;
  // Partition past this sequence's end (the grid is sized for max_decode_len): exit. The test of seq
  // (never negative) keeps the compiler from sinking its load below the branch, so the two loads'
  // latencies overlap (the K/V addresses need both).
  if (begin >= kv_len || seq < 0) {
    pdl_wait();  // keeps the chain: kernels after this one rely on everything before it being done
    return;
  }
  const int end = min(begin + partition_size, kv_len);
  const int kvh = blockIdx.y / head_tiles, ht = blockIdx.y % head_tiles;
  const int group = p.num_heads / p.num_kv_heads;
  const int h0 = ht * kH;                // first query head of the tile within the group
  const int nh = min(kH, group - h0);   // query heads of this CTA
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t4 = lane & 3;
  const int bs = p.block_size;
  const int32_t* table = p.block_tables + static_cast<size_t>(seq) * p.max_blocks_per_seq;

  // Byte offset of this lane's first 16 bytes of token row r; rows past the partition read the
  // partition's first row instead (always mapped; their scores are masked, so P = 0 there). r / bs:
  // kv_block_index.cuh. A block's rows of all KV heads span num_kv_heads * bs * kRowBytes bytes (< 2^32).
  const KvBlockDivider div(bs);
  const uint32_t block_bytes = static_cast<uint32_t>(p.num_kv_heads * bs * kRowBytes);
  const uint32_t head_bytes = static_cast<uint32_t>(kvh * bs * kRowBytes + 16 * t4);
  auto row_offset = [&](int r) -> size_t {
    r = r < end ? r : begin;
    const uint32_t bi = div.block(static_cast<uint32_t>(r));
    const uint32_t blk = static_cast<uint32_t>(__ldg(table + bi));
    return static_cast<size_t>(blk) * block_bytes +
           (head_bytes + (static_cast<uint32_t>(r) - bi * div.block_size) * kRowBytes);
  };
  auto load_rows = [&](uint4 (&dst)[2][kL], const unsigned char* base, const size_t (&off)[2]) {
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int c = 0; c < kL; ++c) dst[nt][c] = __ldg(reinterpret_cast<const uint4*>(base + off[nt] + 64 * c));
  };

  // The mode, a compile-time 0 for bf16 caches (their loop keeps no prefetch branches).
  const int prefetch = kFp8 ? p.kv_fp8_prefetch : 0;
  // FP8 caches, PagedAttentionParams::kv_fp8_prefetch (an experiment, 0 by default): 1 = the rows of the tile
  // two ahead prefetched into L2 (cp.async.bulk.prefetch, prefetch_l2 below); 2 = the tiles one and two ahead
  // staged in shared memory by cp.async (a ring of 2 per warp, dynamic shared memory), the registers filled
  // from it. Either doubles the bytes a warp has in flight (one 4 KB tile with the register
  // loads alone).
  extern __shared__ uint4 s_ring[];  // [kW][2 stages][2 (K, V)][2 nt][kL][32]
  auto ring = [&](int stage, int kv, int nt, int c) -> uint4* {
    return s_ring + ((((warp * 2 + stage) * 2 + kv) * 2 + nt) * kL + c) * 32 + lane;
  };
  // Mode 1: a head's rows of one block are contiguous, so the tile's rows go as one bulk prefetch per block
  // they fall in (one per tile at block size 16: the instruction takes a warp-uniform address, so each
  // distinct address costs the warp a pass), issued by the lane of the run's first row (t4 == 0 of its
  // n-tile); rows past the partition are not fetched.
  auto prefetch_l2 = [&](int tile_index) {
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      const int i = 8 * nt + g, r = begin + tile_index * kT + i;  // row i of the tile
      const int in_block = r - static_cast<int>(div.block(static_cast<uint32_t>(r)) * div.block_size);
      if (t4 != 0 || r >= end || (i != 0 && in_block != 0)) continue;
      const int rows = min(min(kT - i, bs - in_block), end - r);
      const size_t off = row_offset(r);  // t4 == 0: the row's first byte
      const uint32_t bytes = static_cast<uint32_t>(rows * kRowBytes);
      asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(k_base + off), "r"(bytes) : "memory");
      asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(v_base + off), "r"(bytes) : "memory");
    }
  };
  auto stage_tile = [&](int tile_index, int stage) {
    const size_t off[2] = {row_offset(begin + tile_index * kT + g),
                           row_offset(begin + tile_index * kT + 8 + g)};
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int c = 0; c < kL; ++c) {
        cp_async_16(smem_u32(ring(stage, 0, nt, c)), k_base + off[nt] + 64 * c, true);
        cp_async_16(smem_u32(ring(stage, 1, nt, c)), v_base + off[nt] + 64 * c, true);
      }
  };
  auto unstage = [&](uint4(&dst)[2][kL], int stage, int kv) {
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int c = 0; c < kL; ++c) dst[nt][c] = *ring(stage, kv, nt, c);
  };

  const int n_tiles = (end - begin + kT - 1) / kT;
  uint4 kr[2][kL], vr[2][kL];
  int tile = warp;
  if (tile < n_tiles) {
    const size_t off[2] = {row_offset(begin + tile * kT + g), row_offset(begin + tile * kT + 8 + g)};
    load_rows(kr, k_base, off);
    load_rows(vr, v_base, off);
  }
  // kRope: the partition holding the newest row builds it (has_newest); the token's row t and KV slot.
  const int newest = kv_len - 1;
  const bool has_newest = kRope && end == kv_len;
  int rope_t = 0, kv_slot = -1;
  if constexpr (kRope) {
    rope_t = p.query_start_loc[seq];
    kv_slot = rope.slot_mapping[rope_t];
    if (warp == 0 && lane < kD / 4)
      reinterpret_cast<float4*>(s_cs)[lane] =
          __ldg(reinterpret_cast<const float4*>(rope.cos_sin + static_cast<size_t>(newest) * kD) + lane);
  }
  pdl_wait();
  if constexpr (!kRope) {
    if (tile < n_tiles && begin + tile * kT + kT >= kv_len) {  // warp-uniform: this tile holds row kv_len - 1
      const size_t off[2] = {row_offset(begin + tile * kT + g), row_offset(begin + tile * kT + 8 + g)};
      load_rows(kr, k_base, off);
      load_rows(vr, v_base, off);
    }
    if (prefetch == 1 && tile + kW < n_tiles) prefetch_l2(tile + kW);
    if (prefetch == 2) {
      if (tile + kW < n_tiles) stage_tile(tile + kW, 0);
      cp_async_commit();
      if (tile + 2 * kW < n_tiles) stage_tile(tile + 2 * kW, 1);
      cp_async_commit();
    }
  }

  // Q rows of the tile's heads (zero rows past nh) as A fragments, in the same dim order as the K loads;
  // kept in shared memory (lane-major, conflict-free) to leave registers to the K/V tiles in flight. Each
  // k-step's fragment is stored whole, zero rows 8..15 included (a0, 0, a2, 0): one 16-byte load gives the
  // MMA its operand registers, where building them from the words took a register move per operand.
  __shared__ uint4 s_q[kC][2][32];
  auto put_q = [&](int c, const uint4& v) {
    s_q[c][0][lane] = make_uint4(v.x, 0u, v.y, 0u);
    s_q[c][1][lane] = make_uint4(v.z, 0u, v.w, 0u);
  };
  const int t = kRope ? rope_t : p.query_start_loc[seq];
  if (warp == 0) {
    const __nv_bfloat16* qrow = p.qkv + static_cast<size_t>(t) * p.qkv_stride +
                                static_cast<size_t>(kvh * group + h0 + min(g, nh - 1)) * kD + kLaneDims * t4;
    if constexpr (kRope) {
      __syncwarp();  // s_cs, written by this warp's lanes before the wait
      // Chunk c holds dims 32c + 8t4 .. + 7; its RoPE partner (+ D/2) is chunk c + kC/2 of the same lane.
#pragma unroll
      for (int c = 0; c < kC / 2; ++c) {
        uint4 lo = __ldg(reinterpret_cast<const uint4*>(qrow + 32 * c));
        uint4 hi = __ldg(reinterpret_cast<const uint4*>(qrow + 32 * (c + kC / 2)));
        rope_rotate8(lo, hi, s_cs + 32 * c + 8 * t4, s_cs + kD / 2 + 32 * c + 8 * t4);
        put_q(c, g < nh ? lo : make_uint4(0, 0, 0, 0));
        put_q(c + kC / 2, g < nh ? hi : make_uint4(0, 0, 0, 0));
      }
      if (has_newest) {  // CTA-uniform
        // The newest token's k and v of this KV head, chunk u = dims 8u .. 8u + 7: lanes u < kV/2 rotate the
        // k pair (u, u + kV/2), lanes 16 + u (u < kV) copy v chunk u.
        if (kv_slot >= 0) {
          const __nv_bfloat16* krow =
              p.qkv + static_cast<size_t>(t) * p.qkv_stride + static_cast<size_t>(p.num_heads + kvh) * kD;
          const __nv_bfloat16* vrow = krow + static_cast<size_t>(p.num_kv_heads) * kD;
          if (lane < kV / 2) {
            uint4 lo = __ldg(reinterpret_cast<const uint4*>(krow) + lane);
            uint4 hi = __ldg(reinterpret_cast<const uint4*>(krow) + lane + kV / 2);
            rope_rotate8(lo, hi, s_cs + 8 * lane, s_cs + kD / 2 + 8 * lane);
            s_new[0][lane] = lo;
            s_new[0][lane + kV / 2] = hi;
          } else if (lane >= 16 && lane < 16 + kV) {
            s_new[1][lane - 16] = __ldg(reinterpret_cast<const uint4*>(vrow) + (lane - 16));
          }
        } else {
          // Padding row: nothing is written; the unfused pair attends to whatever the cache holds there.
          const size_t off =
              ((static_cast<size_t>(__ldg(table + newest / bs)) * p.num_kv_heads + kvh) * bs + newest % bs) *
              kD;
          if (lane < kV)
            s_new[0][lane] = __ldcg(reinterpret_cast<const uint4*>(p.k_cache + off) + lane);
          else if (lane >= 16 && lane < 16 + kV)
            s_new[1][lane - 16] = __ldcg(reinterpret_cast<const uint4*>(p.v_cache + off) + (lane - 16));
        }
      }
    } else {
#pragma unroll
      for (int c = 0; c < kC; ++c) {
        uint4 v = __ldg(reinterpret_cast<const uint4*>(qrow + chunk_dim(c)));
        if constexpr (kF16) v = bf16x8_to_f16x8(v);
        put_q(c, g < nh ? v : make_uint4(0, 0, 0, 0));
      }
    }
  }
  __syncthreads();
  if constexpr (kRope) {
    // Exactly one CTA per (decode, KV head) writes the new cache row: head tile 0 of the last partition.
    if (has_newest && ht == 0 && kv_slot >= 0 && threadIdx.x < 2 * kV) {
      const size_t dst =
          ((static_cast<size_t>(kv_slot / bs) * p.num_kv_heads + kvh) * bs + kv_slot % bs) * kD;
      if (threadIdx.x < kV)
        reinterpret_cast<uint4*>(rope.k_cache + dst)[threadIdx.x] = s_new[0][threadIdx.x];
      else
        reinterpret_cast<uint4*>(rope.v_cache + dst)[threadIdx.x - kV] = s_new[1][threadIdx.x - kV];
    }
  }
  // kRope: the tile holding the newest row (the partition's last) takes it from s_new; whatever was loaded
  // for that row (concurrently written by the writer CTA) is dropped.
  const int tile_new = has_newest ? (newest - begin) / kT : -1;

  const float scale_log2 = qk_scale_of(p, kvh) * 1.4426950408889634f;
  float o[kMT][4];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) o[mt][0] = o[mt][1] = o[mt][2] = o[mt][3] = 0.0f;
  float m_run = -INFINITY;  // running max (log2 units) of head g; same in the 4 lanes of row g
  float l_run = 0.0f;       // this lane's share of the running sum of head g

  for (int j = 0; tile < n_tiles; tile += kW, ++j) {
    const int tb = begin + tile * kT;
    const bool has_next = tile + kW < n_tiles;  // warp-uniform
    size_t next_off[2] = {0, 0};
    if (has_next && prefetch != 2) {
      next_off[0] = row_offset(tb + kW * kT + g);
      next_off[1] = row_offset(tb + kW * kT + 8 + g);
    }
    if (prefetch == 1 && tile + 2 * kW < n_tiles) prefetch_l2(tile + 2 * kW);

    if constexpr (kRope) {
      if (tile == tile_new) {  // warp-uniform
        // Lanes (g, 0..3) of n-tile nt loaded row tb + 8nt + g, or the partition's first row for rows past
        // its end (masked, but P = 0 times a non-finite value read mid-write would not be 0): each lane
        // whose address is the newest row's takes its chunks c (dims 32c + 8t4 ..) from s_new instead.
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
          if ((tb + 8 * nt + g < end ? tb + 8 * nt + g : begin) == newest) {
#pragma unroll
            for (int c = 0; c < kC; ++c) {
              kr[nt][c] = s_new[0][4 * c + t4];
              vr[nt][c] = s_new[1][4 * c + t4];
            }
          }
      }
    }

    // s[nt]: (head g, tokens tb + 8nt + 2t4 + {0, 1}) in [0], [1]; [2], [3] are the zero rows 8..15.
    float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
    for (int c = 0; c < kC; ++c) {
      const uint4 kc[2] = {chunk(kr, 0, c), chunk(kr, 1, c)};
#pragma unroll
      for (int ks = 0; ks < 2; ++ks) {
        const uint4 q = s_q[c][ks][lane];
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
          mma(s[nt], q.x, q.y, q.z, q.w, word(kc[nt], 2 * ks), word(kc[nt], 2 * ks + 1));
      }
    }
    if (has_next) {
      if (prefetch == 2) {
        cp_async_wait<1>();
        unstage(kr, j & 1, 0);
      } else {
        load_rows(kr, k_base, next_off);
      }
    }

    // Online softmax of head g over the tile (log2 domain).
    float x[2][2];
    float tile_max = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int tok = tb + 8 * nt + 2 * t4 + e;
        x[nt][e] = tok < end ? s[nt][e] * scale_log2 : -INFINITY;
        tile_max = fmaxf(tile_max, x[nt][e]);
      }
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
    const float m_new = fmaxf(m_run, tile_max);  // finite: token tb is always valid
    const float alpha = fast_exp2(m_run - m_new);
    m_run = m_new;
    float pr[2][2];
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e) pr[nt][e] = fast_exp2(x[nt][e] - m_new);
    l_run = l_run * alpha + (pr[0][0] + pr[0][1]) + (pr[1][0] + pr[1][1]);

    // Rescale O: accumulator columns are heads 2t4, 2t4 + 1, whose alpha lives in lanes 8t4, 8t4 + 4. Past the
    // first tiles no head's max moves in most tiles: where every alpha of the warp is exactly 1 the products
    // would be O itself, so the shuffles and 4 * kMT multiplies are skipped (warp-uniform; the same bits).
    if (__any_sync(0xffffffffu, alpha != 1.0f)) {
      const float alpha_lo = __shfl_sync(0xffffffffu, alpha, 8 * t4);
      const float alpha_hi = __shfl_sync(0xffffffffu, alpha, 8 * t4 + 4);
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        o[mt][0] *= alpha_lo;
        o[mt][1] *= alpha_hi;
        o[mt][2] *= alpha_lo;
        o[mt][3] *= alpha_hi;
      }
    }

    // O^T += V^T P^T.
    const uint32_t pb0 = pack_p(pr[0][0], pr[0][1]);  // tokens 2t4, 2t4 + 1
    const uint32_t pb1 = pack_p(pr[1][0], pr[1][1]);  // tokens 8 + 2t4, 9 + 2t4
#pragma unroll
    for (int c = 0; c < kC; ++c) {
      uint32_t vt[2][4];
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
        const uint4 vc = chunk(vr, nt, c);
#pragma unroll
        for (int w = 0; w < 4; ++w) vt[nt][w] = transpose8x8(word(vc, w));
      }
#pragma unroll
      for (int qp = 0; qp < 2; ++qp)
        mma(o[2 * c + qp], vt[0][2 * qp], vt[0][2 * qp + 1], vt[1][2 * qp], vt[1][2 * qp + 1], pb0, pb1);
    }
    if (has_next) {
      if (prefetch == 2) {
        unstage(vr, j & 1, 1);
        // The stage's shared-memory reads stay above the copies that refill it: cp_async_16 has no memory
        // clobber, so without this the compiler could sink them below.
        asm volatile("" ::: "memory");
        if (tile + 3 * kW < n_tiles) stage_tile(tile + 3 * kW, j & 1);
      } else {
        load_rows(vr, v_base, next_off);
      }
    }
    if (prefetch == 2) cp_async_commit();
  }
  if (prefetch == 2) cp_async_wait_all();

  // Merge the warps: per head, the CTA max and each warp's weight exp2(m_warp - max). Warps without a
  // tile have m = -inf (weight 0); warp 0 always has one, so the max is finite.
  l_run += __shfl_xor_sync(0xffffffffu, l_run, 1);
  l_run += __shfl_xor_sync(0xffffffffu, l_run, 2);
  if (t4 == 0) {
    s_m[warp][g] = m_run;
    s_l[warp][g] = l_run;
  }
  __syncthreads();
  if (threadIdx.x < kH) {
    const int h = threadIdx.x;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < kW; ++w) mx = fmaxf(mx, s_m[w][h]);
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < kW; ++w) sum += s_l[w][h] * fast_exp2(s_m[w][h] - mx);
    s_max[h] = mx;
    s_sum[h] = sum;
  }
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    const int h = 2 * t4 + e;
    if (h >= nh) continue;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < kW; ++w) mx = fmaxf(mx, s_m[w][h]);
    const float f = fast_exp2(s_m[warp][h] - mx);
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int hi = 0; hi < 2; ++hi) {
        const int d = chunk_dim(mt / 2) + kLaneDims * (g >> 1) + 4 * (mt % 2) + 2 * hi + (g & 1);
        s_o[warp][h][d] = o[mt][2 * hi + e] * f;
      }
  }
  __syncthreads();

  const int n_parts = (kv_len + partition_size - 1) / partition_size;  // partitions with work for this decode
  __nv_bfloat16* out = p.out + static_cast<size_t>(t) * p.num_heads * kD + static_cast<size_t>(kvh * group + h0) * kD;
  if (n_parts == 1) {
    for (int i = threadIdx.x; i < nh * kD; i += kThreads) {
      const int h = i / kD, d = i % kD;
      float acc = 0.0f;
#pragma unroll
      for (int w = 0; w < kW; ++w) acc += s_o[w][h][d];
      out[i] = __float2bfloat16(acc / s_sum[h] * v_scale_of(p, kvh));
    }
    return;
  }

  // Split-KV: publish this partition's (unnormalized O, max, sum); the last CTA of the slot merges.
  const size_t slots = static_cast<size_t>(gridDim.y) * gridDim.z, parts = gridDim.x;
  const size_t slot = static_cast<size_t>(blockIdx.z) * gridDim.y + blockIdx.y;
  unsigned int* counters = reinterpret_cast<unsigned int*>(workspace);
  float2* ws_ml = reinterpret_cast<float2*>(workspace + kCounterFloats);  // [slots, parts, kH]
  float* ws_o = workspace + kCounterFloats + 2 * slots * parts * kH;      // [slots, parts, kH, kD]
  const size_t row0 = (slot * parts + part) * kH;
  for (int i = threadIdx.x; i < nh * kD; i += kThreads) {
    const int h = i / kD, d = i % kD;
    float acc = 0.0f;
#pragma unroll
    for (int w = 0; w < kW; ++w) acc += s_o[w][h][d];
    ws_o[row0 * kD + i] = acc;
  }
  if (threadIdx.x < nh) ws_ml[row0 + threadIdx.x] = make_float2(s_max[threadIdx.x], s_sum[threadIdx.x]);
  __threadfence();  // partials visible device-wide before the counter says so
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned int done = atomicAdd(counters + slot, 1u);
    const bool last = done == static_cast<unsigned int>(n_parts - 1);
    if (last) atomicExch(counters + slot, 0u);  // every partition has arrived: ready for the next launch
    s_last = last;
  }
  __syncthreads();
  if (!s_last) return;
  __threadfence();

  // Merge (last CTA; partials are read from L2, they were written by other SMs). Warp h reduces head h's
  // (max, sum) over the partitions, online per lane, then across lanes (finite sentinel: no inf - inf).
  if (warp < nh) {
    float mx = -FLT_MAX, sum = 0.0f;
    for (int q = lane; q < n_parts; q += 32) {
      const float2 ml = __ldcg(ws_ml + (slot * parts + q) * kH + warp);
      const float m_new = fmaxf(mx, ml.x);
      sum = sum * fast_exp2(mx - m_new) + ml.y * fast_exp2(ml.x - m_new);
      mx = m_new;
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
      const float mo = __shfl_xor_sync(0xffffffffu, mx, off), so = __shfl_xor_sync(0xffffffffu, sum, off);
      const float m_new = fmaxf(mx, mo);
      sum = sum * fast_exp2(mx - m_new) + so * fast_exp2(mo - m_new);
      mx = m_new;
    }
    if (lane == 0) {
      s_max[warp] = mx;
      s_sum[warp] = sum;
    }
  }
  __syncthreads();
  // out[h, 4 dims] = sum_q exp2(max_q - max) O_q / sum: loads of kBatch partitions in flight at once.
  constexpr int kBatch = 16;
  for (int i4 = threadIdx.x; i4 < nh * kD / 4; i4 += kThreads) {
    const int i = 4 * i4, h = i / kD;
    const float mx = s_max[h];
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int q0 = 0; q0 < n_parts; q0 += kBatch) {
      float mv[kBatch];
      float4 ov[kBatch];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const size_t row = (slot * parts + min(q0 + u, n_parts - 1)) * kH;
        mv[u] = q0 + u < n_parts ? __ldcg(ws_ml + row + h).x : -INFINITY;  // weight 0 past the last partition
        ov[u] = __ldcg(reinterpret_cast<const float4*>(ws_o + row * kD + i));
      }
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const float w = fast_exp2(mv[u] - mx);
        acc.x += w * ov[u].x;
        acc.y += w * ov[u].y;
        acc.z += w * ov[u].z;
        acc.w += w * ov[u].w;
      }
    }
    const float inv = v_scale_of(p, kvh) / s_sum[h];
    const __nv_bfloat162 lo = __floats2bfloat162_rn(acc.x * inv, acc.y * inv);
    const __nv_bfloat162 hi = __floats2bfloat162_rn(acc.z * inv, acc.w * inv);
    uint2 packed;
    packed.x = *reinterpret_cast<const uint32_t*>(&lo);
    packed.y = *reinterpret_cast<const uint32_t*>(&hi);
    *reinterpret_cast<uint2*>(out + i) = packed;
  }
}

template <int kD, int kW, bool kRope, bool kFp8, bool kF16>
void launch_decode(const PagedAttentionParams& p, const AttentionPlanView& plan, const DecodeRopeParams& rope,
                   int partition_size, float* workspace, cudaStream_t stream) {
  using Cfg = DecodeConfig<kD, kW>;
  const int group = p.num_heads / p.num_kv_heads;
  const int head_tiles = decode_head_tiles(group);
  const int parts = (plan.max_decode_len + partition_size - 1) / partition_size;
  XI_CHECK(parts == 1 || workspace != nullptr) << "decode attention: split-KV needs a workspace";
  XI_CHECK(parts == 1 || kW == kDecodeWarps)
      << "decode attention: split-KV runs " << kDecodeWarps << "-warp CTAs only (the workspace bound), got " << kW;
  XI_CHECK_LE(static_cast<int64_t>(p.num_kv_heads) * head_tiles, 65535) << "decode attention: too many heads";
  XI_CHECK_LE(plan.num_decode, 65535) << "decode attention: too many decodes in one step";
  check_kv_block_index(p.block_size, p.max_blocks_per_seq);
  XI_CHECK(parts == 1 || static_cast<size_t>(plan.num_decode) * p.num_kv_heads * head_tiles <= kMaxSplitSlots)
      << "decode attention: " << plan.num_decode << " decodes x " << p.num_kv_heads * head_tiles
      << " head tiles is too many split-KV slots (partition size " << partition_size << " too small)";
  const dim3 grid(static_cast<unsigned>(parts), static_cast<unsigned>(p.num_kv_heads * head_tiles),
                  static_cast<unsigned>(plan.num_decode));
  const int mode = kFp8 ? p.kv_fp8_prefetch : 0;
  XI_CHECK(mode >= 0 && mode <= 2) << "decode attention: no FP8 prefetch mode " << mode << " (0, 1, 2)";
  const size_t ring_bytes = mode == 2 ? static_cast<size_t>(kW) * 2 * 2 * 2 * (kD / 64) * 32 * 16 : 0;
  auto kernel = paged_decode_kernel<Cfg, kRope, kFp8, kF16>;
  if (mode == 2) {  // per (kernel, device): tensor-parallel ranks of one process launch it on several devices
    raise_smem_limit(reinterpret_cast<const void*>(kernel), static_cast<int>(ring_bytes));
    // The whole carveout as shared memory, so 4 CTAs of 4 warps (54.7 KB each) fit an SM; the attribute stays
    // for later mode-0/1 launches of this instantiation in the process (an A/B in one process shares it).
    XI_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, 100));
  }
  launch_pdl(kernel, grid, Cfg::kThreads, ring_bytes, stream, p, plan, rope, partition_size, head_tiles, workspace);
}

// launch_decode with the CTA's warp count (8, 4 or 2: decode_warps()) as a template argument.
template <int kD, bool kRope, bool kFp8, bool kF16 = false>
void launch_decode_warps(const PagedAttentionParams& p, const AttentionPlanView& plan, const DecodeRopeParams& rope,
                         int partition_size, int warps, float* workspace, cudaStream_t stream) {
  switch (warps) {
    case 8: return launch_decode<kD, 8, kRope, kFp8, kF16>(p, plan, rope, partition_size, workspace, stream);
    case 4: return launch_decode<kD, 4, kRope, kFp8, kF16>(p, plan, rope, partition_size, workspace, stream);
    case 2: return launch_decode<kD, 2, kRope, kFp8, kF16>(p, plan, rope, partition_size, workspace, stream);
    default: XI_CHECK(false) << "decode attention: no " << warps << "-warp kernel (8, 4 or 2)";
  }
}

}  // namespace

bool decode_attention_supports(int head_dim) { return head_dim == 64 || head_dim == 128; }

size_t decode_attention_workspace_floats(int num_decode, int num_heads, int num_kv_heads, int head_dim,
                                         int max_decode_len, int partition_size) {
  const int parts = (max_decode_len + partition_size - 1) / partition_size;
  if (parts <= 1) return 0;
  const size_t slots = static_cast<size_t>(num_decode) * num_kv_heads * decode_head_tiles(num_heads / num_kv_heads);
  return kCounterFloats + slots * parts * kDecodeHeadsPerCta * (static_cast<size_t>(head_dim) + 2);
}

size_t decode_attention_max_workspace_floats(int head_dim, int num_sms) {
  const size_t ctas = static_cast<size_t>(kDecodeCtasPerSm) * num_sms;  // slots * parts <= ctas when split
  return kCounterFloats + ctas * kDecodeHeadsPerCta * (static_cast<size_t>(head_dim) + 2);
}

void launch_paged_decode_attention(const PagedAttentionParams& p, const AttentionPlanView& plan, int partition_size,
                                   int warps, float* workspace, cudaStream_t stream) {
  if (plan.num_decode == 0) return;
  XI_CHECK_EQ(p.num_heads % p.num_kv_heads, 0);
  XI_CHECK_GT(partition_size, 0);
  dispatch_fast_head_dim(p.head_dim, [&]<int kD>() {
    const DecodeRopeParams none{};
    if (p.kv_fp8 && p.kv_fp8_f16)
      launch_decode_warps<kD, false, true, true>(p, plan, none, partition_size, warps, workspace, stream);
    else if (p.kv_fp8)
      launch_decode_warps<kD, false, true>(p, plan, none, partition_size, warps, workspace, stream);
    else
      launch_decode_warps<kD, false, false>(p, plan, none, partition_size, warps, workspace, stream);
  });
}

void launch_paged_decode_attention_rope(const PagedAttentionParams& p, const AttentionPlanView& plan,
                                        const DecodeRopeParams& rope, int partition_size, int warps,
                                        float* workspace, cudaStream_t stream) {
  if (plan.num_decode == 0) return;
  XI_CHECK_EQ(p.num_heads % p.num_kv_heads, 0);
  XI_CHECK_GT(partition_size, 0);
  XI_CHECK(rope.cos_sin != nullptr && rope.slot_mapping != nullptr)
      << "decode attention + rope: no table or slots";
  XI_CHECK(rope.k_cache == p.k_cache && rope.v_cache == p.v_cache)
      << "decode attention + rope: writes another cache";
  XI_CHECK_EQ(reinterpret_cast<uintptr_t>(rope.cos_sin) % 16, 0u)
      << "decode attention + rope: cos_sin alignment";
  XI_CHECK(!p.kv_fp8) << "decode attention + rope: fp8 KV caches take rope_kv_write + the decode kernel";
  dispatch_fast_head_dim(p.head_dim, [&]<int kD>() {
    launch_decode_warps<kD, true, false>(p, plan, rope, partition_size, warps, workspace, stream);
  });
}

}  // namespace xinfer::cuda
