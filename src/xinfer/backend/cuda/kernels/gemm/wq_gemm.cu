// The tiled tensor-core GEMM for weight-only int4 / int8 linears (wq_gemm.h: why, tiling, numerics).
#include "xinfer/backend/cuda/kernels/gemm/wq_gemm.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "xinfer/backend/cuda/cuda_check.h"
#include "xinfer/backend/cuda/kernels/cp_async.cuh"
#include "xinfer/backend/cuda/kernels/device_launch.h"
#include "xinfer/backend/cuda/kernels/gemm/quant_gemv_math.cuh"
#include "xinfer/backend/cuda/kernels/mbarrier.cuh"
#include "xinfer/backend/cuda/kernels/wgmma.cuh"

namespace xinfer::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kBM = kWqGemmTileM;    // rows of x per CTA
constexpr int kSmallTileM = 32;      // ... where m <= 32
constexpr int kBN = kWqGemmTileN;    // weight rows per CTA: 16 per warp
constexpr int kRunBytes = 16;        // a lane's bytes of one weight row per step
constexpr int kXCols = 512;          // the most columns of x a CTA holds in shared memory at once
constexpr int kMaxRangeCols = 2048;  // the longest k range wq_gemm_split_cols gives a split CTA
constexpr int kMinRangeCols = 1024;  // ... and the shortest (where the workspace allows)

template <int kBits>
struct Geometry {
  static constexpr int kRunCols = kRunBytes * 8 / kBits;  // a lane's columns per step: 32 / 16
  static constexpr int kStepCols = 4 * kRunCols;          // a warp's (the 4 lanes t): 128 / 64
  static constexpr int kChunks = kRunCols / 8;            // 16-byte x chunks per run: 4 / 2 (two mma each)
  // x rows in shared memory: kXCols columns + 2 chunks (int4: rows 2 chunks apart mod 8, and chunk c of the
  // lanes t >= 2 stored at c ^ 1: the 8 lanes of a 128-bit load's phase, 2 rows x 4 lanes t, hit 8 distinct
  // 16-byte bank groups) or + 1 chunk (int8: an odd row shift; its lanes' chunks are 2 apart already).
  static constexpr int kPitchChunks = kXCols / 8 + (kBits == 4 ? 2 : 1);
  static constexpr int smem(int bm) { return bm * kPitchChunks * 16; }
  __device__ static int phys_chunk(int c) { return kBits == 4 ? c ^ ((c >> 3) & 1) : c; }
};

struct WqParams {
  const __nv_bfloat16* x;     // [m, k]
  const uint8_t* w;           // [n, k * bits / 8]
  const float* scales;        // [n, groups]
  const uint8_t* zeros;       // [n, groups] or nullptr
  const float* mins;          // [n, groups] or nullptr: W = scale * q + min (GGUF Q4_1 / Q4_K repacked)
  const __nv_bfloat16* bias;  // [n] or nullptr
  void* y;                    // [m, n], rows ldy apart
  bool y_f32;
  bool is_signed;  // int8 per channel: i8 values, zero 0
  int m, n, k, groups, group_size;
  int group_shift;  // log2(group_size) where a power of two, else -1
  int ldy;
  int splits, split_cols;  // the k ranges (grid z) and their columns (a multiple of the step)
  float* partial;          // splits > 1: [tiles][splits][kBN][kBM] f32 sums, one slice per (tile, range)
  unsigned* counters;      // splits > 1: [tiles] arrivals, zero between launches
};

// x rows m0 .. m0 + kTileM, columns c0 .. c0 + cols of the CTA's range into shared memory, row r's 16-byte
// chunk c at dst(r, c) (zeros past m and k). Thread i takes chunk i % 64 of rows i / 64, + 4, ...: no
// division, consecutive threads on one row. Both kernels' layouts: load_x below, wg::load_x.
template <int kTileM, typename Dst>
__device__ __forceinline__ void load_x_rows(const WqParams& p, int m0, int c0, int cols, Dst dst) {
  constexpr int kRowChunks = kXCols / 8, kRowsPerPass = kThreads / kRowChunks;
  const int tid = static_cast<int>(threadIdx.x), c = tid % kRowChunks, col = c0 + c * 8;
  if (c * 8 >= cols) return;
#pragma unroll 1
  for (int r = tid / kRowChunks; r < kTileM; r += kRowsPerPass) {
    const bool valid = m0 + r < p.m && col < p.k;
    const __nv_bfloat16* src = valid ? p.x + static_cast<size_t>(m0 + r) * p.k + col : p.x;
    cp_async_16(dst(r, c), src, valid);
  }
}

// The mma.sync kernel's x: rows kPitchChunks chunks apart, chunks swizzled by phys_chunk.
template <int kBits, int kTileM>
__device__ __forceinline__ void load_x(const WqParams& p, int m0, int c0, int cols, __nv_bfloat16* xs) {
  using G = Geometry<kBits>;
  load_x_rows<kTileM>(p, m0, c0, cols, [&](int r, int c) {
    return smem_u32(xs + (r * G::kPitchChunks + G::phys_chunk(c)) * 8);
  });
}

// The group holding column col, and the zero point of group entry gi (128 for signed int8, whose bytes read
// as u8 ^ 0x80; 0 with mins; the symmetric 8 / 128 without zero points): both kernels' scale loads.
__device__ __forceinline__ int group_of(const WqParams& p, int col) {
  return p.group_shift >= 0 ? col >> p.group_shift : col / p.group_size;
}
template <int kBits>
__device__ __forceinline__ uint32_t zero_point(const WqParams& p, size_t gi) {
  return p.is_signed ? 128u
         : p.mins    ? 0u
         : p.zeros   ? static_cast<uint32_t>(__ldg(p.zeros + gi))
                     : (kBits == 4 ? 8u : 128u);
}

