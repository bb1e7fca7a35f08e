// The tiled tensor-core GEMM for weight-only int4 / int8 linears (wq_gemm.h: why, tiling, numerics).
#include "xinfer/backend/cuda/kernels/gemm/wq_gemm.h"

#include <cuda_bf16.h>

#include <cstdint>

#include "xinfer/backend/cuda/cuda_check.h"
#include "xinfer/backend/cuda/kernels/cp_async.cuh"
#include "xinfer/backend/cuda/kernels/device_launch.h"
#include "xinfer/backend/cuda/kernels/gemm/quant_gemv_math.cuh"
#include "xinfer/backend/cuda/kernels/ldmatrix.cuh"

namespace xinfer::cuda {
namespace {

constexpr int kBM = 64;  // rows of x per CTA
constexpr int kBK = 64;  // columns per step
constexpr int kStages = 3;
constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kStride = kBK + 8;  // bf16 per shared-memory row of x and of the dequantized weight: 144 bytes,
                                  // so the 8 rows one ldmatrix reads start in different bank groups

// A CTA's kBN weight rows (128, 64 or 32: wq_gemm_tile_rows picks the widest that still gives every SM a
// CTA): its 8 warps as kWarpsN along n (32 weight rows each) x kWarpsM along m; each thread dequantizes kCols
// columns of one row per step.
template <int kBN>
struct Tile {
  static constexpr int kWarpsN = kBN / 32;            // 4, 2, 1
  static constexpr int kWarpsM = kWarps / kWarpsN;    // 2, 4, 8
  static constexpr int kWarpM = kBM / kWarpsM;        // rows of x per warp: 32, 16, 8
  static constexpr int kBTiles = kWarpM / 8;          // mma B tiles per warp: 4, 2, 1
  static constexpr int kCols = kBN * kBK / kThreads;  // 32, 16, 8
  static constexpr int kThreadsPerRow = kBK / kCols;  // 2, 4, 8
  static_assert(kBN == 32 || kBN == 64 || kBN == 128, "32, 64 or 128 weight rows per CTA");
  static_assert(kCols % 8 == 0 && kCols <= 32,
                "a thread's run: whole 16-byte stores, within one group of 32 or two of 16");
  static_assert(kBTiles == 1 || kBTiles % 2 == 0, "B tiles in pairs (ldmatrix .x4) or one (.x2)");
};

template <int kBits>
constexpr int kRowBytes = kBK* kBits / 8;  // a weight row's bytes per step: 32 (int4) / 64 (int8)

template <int kBits, int kBN>
constexpr int smem_bytes() {
  return kStages * (kBN * kRowBytes<kBits> + kBM * kStride * 2) + kBN * kStride * 2;
}

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
};

// Step `kb`'s raw weight bytes (rows n0.., 16-byte chunks, streamed in 256-byte L2 lines) and x tile (rows
// m0.., columns kb * 64..) into stage buffers; rows past n / m are zero-filled.
template <int kBits, int kBN>
__device__ __forceinline__ void load_stage(const WqParams& p, int n0, int m0, int kb, uint8_t* wq,
                                           __nv_bfloat16* xs) {
  constexpr int kChunksPerRow = kRowBytes<kBits> / 16;  // 2 / 4
  constexpr int kWChunks = kBN * kChunksPerRow;
  const size_t row_bytes = static_cast<size_t>(p.k) * kBits / 8;
  const int tid = static_cast<int>(threadIdx.x);
#pragma unroll
  for (int i = 0; i < (kWChunks + kThreads - 1) / kThreads; ++i) {
    const int idx = tid + i * kThreads, row = idx / kChunksPerRow, c = idx % kChunksPerRow;
    if (kWChunks % kThreads != 0 && idx >= kWChunks) break;
    const bool valid = n0 + row < p.n;
    const uint8_t* src =
        valid ? p.w + static_cast<size_t>(n0 + row) * row_bytes + kb * kRowBytes<kBits> + c * 16 : p.w;
    cp_async_16_stream(smem_u32(wq + row * kRowBytes<kBits> + c * 16), src, valid);
  }
#pragma unroll
  for (int i = 0; i < kBM * (kBK / 8) / kThreads; ++i) {
    const int idx = tid + i * kThreads, row = idx / (kBK / 8), c = idx % (kBK / 8);
    const bool valid = m0 + row < p.m;
    const __nv_bfloat16* src = valid ? p.x + static_cast<size_t>(m0 + row) * p.k + kb * kBK + c * 8 : p.x;
    cp_async_16(smem_u32(xs + row * kStride + c * 8), src, valid);
  }
}

// The scale, zero point (as the f32 2^23 + z; 2^23 with mins) and min (int4 only; 0 without) of this
// thread's run of kCols columns of step kb, [0] for its first 16 columns and [1] for the rest (int8 only:
// groups of a multiple of 16, GGUF Q6_K's 16): loaded before the step's barrier so that their latency
// overlaps it. A run lies in one group (group % 32 == 0, kCols <= 32) or, int8 in groups of 16, 48, .., a run
// of 32 in at most two, split at its middle (runs start at multiples of kCols). Signed int8 reads as u8 ^
// 0x80 with zero 128.
template <int kBits, int kBN>
struct RunScale {
  static constexpr int kParts = kBits == 8 && Tile<kBN>::kCols > 16 ? 2 : 1;
  float s[kParts] = {}, zf[kParts] = {}, mn[kParts] = {};
};
template <int kBits, int kBN>
__device__ __forceinline__ RunScale<kBits, kBN> run_scale(const WqParams& p, int n0, int kb) {
  using T = Tile<kBN>;
  const int tid = static_cast<int>(threadIdx.x);
  const int n = n0 + tid / T::kThreadsPerRow, col = kb * kBK + (tid % T::kThreadsPerRow) * T::kCols;
  RunScale<kBits, kBN> r;
  if (n >= p.n) return r;
  const size_t si = static_cast<size_t>(n) * p.groups + col / p.group_size;
  auto load = [&](int h, size_t gi) {
    r.s[h] = __ldg(p.scales + gi);
    const uint32_t z = p.is_signed ? 128u
                       : p.mins    ? 0u
                       : p.zeros   ? static_cast<uint32_t>(__ldg(p.zeros + gi))
                                   : (kBits == 4 ? 8u : 128u);
    r.zf[h] = __uint_as_float(0x4B000000u | z);
    r.mn[h] = kBits == 4 && p.mins ? __ldg(p.mins + gi) : 0.0f;
  };
  load(0, si);
  // The run's second half (columns col + 16..): in the next group where groups of 16 (or 48, 80, ..) end
  // there.
  if constexpr (RunScale<kBits, kBN>::kParts == 2)
    load(1, static_cast<size_t>(n) * p.groups + (col + 16) / p.group_size);
  return r;
}

// kWords 32-bit words from shared memory at p (aligned to their total size), in the widest loads.
template <int kWords>
__device__ __forceinline__ void load_words(const uint8_t* p, uint32_t (&w)[kWords]) {
  if constexpr (kWords % 4 == 0) {
#pragma unroll
    for (int i = 0; i < kWords / 4; ++i) {
      const uint4 v = reinterpret_cast<const uint4*>(p)[i];
      w[4 * i] = v.x, w[4 * i + 1] = v.y, w[4 * i + 2] = v.z, w[4 * i + 3] = v.w;
    }
  } else if constexpr (kWords == 2) {
    const uint2 v = *reinterpret_cast<const uint2*>(p);
    w[0] = v.x, w[1] = v.y;
  } else {
    static_assert(kWords == 1, "1, 2 or a multiple of 4 words");
    w[0] = *reinterpret_cast<const uint32_t*>(p);
  }
}

// The stage's weight tile as bf16 s * (q - z) (or s * q + min), dequantize8_kernel's values: q - z is formed
// exactly as (2^23 + q) - (2^23 + z) in f32 (no integer conversion instruction), then one f32 FMA with the
// min (0 without mins: the product's one rounding) and one rounding to bf16.
template <int kBits, int kBN>
__device__ __forceinline__ void dequantize_tile(const WqParams& p, int n0, const RunScale<kBits, kBN>& rs,
                                                const uint8_t* wq, __nv_bfloat16* wd) {
  using T = Tile<kBN>;
  constexpr int kCols = T::kCols, kWords = kCols * kBits / 32;
  const int tid = static_cast<int>(threadIdx.x), row = tid / T::kThreadsPerRow,
            part = tid % T::kThreadsPerRow;
  uint32_t out[kCols / 2];
  if (n0 + row < p.n) {
    uint32_t words[kWords];
    load_words<kWords>(wq + row * kRowBytes<kBits> + part * (kCols * kBits / 8), words);
    uint32_t v[kCols];  // each 2^23 + q as f32 bits
    if constexpr (kBits == 4) {
#pragma unroll
      for (int j = 0; j < kCols; ++j) v[j] = 0x4B000000u | ((words[j / 8] >> (4 * (j % 8))) & 15u);
    } else {
      const uint32_t sx = p.is_signed ? 0x80808080u : 0u;
#pragma unroll
      for (int j = 0; j < kCols; ++j) v[j] = 0x4B000000u | (((words[j / 4] ^ sx) >> (8 * (j % 4))) & 0xffu);
    }
    auto value = [&](int j) {
      const int h = RunScale<kBits, kBN>::kParts == 2 && j >= 16 ? 1 : 0;
      return fmaf(rs.s[h], __uint_as_float(v[j]) - rs.zf[h], rs.mn[h]);
    };
#pragma unroll
    for (int j = 0; j < kCols / 2; ++j) out[j] = quant_gemv::pack_bf16x2(value(2 * j), value(2 * j + 1));
  } else {
#pragma unroll
    for (int j = 0; j < kCols / 2; ++j) out[j] = 0;
  }
  uint4* dst = reinterpret_cast<uint4*>(wd + row * kStride + part * kCols);
#pragma unroll
  for (int j = 0; j < kCols / 8; ++j)
    dst[j] = make_uint4(out[4 * j], out[4 * j + 1], out[4 * j + 2], out[4 * j + 3]);
}

// grid: (ceil(m / 64), ceil(n / kBN)): the m tiles of one weight tile are consecutive CTAs, so its bytes come
// from HBM once and from L2 for the others.
template <int kBits, int kBN>
__global__ void __launch_bounds__(kThreads) wq_gemm_kernel(WqParams p) {
  using T = Tile<kBN>;
  extern __shared__ __align__(16) uint8_t smem[];
  uint8_t* wq = smem;  // [kStages][kBN][row bytes]
  auto* xs =
      reinterpret_cast<__nv_bfloat16*>(smem + kStages * kBN * kRowBytes<kBits>);  // [kStages][kBM][kStride]
  __nv_bfloat16* wd = xs + kStages * kBM * kStride;                               // [kBN][kStride]
  const int m0 = static_cast<int>(blockIdx.x) * kBM, n0 = static_cast<int>(blockIdx.y) * kBN;
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const int wn = warp % T::kWarpsN, wm = warp / T::kWarpsN;
  const int steps = p.k / kBK;
  auto stage_w = [&](int s) { return wq + s * kBN * kRowBytes<kBits>; };
  auto stage_x = [&](int s) { return xs + s * kBM * kStride; };

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < steps) load_stage<kBits, kBN>(p, n0, m0, s, stage_w(s), stage_x(s));
    cp_async_commit();
  }
  float acc[2][T::kBTiles][4] = {};  // [n tile of 16][m tile of 8][C fragment]
  // ldmatrix addresses of this lane: A (weights, rows = n) row lane % 16, column (lane / 16) * 8; B (x, rows
  // = m) row (lane % 8) + (lane / 16) * 8, column ((lane / 8) % 2) * 8: two 8-row tiles per x4 load (x2: one
  // tile, lanes 0-15).
  const int a_row = wn * 32 + lane % 16, a_col = (lane / 16) * 8;
  const int b_row = wm * T::kWarpM + lane % 8 + (T::kBTiles >= 2 ? (lane / 16) * 8 : 0);
  const int b_col = ((lane / 8) % 2) * 8;
  for (int kb = 0; kb < steps; ++kb) {
    const RunScale rs = run_scale<kBits, kBN>(p, n0, kb);
    cp_async_wait<kStages - 2>();
    __syncthreads();  // step kb's stage landed; every warp is done with step kb - 1's tiles
    const int next = kb + kStages - 1;
    if (next < steps)
      load_stage<kBits, kBN>(p, n0, m0, next, stage_w(next % kStages), stage_x(next % kStages));
    cp_async_commit();
    dequantize_tile<kBits, kBN>(p, n0, rs, stage_w(kb % kStages), wd);
    __syncthreads();  // the bf16 weight tile is complete
    const __nv_bfloat16* xt = stage_x(kb % kStages);
#pragma unroll
    for (int ks = 0; ks < kBK / 16; ++ks) {
      uint32_t a[2][4], b[(T::kBTiles + 1) / 2][4];
#pragma unroll
      for (int at = 0; at < 2; ++at)
        ldmatrix_x4(a[at], smem_u32(wd + (a_row + at * 16) * kStride + ks * 16 + a_col));
      if constexpr (T::kBTiles >= 2) {
#pragma unroll
        for (int bp = 0; bp < T::kBTiles / 2; ++bp)
          ldmatrix_x4(b[bp], smem_u32(xt + (b_row + bp * 16) * kStride + ks * 16 + b_col));
      } else {
        ldmatrix_x2(b[0], smem_u32(xt + b_row * kStride + ks * 16 + b_col));
      }
#pragma unroll
      for (int at = 0; at < 2; ++at)
#pragma unroll
        for (int bt = 0; bt < T::kBTiles; ++bt) {
          const uint32_t* bb = &b[bt / 2][(bt % 2) * 2];
          quant_gemv::mma(acc[at][bt], a[at][0], a[at][1], a[at][2], a[at][3], bb[0], bb[1]);
        }
    }
  }
  cp_async_wait_all();
  // C fragment: c0, c1 = (weight row g, x rows 2t, 2t + 1), c2, c3 = (row g + 8, the same x rows).
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int at = 0; at < 2; ++at)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int n = n0 + wn * 32 + at * 16 + g + half * 8;
      if (n >= p.n) continue;
      const float bias = p.bias ? __bfloat162float(p.bias[n]) : 0.0f;
