#include "xinfer/backend/cuda/kernels/attention/paged_prefill_attention.h"

#include <climits>
#include <cstdint>

#include "xinfer/backend/cuda/cuda_check.h"
#include "xinfer/backend/cuda/kernels/attention/attention_dispatch.cuh"
#include "xinfer/backend/cuda/kernels/attention/attention_mma.cuh"
#include "xinfer/backend/cuda/kernels/attention/attention_plan.h"
#include "xinfer/backend/cuda/kernels/attention/kv_block_index.cuh"
#include "xinfer/backend/cuda/kernels/attention/kv_fp8.cuh"
#include "xinfer/backend/cuda/kernels/cp_async.cuh"
#include "xinfer/backend/cuda/kernels/ldmatrix.cuh"
#include "xinfer/backend/cuda/kernels/mbarrier.cuh"
#include "xinfer/backend/cuda/kernels/wgmma.cuh"

namespace xinfer::cuda {
namespace {

// ---- PTX wrappers (cp.async: cp_async.cuh; ldmatrix: ldmatrix.cuh). Shared-memory operands are 32-bit
// shared-window addresses. ----

#define XI_ACC8(d, i)                                                                         \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
      "+f"(d[i + 6]), "+f"(d[i + 7])
// The 64 accumulators of an m64n128 wgmma, as in-out operands %0..%63 (XI_WGMMA_D64 names them).
#define XI_ACC64(d)                                                                                 \
  XI_ACC8(d, 0), XI_ACC8(d, 8), XI_ACC8(d, 16), XI_ACC8(d, 24), XI_ACC8(d, 32), XI_ACC8(d, 40), XI_ACC8(d, 48), \
      XI_ACC8(d, 56)

// d[64 x 128] = (accumulate ? d : 0) + A[64 x 16] (K-major smem) * B[16 x 128] (K-major smem: [128, 16]);
// operands in f16 (kF16) or bf16.
#define XI_WGMMA_SS(TYPES)                                                                            \
  asm volatile(                                                                                       \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                                    \
      "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPES " " XI_WGMMA_D64                           \
      ", "                                                                                            \
      "%64, %65, p, 1, 1, 0, 0;\n}\n"                                                                 \
      : XI_ACC64(d)                                                                                   \
      : "l"(a), "l"(b), "r"(accumulate)                                                               \
      : "memory")
template <bool kF16>
__device__ __forceinline__ void wgmma_m64n128k16_ss(float (&d)[64], uint64_t a, uint64_t b, int accumulate) {
  if constexpr (kF16)
    XI_WGMMA_SS("f16.f16");
  else
    XI_WGMMA_SS("bf16.bf16");
}
#undef XI_WGMMA_SS

// d[64 x N] += A[64 x 16] (registers) * B[16 x N] (MN-major smem: transposed, tnspB = 1), N = 128 or 64;
// operands in f16 (kF16) or bf16.
#define XI_WGMMA_RS_N128(TYPES)                                                                       \
  asm volatile(                                                                                       \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                                    \
      "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPES " " XI_WGMMA_D64                           \
      ", "                                                                                            \
      "{%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"                                                   \
      : XI_ACC64(d)                                                                                   \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1)                                    \
      : "memory")
#define XI_WGMMA_RS_N64(TYPES)                                                            \
  asm volatile(                                                                           \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                        \
      "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPES                                 \
      " "                                                                                 \
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "           \
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, " \
      "{%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"                                       \
      : XI_ACC8(d, 0), XI_ACC8(d, 8), XI_ACC8(d, 16), XI_ACC8(d, 24)                      \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1)                        \
      : "memory")
template <bool kF16>
__device__ __forceinline__ void wgmma_m64nNk16_rs_tb(float (&d)[64], const uint32_t (&a)[4], uint64_t b) {
  if constexpr (kF16)
    XI_WGMMA_RS_N128("f16.f16");
  else
    XI_WGMMA_RS_N128("bf16.bf16");
}
template <bool kF16>
__device__ __forceinline__ void wgmma_m64nNk16_rs_tb(float (&d)[32], const uint32_t (&a)[4], uint64_t b) {
  if constexpr (kF16)
    XI_WGMMA_RS_N64("f16.f16");
  else
    XI_WGMMA_RS_N64("bf16.bf16");
}
#undef XI_WGMMA_RS_N128
#undef XI_WGMMA_RS_N64
#undef XI_ACC64
#undef XI_ACC8

// A never-taken branch on a value computed just before it. ptxas schedules within basic blocks and hoists
// wgmma.wait_group to the earliest point of its block, which would put the wait for P V ahead of the
// softmax meant to overlap it; ending the block here keeps the wait after that softmax.
__device__ __forceinline__ void end_schedule_region(float v) {
  if (__float_as_uint(v) == 0xFFFFFFFFu) asm volatile("trap;");
}

// ---- pieces shared by both kernels ----

inline constexpr float kLog2e = 1.4426950408889634f;

// The CTA's work item: plan items are visited last to first (grid y reversed) because a sequence's later
// query tiles see more keys, so the heavy CTAs start first and the light ones fill the tail of the wave.
struct TileWork {
  int seq;
  int q_begin;  // first token (row of qkv / out) of the tile
  int rows;     // valid query rows, 1..kPrefillTileRows
  int head;     // q head
  int kv_head;
};
__device__ __forceinline__ TileWork tile_work(const PagedAttentionParams& p, const AttentionPlanView& plan) {
  const int item = plan.num_prefill_items - 1 - static_cast<int>(blockIdx.y);
  TileWork w;
  w.seq = plan.prefill_items[2 * item];
  w.q_begin = p.query_start_loc[w.seq] + plan.prefill_items[2 * item + 1];
  w.rows = min(kPrefillTileRows, p.query_start_loc[w.seq + 1] - w.q_begin);
  w.head = blockIdx.x;
  w.kv_head = w.head / (p.num_heads / p.num_kv_heads);
  return w;
}

// Finds the cache row (index of a head_dim vector in [num_blocks * num_kv_heads * block_size]) of key j of
// the tile's sequence through its block table (j / block_size: kv_block_index.cuh).
struct KvRowLocator {
  const int32_t* table;  // [max_blocks_per_seq] of this sequence
  KvBlockDivider div;
  uint32_t head_rows;   // kv_head * block_size: offset of this KV head's rows inside a block
  uint32_t block_rows;  // num_kv_heads * block_size: rows per cache block
  __device__ __forceinline__ KvRowLocator(const PagedAttentionParams& p, const TileWork& w)
      : table(p.block_tables + static_cast<size_t>(w.seq) * p.max_blocks_per_seq),
        div(p.block_size),
        head_rows(static_cast<uint32_t>(w.kv_head * p.block_size)),
        block_rows(static_cast<uint32_t>(p.num_kv_heads * p.block_size)) {}
  // j must be < the sequence's length.
  __device__ __forceinline__ uint32_t row(int j) const {
    const uint32_t b = div.block(static_cast<uint32_t>(j));
    return static_cast<uint32_t>(table[b]) * block_rows + head_rows +
           (static_cast<uint32_t>(j) - b * div.block_size);
  }
};

// Copies keys [tile * kN, tile * kN + kN) of the tile's sequence from kSrcs caches (K and / or V) into
// swizzled shared buffers (zeros past kv_end); the caller commits. Thread t copies 16-byte chunk
// t % kChunks of rows t / kChunks + i * kLoadRows; block-table lookups are issued kBatch rows at a time
// ahead of their copies so their latencies overlap.
template <int kD, int kN, int kThreads, int kBatch, int kSrcs, typename Swizzle>
__device__ __forceinline__ void load_kv_tile(const KvRowLocator& loc, int tile, int kv_end,
                                             const __nv_bfloat16* const (&src)[kSrcs],
                                             const uint32_t (&dst)[kSrcs], Swizzle swz) {
  constexpr int kChunks = kD / 8, kLoadRows = kThreads / kChunks, kPerThread = kN / kLoadRows;
  constexpr int kB = kBatch < kPerThread ? kBatch : kPerThread;
  static_assert(kPerThread % kB == 0);
  const int c = threadIdx.x % kChunks, r0 = threadIdx.x / kChunks;
#pragma unroll
  for (int i0 = 0; i0 < kPerThread; i0 += kB) {
    uint32_t rows[kB];
#pragma unroll
    for (int i = 0; i < kB; ++i) rows[i] = loc.row(min(tile * kN + r0 + (i0 + i) * kLoadRows, kv_end - 1));
#pragma unroll
    for (int i = 0; i < kB; ++i) {
      const int r = r0 + (i0 + i) * kLoadRows;
      const bool ok = tile * kN + r < kv_end;
      const size_t off = static_cast<size_t>(rows[i]) * kD + c * 8;
#pragma unroll
      for (int j = 0; j < kSrcs; ++j) cp_async_16(dst[j] + swz(r, c), src[j] + off, ok);
    }
  }
}

__device__ __forceinline__ void st_shared_16(uint32_t addr, const uint4& v) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}
__device__ __forceinline__ uint4 ld_shared_16(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr)
               : "memory");
  return v;
}

// FP8 caches: a KV tile's e4m3 codes are staged in shared memory by cp.async (plain rows: K codes [kN][kD],
// then V codes) while the previous tile computes, then converted to the kernel's operand type (bf16 by
// integer ops, or f16 by one cvt per pair for the f16 variants: kv_fp8.cuh) into the swizzled K / V tiles by
// the thread that copied them. Thread t owns 16-code chunk t % (kD / 16) of rows t / (kD / 16) + i * kRows
// and reads back only its own chunks, so its next copy may follow its conversion without a barrier.
template <int kD, int kN, int kThreads>
struct Fp8TileStager {
  static constexpr int kChunks = kD / 16, kRows = kThreads / kChunks, kPasses = kN / kRows;
  static constexpr int kBytes = 2 * kN * kD;
  static_assert(kThreads % kChunks == 0 && kN % kRows == 0);
  uint32_t stage;  // shared address of the K codes; the V codes follow
  int c, r0;
  __device__ __forceinline__ explicit Fp8TileStager(uint32_t stage_s)
      : stage(stage_s),
        c(static_cast<int>(threadIdx.x) % kChunks),
        r0(static_cast<int>(threadIdx.x) / kChunks) {}
  __device__ __forceinline__ uint32_t slot(int i) const {
    return stage + static_cast<uint32_t>((r0 + i * kRows) * kD + c * 16);
  }
  // Copies this thread's chunks of keys [tile * kN, tile * kN + kN) (code 0 = +0 past kv_end); the caller
  // commits.
  __device__ __forceinline__ void load(const KvRowLocator& loc, int tile, int kv_end,
                                       const PagedAttentionParams& p) const {
    const auto* k8 = reinterpret_cast<const uint8_t*>(p.k_cache);
    const auto* v8 = reinterpret_cast<const uint8_t*>(p.v_cache);
    uint32_t rows[kPasses];
#pragma unroll
    for (int i = 0; i < kPasses; ++i) rows[i] = loc.row(min(tile * kN + r0 + i * kRows, kv_end - 1));
#pragma unroll
    for (int i = 0; i < kPasses; ++i) {
      const bool ok = tile * kN + r0 + i * kRows < kv_end;
      const size_t off = static_cast<size_t>(rows[i]) * kD + c * 16;
      cp_async_16(slot(i), k8 + off, ok);
      cp_async_16(slot(i) + kN * kD, v8 + off, ok);
    }
  }
  // Once this thread's copies landed: its chunks of K (convert_k) or V (convert_v) -> 8-element chunks 2c, 2c
  // + 1 of its rows of the tile at dst (swz(row, chunk): the byte offset of a 16-byte chunk in the kernel's
  // layout).
  template <bool kF16, typename Swizzle>
  __device__ __forceinline__ void convert_k(uint32_t dst, Swizzle swz) const {
    convert_one<kF16>(0, dst, swz);
  }
  template <bool kF16, typename Swizzle>
  __device__ __forceinline__ void convert_v(uint32_t dst, Swizzle swz) const {
    convert_one<kF16>(kN * kD, dst, swz);
  }
  template <bool kF16, typename Swizzle>
  __device__ __forceinline__ void convert_one(uint32_t src_offset, uint32_t dst, Swizzle swz) const {
#pragma unroll
    for (int i = 0; i < kPasses; ++i) {
      const uint4 codes = ld_shared_16(slot(i) + src_offset);
#pragma unroll
      for (int h = 0; h < 2; ++h)
        st_shared_16(dst + swz(r0 + i * kRows, 2 * c + h),
                     kF16 ? e4m3x16_half_to_f16x8(codes, h) : e4m3x16_half_to_bf16x8(codes, h));
    }
  }
  // Both tiles (the kernels without a producer warpgroup).
  template <bool kF16, typename Swizzle>
  __device__ __forceinline__ void convert(uint32_t k_dst, uint32_t v_dst, Swizzle swz) const {
    convert_k<kF16>(k_dst, swz);
    convert_v<kF16>(v_dst, swz);
  }
};

// The f16 variants' Q: the chunks of the [kM, kD] Q tile this thread copied (chunk t % (kD / 8) of rows
// t / (kD / 8) + i * (kThreads / (kD / 8)), as the kernels' Q loops) from bf16 to f16 in place, once they
// landed.
template <int kD, int kM, int kThreads, typename Swizzle>
__device__ __forceinline__ void q_tile_to_f16(uint32_t q_s, Swizzle swz) {
  constexpr int kChunks = kD / 8, kLoadRows = kThreads / kChunks;
  const int c = static_cast<int>(threadIdx.x) % kChunks;
#pragma unroll
  for (int r = static_cast<int>(threadIdx.x) / kChunks; r < kM; r += kLoadRows) {
    const uint32_t a = q_s + swz(r, c);
    st_shared_16(a, bf16x8_to_f16x8(ld_shared_16(a)));
  }
}

// Positions of query rows: the key range [0, kv_end) of the tile and per-warp bounds. Rows past the chunk
// borrow the last row's position (their softmax stays finite; they are never stored) and do not widen the
// warp's bounds. Call with all threads of the CTA (one barrier).
struct RowBounds {
  int pos_min;  // of this warp's valid rows (INT_MAX if none)
  int pos_max;  // of this warp's valid rows (-1 if none)
};
__device__ __forceinline__ RowBounds warp_row_bounds(const int* pos, const bool* valid, int n) {
  RowBounds b{INT_MAX, -1};
  for (int i = 0; i < n; ++i)
    if (valid[i]) {
      b.pos_min = min(b.pos_min, pos[i]);
      b.pos_max = max(b.pos_max, pos[i]);
    }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    b.pos_min = min(b.pos_min, __shfl_xor_sync(0xffffffffu, b.pos_min, o));
    b.pos_max = max(b.pos_max, __shfl_xor_sync(0xffffffffu, b.pos_max, o));
  }
  return b;
}

// Online-softmax update of one query row held by a quad of lanes, each holding kVals raw scores of it
// (masked ones -inf): replaces them with p = exp2(score * scale_log2 - max * scale_log2) (one FFMA + EX2)
// and returns the factor the row's output accumulator must be scaled by. row_max is kept in raw units,
// which needs scale_log2 > 0 (checked on the host).
template <int kVals, typename Get>
__device__ __forceinline__ float softmax_row(Get&& val, float scale_log2, float& row_max, float& row_sum) {
  float mx = row_max;
#pragma unroll
  for (int i = 0; i < kVals; ++i) mx = fmaxf(mx, val(i));
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
  const float base = mx == -INFINITY ? 0.0f : mx * scale_log2;  // a row with every key masked so far stays 0
  const float alpha = fast_exp2(row_max * scale_log2 - base);   // 0 on the first tile (row_max = -inf)
  row_max = mx;
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < kVals; ++i) {
    const float pr = fast_exp2(fmaf(val(i), scale_log2, -base));
    val(i) = pr;
    sum += pr;
  }
  row_sum = row_sum * alpha + sum;  // this lane's share; the quad's shares are added at the end
  return alpha;
}

// =====================================================================================================
// Kernel 1 (default on sm_90a): warpgroup MMA. CTA = 128 query rows of one q head = 2 warpgroups x 64
// rows, KV tiles of kN = 128 keys. S = Q K^T with both operands in shared memory (wgmma SS), P stays in
// registers as the A operand of O += P V (wgmma RS, V read transposed through an MN-major descriptor).
// Shared memory: Q [128, kD], K and V [2][kN, kD], each stored as 64-column panels of 128-byte rows with
// the 128-byte swizzle (16-byte chunk c of row r at chunk c ^ (r & 7)), panel bases 1024-aligned; the
// cp.async writes use the same pattern. kD = 128: 160 KiB, one CTA (8 warps) per SM.
// =====================================================================================================

template <int kD>
struct WgmmaConfig {
  static constexpr int kHeadDim = kD;
  static constexpr int kM = kPrefillTileRows;
  static constexpr int kN = 128;
  static constexpr int kThreads = 256;
  static constexpr int kChunks = kD / 8;                // 16-byte chunks per row
  static constexpr int kLoadRows = kThreads / kChunks;  // rows per pass of the loaders
  static constexpr int kQBytes = kM * kD * 2;
  static constexpr int kKvBytes = kN * kD * 2;
  static constexpr int kSmem = kQBytes + 4 * kKvBytes + 1024;  // + slack to align the base to 1024
  // FP8 caches (kWgmmaSimple only): the next tile's K and V codes are staged behind V[1] ([2][kN][kD] bytes,
  // plain rows) by cp.async and converted into the bf16 buffers at the top of the tile's iteration.
  using Stager = Fp8TileStager<kD, kN, kThreads>;
  static constexpr int kStageBytes = Stager::kBytes;
  static_assert(kM == 128, "two warpgroups of 64 rows");
  static_assert(kD == 64 || kD == 128);
  static_assert(kN % kLoadRows == 0 && kM % kLoadRows == 0);
};

// Byte offset of 16-byte chunk c (of kD / 8) of row r in a [kRows, kD] tile of swizzled 64-column panels.
template <int kRows>
__device__ __forceinline__ uint32_t panel_swz(int r, int c) {
  return static_cast<uint32_t>((c >> 3) * (kRows * 128) + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}

// The wgmma kernels' Q tile: [kM, kD] bf16 of the tile's rows and q head into q_s (swizzled panels; rows past
// the chunk are zeros) by kThreads threads (thread t: chunk t % (kD / 8) of rows t / (kD / 8) + i * (kThreads
// / (kD / 8)), as q_tile_to_f16), without committing the copies.
template <int kD, int kM, int kThreads>
__device__ __forceinline__ void load_q_tile(const PagedAttentionParams& p, const TileWork& w, uint32_t q_s) {
  constexpr int kChunks = kD / 8, kLoadRows = kThreads / kChunks;
  const __nv_bfloat16* q_src = p.qkv + static_cast<size_t>(w.q_begin) * p.qkv_stride + w.head * kD;
  const int c = static_cast<int>(threadIdx.x) % kChunks;
#pragma unroll
  for (int r = static_cast<int>(threadIdx.x) / kChunks; r < kM; r += kLoadRows) {
    const bool ok = r < w.rows;
    cp_async_16(q_s + panel_swz<kM>(r, c), q_src + static_cast<size_t>(ok ? r : 0) * p.qkv_stride + c * 8,
                ok);
  }
}

// The wgmma kernels' row bounds: this thread's accumulator rows r0, r0 + 8 (positions in pos; none where
// has_rows is false, a producer thread), then across the CTA (one barrier, warp_max_pos[] of every warp): the
// keys [0, kv_end) any row reads and the last key wg_max that the rows of warpgroup `wg` see (warps
// first_warp.. hold rows; four warps a warpgroup).
template <int kWarps>
__device__ __forceinline__ RowBounds wgmma_row_bounds(const PagedAttentionParams& p, const TileWork& w,
                                                      int r0, bool has_rows, int first_warp, int (&pos)[2],
                                                      int (&warp_max_pos)[kWarps], int& kv_end, int& wg_max) {
  bool valid[2] = {false, false};
  pos[0] = pos[1] = 0;
  if (has_rows) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int r = r0 + 8 * hh;
      valid[hh] = r < w.rows;
      pos[hh] = p.positions[w.q_begin + min(r, w.rows - 1)];
    }
  }
  const RowBounds wb = warp_row_bounds(pos, valid, 2);
  const int warp = static_cast<int>(threadIdx.x) / 32, wg = warp / 4;
  if (threadIdx.x % 32 == 0) warp_max_pos[warp] = wb.pos_max;
  __syncthreads();
  kv_end = 0;
  wg_max = -1;
#pragma unroll
  for (int i = 0; i < kWarps; ++i) {
    if (i < first_warp) continue;
    kv_end = max(kv_end, warp_max_pos[i] + 1);
    if (i / 4 == wg) wg_max = max(wg_max, warp_max_pos[i]);
  }
  return wb;
}