// The lane's run (16 bytes at column col) of its 2 weight rows (row0 + 8 i) and their scale, zero point (as
// the f32 2^23 + z; 2^23 with mins; 128 for signed int8, whose bytes read as u8 ^ 0x80) and min (0 without):
// a run of 32 (int4) / 16 (int8) columns lies in one group (groups are multiples of 32 / 16). Rows past n
// load nothing and dequantize to 0 (scale 0). Runs past k (the lanes t >= 2 of an int4 step half past k) load
// no weights and give A = 0 either way (z 0, no min), but keep the row's scale of the last group: with scaled
// sums each C fragment sums all 4 lanes' runs and is scaled by its own lane's, so a 0 there would drop the
// other lanes' columns.
struct Run {
  uint4 w[2];
  float s[2], zf[2], mn[2];
  uint32_t z2[2];  // int4: the zero point in both bf16 halves (z | z << 16), for the scaled sums' subtract
};
template <int kBits>
__device__ __forceinline__ void load_run(const WqParams& p, int row0, int col, Run& r) {
  const size_t row_bytes = static_cast<size_t>(p.k) * kBits / 8;
  const int group = group_of(p, col);
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int n = row0 + 8 * i;
    r.w[i] = make_uint4(0, 0, 0, 0);
    r.s[i] = 0.0f, r.zf[i] = __uint_as_float(0x4B000000u), r.mn[i] = 0.0f, r.z2[i] = 0;
    if (n >= p.n) continue;
    if (col >= p.k) {
      r.s[i] = __ldg(p.scales + static_cast<size_t>(n) * p.groups + (p.k - 1) / p.group_size);
      continue;
    }
    r.w[i] = quant_gemv::load_weights(p.w + static_cast<size_t>(n) * row_bytes +
                                      static_cast<size_t>(col) * kBits / 8);
    const size_t gi = static_cast<size_t>(n) * p.groups + group;
    r.s[i] = __ldg(p.scales + gi);
    const uint32_t z = zero_point<kBits>(p, gi);
    r.zf[i] = __uint_as_float(0x4B000000u | z);
    r.z2[i] = z | (z << 16);
    r.mn[i] = kBits == 4 && p.mins ? __ldg(p.mins + gi) : 0.0f;
  }
}

__device__ __forceinline__ uint32_t word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// Chunk c of one row's run as the bf16 A halves of mma 2 c (a[0]) and 2 c + 1 (a[1]): [h][0] the pair at
// logical k 2t, 2t + 1, [h][1] the pair at 2t + 8, 2t + 9, where mma j takes the run's columns 4 j .. 4 j + 3
// (an mma's k order is free as long as x's B fragment follows it). Each weight is s * (q - z) + min rounded
// to bf16 once, launch_dequantize_weight's value: q - z formed exactly as (2^23 + q) - (2^23 + z) in f32, one
// FMA.
template <int kBits>
__device__ __forceinline__ void dequantize_chunk(const Run& r, int i, int c, bool is_signed,
                                                 uint32_t (&a)[2][2]) {
  auto value = [&](uint32_t q) { return fmaf(r.s[i], __uint_as_float(0x4B000000u | q) - r.zf[i], r.mn[i]); };
  if constexpr (kBits == 4) {  // word c: columns 8 c .. 8 c + 7
    const uint32_t w = word(r.w[i], c);
#pragma unroll
    for (int p = 0; p < 4; ++p)
      a[p / 2][p % 2] = quant_gemv::pack_bf16x2(value((w >> (8 * p)) & 15u), value((w >> (8 * p + 4)) & 15u));
  } else {  // words 2 c, 2 c + 1: columns 4 j .. 4 j + 3 each
    const uint32_t sx = is_signed ? 0x80808080u : 0u;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint32_t v = word(r.w[i], 2 * c + h) ^ sx;
#pragma unroll
      for (int p = 0; p < 2; ++p)
        a[h][p] = quant_gemv::pack_bf16x2(value((v >> (16 * p)) & 0xffu), value((v >> (16 * p + 8)) & 0xffu));
    }
  }
}

// d[d0 + j] += one chunk's A fragments (rows g, g + 8 x mma 2c, 2c + 1 x (lo, hi)) times x's B tiles bt0 + j,
// j < kQuad, at physical chunk pc: each tile's two MMAs (k halves) kQuad apart, so none waits on the one just
// issued.
template <int kBits, int kQuad, int kN>
__device__ __forceinline__ void mma_tiles(const uint32_t (&a)[2][2][2], const __nv_bfloat16* xs, int g,
                                          int pc, int bt0, float (&d)[kN][4], int d0) {
  using G = Geometry<kBits>;
  uint4 b[kQuad];
#pragma unroll
  for (int j = 0; j < kQuad; ++j)
    b[j] = *reinterpret_cast<const uint4*>(xs + (((bt0 + j) * 8 + g) * G::kPitchChunks + pc) * 8);
#pragma unroll
  for (int j = 0; j < kQuad; ++j)
    quant_gemv::mma(d[d0 + j], a[0][0][0], a[1][0][0], a[0][0][1], a[1][0][1], b[j].x, b[j].y);
#pragma unroll
  for (int j = 0; j < kQuad; ++j)
    quant_gemv::mma(d[d0 + j], a[0][1][0], a[1][1][0], a[0][1][1], a[1][1][1], b[j].z, b[j].w);
}

// One step of the warp: its 16 weight rows x kTileM rows of x x the 4 lanes' runs. The B tiles go 4 at a
// time, each tile's two mma (k halves) 4 apart: no mma waits on the one just issued.
template <int kBits, int kTiles>
__device__ __forceinline__ void compute_run(const Run& r, const __nv_bfloat16* xs, int g, int chunk0,
                                            bool is_signed, float (&acc)[kTiles][4]) {
  using G = Geometry<kBits>;
  constexpr int kQuad = kTiles < 4 ? kTiles : 4;
#pragma unroll
  for (int c = 0; c < G::kChunks; ++c) {
    uint32_t a[2][2][2];  // rows g, g + 8 x mma 2c, 2c + 1 x (lo, hi)
#pragma unroll
    for (int i = 0; i < 2; ++i) dequantize_chunk<kBits>(r, i, c, is_signed, a[i]);
    const int pc = G::phys_chunk(chunk0 + c);
#pragma unroll
    for (int bt0 = 0; bt0 < kTiles; bt0 += kQuad) mma_tiles<kBits, kQuad>(a, xs, g, pc, bt0, acc, bt0);
  }
}