#pragma unroll
      for (int bt = 0; bt < T::kBTiles; ++bt)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int row = m0 + wm * T::kWarpM + bt * 8 + 2 * t + c;
          if (row >= p.m) continue;
          const float v = acc[at][bt][half * 2 + c] + bias;
          const size_t i = static_cast<size_t>(row) * p.ldy + n;
          if (p.y_f32)
            static_cast<float*>(p.y)[i] = v;
          else
            static_cast<__nv_bfloat16*>(p.y)[i] = __float2bfloat16(v);
        }
    }
}

template <int kBits, int kBN>
void launch(const WqParams& p, cudaStream_t stream) {
  constexpr int smem = smem_bytes<kBits, kBN>();
  raise_smem_limit(reinterpret_cast<const void*>(wq_gemm_kernel<kBits, kBN>), smem);
  const dim3 grid((p.m + kBM - 1) / kBM, (p.n + kBN - 1) / kBN);
  wq_gemm_kernel<kBits, kBN><<<grid, kThreads, smem, stream>>>(p);
  XI_CUDA_CHECK_LAUNCH();
}

template <int kBits>
void launch_bits(const WqParams& p, int tile_rows, cudaStream_t stream) {
  if (tile_rows == 128)
    launch<kBits, 128>(p, stream);
  else if (tile_rows == 64)
    launch<kBits, 64>(p, stream);
  else
    launch<kBits, 32>(p, stream);
}

}  // namespace