// One warpgroup's 64 query rows of a 128-row tile on wgmma (the wgmma kernels share it): this thread's
// accumulator fragments (O, S, and P as the A operand of P V), its two rows' online-softmax state, S = Q K^T
// and O += P V issued from shared memory (the caller fences and commits around them), the softmax of a tile
// and the normalized bf16 store.
template <int kD, int kM, int kN, bool kF16>
struct WgmmaRows {
  float o[kD / 2];
  float s[kN / 2];
  uint32_t pa[kN / 16][4];
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};
  int pos[2];   // positions of this thread's rows r0, r0 + 8 (rows past the chunk: the last row's)
  int pos_min;  // the lowest position among this warp's valid rows
  int t4;       // lane % 4: this thread's columns 2 t4, 2 t4 + 1 of each 8-column group
  float scale_log2;
  uint32_t q_wg;  // this warpgroup's 64 rows inside each Q panel

  __device__ __forceinline__ WgmmaRows(const int (&row_pos)[2], int warp_pos_min, float scale_log2_,
                                       uint32_t q_wg_)
      : pos{row_pos[0], row_pos[1]},
        pos_min(warp_pos_min),
        t4(static_cast<int>(threadIdx.x) % 4),
        scale_log2(scale_log2_),
        q_wg(q_wg_) {
#pragma unroll
    for (int i = 0; i < kD / 2; ++i) o[i] = 0.0f;
#pragma unroll
    for (int i = 0; i < kN / 2; ++i) s[i] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < kN / 16; ++kk) pa[kk][0] = pa[kk][1] = pa[kk][2] = pa[kk][3] = 0u;
  }
  // S = Q K^T for K at kb: kD / 16 k-steps; k-step ks lies in panel ks / 4 at byte 32 (ks % 4) of the
  // 128-byte rows.
  __device__ __forceinline__ void issue_s(uint32_t kb) {
#pragma unroll
    for (int ks = 0; ks < kD / 16; ++ks) {
      const uint32_t koff = (ks % 4) * 32;
      wgmma_m64n128k16_ss<kF16>(s, make_desc(q_wg + (ks / 4) * (kM * 128) + koff, 16, 1024),
                                make_desc(kb + (ks / 4) * (kN * 128) + koff, 16, 1024), ks > 0 ? 1 : 0);
    }
  }
  // O += P V for V at vb: k-step kk is rows [16kk, 16kk + 16) of V's panels (2048 bytes each), panels kN *
  // 128 bytes apart.
  __device__ __forceinline__ void issue_pv(uint32_t vb) {
#pragma unroll
    for (int kk = 0; kk < kN / 16; ++kk)
      wgmma_m64nNk16_rs_tb<kF16>(o, pa[kk], make_desc(vb + kk * 2048, kN * 128, 1024));
  }
  // Scores of tile `tile` in s -> probabilities (masked where the tile crosses a row's position: a
  // warp-uniform branch); alpha: the factors O's rows must be scaled by.
  __device__ __forceinline__ void softmax_tile(int tile, float (&alpha)[2]) {
    const int n0 = tile * kN;
    if (n0 + kN - 1 > pos_min) {
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int lim = pos[hh] - n0 - 2 * t4;  // column 8i + e of this lane is key n0 + 8i + 2 t4 + e
#pragma unroll
        for (int i = 0; i < kN / 8; ++i)
#pragma unroll
          for (int e = 0; e < 2; ++e)
            if (8 * i + e > lim) s[4 * i + 2 * hh + e] = -INFINITY;
      }
    }