// Scaled sums (a step in one group, no mins: int4 groups of a multiple of 128, int8 of 64, int8 per channel):
// chunk c of one row's run as exact bf16 (q - z) pairs, the halves of mma 2 c (a[0]) and 2 c + 1 (a[1]) as in
// dequantize_chunk. int4: byte p of the word and of the word >> 4 side by side (PRMT) hold columns 2p and 2p
// + 1 in their low nibbles, masked under the bf16 exponent of 128 (128 + q exactly), then 128 + z subtracted
// (exact); int8: each byte as the f32 2^23 + q, minus 2^23 + z (exact), two packed to bf16 (|q - z| <= 255:
// exact).
template <int kBits>
__device__ __forceinline__ void integer_chunk(const Run& r, int i, int c, bool is_signed,
                                              uint32_t (&a)[2][2]) {
  if constexpr (kBits == 4) {
    const uint32_t w = word(r.w[i], c), w4 = w >> 4;
    const uint32_t magic_z = 0x43004300u + r.z2[i];  // bf16x2 (128 + z, 128 + z)
#pragma unroll
    for (int p = 0; p < 4; ++p) {
      const uint32_t v =
          (__byte_perm(w, w4, p | (p << 4) | ((4 + p) << 8) | ((4 + p) << 12)) & 0x000F000Fu) | 0x43004300u;
      a[p / 2][p % 2] = quant_gemv::bf16x2_sub(v, magic_z);
    }
  } else {
    const uint32_t sx = is_signed ? 0x80808080u : 0u;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint32_t v = word(r.w[i], 2 * c + h) ^ sx;
#pragma unroll
      for (int p = 0; p < 2; ++p) {
        const float lo = __uint_as_float(__byte_perm(v, 0x4B, 0x4550 + 2 * p)) - r.zf[i];
        const float hi = __uint_as_float(__byte_perm(v, 0x4B, 0x4551 + 2 * p)) - r.zf[i];
        a[h][p] = quant_gemv::pack_bf16x2(lo, hi);
      }
    }
  }
}

// One step of the warp on scaled sums: the step's integer A fragments first, then for each 4 B tiles the
// step's f32 sums in fresh registers (4 independent chains, each tile's mma 4 apart), scaled per weight row
// into acc (C fragment: c0, c1 row g, c2, c3 row g + 8).
template <int kBits, int kTiles>
__device__ __forceinline__ void compute_run_scaled(const Run& r, const __nv_bfloat16* xs, int g, int chunk0,
                                                   bool is_signed, float (&acc)[kTiles][4]) {
  using G = Geometry<kBits>;
  constexpr int kQuad = 2;          // 4 spills at 64 rows (128 registers)
  uint32_t a[G::kChunks][2][2][2];  // chunk x rows g, g + 8 x mma 2c, 2c + 1 x (lo, hi)
#pragma unroll
  for (int c = 0; c < G::kChunks; ++c)
#pragma unroll
    for (int i = 0; i < 2; ++i) integer_chunk<kBits>(r, i, c, is_signed, a[c][i]);
#pragma unroll
  for (int bt0 = 0; bt0 < kTiles; bt0 += kQuad) {
    float sum[kQuad][4] = {};
#pragma unroll
    for (int c = 0; c < G::kChunks; ++c) {
      mma_tiles<kBits, kQuad>(a[c], xs, g, G::phys_chunk(chunk0 + c), bt0, sum, 0);
    }
#pragma unroll
    for (int j = 0; j < kQuad; ++j) {
      acc[bt0 + j][0] = fmaf(r.s[0], sum[j][0], acc[bt0 + j][0]);
      acc[bt0 + j][1] = fmaf(r.s[0], sum[j][1], acc[bt0 + j][1]);
      acc[bt0 + j][2] = fmaf(r.s[1], sum[j][2], acc[bt0 + j][2]);
      acc[bt0 + j][3] = fmaf(r.s[1], sum[j][3], acc[bt0 + j][3]);
    }
  }
}

// The CTA's sums into y: acc = this thread's C fragments (c0, c1 = weight row g, x rows 2t, 2t + 1 of each
// 8-row tile; c2, c3 = row g + 8), warp w's rows 16 w + g (+ 8) of the tile. Split k: every range stores its
// sums in its own f32 slice of the tile; the last to arrive adds the slices in range order (the same bits
// whichever CTA finishes last), adds the bias, writes y and leaves the counter zero for the next launch.
template <int kTileM>
__device__ __forceinline__ void store_tile(const WqParams& p, const float (&acc)[kTileM / 8][4], int m0,
                                           int n0, int warp, int g, int t) {
  constexpr int kTiles = kTileM / 8;
  const int row0 = n0 + warp * 16 + g;
  if (p.splits == 1) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int n = row0 + half * 8;
      if (n >= p.n) continue;
      const float bias = p.bias ? __bfloat162float(p.bias[n]) : 0.0f;
#pragma unroll
      for (int bt = 0; bt < kTiles; ++bt)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int row = m0 + bt * 8 + 2 * t + c;
          if (row >= p.m) continue;
          const float v = acc[bt][half * 2 + c] + bias;
          const size_t i = static_cast<size_t>(row) * p.ldy + n;
          if (p.y_f32)
            static_cast<float*>(p.y)[i] = v;
          else
            static_cast<__nv_bfloat16*>(p.y)[i] = __float2bfloat16(v);
        }
    }
    return;
  }
  const int tile = static_cast<int>(blockIdx.x + blockIdx.y * gridDim.x);
  const size_t slice = static_cast<size_t>(kBM) * kBN, tile_stride = slice * p.splits;
  float* part = p.partial + tile * tile_stride;
#pragma unroll
  for (int half = 0; half < 2; ++half)
