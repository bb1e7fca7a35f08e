// The tiled tensor-core GEMM for weight-only int4 / int8 linears (wq_gemm.h: why, tiling, numerics).
#include "xinfer/backend/cuda/kernels/gemm/wq_gemm.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "xinfer/backend/cuda/cuda_check.h"
#include "xinfer/backend/cuda/kernels/cp_async.cuh"
#include "xinfer/backend/cuda/kernels/device_launch.h"
#include "xinfer/backend/cuda/kernels/gemm/quant_gemv_math.cuh"

namespace xinfer::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kBM = kWqGemmTileM;    // rows of x per CTA
constexpr int kBN = kWqGemmTileN;    // weight rows per CTA: 16 per warp
constexpr int kBTiles = kBM / 8;     // mma B tiles (8 rows of x) per warp: every warp takes all of them
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
  static constexpr int kSmem = kBM * kPitchChunks * 16;
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
  int ldy;
  int splits, split_cols;  // the k ranges (grid z) and their columns (a multiple of the step)
  float* partial;          // splits > 1: [tiles][splits][kBN][kBM] f32 sums, one slice per (tile, range)
  unsigned* counters;      // splits > 1: [tiles] arrivals, zero between launches
};

// x rows m0.. columns c0 .. c0 + cols of the CTA's range into shared memory (zero past m and k).
template <int kBits>
__device__ __forceinline__ void load_x(const WqParams& p, int m0, int c0, int cols, __nv_bfloat16* xs) {
  using G = Geometry<kBits>;
  const int chunks = (cols + 7) / 8, tid = static_cast<int>(threadIdx.x);
  for (int idx = tid; idx < kBM * chunks; idx += kThreads) {
    const int row = idx / chunks, c = idx % chunks, col = c0 + c * 8;
    const bool valid = m0 + row < p.m && col < p.k;
    const __nv_bfloat16* src = valid ? p.x + static_cast<size_t>(m0 + row) * p.k + col : p.x;
    cp_async_16(smem_u32(xs + (row * G::kPitchChunks + G::phys_chunk(c)) * 8), src, valid);
  }
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
  const int group = col / p.group_size;
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
    const uint32_t z = p.is_signed ? 128u
                       : p.mins    ? 0u
                       : p.zeros   ? static_cast<uint32_t>(__ldg(p.zeros + gi))
                                   : (kBits == 4 ? 8u : 128u);
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

// One step of the warp: its 16 weight rows x kBM rows of x x the 4 lanes' runs.
template <int kBits>
__device__ __forceinline__ void compute_run(const Run& r, const __nv_bfloat16* xs, int g, int chunk0,
                                            bool is_signed, float (&acc)[kBTiles][4]) {
  using G = Geometry<kBits>;
#pragma unroll
  for (int c = 0; c < G::kChunks; ++c) {
    uint32_t a[2][2][2];  // rows g, g + 8 x mma 2c, 2c + 1 x (lo, hi)
#pragma unroll
    for (int i = 0; i < 2; ++i) dequantize_chunk<kBits>(r, i, c, is_signed, a[i]);
    const int pc = G::phys_chunk(chunk0 + c);
#pragma unroll
    for (int bt = 0; bt < kBTiles; ++bt) {
      const uint4 b = *reinterpret_cast<const uint4*>(xs + ((bt * 8 + g) * G::kPitchChunks + pc) * 8);
      quant_gemv::mma(acc[bt], a[0][0][0], a[1][0][0], a[0][0][1], a[1][0][1], b.x, b.y);
      quant_gemv::mma(acc[bt], a[0][1][0], a[1][1][0], a[0][1][1], a[1][1][1], b.z, b.w);
    }
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

// One step of the warp on scaled sums: the step's integer A fragments first, then for each pair of B tiles
// the step's f32 sums in fresh registers (8 or 4 mma deep each), scaled per weight row into acc (C fragment:
// c0, c1 row g, c2, c3 row g + 8).
template <int kBits>
__device__ __forceinline__ void compute_run_scaled(const Run& r, const __nv_bfloat16* xs, int g, int chunk0,
                                                   bool is_signed, float (&acc)[kBTiles][4]) {
  using G = Geometry<kBits>;
  uint32_t a[G::kChunks][2][2][2];  // chunk x rows g, g + 8 x mma 2c, 2c + 1 x (lo, hi)
#pragma unroll
  for (int c = 0; c < G::kChunks; ++c)
#pragma unroll
    for (int i = 0; i < 2; ++i) integer_chunk<kBits>(r, i, c, is_signed, a[c][i]);
  constexpr int kGroup = 2;
#pragma unroll
  for (int bt0 = 0; bt0 < kBTiles; bt0 += kGroup) {
    float sum[kGroup][4] = {};
#pragma unroll
    for (int c = 0; c < G::kChunks; ++c) {
      const int pc = G::phys_chunk(chunk0 + c);
#pragma unroll
      for (int j = 0; j < kGroup; ++j) {
        const uint4 b =
            *reinterpret_cast<const uint4*>(xs + (((bt0 + j) * 8 + g) * G::kPitchChunks + pc) * 8);
        quant_gemv::mma(sum[j], a[c][0][0][0], a[c][1][0][0], a[c][0][0][1], a[c][1][0][1], b.x, b.y);
        quant_gemv::mma(sum[j], a[c][0][1][0], a[c][1][1][0], a[c][0][1][1], a[c][1][1][1], b.z, b.w);
      }
    }
#pragma unroll
    for (int j = 0; j < kGroup; ++j) {
      acc[bt0 + j][0] = fmaf(r.s[0], sum[j][0], acc[bt0 + j][0]);
      acc[bt0 + j][1] = fmaf(r.s[0], sum[j][1], acc[bt0 + j][1]);
      acc[bt0 + j][2] = fmaf(r.s[1], sum[j][2], acc[bt0 + j][2]);
      acc[bt0 + j][3] = fmaf(r.s[1], sum[j][3], acc[bt0 + j][3]);
    }
  }
}

// grid: (ceil(m / kBM), ceil(n / kBN), splits): the m tiles of one weight tile are consecutive CTAs, so its
// bytes come from HBM once and from L2 for the others.
template <int kBits, bool kScaled>
__global__ void __launch_bounds__(kThreads, 2) wq_gemm_kernel(WqParams p) {
  using G = Geometry<kBits>;
  extern __shared__ __align__(16) uint8_t smem[];
  auto* xs = reinterpret_cast<__nv_bfloat16*>(smem);  // [kBM][kPitchChunks * 8]
  const int m0 = static_cast<int>(blockIdx.x) * kBM, n0 = static_cast<int>(blockIdx.y) * kBN;
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const int g = lane / 4, t = lane % 4;
  const int row0 = n0 + warp * 16 + g;
  const int k_begin = static_cast<int>(blockIdx.z) * p.split_cols, k_end = min(p.k, k_begin + p.split_cols);
  float acc[kBTiles][4] = {};
  Run cur, next;
  load_run<kBits>(p, row0, k_begin + t * G::kRunCols, next);  // before x: its latency overlaps x's
  for (int c0 = k_begin; c0 < k_end; c0 += kXCols) {
    const int cols = min(kXCols, k_end - c0), steps = (cols + G::kStepCols - 1) / G::kStepCols;
    if (c0 != k_begin) __syncthreads();                  // every warp is done with the previous columns of x
    load_x<kBits>(p, m0, c0, steps * G::kStepCols, xs);  // whole steps: a last partial one reads zeros
    cp_async_commit();
    cp_async_wait_all();
    __syncthreads();
    for (int s = 0; s < steps; ++s) {
      cur = next;
      const int col_next = c0 + (s + 1) * G::kStepCols;
      if (col_next < k_end) load_run<kBits>(p, row0, col_next + t * G::kRunCols, next);
      const int chunk0 = (s * G::kStepCols + t * G::kRunCols) / 8;
      if constexpr (kScaled)
        compute_run_scaled<kBits>(cur, xs, g, chunk0, p.is_signed, acc);
      else
        compute_run<kBits>(cur, xs, g, chunk0, p.is_signed, acc);
    }
  }
  // C fragment: c0, c1 = (weight row g, x rows 2t, 2t + 1), c2, c3 = (row g + 8, the same x rows).
  if (p.splits == 1) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int n = row0 + half * 8;
      if (n >= p.n) continue;
      const float bias = p.bias ? __bfloat162float(p.bias[n]) : 0.0f;
#pragma unroll
      for (int bt = 0; bt < kBTiles; ++bt)
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
  // Split k: every range stores its sums in its own f32 slice of the tile; the last to arrive adds the slices
  // in range order (the same bits whichever CTA finishes last), adds the bias, writes y and leaves the
  // counter zero for the next launch.
  const int tile = static_cast<int>(blockIdx.x + blockIdx.y * gridDim.x);
  const size_t slice = static_cast<size_t>(kBM) * kBN, tile_stride = slice * p.splits;
  float* part = p.partial + tile * tile_stride;
#pragma unroll
  for (int half = 0; half < 2; ++half)
#pragma unroll
    for (int bt = 0; bt < kBTiles; ++bt)
      *reinterpret_cast<float2*>(part + blockIdx.z * slice + (warp * 16 + g + half * 8) * kBM + bt * 8 +
                                 2 * t) = make_float2(acc[bt][half * 2], acc[bt][half * 2 + 1]);
  __threadfence();
  __syncthreads();
  __shared__ bool last;
  if (threadIdx.x == 0) last = atomicAdd(p.counters + tile, 1u) == static_cast<unsigned>(p.splits - 1);
  __syncthreads();
  if (!last) return;
  __threadfence();
  // Thread i: row n0 + i of the tile (its kBM sums are contiguous in each slice), rows of x in turn.
  for (int r = static_cast<int>(threadIdx.x); r < kBN; r += kThreads) {
    const int n = n0 + r;
    if (n >= p.n) continue;
    const float bias = p.bias ? __bfloat162float(p.bias[n]) : 0.0f;
    for (int j = 0; j < kBM && m0 + j < p.m; j += 4) {
      float4 v = __ldcg(reinterpret_cast<const float4*>(part + r * kBM + j));
      for (int z = 1; z < p.splits; ++z) {
        const float4 u = __ldcg(reinterpret_cast<const float4*>(part + z * slice + r * kBM + j));
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

template <int kBits, bool kScaled>
void launch(const WqParams& p, cudaStream_t stream) {
  constexpr int smem = Geometry<kBits>::kSmem;
  raise_smem_limit(reinterpret_cast<const void*>(wq_gemm_kernel<kBits, kScaled>), smem);
  const dim3 grid((p.m + kBM - 1) / kBM, (p.n + kBN - 1) / kBN, p.splits);
  wq_gemm_kernel<kBits, kScaled><<<grid, kThreads, smem, stream>>>(p);
  XI_CUDA_CHECK_LAUNCH();
}

}  // namespace

int wq_gemm_split_cols(int m, int n, int k, int sms) {
  const int64_t tiles = static_cast<int64_t>((m + kBM - 1) / kBM) * ((n + kBN - 1) / kBN);
  const int64_t slots = 2 * static_cast<int64_t>(sms);  // 2 CTAs per SM
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

bool wq_gemm_supports(const QuantWeight& w) {
  const bool groups = w.group_size % 32 == 0 || (w.bits == 8 && w.group_size % 16 == 0);  // 16: int8's only
  return (w.bits == 4 || w.bits == 8) && w.g_idx == nullptr && w.k % 64 == 0 && w.group_size > 0 && groups &&
         (!w.is_signed || w.bits == 8) && (w.mins == nullptr || (w.bits == 4 && w.zeros == nullptr)) &&
         w.n > 0;
}

void launch_wq_gemm(const QuantLinearArgs& a, const WqGemmWorkspace& ws, cudaStream_t stream,
                    int split_cols) {
  XI_CHECK(wq_gemm_supports(a.w))
      << "wq GEMM: unsupported weight " << describe(a.w)
      << " (needs bits 4 / 8, no g_idx, k % 64, group % 32 (int8: % 16), mins int4's only)";
  XI_CHECK(a.m >= 1) << "wq GEMM: m " << a.m;
  XI_CHECK(a.ldy == 0 || a.ldy >= a.w.n) << "wq GEMM: y row stride " << a.ldy << " < n " << a.w.n;
  const int m_tiles = (a.m + kBM - 1) / kBM, n_tiles = (a.w.n + kBN - 1) / kBN;
  XI_CHECK(m_tiles <= 65535 && n_tiles <= 65535)
      << "wq GEMM: m " << a.m << " x n " << a.w.n << " exceed the grid";
  if (split_cols == 0)
    split_cols = ws.partial != nullptr ? wq_gemm_split_cols(a.m, a.w.n, a.w.k, sm_count()) : a.w.k;
  split_cols = std::min(split_cols, a.w.k);
  XI_CHECK(split_cols == a.w.k || split_cols % 128 == 0) << "wq GEMM: split columns " << split_cols;
  const int splits = (a.w.k + split_cols - 1) / split_cols;
  if (splits > 1)
    XI_CHECK(ws.partial != nullptr && ws.counters != nullptr &&
             static_cast<int64_t>(m_tiles) * n_tiles * splits <= kWqGemmMaxSplitSlices)
        << "wq GEMM: " << splits << " k ranges need the workspace and at most " << kWqGemmMaxSplitSlices
        << " (tile, range) slices (" << static_cast<int64_t>(m_tiles) * n_tiles * splits << ")";
  XI_CHECK(reinterpret_cast<uintptr_t>(a.x) % 16 == 0) << "wq GEMM: x must be 16-byte aligned";
  const WqParams p{a.x,    a.w.w,      a.w.scales,   a.w.zeros,      a.w.mins,
                   a.bias, a.y,        a.y_f32,      a.w.is_signed,  a.m,
                   a.w.n,  a.w.k,      a.w.groups(), a.w.group_size, a.ldy > 0 ? a.ldy : a.w.n,
                   splits, split_cols, ws.partial,   ws.counters};
  const bool scaled = wq_gemm_scaled_sums(a.w);
  if (a.w.bits == 4)
    scaled ? launch<4, true>(p, stream) : launch<4, false>(p, stream);
  else
    scaled ? launch<8, true>(p, stream) : launch<8, false>(p, stream);
}

}  // namespace xinfer::cuda