#pragma unroll
    for (int hh = 0; hh < 2; ++hh)
      alpha[hh] = softmax_row<kN / 4>([&](int k) -> float& { return s[4 * (k / 2) + 2 * hh + (k % 2)]; },
                                      scale_log2, row_max[hh], row_sum[hh]);
  }
  // O *= alpha; P (A fragments: the S fragments of key columns [16kk, 16kk + 16) form k-step kk).
  __device__ __forceinline__ void rescale_and_pack(const float (&alpha)[2]) {
#pragma unroll
    for (int i = 0; i < kD / 8; ++i) {
      o[4 * i + 0] *= alpha[0];
      o[4 * i + 1] *= alpha[0];
      o[4 * i + 2] *= alpha[1];
      o[4 * i + 3] *= alpha[1];
    }
#pragma unroll
    for (int kk = 0; kk < kN / 16; ++kk) {
      pa[kk][0] = pack_operand<kF16>(s[8 * kk + 0], s[8 * kk + 1]);
      pa[kk][1] = pack_operand<kF16>(s[8 * kk + 2], s[8 * kk + 3]);
      pa[kk][2] = pack_operand<kF16>(s[8 * kk + 4], s[8 * kk + 5]);
      pa[kk][3] = pack_operand<kF16>(s[8 * kk + 6], s[8 * kk + 7]);
    }
  }
  __device__ __forceinline__ void fence_all() {
    fence_regs(s);
    fence_regs(o);
    fence_regs(pa);
  }
  // Normalize and store bf16 pairs straight from the accumulator (each quad writes 16 bytes): rows r0, r0 + 8
  // of the tile, those before w.rows.
  __device__ __forceinline__ void store(const PagedAttentionParams& p, const TileWork& w, int r0) const {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      float l = row_sum[hh];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const float inv = l > 0.0f ? v_scale_of(p, w.kv_head) / l : 0.0f;  // 1 for bf16 caches
      const int r = r0 + 8 * hh;
      if (r < w.rows) {
        __nv_bfloat16* out =
            p.out + static_cast<size_t>(w.q_begin + r) * p.num_heads * kD + w.head * kD + 2 * t4;
#pragma unroll
        for (int i = 0; i < kD / 8; ++i)
          *reinterpret_cast<uint32_t*>(out + 8 * i) =
              pack_bf16x2(o[4 * i + 2 * hh] * inv, o[4 * i + 2 * hh + 1] * inv);
      }
    }
  }
};