#pragma unroll
    for (int bt = 0; bt < kTiles; ++bt)
      *reinterpret_cast<float2*>(part + blockIdx.z * slice + (warp * 16 + g + half * 8) * kTileM + bt * 8 +
                                 2 * t) = make_float2(acc[bt][half * 2], acc[bt][half * 2 + 1]);
  __threadfence();
  __syncthreads();
  __shared__ bool last;
  if (threadIdx.x == 0) last = atomicAdd(p.counters + tile, 1u) == static_cast<unsigned>(p.splits - 1);
  __syncthreads();
  if (!last) return;
  __threadfence();
  // Thread i: row n0 + i of the tile (its kTileM sums are contiguous in each slice), rows of x in turn.
  for (int r = static_cast<int>(threadIdx.x); r < kBN; r += kThreads) {
    const int n = n0 + r;
    if (n >= p.n) continue;
    const float bias = p.bias ? __bfloat162float(p.bias[n]) : 0.0f;
    for (int j = 0; j < kTileM && m0 + j < p.m; j += 4) {
      float4 v = __ldcg(reinterpret_cast<const float4*>(part + r * kTileM + j));
      for (int z = 1; z < p.splits; ++z) {
        const float4 u = __ldcg(reinterpret_cast<const float4*>(part + z * slice + r * kTileM + j));
        v.x += u.x, v.y += u.y, v.z += u.z, v.w += u.w;
      }
      const float o[4] = {v.x, v.y, v.z, v.w};
      for (int c = 0; c < 4 && m0 + j + c < p.m; ++c) {
        const size_t yi = static_cast<size_t>(m0 + j + c) * p.ldy + n;
        if (p.y_f32)
          static_cast<float*>(p.y)[yi] = o[c] + bias;
        else
          static_cast<__nv_bfloat16*>(p.y)[yi] = __float2bfloat16(o[c] + bias);
      }
    }
  }
  if (threadIdx.x == 0) p.counters[tile] = 0;
}

// grid: (ceil(m / kTileM), ceil(n / kBN), splits): the m tiles of one weight tile are consecutive CTAs, so
// its bytes come from HBM once and from L2 for the others. kTileM: 64, or 32 where m <= 32 (half the mma
// work).
template <int kBits, bool kScaled, int kTileM>
__global__ void __launch_bounds__(kThreads, 2) wq_gemm_kernel(WqParams p) {
  using G = Geometry<kBits>;
  constexpr int kTiles = kTileM / 8;  // mma B tiles (8 rows of x) per warp: every warp takes all of them
  extern __shared__ __align__(16) uint8_t smem[];
  auto* xs = reinterpret_cast<__nv_bfloat16*>(smem);  // [kTileM][kPitchChunks * 8]
  const int m0 = static_cast<int>(blockIdx.x) * kTileM, n0 = static_cast<int>(blockIdx.y) * kBN;
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const int g = lane / 4, t = lane % 4;
  const int row0 = n0 + warp * 16 + g;
  const int k_begin = static_cast<int>(blockIdx.z) * p.split_cols, k_end = min(p.k, k_begin + p.split_cols);
  float acc[kTiles][4] = {};
  Run cur, next;
  load_run<kBits>(p, row0, k_begin + t * G::kRunCols, next);  // before x: its latency overlaps x's
  for (int c0 = k_begin; c0 < k_end; c0 += kXCols) {
    const int cols = min(kXCols, k_end - c0), steps = (cols + G::kStepCols - 1) / G::kStepCols;
    if (c0 != k_begin) __syncthreads();  // every warp is done with the previous columns of x
    load_x<kBits, kTileM>(p, m0, c0, steps * G::kStepCols,
                          xs);  // whole steps: a last partial one reads zeros
    cp_async_commit();
    cp_async_wait_all();
    __syncthreads();
    for (int s = 0; s < steps; ++s) {
      cur = next;
      const int col_next = c0 + (s + 1) * G::kStepCols;
      if (col_next < k_end) load_run<kBits>(p, row0, col_next + t * G::kRunCols, next);
      const int chunk0 = (s * G::kStepCols + t * G::kRunCols) / 8;
      if constexpr (kScaled)
        compute_run_scaled<kBits, kTiles>(cur, xs, g, chunk0, p.is_signed, acc);
      else
        compute_run<kBits, kTiles>(cur, xs, g, chunk0, p.is_signed, acc);
    }
  }
  store_tile<kTileM>(p, acc, m0, n0, warp, g, t);
}

// ---- The warpgroup-MMA kernel (sm_90a) for scaled sums (int4 groups of 128 k, int8 of 64 k or per channel)
// ----
//
// The same CTA tile (kBN = 128 weight rows, 64 or 32 rows of x) and split-k epilogue as wq_gemm_kernel, on
// two warpgroups of 64 weight rows each. Per step of 64 bytes of each weight row (128 int4 / 64 int8 columns,
// in one group):
//   - the weights come through a cp.async ring in shared memory (8 KB a stage: 128 rows x 64 bytes, 16-byte
//     chunk q of row r at q ^ (r / 2 % 4): the 8 rows of a warp's 128-bit load hit 8 bank groups), kStages -
//     1 steps ahead of their use, with no registers held; each warpgroup loads and reads only its own rows,
//     so within a chunk of x it waits only for itself (a named barrier) and the two drift apart;
//   - x's columns sit in shared memory 512 at a time in wgmma's 128-byte-swizzle K-major layout (8 panels of
//     64 columns), double-buffered: the next 512 columns load during this chunk's 4 steps;
//   - each lane reads its rows' 64 bytes (4 x 128-bit) and keeps the pair at columns 2t, 2t + 1 of every 8,
//     which is the m16n8k16 A fragment's k order, so x keeps its natural order and the A fragments of the
//     step's k16 slices are exact bf16 (q - z) (build_a);
//   - 8 / 4 wgmma m64nNk16 (A from registers, B = x from shared memory) sum the step into fresh f32 registers
//     (scale-d 0 on the first), waited for at once and scaled per weight row into the accumulators (f32: the
//     oracle's arithmetic up to summation order). Waiting at once frees the A fragments' registers (ptxas
//     serializes MMAs whose register operands it wants back early); the other warpgroup's MMAs overlap this
//     one's fragments.
namespace wg {

// A step: 64 bytes of each weight row, 128 int4 / 64 int8 columns (8 / 4 k16 slices), inside one group.
constexpr int kRowBytes = 64;
template <int kBits>
constexpr int kStepColsOf = kRowBytes * 8 / kBits;
constexpr int kStageBytes = kBN * kRowBytes;  // 8 KB
constexpr int kPanels = kXCols / 64;          // 128-byte panels of x per chunk
constexpr int kWgThreads = 128;               // a warpgroup

// Shared memory of a CTA: x double-buffered, the weight ring (64 rows of x: one CTA per SM, 6 stages, 40 KB
// in flight; 32 rows: two per SM, 4 stages each, 48 KB), 1 KB to align the swizzle atoms.
template <int kTileM>
struct Smem {
  static constexpr int kStages = kTileM == 64 ? 6 : 4;
  static constexpr int kXBuf = kPanels * kTileM * 128;  // one chunk of x
  static constexpr int kBytes = 2 * kXBuf + kStages * kStageBytes + 1024;
};

// d[64 x N] (+)= A[64 x 16] (registers, the m16n8k16 A layout per warp) * B[16 x N] (K-major, 128-byte
// swizzle), N = 64 (d[32]) or 32 (d[16]); kFirst: d = A B, d written and not read (no register of it is an
// input defined outside the wgmma pipeline).
#define XI_WQ_D32                                                                                         \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, " \
  "%22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define XI_WQ_D16 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}"
#define XI_WQ_OUT8(m, d, i) \
  m(d[i]), m(d[i + 1]), m(d[i + 2]), m(d[i + 3]), m(d[i + 4]), m(d[i + 5]), m(d[i + 6]), m(d[i + 7])
#define XI_WQ_RW(x) "+f"(x)
#define XI_WQ_W(x) "=f"(x)
// One wgmma: SHAPE, its accumulator list D and A / B operand numbers, scale-d SCALE_D (0 or 1), the outputs.
#define XI_WQ_WGMMA(SHAPE, D, AB, SCALE_D, ...)                                                              \
  asm volatile("wgmma.mma_async.sync.aligned." SHAPE ".f32.bf16.bf16 " D ", " AB ", " SCALE_D ", 1, 1, 0;\n" \
               : __VA_ARGS__                                                                                 \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b)                                          \
               : "memory")