int wq_gemm_tile_rows(int m, int n, int sms) {
  const int m_tiles = (m + kBM - 1) / kBM;
  for (const int rows : {128, 64})
    if (static_cast<int64_t>(m_tiles) * ((n + rows - 1) / rows) >= sms) return rows;
  return 32;
}

bool wq_gemm_supports(const QuantWeight& w) {
  const bool groups = w.group_size % 32 == 0 || (w.bits == 8 && w.group_size % 16 == 0);  // 16: int8's only
  return (w.bits == 4 || w.bits == 8) && w.g_idx == nullptr && w.k % kBK == 0 && w.group_size > 0 && groups &&
         (!w.is_signed || w.bits == 8) && (w.mins == nullptr || (w.bits == 4 && w.zeros == nullptr)) &&
         w.n > 0;
}

void launch_wq_gemm(const QuantLinearArgs& a, cudaStream_t stream, int tile_rows) {
  XI_CHECK(wq_gemm_supports(a.w))
      << "wq GEMM: unsupported weight " << describe(a.w)
      << " (needs bits 4 / 8, no g_idx, k % 64, group % 32 (int8: % 16), mins int4's only)";
  XI_CHECK(a.m >= 1) << "wq GEMM: m " << a.m;
  XI_CHECK(a.ldy == 0 || a.ldy >= a.w.n) << "wq GEMM: y row stride " << a.ldy << " < n " << a.w.n;
  if (tile_rows == 0) tile_rows = wq_gemm_tile_rows(a.m, a.w.n, sm_count());
  XI_CHECK(tile_rows == 128 || tile_rows == 64 || tile_rows == 32) << "wq GEMM: tile rows " << tile_rows;
  XI_CHECK((a.w.n + tile_rows - 1) / tile_rows <= 65535)
      << "wq GEMM: n " << a.w.n << " exceeds the grid's y limit";
  XI_CHECK(reinterpret_cast<uintptr_t>(a.x) % 16 == 0) << "wq GEMM: x must be 16-byte aligned";
  const WqParams p{a.x,    a.w.w, a.w.scales,   a.w.zeros,      a.w.mins,
                   a.bias, a.y,   a.y_f32,      a.w.is_signed,  a.m,
                   a.w.n,  a.w.k, a.w.groups(), a.w.group_size, a.ldy > 0 ? a.ldy : a.w.n};
  if (a.w.bits == 4)
    launch_bits<4>(p, tile_rows, stream);
  else
    launch_bits<8>(p, tile_rows, stream);
}

}  // namespace xinfer::cuda