// kOverlap = false: per KV tile, S = Q K^T, wait, softmax, O += P V, wait (the two warpgroups overlap
// each other's softmax only as far as they drift apart between the per-tile barriers).
// kOverlap = true (FlashAttention-3's intra-warpgroup pipelining): S of tile t + 1 and P V of tile t are
// issued together; the softmax of tile t + 1 then runs while P V of tile t is still on the tensor cores.
// Every buffer is refilled only after the barrier that follows the last wgmma reading it (the schedule
// is spelled out at the loop).
// kFp8 (with kOverlap = false): the cache holds e4m3 codes. Each thread cp.asyncs its 16-code chunks of the
// next tile's K and V rows into the staging buffer while the current tile computes; at the top of the next
// iteration it waits for its own copies, converts those chunks (exact, kv_fp8.cuh; Fp8TileStager) into the
// swizzled K / V buffer and the barrier publishes them to the tensor cores: the bf16 kernel's schedule with a
// shared-memory conversion per tile and no registers held across the MMAs (the kernel is at 232-255
// registers). The K scale is folded into the score scale, the V scale applied in the epilogue (qk_scale_of /
// v_scale_of, kv_fp8.cuh). kF16 (with kFp8): f16 operands (attention_mma.cuh): codes -> f16 by cvt, Q rounded
// to f16 in shared memory once its copies land, P packed as f16.
template <typename Cfg, bool kOverlap, bool kFp8 = false, bool kF16 = false>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    paged_prefill_wgmma_kernel(PagedAttentionParams p, AttentionPlanView plan) {
  static_assert(!(kOverlap && kFp8), "FP8 caches run the kernel without the softmax / P V overlap");
  static_assert(kFp8 || !kF16, "the f16 variant reads FP8 caches");
  constexpr int kD = Cfg::kHeadDim, kM = Cfg::kM, kN = Cfg::kN;
  extern __shared__ unsigned char smem_raw[];
  __shared__ int warp_max_pos[Cfg::kThreads / 32];
  const uint32_t q_s = (smem_u32(smem_raw) + 1023u) & ~1023u;
  const uint32_t k_s = q_s + Cfg::kQBytes;       // K[b] at k_s + b * kKvBytes
  const uint32_t v_s = k_s + 2 * Cfg::kKvBytes;  // V[b] at v_s + b * kKvBytes

  const TileWork w = tile_work(p, plan);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, wg = warp / 4;
  const int g = lane / 4;
  const int r0 = wg * 64 + (warp % 4) * 16 + g;  // this thread's accumulator rows: r0, r0 + 8

  load_q_tile<kD, kM, Cfg::kThreads>(p, w, q_s);
  int pos[2], kv_end, wg_max;  // keys [0, kv_end) are read; this warpgroup's rows see keys <= wg_max
  const RowBounds wb = wgmma_row_bounds(p, w, r0, true, 0, pos, warp_max_pos, kv_end, wg_max);
  const int num_tiles = (kv_end + kN - 1) / kN;
  // Tiles [0, wg_tiles) hold keys of this warpgroup's rows; later ones are skipped (warpgroup-uniform).
  const int wg_tiles = min(num_tiles, (wg_max + kN) / kN);

  const KvRowLocator loc(p, w);
  const auto swz = [](int r, int c) { return panel_swz<kN>(r, c); };
  auto load_k = [&](int tile, int buf) {
    const __nv_bfloat16* const src[1] = {p.k_cache};
    const uint32_t dst[1] = {k_s + buf * Cfg::kKvBytes};
    load_kv_tile<kD, kN, Cfg::kThreads, 8, 1>(loc, tile, kv_end, src, dst, swz);
  };
  auto load_v = [&](int tile, int buf) {
    const __nv_bfloat16* const src[1] = {p.v_cache};
    const uint32_t dst[1] = {v_s + buf * Cfg::kKvBytes};
    load_kv_tile<kD, kN, Cfg::kThreads, 8, 1>(loc, tile, kv_end, src, dst, swz);
  };
  const typename Cfg::Stager stager(v_s + 2 * Cfg::kKvBytes);  // kFp8: the codes' staging buffer

  WgmmaRows<kD, kM, kN, kF16> rows(pos, wb.pos_min, qk_scale_of(p, w.kv_head) * kLog2e, q_s + wg * 64 * 128);

  auto publish_loads = [] {  // this thread's copies landed and are visible to the async proxy; then barrier
    cp_async_wait_all();
    fence_proxy_async();
    __syncthreads();
  };

  // S = Q K^T, softmax, O += P V of a tile in buffers tile & 1, in turn (kOverlap = false).
  auto compute_tile = [&](int tile) {
    rows.fence_all();
    wgmma_fence();
    rows.issue_s(k_s + (tile & 1) * Cfg::kKvBytes);
    wgmma_commit();
    wgmma_wait_all();
    fence_regs(rows.s);
    float alpha[2];
    rows.softmax_tile(tile, alpha);
    rows.rescale_and_pack(alpha);
    rows.fence_all();
    wgmma_fence();
    rows.issue_pv(v_s + (tile & 1) * Cfg::kKvBytes);
    wgmma_commit();
    wgmma_wait_all();  // V[tile & 1] is refilled after the next barrier
    fence_regs(rows.o);
  };

  if constexpr (kFp8) {
    stager.load(loc, 0, kv_end, p);
    cp_async_commit();  // with Q
    for (int tile = 0; tile < num_tiles; ++tile) {
      cp_async_wait_all();  // this thread's codes of the tile (and Q) landed
      if (kF16 && tile == 0)
        q_tile_to_f16<kD, kM, Cfg::kThreads>(q_s, [](int r, int c) { return panel_swz<kM>(r, c); });
      // Into the buffers last read by tile - 2, retired before the previous barrier.
      stager.template convert<kF16>(k_s + (tile & 1) * Cfg::kKvBytes, v_s + (tile & 1) * Cfg::kKvBytes, swz);
      fence_proxy_async();
      __syncthreads();          // bf16 tile visible to every thread and to wgmma; the staging buffer is free
      if (tile + 1 < num_tiles) {
        stager.load(loc, tile + 1, kv_end, p);
        cp_async_commit();
      }
      if (tile < wg_tiles) compute_tile(tile);
    }
  } else if constexpr (!kOverlap) {
    load_k(0, 0);
    load_v(0, 0);
    cp_async_commit();
    for (int tile = 0; tile < num_tiles; ++tile) {
      publish_loads();  // tile visible to every thread and to wgmma; the buffers refilled next are free
      if (tile + 1 < num_tiles) {
        load_k(tile + 1, (tile + 1) & 1);
        load_v(tile + 1, (tile + 1) & 1);
        cp_async_commit();
      }
      if (tile < wg_tiles) compute_tile(tile);
    }
  } else {
    // Iteration t (one barrier each, t = 0 .. num_tiles): S of tile t and P V of tile t - 1 are issued
    // together, the softmax of tile t runs while P V is on the tensor cores, and both are retired within
    // the iteration (ptxas serializes wgmma left in flight across the loop's back edge). Iteration t >= 1
    // loads K[t + 1] and V[t] (used at t + 1); the barrier at its top follows every wgmma of iteration
    // t - 1, so K[(t + 1) & 1] and V[t & 1] are free. The prologue loads Q and K[0] (one group: iteration
    // 0 waits only for it), then V[0] and K[1].
    load_k(0, 0);
    cp_async_commit();  // with Q
    load_v(0, 0);
    if (num_tiles > 1) load_k(1, 1);
    cp_async_commit();
    // Loads of iteration t >= 1, issued right after its wgmma so the copies overlap the tensor-core work.
    auto issue_loads = [&](int tile) {
      if (tile == 0) return;
      if (tile + 1 < num_tiles) load_k(tile + 1, (tile + 1) & 1);
      if (tile < num_tiles) load_v(tile, tile & 1);
      cp_async_commit();
    };
    for (int tile = 0; tile <= num_tiles; ++tile) {
      if (tile == 0) {
        cp_async_wait<1>();  // Q and K[0]
        fence_proxy_async();
        __syncthreads();
      } else {
        publish_loads();
      }
      const uint32_t kb = k_s + (tile & 1) * Cfg::kKvBytes, vb_prev = v_s + ((tile + 1) & 1) * Cfg::kKvBytes;
      float alpha[2];
      // Each branch is one straight-line sequence from the first wgmma fence to the last wait (ptxas
      // serializes wgmma issued under a condition after a fence outside it).
      if (tile == 0 && wg_tiles > 0) {  // S of tile 0 alone
        rows.fence_all();
        wgmma_fence();
        rows.issue_s(kb);
        wgmma_commit();
        wgmma_wait<0>();
        fence_regs(rows.s);
        rows.softmax_tile(tile, alpha);
        rows.rescale_and_pack(alpha);
      } else if (tile > 0 && tile < wg_tiles) {  // S of tile t and P V of tile t - 1
        rows.fence_all();
        wgmma_fence();
        rows.issue_s(kb);
        wgmma_commit();
        wgmma_fence();  // a second stage: s is rewritten once S retires, while P V still runs
        rows.issue_pv(vb_prev);
        wgmma_commit();
        issue_loads(tile);
        wgmma_wait<1>();  // S (committed first) is done
        fence_regs(rows.s);
        rows.softmax_tile(tile, alpha);
        end_schedule_region(rows.row_sum[0] + rows.row_sum[1]);
        wgmma_wait<0>();  // P V is done: O may be rescaled and P rewritten
        rows.fence_all();
        rows.rescale_and_pack(alpha);
      } else if (tile > 0 && tile == wg_tiles) {  // this warpgroup's last P V
        rows.fence_all();
        wgmma_fence();
        rows.issue_pv(vb_prev);
        wgmma_commit();
        issue_loads(tile);
        wgmma_wait<0>();
        fence_regs(rows.o);
      } else {
        issue_loads(tile);
      }
    }
  }

  rows.store(p, w, r0);
}