template <bool kFirst>
__device__ __forceinline__ void wgmma_rs(float (&d)[32], const uint32_t (&a)[4], uint64_t b) {
  if constexpr (kFirst)
    XI_WQ_WGMMA("m64n64k16", XI_WQ_D32, "{%32, %33, %34, %35}, %36", "0", XI_WQ_OUT8(XI_WQ_W, d, 0),
                XI_WQ_OUT8(XI_WQ_W, d, 8), XI_WQ_OUT8(XI_WQ_W, d, 16), XI_WQ_OUT8(XI_WQ_W, d, 24));
  else
    XI_WQ_WGMMA("m64n64k16", XI_WQ_D32, "{%32, %33, %34, %35}, %36", "1", XI_WQ_OUT8(XI_WQ_RW, d, 0),
                XI_WQ_OUT8(XI_WQ_RW, d, 8), XI_WQ_OUT8(XI_WQ_RW, d, 16), XI_WQ_OUT8(XI_WQ_RW, d, 24));
}
template <bool kFirst>
__device__ __forceinline__ void wgmma_rs(float (&d)[16], const uint32_t (&a)[4], uint64_t b) {
  if constexpr (kFirst)
    XI_WQ_WGMMA("m64n32k16", XI_WQ_D16, "{%16, %17, %18, %19}, %20", "0", XI_WQ_OUT8(XI_WQ_W, d, 0),
                XI_WQ_OUT8(XI_WQ_W, d, 8));
  else
    XI_WQ_WGMMA("m64n32k16", XI_WQ_D16, "{%16, %17, %18, %19}, %20", "1", XI_WQ_OUT8(XI_WQ_RW, d, 0),
                XI_WQ_OUT8(XI_WQ_RW, d, 8));
}
#undef XI_WQ_WGMMA
#undef XI_WQ_D32
#undef XI_WQ_D16
#undef XI_WQ_OUT8
#undef XI_WQ_RW
#undef XI_WQ_W

// Warpgroup wg's 64 weight rows of the step at column col into ring stage `stage`: its thread i copies
// 16-byte chunk i % 4 of rows i / 4 and i / 4 + 32 of them (zeros past n and k). Each warpgroup reads only
// its own rows, so a warpgroup barrier orders a stage's reads before its refill.
template <int kBits>
__device__ __forceinline__ void load_weights(const WqParams& p, int n0, int wg, int col, uint32_t stage) {
  const int tid = static_cast<int>(threadIdx.x) % kWgThreads, q = tid % 4;
  const size_t row_bytes = static_cast<size_t>(p.k) * kBits / 8;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = 64 * wg + tid / 4 + 32 * h, n = n0 + r,
              c = col + q * 128 / kBits;  // 16 bytes: 32 / 16 columns
    const bool valid = n < p.n && c < p.k;
    const uint8_t* src = valid ? p.w + static_cast<size_t>(n) * row_bytes + c * kBits / 8 : p.w;
    cp_async_16_stream(stage + r * kRowBytes + ((q ^ ((r >> 1) & 3)) << 4), src, valid);
  }
}

// The wgmma kernel's x into `buf`: 128-byte swizzle, row r's 16-byte chunk c of panel c / 8 at c % 8 ^ r % 8.
template <int kTileM>
__device__ __forceinline__ void load_x(const WqParams& p, int m0, int c0, int cols, uint32_t buf) {
  load_x_rows<kTileM>(p, m0, c0, cols, [&](int r, int c) {
    return buf + (c / 8) * (kTileM * 128) + r * 128 + (((c % 8) ^ (r % 8)) << 4);
  });
}

// The scale and zero point of the lane's 2 rows (row0, row0 + 8) for the group holding column col.
struct Meta {
  float s[2];
  uint32_t
      z[2];  // int4: bf16x2 (128 + z, 128 + z); int8: f32 2^23 + z (signed int8: its bytes ^ 0x80, z 128)
};
template <int kBits>
__device__ __forceinline__ void load_meta(const WqParams& p, int row0, int col, Meta& m) {
  const int group = group_of(p, col);
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int n = row0 + 8 * i;
    const size_t gi = static_cast<size_t>(n) * p.groups + group;
    const bool valid = n < p.n && col < p.k;
    m.s[i] = valid ? __ldg(p.scales + gi) : 0.0f;
    const uint32_t z = valid ? zero_point<kBits>(p, gi) : (kBits == 4 ? 8u : 128u);  // no mins here
    m.z[i] = kBits == 4 ? 0x43004300u + (z | (z << 16)) : 0x4B000000u | z;
  }
}