// =====================================================================================================
// Kernel 1b: warp-specialized wgmma (FlashAttention-3's schedule). CTA = 128 query rows of one q head and
// three warpgroups: a producer (warpgroup 0) that fills a two-stage ring of K and V tiles (kN = 128 keys) and
// two consumers of 64 rows each. The consumers never wait for a load at a CTA barrier: each stage has its own
// full / empty mbarriers for K and for V, so a K stage is refilled once both consumers' S of it completed and
// a V stage once their P V did. Each consumer issues S of tile t and P V of tile t - 1 together and runs the
// softmax of tile t while P V is on the tensor cores (intra-warpgroup overlap); the two consumers take turns
// at issuing (named barriers), so one's softmax runs beside the other's MMAs (ping-pong). The producer issues
// cp.async copies (bf16 caches: straight into the stage; FP8: the codes into a staging ring, then converted
// into the stage by Fp8TileStager, to f16 with kF16) and, once its own copies landed or its own conversions
// are stored, fences them for the async proxy and arrives on the stage's full barrier (128 arrivals, one per
// producer thread). Q rides with tile 0's K (and is rounded to f16 there with kF16). Registers: the producer
// gives all but kWsProducerRegs of its share to the consumers (setmaxnreg). Shared memory: Q [128, kD], K[2],
// V[2] [kN, kD] in the wgmma kernel's swizzled panels, FP8 staging [2][2][kN][kD] bytes; kD = 128: 160 KiB
// (bf16) / 224 KiB (FP8).
// =====================================================================================================

template <int kD, bool kFp8>
struct WsConfig {
  static constexpr int kHeadDim = kD;
  static constexpr int kM = kPrefillTileRows;
  static constexpr int kN = 128;
  static constexpr int kThreads = 384;  // producer warpgroup + two consumers
  static constexpr int kProducerThreads = 128;
  static constexpr int kQBytes = kM * kD * 2;
  static constexpr int kKvBytes = kN * kD * 2;
  using Stager = Fp8TileStager<kD, kN, kProducerThreads>;
  static constexpr int kStageBytes = kFp8 ? 2 * Stager::kBytes : 0;  // two tiles of K + V codes
  static constexpr int kBarrierBytes = 8 * 8;  // fullK, fullV, emptyK, emptyV x 2 stages
  static constexpr int kSmem = kQBytes + 4 * kKvBytes + kStageBytes + kBarrierBytes + 1024;
  static_assert(kM == 128 && (kD == 64 || kD == 128));
};
// Registers per thread after the hand-off: 128 x 72 + 256 x 216 = 384 x 168 (the launch's share).
inline constexpr int kWsProducerRegs = 104, kWsConsumerRegs = 200;
static_assert(128 * kWsProducerRegs + 256 * kWsConsumerRegs <= 384 * ((65536 / 384) & ~7));