// The step's k16 slices' A fragments of the lane's rows from ring stage `stage` (row r0 = the warp's row g,
// local to the CTA), as exact bf16 (q - z) pairs: the pair at columns 2t, 2t + 1 of each 8.
//   int4: byte t of each of the row's 16 words (8 columns a word): PRMT + mask under the bf16 exponent of 128
//   (128 + q exactly), one subtract;
//   int8: half t % 2 of word t / 2 of each 8 columns (2 words): each byte as the f32 2^23 + q minus 2^23 + z,
//   packed to bf16 (|q - z| <= 255: exact).
template <int kBits>
__device__ __forceinline__ void build_a(uint32_t stage, int r0, int t, bool is_signed, const Meta& m,
                                        uint32_t (&a)[kStepColsOf<kBits> / 16][4]) {
  const uint32_t sel = static_cast<uint32_t>(t) | ((4u + t) << 8);
  const uint32_t sx = is_signed ? 0x80808080u : 0u;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int r = r0 + 8 * i;
#pragma unroll
    for (int u = 0; u < 4; ++u) {  // 16-byte chunk u of the row's 64
      uint4 v;
      asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                   : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                   : "r"(stage + r * kRowBytes + ((u ^ ((r >> 1) & 3)) << 4))
                   : "memory");
      if constexpr (kBits == 4) {  // words 4u .. 4u + 3 = slices 2u, 2u + 1
        const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const uint32_t q = (__byte_perm(w[e], w[e] >> 4, sel) & 0x000F000Fu) | 0x43004300u;
          // word 4u + e = slice 2u + e / 2, half e % 2 (k 2t.. or 2t + 8..): register 2 * half + i
          a[2 * u + e / 2][2 * (e % 2) + i] = quant_gemv::bf16x2_sub(q, m.z[i]);
        }
      } else {  // chunk u = slice u: columns 8h .. 8h + 7 in words 2h, 2h + 1
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const uint32_t w = ((t < 2) ? (h == 0 ? v.x : v.z) : (h == 0 ? v.y : v.w)) ^ sx;
          const uint32_t lo_sel = 0x4550u + 2 * (t % 2), hi_sel = 0x4551u + 2 * (t % 2);
          const float lo = __uint_as_float(__byte_perm(w, 0x4B, lo_sel)) - __uint_as_float(m.z[i]);
          const float hi = __uint_as_float(__byte_perm(w, 0x4B, hi_sel)) - __uint_as_float(m.z[i]);
          a[u][2 * h + i] = quant_gemv::pack_bf16x2(lo, hi);
        }
      }
    }
  }
}

// A never-taken branch on a value computed just before it: ends ptxas's scheduling block there, so the A
// fragments built before it are not sunk between the MMAs that read them (which would serialize the MMAs:
// ptxas C7513).
__device__ __forceinline__ void end_block(uint32_t v) {
  if (v == 0xFFFFFFFFu) asm volatile("trap;");
}

// acc += each weight row's scale * the step's sums (the wgmma accumulator layout: d[4 bt + 2 h + e] = row g +
// 8 h, x row 8 bt + 2 t + e).
template <int kTiles>
__device__ __forceinline__ void add_scaled(float (&acc)[kTiles][4], const float (&sum)[kTiles * 4],
                                           const Meta& m) {
#pragma unroll
  for (int bt = 0; bt < kTiles; ++bt) {
    acc[bt][0] = fmaf(m.s[0], sum[4 * bt + 0], acc[bt][0]);
    acc[bt][1] = fmaf(m.s[0], sum[4 * bt + 1], acc[bt][1]);
    acc[bt][2] = fmaf(m.s[1], sum[4 * bt + 2], acc[bt][2]);
    acc[bt][3] = fmaf(m.s[1], sum[4 * bt + 3], acc[bt][3]);
  }
}

template <int kBits, int kTileM>
__global__ void __launch_bounds__(kThreads, kTileM == 64 ? 1 : 2) wq_wgmma_kernel(WqParams p) {
  using S = Smem<kTileM>;
  constexpr int kStepCols = kStepColsOf<kBits>, kSlices = kStepCols / 16, kStepsPerChunk = kXCols / kStepCols;
  // Commit groups: the prologue's kStages - 1, then one a step (step s + kStages - 1's weights; at a chunk's
  // first step also the next chunk of x). Waiting for all but kStages - 2 lands step s's weights; a chunk's
  // x, committed a chunk earlier, needs all but kStepsPerChunk - 1 at its first step.
  constexpr int kPending = S::kStages - 2;
  constexpr int kPendingAtChunk = kPending < kStepsPerChunk - 1 ? kPending : kStepsPerChunk - 1;
  constexpr int kTiles = kTileM / 8, kD = kTileM / 2;  // accumulators per thread
  extern __shared__ uint8_t smem_raw[];
  const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  auto xbuf = [&](int i) { return base + (i & 1) * S::kXBuf; };
  auto stage = [&](int s) { return base + 2 * S::kXBuf + (s % S::kStages) * kStageBytes; };
  const int m0 = static_cast<int>(blockIdx.x) * kTileM, n0 = static_cast<int>(blockIdx.y) * kBN;
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const int wg = warp / 4, g = lane / 4, t = lane % 4;
  const int r0 = warp * 16 + g, row0 = n0 + r0;
  const int k_begin = static_cast<int>(blockIdx.z) * p.split_cols, k_end = min(p.k, k_begin + p.split_cols);
  const int steps = (k_end - k_begin + kStepCols - 1) / kStepCols;

  // Prologue: x's first chunk and the first kStages - 1 steps of weights, a commit group per step.
  load_x<kTileM>(p, m0, k_begin, min(kXCols, steps * kStepCols), xbuf(0));
#pragma unroll
  for (int s = 0; s < S::kStages - 1; ++s) {
    if (s < steps) load_weights<kBits>(p, n0, wg, k_begin + s * kStepCols, stage(s));
    cp_async_commit();
  }
  float acc[kTiles][4] = {};
  float sum[kD];
  uint32_t a[kSlices][4];
  Meta meta[3];  // steps s, s + 1, s + 2 (loaded two steps ahead)
  load_meta<kBits>(p, row0, k_begin, meta[1]);
  if (steps > 1) load_meta<kBits>(p, row0, k_begin + kStepCols, meta[2]);
  for (int c0 = 0; c0 < steps; c0 += kStepsPerChunk) {
    const int chunk = c0 / kStepsPerChunk;
    const uint64_t xdesc = make_desc(xbuf(chunk), 16, 1024);  // the chunk's first k16 slice
#pragma unroll
    for (int si = 0; si < kStepsPerChunk; ++si) {
      const int s = c0 + si;
      if (s >= steps) break;
      if (si == 0) {
        cp_async_wait<kPendingAtChunk>();  // step s's weights and this chunk's x have landed
        // x is both warpgroups': both have landed their part of this chunk and finished the last one's MMAs
        // (each step waits for its own), so the other buffer takes the next chunk.
        fence_proxy_async();
        __syncthreads();
        if (c0 + kStepsPerChunk < steps) {
          const int nc = k_begin + (c0 + kStepsPerChunk) * kStepCols;
          // Whole steps: a last step half past k reads zeros (its weights there give A = -z, not 0).
          load_x<kTileM>(p, m0, nc, min(kXCols, (steps - c0 - kStepsPerChunk) * kStepCols), xbuf(chunk + 1));
        }
      } else {
        cp_async_wait<kPending>();               // step s's weights have landed
        // (this warpgroup's rows: its own copies); s - 1's read. Barrier ids 1, 2 as constants: a register id
        // makes ptxas reserve all 16.
        if (wg == 0)
          named_barrier_sync(1, kWgThreads);
        else
          named_barrier_sync(2, kWgThreads);
      }
      // Refill the stage step s - 1 used (this warpgroup's rows) with step s + kStages - 1.
      if (s + S::kStages - 1 < steps)
        load_weights<kBits>(p, n0, wg, k_begin + (s + S::kStages - 1) * kStepCols, stage(s + S::kStages - 1));
      cp_async_commit();
      meta[0] = meta[1];
      meta[1] = meta[2];
      if (s + 2 < steps) load_meta<kBits>(p, row0, k_begin + (s + 2) * kStepCols, meta[2]);
      build_a<kBits>(stage(s), r0, t, p.is_signed, meta[0], a);
      end_block(a[kSlices - 1][3]);  // ptxas schedules within a block: no fragment is sunk past the fence
      wgmma_fence();
      // Slice j of the step is slice si * kSlices + j of the chunk: panel (that) / 4, 32 bytes per slice
      // within it (a descriptor's address field counts 16 bytes; x stays below 256 KB, so adding never
      // carries out).
      constexpr uint64_t kPanel = kTileM * 128 / 16;
      auto slice_desc = [&](int j) {
        const int c = si * kSlices + j;
        return xdesc + (c / 4) * kPanel + (c % 4) * 2;
      };
      wgmma_rs<true>(sum, a[0], slice_desc(0));
#pragma unroll
      for (int j = 1; j < kSlices; ++j) wgmma_rs<false>(sum, a[j], slice_desc(j));
      wgmma_commit();
      // Waited for at once: the A fragments' registers are then free (ptxas would otherwise serialize the
      // MMAs to reuse them); the other warpgroup's MMAs overlap this one's fragments.
      wgmma_wait<0>();
      fence_regs(sum);
      add_scaled<kTiles>(acc, sum, meta[0]);
    }
  }
  store_tile<kTileM>(p, acc, m0, n0, warp, g, t);
}

}  // namespace wg

template <int kBits, int kTileM>
void launch_wgmma_tile(const WqParams& p, cudaStream_t stream) {
  constexpr int smem = wg::Smem<kTileM>::kBytes;
  raise_smem_limit(reinterpret_cast<const void*>(wg::wq_wgmma_kernel<kBits, kTileM>), smem);
  const dim3 grid((p.m + kTileM - 1) / kTileM, (p.n + kBN - 1) / kBN, p.splits);
  wg::wq_wgmma_kernel<kBits, kTileM><<<grid, kThreads, smem, stream>>>(p);
  XI_CUDA_CHECK_LAUNCH();
}

template <int kBits, bool kScaled, int kTileM>
void launch_tile(const WqParams& p, cudaStream_t stream) {
  constexpr int smem = Geometry<kBits>::smem(kTileM);
  raise_smem_limit(reinterpret_cast<const void*>(wq_gemm_kernel<kBits, kScaled, kTileM>), smem);
  const dim3 grid((p.m + kTileM - 1) / kTileM, (p.n + kBN - 1) / kBN, p.splits);
  wq_gemm_kernel<kBits, kScaled, kTileM><<<grid, kThreads, smem, stream>>>(p);
  XI_CUDA_CHECK_LAUNCH();
}

template <int kBits, bool kScaled>
void launch(const WqParams& p, cudaStream_t stream) {
  if (p.m <= kSmallTileM)
    launch_tile<kBits, kScaled, kSmallTileM>(p, stream);
  else
    launch_tile<kBits, kScaled, kBM>(p, stream);
}

// Rows of x per CTA for m rows.
int tile_m(int m) {
  return m <= kSmallTileM ? kSmallTileM : kBM;
}

}  // namespace

int wq_gemm_split_cols(int m, int n, int k, int sms, WqGemmKernel kernel) {
  XI_CHECK(kernel != WqGemmKernel::kAuto) << "wq GEMM: split columns are per kernel";
  const int64_t tiles = static_cast<int64_t>((m + tile_m(m) - 1) / tile_m(m)) * ((n + kBN - 1) / kBN);
  // CTAs per SM: the mma.sync kernel 2; the wgmma one 1 at 64 rows of x (its shared memory), 2 at 32.
  const int per_sm = kernel == WqGemmKernel::kWgmma && tile_m(m) == kBM ? 1 : 2;
  const int64_t slots = per_sm * static_cast<int64_t>(sms);
  // Split where the tiles leave more than half the CTA slots idle (a range costs its x load and its sums'
  // trip through L2), into the longest ranges (a multiple of 128 columns, kMinRangeCols..kMaxRangeCols) that
  // fill at least 90% of them. Shorter ranges lose more to their prologue and x loads than the extra CTAs
  // gain (session 39, H100, int4 g128 at 17-64 rows: qkv 27.8-36.6 us with ranges of 1024 columns
  // against 35.3-49.2 with 512, o 22.0-30.5 against 21.5-37.6; session 38's H200 rows agree).
  if (2 * tiles >= slots) return k;
  int cols = kMaxRangeCols;
  while (cols > kMinRangeCols && tiles * ((k + cols - 1) / cols) * 10 < slots * 9) cols /= 2;
  while (cols < k && tiles * ((k + cols - 1) / cols) > kWqGemmMaxSplitSlices) cols *= 2;  // the workspace
  return cols >= k ? k : cols;
}