template <typename Cfg, bool kFp8, bool kF16>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    paged_prefill_ws_kernel(PagedAttentionParams p, AttentionPlanView plan) {
  static_assert(kFp8 || !kF16, "the f16 variant reads FP8 caches");
  constexpr int kD = Cfg::kHeadDim, kM = Cfg::kM, kN = Cfg::kN, kP = Cfg::kProducerThreads;
  extern __shared__ unsigned char smem_raw[];
  __shared__ int warp_max_pos[Cfg::kThreads / 32];
  const uint32_t q_s = (smem_u32(smem_raw) + 1023u) & ~1023u;
  const uint32_t k_s = q_s + Cfg::kQBytes;       // K[b] at k_s + b * kKvBytes
  const uint32_t v_s = k_s + 2 * Cfg::kKvBytes;  // V[b] at v_s + b * kKvBytes
  const uint32_t stage_s = v_s + 2 * Cfg::kKvBytes;
  const uint32_t bars = stage_s + Cfg::kStageBytes;
  auto full_k = [&](int b) { return bars + 8u * static_cast<uint32_t>(b); };
  auto full_v = [&](int b) { return bars + 8u * static_cast<uint32_t>(2 + b); };
  auto empty_k = [&](int b) { return bars + 8u * static_cast<uint32_t>(4 + b); };
  auto empty_v = [&](int b) { return bars + 8u * static_cast<uint32_t>(6 + b); };

  const TileWork w = tile_work(p, plan);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, wg = warp / 4;
  // Consumer c = wg - 1 holds rows 64c + 16 (warp % 4) + lane / 4 (+ 8); the producer's threads hold no rows.
  const int g = lane / 4;
  const int r0 = (wg - 1) * 64 + (warp % 4) * 16 + g;

  if (tid == 0) {
    for (int b = 0; b < 2; ++b) {
      mbar_init(full_k(b), kP);
      mbar_init(full_v(b), kP);
      mbar_init(empty_k(b), 256);
      mbar_init(empty_v(b), 256);
    }
    mbar_init_fence();
  }
  // Keys [0, kv_end) are read; this consumer's rows see keys <= wg_max. The barrier also publishes the
  // mbarriers' initialization.
  int pos[2], kv_end, wg_max;
  const RowBounds wb = wgmma_row_bounds(p, w, r0, wg > 0, 4, pos, warp_max_pos, kv_end, wg_max);
  const int num_tiles = (kv_end + kN - 1) / kN;
  const KvRowLocator loc(p, w);
  const auto swz = [](int r, int c) { return panel_swz<kN>(r, c); };

  if (wg == 0) {
    // ---- producer ----
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kWsProducerRegs) : "memory");
    load_q_tile<kD, kM, kP>(p, w, q_s);  // in the group of tile 0's K (or codes)
    // Stage b's refill for tile t waits for the consumers' release of tile t - 2 (parity of round t / 2 - 1).
    auto wait_empty = [&](uint32_t bar, int t) { mbar_wait(bar, ((t / 2) & 1) ^ 1); };
    auto publish = [&](uint32_t bar) {  // this thread's copies / stores of a stage -> the async proxy, arrive
      fence_proxy_async();
      mbar_arrive(bar);
    };
    if constexpr (kFp8) {
      auto stager = [&](int t) { return typename Cfg::Stager(stage_s + (t & 1) * Cfg::Stager::kBytes); };
      stager(0).load(loc, 0, kv_end, p);
      cp_async_commit();  // Q and tile 0's codes
      if (num_tiles > 1) stager(1).load(loc, 1, kv_end, p);
      cp_async_commit();  // (possibly empty)
      for (int t = 0; t < num_tiles; ++t) {
        cp_async_wait<1>();  // tile t's codes (and Q) landed; tile t + 1's may still be in flight
        if (kF16 && t == 0) q_tile_to_f16<kD, kM, kP>(q_s, [](int r, int c) { return panel_swz<kM>(r, c); });
        const uint32_t kb = k_s + (t & 1) * Cfg::kKvBytes, vb = v_s + (t & 1) * Cfg::kKvBytes;
        wait_empty(empty_k(t & 1), t);
        stager(t).template convert_k<kF16>(kb, swz);
        publish(full_k(t & 1));
        wait_empty(empty_v(t & 1), t);
        stager(t).template convert_v<kF16>(vb, swz);
        publish(full_v(t & 1));
        if (t + 2 < num_tiles) stager(t).load(loc, t + 2, kv_end, p);  // this thread read its chunks of t
        cp_async_commit();
      }
    } else {
      // This thread's 16-byte chunk c of rows r_first + i * kLoadRows of a tile: their cache rows are looked
      // up once for K and V, all in flight together (the block-table reads are the producer's latency).
      constexpr int kChunks = kD / 8, kLoadRows = kP / kChunks, kPerThread = kN / kLoadRows;
      const int c_load = tid % kChunks, r_first = tid / kChunks;
      uint32_t rows[kPerThread];
      auto lookup = [&](int t) {
#pragma unroll
        for (int i = 0; i < kPerThread; ++i)
          rows[i] = loc.row(min(t * kN + r_first + i * kLoadRows, kv_end - 1));
      };
      auto load = [&](const __nv_bfloat16* cache, uint32_t dst, int t) {
#pragma unroll
        for (int i = 0; i < kPerThread; ++i) {
          const int r = r_first + i * kLoadRows;
          cp_async_16(dst + swz(r, c_load), cache + static_cast<size_t>(rows[i]) * kD + c_load * 8,
                      t * kN + r < kv_end);  // zeros past the end
        }
        cp_async_commit();
      };
      // Groups in issue order: K0 (with Q), V0, then per t: K[t + 1], V[t + 1]. K[t] is published once K[t +
      // 1] is issued (its stage freed by S of tile t - 1), V[t] once V[t + 1] is (freed by P V of tile t -
      // 1), so a consumer waiting on K[t] never waits behind a refill that needs its own P V.
      lookup(0);
      load(p.k_cache, k_s, 0);
      load(p.v_cache, v_s, 0);
      for (int t = 0; t < num_tiles; ++t) {
        const bool next = t + 1 < num_tiles;
        const uint32_t b1 = (t + 1) & 1;
        if (next) {
          lookup(t + 1);
          wait_empty(empty_k(b1), t + 1);
          load(p.k_cache, k_s + b1 * Cfg::kKvBytes, t + 1);
          cp_async_wait<2>();  // K[t] landed (V[t], K[t + 1] may be in flight)
        } else {
          cp_async_wait<1>();
        }
        publish(full_k(t & 1));
        if (next) {
          wait_empty(empty_v(b1), t + 1);
          load(p.v_cache, v_s + b1 * Cfg::kKvBytes, t + 1);
          cp_async_wait<2>();  // V[t] landed
        } else {
          cp_async_wait<0>();
        }
        publish(full_v(t & 1));
      }
    }
    return;  // the CTA stays resident until the consumers finish
  }

  // ---- consumers ----
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kWsConsumerRegs) : "memory");
  const int c = wg - 1;
  // Tiles [0, my_tiles) hold keys of this consumer's rows; it skips later ones (releasing their stages).
  const int my_tiles = min(num_tiles, (wg_max + kN) / kN);
  constexpr int kTurn0 = 1;  // named barriers kTurn0 + c: consumer c may issue its MMAs
  WgmmaRows<kD, kM, kN, kF16> rows(pos, wb.pos_min, qk_scale_of(p, w.kv_head) * kLog2e, q_s + c * 64 * 128);

  // The turns (H200, bf16 cache, us with / without them: 2048-token prompt 111 / 117, 7 x 2048 727 / 767; FP8
  // cache within 1%; docs/PERF.md session 25).
  auto turn_wait = [&] { named_barrier_sync(kTurn0 + c, 256); };
  auto turn_pass = [&](int t) {
    if (c == 0 || t < num_tiles) named_barrier_arrive(kTurn0 + 1 - c, 256);
  };
  if (c == 1) named_barrier_arrive(kTurn0 + 0, 256);  // consumer 0 issues first
  // Iteration t = 0 .. num_tiles: S of tile t (t < my_tiles) and P V of tile t - 1 (t - 1 < my_tiles), issued
  // in this consumer's turn; each stage is released once the MMA reading it retired, or at once where this
  // consumer skips the tile. Each branch is one straight-line sequence from its first wgmma fence to its last
  // wait (ptxas serializes wgmma issued under a condition after a fence outside it).
  for (int t = 0; t <= num_tiles; ++t) {
    const bool do_s = t < my_tiles, do_pv = t >= 1 && t - 1 < my_tiles;
    const uint32_t kb = k_s + (t & 1) * Cfg::kKvBytes, vb_prev = v_s + ((t + 1) & 1) * Cfg::kKvBytes;
    // Every stage is waited for, skipped ones too: a stage's release then never runs ahead of the other
    // consumer's release of the tile two before (its fill needed that), so each empty barrier's phases stay
    // apart.
    if (t < num_tiles) mbar_wait(full_k(t & 1), (t / 2) & 1);
    if (t >= 1) mbar_wait(full_v((t + 1) & 1), ((t - 1) / 2) & 1);
    turn_wait();
    float alpha[2];
    if (do_s && !do_pv) {  // S of tile 0 alone
      rows.fence_all();
      wgmma_fence();
      rows.issue_s(kb);
      wgmma_commit();
      turn_pass(t);
      wgmma_wait<0>();
      fence_regs(rows.s);
      mbar_arrive(empty_k(t & 1));
      rows.softmax_tile(t, alpha);
      rows.rescale_and_pack(alpha);
    } else if (do_s) {  // S of tile t and P V of tile t - 1
      rows.fence_all();
      wgmma_fence();
      rows.issue_s(kb);
      wgmma_commit();
      wgmma_fence();
      rows.issue_pv(vb_prev);
      wgmma_commit();
      turn_pass(t);
      wgmma_wait<1>();  // S (committed first) is done
      fence_regs(rows.s);
      mbar_arrive(empty_k(t & 1));
      rows.softmax_tile(t, alpha);
      end_schedule_region(rows.row_sum[0] + rows.row_sum[1]);
      wgmma_wait<0>();  // P V is done: O may be rescaled and P rewritten
      rows.fence_all();
      mbar_arrive(empty_v((t + 1) & 1));
      rows.rescale_and_pack(alpha);
    } else if (do_pv) {  // this consumer's last P V
      rows.fence_all();
      wgmma_fence();
      rows.issue_pv(vb_prev);
      wgmma_commit();
      turn_pass(t);
      wgmma_wait<0>();
      fence_regs(rows.o);
      mbar_arrive(empty_v((t + 1) & 1));
    } else {
      turn_pass(t);
    }
    // Stages of tiles this consumer skips: released without reading them.
    if (!do_s && t < num_tiles) mbar_arrive(empty_k(t & 1));
    if (!do_pv && t >= 1) mbar_arrive(empty_v((t + 1) & 1));
  }

  rows.store(p, w, r0);
}