bool wq_gemm_scaled_sums(const QuantWeight& w) {
  return w.mins == nullptr && w.group_size % (w.bits == 4 ? 128 : 64) == 0;
}

bool wq_gemm_wgmma_supports(const QuantWeight& w) {
  return wq_gemm_supports(w) && wq_gemm_scaled_sums(w);
}

// int4 only: session 40 (H100) measured the wgmma kernel faster for int4 g128 at 64-256 rows (qkv 39.5
// against 55.3 us at 128, down 128.9 against 179.6 at 256; W4A16 128/128 at 64 sequences 6,813 against 6,031
// tok/s) and slower for int8 per channel (gate_up 218.1 against 173.5 us at 128; W8A16 5,528 against 5,847
// tok/s): its ring holds half the k of an int4 one per stage, so int8 keeps mma.sync.
WqGemmKernel wq_gemm_kernel_for(const QuantWeight& w) {
  static const char* const env = std::getenv("XINFER_WQ_WGMMA");  // 0: mma.sync everywhere; 1: wgmma wherever
  const std::string choice = env == nullptr ? "" : env;           // it applies (A/B switches)
  const bool wgmma = choice == "1" || (choice != "0" && w.bits == 4);
  return wgmma && wq_gemm_wgmma_supports(w) ? WqGemmKernel::kWgmma : WqGemmKernel::kMma;
}

bool wq_gemm_supports(const QuantWeight& w) {
  const bool groups = w.group_size % 32 == 0 || (w.bits == 8 && w.group_size % 16 == 0);  // 16: int8's only
  return (w.bits == 4 || w.bits == 8) && w.g_idx == nullptr && w.k % 64 == 0 && w.group_size > 0 && groups &&
         (!w.is_signed || w.bits == 8) && (w.mins == nullptr || (w.bits == 4 && w.zeros == nullptr)) &&
         w.n > 0;
}

void launch_wq_gemm(const QuantLinearArgs& a, const WqGemmWorkspace& ws, cudaStream_t stream, int split_cols,
                    WqGemmKernel kernel) {
  XI_CHECK(wq_gemm_supports(a.w))
      << "wq GEMM: unsupported weight " << describe(a.w)
      << " (needs bits 4 / 8, no g_idx, k % 64, group % 32 (int8: % 16), mins int4's only)";
  if (kernel == WqGemmKernel::kAuto) kernel = wq_gemm_kernel_for(a.w);
  XI_CHECK(kernel != WqGemmKernel::kWgmma || wq_gemm_wgmma_supports(a.w))
      << "wq GEMM: the wgmma kernel takes scaled sums (int4 groups of 128 k, int8 of 64 k or per channel, no "
         "mins), not "
      << describe(a.w);
  XI_CHECK(a.m >= 1) << "wq GEMM: m " << a.m;
  XI_CHECK(a.ldy == 0 || a.ldy >= a.w.n) << "wq GEMM: y row stride " << a.ldy << " < n " << a.w.n;
  const int m_tiles = (a.m + tile_m(a.m) - 1) / tile_m(a.m), n_tiles = (a.w.n + kBN - 1) / kBN;
  XI_CHECK(m_tiles <= 65535 && n_tiles <= 65535)
      << "wq GEMM: m " << a.m << " x n " << a.w.n << " exceed the grid";
  if (split_cols == 0)
    split_cols = ws.partial != nullptr ? wq_gemm_split_cols(a.m, a.w.n, a.w.k, sm_count(), kernel) : a.w.k;
  split_cols = std::min(split_cols, a.w.k);
  XI_CHECK(split_cols == a.w.k || split_cols % 128 == 0) << "wq GEMM: split columns " << split_cols;
  const int splits = (a.w.k + split_cols - 1) / split_cols;
  if (splits > 1)
    XI_CHECK(ws.partial != nullptr && ws.counters != nullptr &&
             static_cast<int64_t>(m_tiles) * n_tiles * splits <= kWqGemmMaxSplitSlices)
        << "wq GEMM: " << splits << " k ranges need the workspace and at most " << kWqGemmMaxSplitSlices
        << " (tile, range) slices (" << static_cast<int64_t>(m_tiles) * n_tiles * splits << ")";
  XI_CHECK(reinterpret_cast<uintptr_t>(a.x) % 16 == 0) << "wq GEMM: x must be 16-byte aligned";
  const int gs = a.w.group_size;
  const int group_shift = (gs & (gs - 1)) == 0 ? __builtin_ctz(static_cast<unsigned>(gs)) : -1;
  const WqParams p{a.x,           a.w.w,      a.w.scales,  a.w.zeros,
                   a.w.mins,      a.bias,     a.y,         a.y_f32,
                   a.w.is_signed, a.m,        a.w.n,       a.w.k,
                   a.w.groups(),  gs,         group_shift, a.ldy > 0 ? a.ldy : a.w.n,
                   splits,        split_cols, ws.partial,  ws.counters};
  const bool scaled = wq_gemm_scaled_sums(a.w);
  if (kernel == WqGemmKernel::kWgmma) {
    if (a.w.bits == 4)
      a.m <= kSmallTileM ? launch_wgmma_tile<4, kSmallTileM>(p, stream)
                         : launch_wgmma_tile<4, kBM>(p, stream);
    else
      a.m <= kSmallTileM ? launch_wgmma_tile<8, kSmallTileM>(p, stream)
                         : launch_wgmma_tile<8, kBM>(p, stream);
  } else if (a.w.bits == 4)
    scaled ? launch<4, true>(p, stream) : launch<4, false>(p, stream);
  else
    scaled ? launch<8, true>(p, stream) : launch<8, false>(p, stream);
}

}  // namespace xinfer::cuda