// =====================================================================================================
// Kernel 2 (fallback): FlashAttention-2 layout with mma.sync.m16n8k16. CTA = 128 query rows of one q head,
// 4 warps x 32 rows (two m16 tiles per warp, so each K / V fragment read from shared memory feeds two
// MMAs), KV tiles of kN = 64 keys, fragments loaded with ldmatrix (.trans for V). Shared memory: Q [128, kD]
// and double-buffered K, V [2][kN, kD], rows of kD bf16 whose 16-byte chunks are XOR-swizzled by (row & 7)
// so that ldmatrix and the row-wise cp.async writes are free of bank conflicts. 96 KiB for kD = 128: two
// CTAs per SM. FP8 caches: the next tile's codes staged by cp.async behind V[1] (16 KiB more) and converted
// at the top of its iteration (Fp8TileStager), in bf16 or, kF16, f16 (Q rounded to f16 once its copies land).
// =====================================================================================================

template <int kD>
struct MmaConfig {
  static constexpr int kHeadDim = kD;
  static constexpr int kM = kPrefillTileRows;
  static constexpr int kN = 64;
  static constexpr int kWarps = 4;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kWarpRows = kM / kWarps;   // 32
  static constexpr int kMTiles = kWarpRows / 16;  // m16 tiles per warp
  static constexpr int kChunks = kD / 8;
  static constexpr int kRowBytes = kD * 2;
  static constexpr int kLoadRows = kThreads / kChunks;
  static constexpr int kQBytes = kM * kRowBytes;
  static constexpr int kKvBytes = kN * kRowBytes;
  static constexpr int kSmem = kQBytes + 4 * kKvBytes;  // Q, K[2], V[2]
  using Stager = Fp8TileStager<kD, kN, kThreads>;
  static constexpr int kSmemFp8 = kSmem + Stager::kBytes;
  static_assert(kM == 128 && kWarpRows % 16 == 0);
  static_assert(kD % 16 == 0 && kChunks >= 8 && kThreads % kChunks == 0 && kN % kLoadRows == 0);
};

// Byte offset of 16-byte chunk c of row r in a swizzled [rows, kD] bf16 tile with kRowBytes-byte rows.
template <int kRowBytes>
__device__ __forceinline__ uint32_t row_swz(int r, int c) {
  return static_cast<uint32_t>(r * kRowBytes + ((c ^ (r & 7)) << 4));
}

template <typename Cfg, bool kFp8, bool kF16 = false>
__global__ void __launch_bounds__(Cfg::kThreads, 2)
    paged_prefill_mma_kernel(PagedAttentionParams p, AttentionPlanView plan) {
  static_assert(kFp8 || !kF16, "the f16 variant reads FP8 caches");
  auto mma = [](float(&d)[4], const uint32_t(&a)[4], uint32_t b0, uint32_t b1) {
    mma_16816<kF16>(d, a[0], a[1], a[2], a[3], b0, b1);
  };
  constexpr int kD = Cfg::kHeadDim, kM = Cfg::kM, kN = Cfg::kN, kMT = Cfg::kMTiles, kChunks = Cfg::kChunks,
                kRB = Cfg::kRowBytes, kLoadRows = Cfg::kLoadRows, kWarpRows = Cfg::kWarpRows;
  constexpr int kNT = kN / 8;  // n8 tiles of S per m16 tile
  constexpr int kDT = kD / 8;  // n8 tiles of O per m16 tile
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ int warp_max_pos[Cfg::kWarps];
  const uint32_t q_s = smem_u32(smem);
  const uint32_t k_s = q_s + Cfg::kQBytes;       // K[b] at k_s + b * kKvBytes
  const uint32_t v_s = k_s + 2 * Cfg::kKvBytes;  // V[b] at v_s + b * kKvBytes

  const TileWork w = tile_work(p, plan);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t4 = lane % 4;  // fragment coordinates: rows g, g + 8; columns 2 t4 + {0, 1}
  const int wr = warp * kWarpRows;        // this warp's first row in the tile

  {
    const __nv_bfloat16* q_src = p.qkv + static_cast<size_t>(w.q_begin) * p.qkv_stride + w.head * kD;
    const int c = tid % kChunks;
#pragma unroll
    for (int r = tid / kChunks; r < kM; r += kLoadRows) {
      const bool ok = r < w.rows;
      cp_async_16(q_s + row_swz<kRB>(r, c), q_src + static_cast<size_t>(ok ? r : 0) * p.qkv_stride + c * 8,
                  ok);
    }
    cp_async_commit();
  }

  int pos[2 * kMT];  // rows wr + 16 mt + g + 8 hh at index 2 mt + hh
  bool valid[2 * kMT];
#pragma unroll
  for (int i = 0; i < 2 * kMT; ++i) {
    const int r = wr + (i / 2) * 16 + g + 8 * (i % 2);
    valid[i] = r < w.rows;
    pos[i] = p.positions[w.q_begin + min(r, w.rows - 1)];
  }
  const RowBounds wb = warp_row_bounds(pos, valid, 2 * kMT);
  if (lane == 0) warp_max_pos[warp] = wb.pos_max;
  __syncthreads();
  int kv_end = 0;
#pragma unroll
  for (int i = 0; i < Cfg::kWarps; ++i) kv_end = max(kv_end, warp_max_pos[i] + 1);
  const int num_tiles = (kv_end + kN - 1) / kN;

  const KvRowLocator loc(p, w);
  const auto swz = [](int r, int c) { return row_swz<kRB>(r, c); };
  const typename Cfg::Stager stager(v_s + 2 * Cfg::kKvBytes);  // kFp8: the codes' staging buffer
  // Tile `tile`'s copies: bf16 rows straight into buffer `buf`, or FP8 codes into the staging buffer.
  auto load_kv = [&](int tile, int buf) {
    if constexpr (kFp8) {
      stager.load(loc, tile, kv_end, p);
    } else {
      const __nv_bfloat16* const src[2] = {p.k_cache, p.v_cache};
      const uint32_t dst[2] = {k_s + buf * Cfg::kKvBytes, v_s + buf * Cfg::kKvBytes};
      load_kv_tile<kD, kN, Cfg::kThreads, 1, 2>(loc, tile, kv_end, src, dst, swz);
    }
    cp_async_commit();
  };
  load_kv(0, 0);

  float o_acc[kMT][kDT][4];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int dt = 0; dt < kDT; ++dt)
#pragma unroll
      for (int e = 0; e < 4; ++e) o_acc[mt][dt][e] = 0.0f;
  float row_max[2 * kMT], row_sum[2 * kMT];
#pragma unroll
  for (int i = 0; i < 2 * kMT; ++i) {
    row_max[i] = -INFINITY;
    row_sum[i] = 0.0f;
  }
  const float scale_log2 = qk_scale_of(p, w.kv_head) * kLog2e;
  const int lr = lane & 7;  // (row & 7) of every ldmatrix row address below

  for (int tile = 0; tile < num_tiles; ++tile) {
    cp_async_wait_all();  // this thread's copies of the tile (and Q) landed
    if constexpr (kFp8) {
      if (kF16 && tile == 0) q_tile_to_f16<kD, kM, Cfg::kThreads>(q_s, swz);
      // Into the buffers last read by tile - 2, retired before the previous barrier.
      stager.template convert<kF16>(k_s + (tile & 1) * Cfg::kKvBytes, v_s + (tile & 1) * Cfg::kKvBytes, swz);
    }
    __syncthreads();  // tile visible to all; everyone is done with the buffer refilled next
    if (tile + 1 < num_tiles) load_kv(tile + 1, (tile + 1) & 1);
    const int n0 = tile * kN;
    if (n0 > wb.pos_max) continue;  // every row of this warp precedes the tile (or is past the chunk)
    const uint32_t kb = k_s + (tile & 1) * Cfg::kKvBytes, vb = v_s + (tile & 1) * Cfg::kKvBytes;

    // S = Q K^T for this warp's 32 rows x kN keys.
    float s[kMT][kNT][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mt][nt][e] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < kD / 16; ++ks) {
      uint32_t a[kMT][4];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
        ldmatrix_x4(a[mt], q_s + (wr + mt * 16 + (lane & 15)) * kRB + (((2 * ks + (lane >> 4)) ^ lr) << 4));
#pragma unroll
      for (int np = 0; np < kNT / 2; ++np) {
        uint32_t b[4];  // n8 tiles 2np, 2np + 1 at k-step ks
        ldmatrix_x4(
            b, kb + (np * 16 + ((lane >> 4) << 3) + lr) * kRB + (((2 * ks + ((lane >> 3) & 1)) ^ lr) << 4));
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          mma(s[mt][2 * np], a[mt], b[0], b[1]);
          mma(s[mt][2 * np + 1], a[mt], b[2], b[3]);
        }
      }
    }

    // Mask keys past each row's position, only in tiles that cross one (warp-uniform branch).
    if (n0 + kN - 1 > wb.pos_min) {
#pragma unroll
      for (int i = 0; i < 2 * kMT; ++i) {
        const int lim = pos[i] - n0 - 2 * t4;  // column 8nt + e of this lane is key n0 + 8nt + 2 t4 + e
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
          for (int e = 0; e < 2; ++e)
            if (8 * nt + e > lim) s[i / 2][nt][2 * (i % 2) + e] = -INFINITY;
      }
    }
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const float alpha =
            softmax_row<2 * kNT>([&](int k) -> float& { return s[mt][k / 2][2 * hh + (k % 2)]; }, scale_log2,
                                 row_max[2 * mt + hh], row_sum[2 * mt + hh]);
#pragma unroll
        for (int dt = 0; dt < kDT; ++dt) {
          o_acc[mt][dt][2 * hh] *= alpha;
          o_acc[mt][dt][2 * hh + 1] *= alpha;
        }
      }

      // O += P V: P's accumulator fragments of n8 tiles 2kk, 2kk + 1 are the A fragment of k-step kk.
#pragma unroll
    for (int kk = 0; kk < kN / 16; ++kk) {
      uint32_t a[kMT][4];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        a[mt][0] = pack_operand<kF16>(s[mt][2 * kk][0], s[mt][2 * kk][1]);
        a[mt][1] = pack_operand<kF16>(s[mt][2 * kk][2], s[mt][2 * kk][3]);
        a[mt][2] = pack_operand<kF16>(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
        a[mt][3] = pack_operand<kF16>(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
      }
#pragma unroll
      for (int dp = 0; dp < kDT / 2; ++dp) {
        uint32_t b[4];  // V^T fragments of d tiles 2dp, 2dp + 1 for keys [16kk, 16kk + 16)
        ldmatrix_x4_trans(
            b, vb + (kk * 16 + ((lane >> 3) & 1) * 8 + lr) * kRB + (((2 * dp + (lane >> 4)) ^ lr) << 4));
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          mma(o_acc[mt][2 * dp], a[mt], b[0], b[1]);
          mma(o_acc[mt][2 * dp + 1], a[mt], b[2], b[3]);
        }
      }
    }
  }

  // Epilogue: normalize, stage the warp's rows as bf16 in its own (no longer read) Q rows, then write
  // them out with 16-byte stores.
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      float l = row_sum[2 * mt + hh];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const float inv = l > 0.0f ? v_scale_of(p, w.kv_head) / l : 0.0f;
      const int r = wr + mt * 16 + g + 8 * hh;  // r & 7 == g
#pragma unroll
      for (int dt = 0; dt < kDT; ++dt)
        *reinterpret_cast<uint32_t*>(smem + r * kRB + ((dt ^ g) << 4) + 4 * t4) =
            pack_bf16x2(o_acc[mt][dt][2 * hh] * inv, o_acc[mt][dt][2 * hh + 1] * inv);
    }
  __syncwarp();
  __nv_bfloat16* out = p.out + static_cast<size_t>(w.q_begin) * p.num_heads * kD + w.head * kD;
#pragma unroll
  for (int idx = lane; idx < kWarpRows * kChunks; idx += 32) {
    const int r = wr + idx / kChunks, c = idx % kChunks;
    if (r < w.rows)
      *reinterpret_cast<uint4*>(out + static_cast<size_t>(r) * p.num_heads * kD + c * 8) =
          *reinterpret_cast<const uint4*>(smem + row_swz<kRB>(r, c));
  }
}

// ---- launch ----

// The shared-memory attribute is set on every launch (cheap, no synchronization, allowed during graph
// capture): it belongs to the current device.
template <typename Kernel>
void launch_prefill_kernel(Kernel kernel, int threads, int smem, const PagedAttentionParams& p,
                           const AttentionPlanView& plan, cudaStream_t stream) {
  XI_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  kernel<<<dim3(p.num_heads, plan.num_prefill_items), threads, smem, stream>>>(p, plan);
  XI_CUDA_CHECK_LAUNCH();
}

}  // namespace

bool prefill_attention_supports(int head_dim) {
  return head_dim == 64 || head_dim == 128;
}
bool prefill_ws_supports(int head_dim) {
  return head_dim == 128;
}

void launch_paged_prefill_attention(const PagedAttentionParams& p, const AttentionPlanView& plan,
                                    cudaStream_t stream, PrefillKernel kernel) {
  if (plan.num_prefill_items == 0) return;
  XI_CHECK_EQ(p.num_heads % p.num_kv_heads, 0);
  XI_CHECK_GT(p.scale, 0.0f) << "the kernels keep row maxima of unscaled scores";
  check_kv_block_index(p.block_size, p.max_blocks_per_seq);
  XI_CHECK_LE(plan.num_prefill_items, 65535) << "prefill work items exceed the grid's y limit";
  XI_CHECK(!p.kv_fp8 || kernel != PrefillKernel::kWgmma)
      << "prefill attention: fp8 KV caches are read by the kWgmmaSimple and mma.sync kernels only";
  dispatch_fast_head_dim(p.head_dim, [&]<int kD>() {
    using Wgmma = WgmmaConfig<kD>;
    using Mma = MmaConfig<kD>;
    switch (kernel) {
      case PrefillKernel::kWgmma:
        launch_prefill_kernel(paged_prefill_wgmma_kernel<Wgmma, true>, Wgmma::kThreads, Wgmma::kSmem, p, plan,
                              stream);
        break;
      case PrefillKernel::kWgmmaSimple:
        if (p.kv_fp8 && p.kv_fp8_f16)
          launch_prefill_kernel(paged_prefill_wgmma_kernel<Wgmma, false, true, true>, Wgmma::kThreads,
                                Wgmma::kSmem + Wgmma::kStageBytes, p, plan, stream);
        else if (p.kv_fp8)
          launch_prefill_kernel(paged_prefill_wgmma_kernel<Wgmma, false, true>, Wgmma::kThreads,
                                Wgmma::kSmem + Wgmma::kStageBytes, p, plan, stream);
        else
          launch_prefill_kernel(paged_prefill_wgmma_kernel<Wgmma, false>, Wgmma::kThreads, Wgmma::kSmem, p,
                                plan, stream);
        break;
      case PrefillKernel::kWgmmaWs:
        if constexpr (kD == 128) {
          using Ws8 = WsConfig<kD, true>;
          using Ws16 = WsConfig<kD, false>;
          if (p.kv_fp8 && p.kv_fp8_f16)
            launch_prefill_kernel(paged_prefill_ws_kernel<Ws8, true, true>, Ws8::kThreads, Ws8::kSmem, p,
                                  plan, stream);
          else if (p.kv_fp8)
            launch_prefill_kernel(paged_prefill_ws_kernel<Ws8, true, false>, Ws8::kThreads, Ws8::kSmem, p,
                                  plan, stream);
          else
            launch_prefill_kernel(paged_prefill_ws_kernel<Ws16, false, false>, Ws16::kThreads, Ws16::kSmem, p,
                                  plan, stream);
        } else {
          XI_CHECK(false) << "prefill attention: the warp-specialized kernel takes head_dim 128 (got " << kD
                          << ")";
        }
        break;
      case PrefillKernel::kMmaSync:
        if (p.kv_fp8 && p.kv_fp8_f16)
          launch_prefill_kernel(paged_prefill_mma_kernel<Mma, true, true>, Mma::kThreads, Mma::kSmemFp8, p,
                                plan, stream);
        else if (p.kv_fp8)
          launch_prefill_kernel(paged_prefill_mma_kernel<Mma, true>, Mma::kThreads, Mma::kSmemFp8, p, plan,
                                stream);
        else
          launch_prefill_kernel(paged_prefill_mma_kernel<Mma, false>, Mma::kThreads, Mma::kSmem, p, plan, stream);
        break;
    }
  });
}

}  // namespace xinfer::cuda
