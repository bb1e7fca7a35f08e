// The CUDA-core int4 decode GEMV (quant_dot_gemv.h: layout, instruction budget, numerics).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cstdio>

#include "xinfer/backend/cuda/cuda_check.h"
#include "xinfer/backend/cuda/kernels/gemm/quant_dot_gemv.h"
#include "xinfer/backend/cuda/kernels/gemm/quant_gemv_math.cuh"
#include "xinfer/backend/cuda/kernels/quant/activation_quant.cuh"
#include "xinfer/backend/cuda/kernels/pdl.cuh"

namespace xinfer::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr size_t kMaxSmemX = 48 * 1024;  // smem_x: no opt-in attribute needed
// The kernels' weight kinds: kBits 4 (int4), 8 (int8), kFp8 (W8A8-FP8: e4m3 weights and e4m3 x), kFp8Quant
// (e4m3 weights, bf16 x that each CTA quantizes to e4m3 itself: smem_x schedules only).
constexpr int kFp8 = 0;
constexpr int kFp8Quant = 1;
template <int kBits>
constexpr bool kIsFp8 = kBits == kFp8 || kBits == kFp8Quant;
// A lane's chunk: 16 bytes of a row = 32 int4 / 16 int8 or e4m3 columns.
template <int kBits>
constexpr int kChunkCols = kBits == 4 ? 32 : 16;

struct DotParams {
  const __nv_bfloat16* x;     // [m, k] (int4 / int8 / kFp8Quant)
  const uint8_t* xq;          // [m, k] e4m3 (kFp8)
  const float* x_scales;      // [m] (kFp8)
  const float* input_scale;   // kFp8Quant: [1] static per-tensor scale, or nullptr (dynamic per token)
  bool per_channel;           // FP8: scales [n] (else [1])
  const uint8_t* w;           // [n, k / 2]
  const float* scales;        // [n, G] (kFp8: [n] or [1])
  const uint8_t* zeros;       // [n, G] or nullptr (8)
  const __nv_bfloat16* bias;  // [n] or nullptr
  void* y;                    // [m, n]
  bool y_f32;
  int n, k, G;
  int group_shift;    // chunk c is in group c >> group_shift (log2(group / chunk columns); 31: per channel)
  uint32_t sign_xor;  // int8: 0x80808080 for i8 values (then zero 128), else 0
  int sym_zero;       // the zero point without zeros: 8 (int4), 128 (int8)
};

// Weights are read once past L1 (quant_gemv_math.cuh's load, as the other GEMVs).
using quant_gemv::load_weights;

using quant_gemv::hfma2;
__device__ __forceinline__ uint32_t hmul2(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}
__device__ __forceinline__ uint32_t f16x2(float lo, float hi) {
  uint32_t d;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
}
__device__ __forceinline__ float f16x2_sum(uint32_t v) {
  const __half2 h = *reinterpret_cast<const __half2*>(&v);
  return __low2float(h) + __high2float(h);
}

// x columns 8i..8i+7 (one 16-byte load, bf16 pairs (x0, x1) ... (x6, x7)) as the f16x2 pairs the weight
// word's nibble masks produce: (x0, x4), (x1, x5), (x2, x6), (x3, x7).
__device__ __forceinline__ void x_pairs(const uint4& a, uint32_t (&xp)[4]) {
  xp[0] = f16x2(__uint_as_float(a.x << 16), __uint_as_float(a.z << 16));
  xp[1] = f16x2(__uint_as_float(a.x & 0xffff0000u), __uint_as_float(a.z & 0xffff0000u));
  xp[2] = f16x2(__uint_as_float(a.y << 16), __uint_as_float(a.w << 16));
  xp[3] = f16x2(__uint_as_float(a.y & 0xffff0000u), __uint_as_float(a.w & 0xffff0000u));
}

// The 8 weights of word `wd` as (q - z) / 16 in the pairing of x_pairs: lo = 1024 + q (f16 bits 0x6400 | q)
// times 1/16 minus (64 + z / 16); hi = 1024 + 16 q times 1/256 minus (4 + z / 16); both exact.
__device__ __forceinline__ void weight_pairs(uint32_t wd, uint32_t c_lo, uint32_t c_hi, uint32_t (&wp)[4]) {
  constexpr uint32_t kMagic = 0x64006400u, kSixteenth = 0x2C002C00u, kInv256 = 0x1C001C00u;
  const uint32_t w8 = wd >> 8;
  wp[0] = hfma2((wd & 0x000f000fu) | kMagic, kSixteenth, c_lo);
  wp[1] = hfma2((wd & 0x00f000f0u) | kMagic, kInv256, c_hi);
  wp[2] = hfma2((w8 & 0x000f000fu) | kMagic, kSixteenth, c_lo);
  wp[3] = hfma2((w8 & 0x00f000f0u) | kMagic, kInv256, c_hi);
}

// int8: bytes b0..b3 of `wd` as f16x2 (b0, b1), (b2, b3) = (u - z) / 256 exactly: PRMT puts each byte under
// the exponent byte 0x64 (1024 + u), one HFMA2 * 1/256 - (4 + z / 256).
__device__ __forceinline__ void byte_pairs(uint32_t wd, uint32_t c8, uint32_t (&wp)[2]) {
  constexpr uint32_t kInv256 = 0x1C001C00u;
  wp[0] = hfma2(__byte_perm(wd, 0x64646464u, 0x4140), kInv256, c8);
  wp[1] = hfma2(__byte_perm(wd, 0x64646464u, 0x4342), kInv256, c8);
}

using quant_gemv::e4m3x2_to_f16x2;  // two e4m3 (bytes 0, 1 or 2, 3) as f16x2, exact

// 8 e4m3 x values (a.x: columns 0..3, a.y: 4..7) as natural f16x2 pairs times 2^-8, exact (products with an
// e4m3 weight stay <= 448 * 448 / 256 = 784, so 8 of them sum in f16 without overflow).
__device__ __forceinline__ void fp8_x_pairs(const uint2& a, uint32_t (&xp)[4]) {
  constexpr uint32_t kInv256 = 0x1C001C00u;
  xp[0] = hmul2(e4m3x2_to_f16x2(a.x, false), kInv256);
  xp[1] = hmul2(e4m3x2_to_f16x2(a.x, true), kInv256);
  xp[2] = hmul2(e4m3x2_to_f16x2(a.y, false), kInv256);
  xp[3] = hmul2(e4m3x2_to_f16x2(a.y, true), kInv256);
}

// x columns 8i..8i+7 as natural f16x2 pairs (x0, x1) ... (x6, x7) (the int8 pairing).
__device__ __forceinline__ void x_pairs_natural(const uint4& a, uint32_t (&xp)[4]) {
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const uint32_t v = (&a.x)[j];
    xp[j] = f16x2(__uint_as_float(v << 16), __uint_as_float(v & 0xffff0000u));
  }
}

// grid: ceil(n / (kR * kWarps / kS)) CTAs of 4 warps; warp w owns rows (blockIdx.x * (4 / kS) + w / kS) * kR
// + 0..kR-1 and the chunks c with (c / 32) % kS == w % kS (lane: c % 32), kU of them per row per batch.
// kXs: the CTA converts x to f16 pairs once into shared memory (dynamic, m * k * 2 bytes; uint4 of 4 pairs per
// 8 columns, stored word-major: [t][i][c] with i the 8-column word of chunk c, so a warp's 32 lanes read 512
// consecutive bytes) and every warp reads its pairs there: the conversion is shared by the CTA's rows
// instead of each warp's.
// kFp8Quant: before that, the CTA computes each token's scale and e4m3 codes as quantize_activations.h's
// kernel does (act_quant: the same bits), and keeps the scale for the epilogue.
template <int kBits, int kM, int kR, int kU, int kS, bool kXs>
__global__ void __launch_bounds__(kThreads) dot_gemv_kernel(DotParams p) {
  static_assert(kBits != kFp8Quant || kXs, "the fused FP8 quantization writes x to shared memory");
  constexpr int kCols = kChunkCols<kBits>;
  constexpr int kWords = kCols / 8;  // 8-column x words per chunk: 4 (int4), 2 (int8)
  extern __shared__ uint4 xs[];      // kXs: [kM][kWords][chunks]
  constexpr int kRowGroups = kWarps / kS;
  constexpr int kStride = 32 * kS;  // chunks between a lane's consecutive chunks of a row
  __shared__ float red[kS > 1 ? kWarps : 1][kR][kM];
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const int split = warp % kS;
  const int row0 = (static_cast<int>(blockIdx.x) * kRowGroups + warp / kS) * kR;
  const int chunks = p.k / kCols;
  const size_t row_bytes = kBits == 4 ? static_cast<size_t>(p.k) / 2 : static_cast<size_t>(p.k);
  int row[kR];
#pragma unroll
  for (int r = 0; r < kR; ++r) row[r] = min(row0 + r, p.n - 1);

  uint4 wv[kU][kR];
  float sc[kU][kR];
  int zc[kU][kR];
  auto load = [&](int base) {
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int c = base + u * kStride + split * 32 + lane;
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        if (c < chunks) {
          wv[u][r] = load_weights(p.w + static_cast<size_t>(row[r]) * row_bytes + static_cast<size_t>(c) * 16);
          if constexpr (kIsFp8<kBits>) {
            sc[u][r] = 0.f;
            zc[u][r] = 0;
          } else {
            const size_t si = static_cast<size_t>(row[r]) * p.G + (c >> p.group_shift);
            sc[u][r] = __ldg(p.scales + si);
            zc[u][r] = p.zeros ? static_cast<int>(__ldg(p.zeros + si)) : p.sym_zero;
          }
        } else {
          wv[u][r] = make_uint4(0, 0, 0, 0);
          sc[u][r] = 0.f;
          zc[u][r] = p.sym_zero;
        }
      }
    }
  };

  float acc[kR][kM] = {};
  constexpr int kBatch = kU * kStride;
  int base = 0;
  load(base);  // weights only: before pdl_wait() (they do not depend on earlier kernels)
  pdl_release();
  pdl_wait();
  float x_scale[kM];  // kFp8Quant: the tokens' scales
  if constexpr (kBits == kFp8Quant) {
    __shared__ float amax_red[kWarps];
    const int per_token = kWords * chunks;  // = k / 8
#pragma unroll
    for (int t = 0; t < kM; ++t) {
      const __nv_bfloat16* xr = p.x + static_cast<size_t>(t) * p.k;
      x_scale[t] = act_quant::row_scale<kThreads>(xr, p.k, p.input_scale, act_quant::kFp8Max, amax_red);
      const float inv = act_quant::inverse_scale(x_scale[t]);
      for (int g = static_cast<int>(threadIdx.x); g < per_token; g += kThreads) {
        const uint4 a = __ldg(reinterpret_cast<const uint4*>(xr + g * 8));
        uint32_t q[2];
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const uint32_t lo = (&a.x)[2 * j], hi = (&a.x)[2 * j + 1];
          q[j] = static_cast<uint32_t>(act_quant::to_e4m3(__uint_as_float(lo << 16), inv)) |
                 static_cast<uint32_t>(act_quant::to_e4m3(__uint_as_float(lo & 0xffff0000u), inv)) << 8 |
                 static_cast<uint32_t>(act_quant::to_e4m3(__uint_as_float(hi << 16), inv)) << 16 |
                 static_cast<uint32_t>(act_quant::to_e4m3(__uint_as_float(hi & 0xffff0000u), inv)) << 24;
        }
        uint32_t v[4];
        fp8_x_pairs(make_uint2(q[0], q[1]), v);
        xs[(t * kWords + g % kWords) * chunks + g / kWords] = make_uint4(v[0], v[1], v[2], v[3]);
      }
    }
    __syncthreads();
  } else if constexpr (kXs) {
    const int per_token = kWords * chunks;  // = k / 8
    for (int idx = static_cast<int>(threadIdx.x); idx < kM * per_token; idx += kThreads) {
      const int t = idx / per_token, g = idx % per_token;  // g: 8-column group g of row t (column 8 g)
      uint32_t v[4];
      if constexpr (kBits == kFp8) {
        fp8_x_pairs(__ldg(reinterpret_cast<const uint2*>(p.xq + static_cast<size_t>(t) * p.k + g * 8)), v);
      } else {
        const uint4 a = __ldg(reinterpret_cast<const uint4*>(p.x + static_cast<size_t>(t) * p.k + g * 8));
        if constexpr (kBits == 4)
          x_pairs(a, v);
        else
          x_pairs_natural(a, v);
      }
      xs[(t * kWords + g % kWords) * chunks + g / kWords] = make_uint4(v[0], v[1], v[2], v[3]);
    }
    __syncthreads();
  }
  while (base < chunks) {
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int c = base + u * kStride + split * 32 + lane;
      if (c >= chunks) continue;
      uint32_t h[kR][kM];
      uint32_t c_lo[kR], c_hi[kR];
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        const uint32_t z = static_cast<uint32_t>(zc[u][r]);
        if constexpr (kBits == 4) {
          c_lo[r] = (0xD400u + z) * 0x00010001u;         // -(64 + z / 16)
          c_hi[r] = (0xC400u + (z << 4)) * 0x00010001u;  // -(4 + z / 16)
        } else {
          c_lo[r] = (0xC400u + z) * 0x00010001u;  // -(4 + z / 256)
          c_hi[r] = 0u;
        }
#pragma unroll
        for (int t = 0; t < kM; ++t) h[r][t] = 0u;
      }
      if constexpr (kBits == 4) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          uint32_t xp[kM][4];
#pragma unroll
          for (int t = 0; t < kM; ++t) {
            if constexpr (kXs) {
              const uint4 v = xs[(t * kWords + i) * chunks + c];
              xp[t][0] = v.x, xp[t][1] = v.y, xp[t][2] = v.z, xp[t][3] = v.w;
            } else
              x_pairs(__ldg(reinterpret_cast<const uint4*>(p.x + static_cast<size_t>(t) * p.k + c * kCols + i * 8)), xp[t]);
          }
#pragma unroll
          for (int r = 0; r < kR; ++r) {
            uint32_t wp[4];
            weight_pairs((&wv[u][r].x)[i], c_lo[r], c_hi[r], wp);
#pragma unroll
            for (int t = 0; t < kM; ++t)
#pragma unroll
              for (int j = 0; j < 4; ++j) h[r][t] = hfma2(wp[j], xp[t][j], h[r][t]);
          }
        }
      } else {
#pragma unroll
        for (int i = 0; i < 2; ++i) {  // 8 columns: words 2i, 2i + 1
          uint32_t xp[kM][4];
#pragma unroll
          for (int t = 0; t < kM; ++t) {
            if constexpr (kXs) {
              const uint4 v = xs[(t * kWords + i) * chunks + c];
              xp[t][0] = v.x, xp[t][1] = v.y, xp[t][2] = v.z, xp[t][3] = v.w;
            } else if constexpr (kBits == kFp8) {
              fp8_x_pairs(__ldg(reinterpret_cast<const uint2*>(p.xq + static_cast<size_t>(t) * p.k + c * kCols + i * 8)),
                          xp[t]);
            } else {
              x_pairs_natural(__ldg(reinterpret_cast<const uint4*>(p.x + static_cast<size_t>(t) * p.k + c * kCols + i * 8)),
                              xp[t]);
            }
          }
#pragma unroll
          for (int r = 0; r < kR; ++r)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              uint32_t wp[2];
              if constexpr (kIsFp8<kBits>) {
                const uint32_t wd = (&wv[u][r].x)[2 * i + e];
                wp[0] = e4m3x2_to_f16x2(wd, false);
                wp[1] = e4m3x2_to_f16x2(wd, true);
              } else {
                byte_pairs((&wv[u][r].x)[2 * i + e] ^ p.sign_xor, c_lo[r], wp);
              }
#pragma unroll
              for (int t = 0; t < kM; ++t) {
                h[r][t] = hfma2(wp[0], xp[t][2 * e], h[r][t]);
                h[r][t] = hfma2(wp[1], xp[t][2 * e + 1], h[r][t]);
              }
            }
        }
      }
      constexpr float kUnscale = kBits == 4 ? 16.f : 256.f;
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        if constexpr (kIsFp8<kBits>) {  // the 2^8 and the scales apply per output (below)
#pragma unroll
          for (int t = 0; t < kM; ++t) acc[r][t] += f16x2_sum(h[r][t]);
        } else {
          const float s_full = sc[u][r] * kUnscale;
#pragma unroll
          for (int t = 0; t < kM; ++t) acc[r][t] = fmaf(f16x2_sum(h[r][t]), s_full, acc[r][t]);
        }
      }
    }
    base += kBatch;
    if (base < chunks) load(base);
  }

#pragma unroll
  for (int r = 0; r < kR; ++r)
#pragma unroll
    for (int t = 0; t < kM; ++t)
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) acc[r][t] += __shfl_xor_sync(0xffffffffu, acc[r][t], o);
  if constexpr (kS > 1) {
    if (lane == 0)
#pragma unroll
      for (int r = 0; r < kR; ++r)
#pragma unroll
        for (int t = 0; t < kM; ++t) red[warp][r][t] = acc[r][t];
    __syncthreads();
    if (split != 0) return;
#pragma unroll
    for (int r = 0; r < kR; ++r)
#pragma unroll
      for (int t = 0; t < kM; ++t) {
        float v = 0.f;
#pragma unroll
        for (int s = 0; s < kS; ++s) v += red[warp + s][r][t];
        acc[r][t] = v;
      }
  }
  // Lane r * kM + t stores output (row0 + r, token t).
#pragma unroll
  for (int r = 0; r < kR; ++r)
#pragma unroll
    for (int t = 0; t < kM; ++t)
      if (lane == r * kM + t && row0 + r < p.n) {
        float v = acc[r][t];
        if constexpr (kBits == kFp8)
          v = v * 256.f * __ldg(p.x_scales + t) * __ldg(p.scales + (p.per_channel ? row0 + r : 0));
        if constexpr (kBits == kFp8Quant)
          v = v * 256.f * x_scale[t] * __ldg(p.scales + (p.per_channel ? row0 + r : 0));
        if (p.bias) v += __bfloat162float(p.bias[row0 + r]);
        const size_t o = static_cast<size_t>(t) * p.n + row0 + r;
        if (p.y_f32)
          static_cast<float*>(p.y)[o] = v;
        else
          static_cast<__nv_bfloat16*>(p.y)[o] = __float2bfloat16(v);
      }
}

// The compiled schedules (rows, unroll, split); each for m = 1..4 and int4 / int8.
constexpr DotGemvConfig kConfigs[] = {
    {2, 4, 1, false}, {4, 2, 1, false}, {1, 8, 1, false}, {4, 4, 1, false}, {2, 4, 4, false}, {2, 2, 2, false},
    {2, 4, 1, false, true}, {4, 2, 1, false, true}, {2, 4, 4, false, true},
};

template <int kBits, int kM>
void (*pick_kernel(const DotGemvConfig& c))(DotParams) {
  if (c.smem_x) {
    if (c.rows == 2 && c.unroll == 4 && c.split == 1) return dot_gemv_kernel<kBits, kM, 2, 4, 1, true>;
    if (c.rows == 4 && c.unroll == 2 && c.split == 1) return dot_gemv_kernel<kBits, kM, 4, 2, 1, true>;
    if (c.rows == 2 && c.unroll == 4 && c.split == 4) return dot_gemv_kernel<kBits, kM, 2, 4, 4, true>;
    return nullptr;
  }
  if constexpr (kBits != kFp8Quant) {  // kFp8Quant: smem_x schedules only
    if (c.rows == 2 && c.unroll == 4 && c.split == 1) return dot_gemv_kernel<kBits, kM, 2, 4, 1, false>;
    if (c.rows == 4 && c.unroll == 2 && c.split == 1) return dot_gemv_kernel<kBits, kM, 4, 2, 1, false>;
    if (c.rows == 1 && c.unroll == 8 && c.split == 1) return dot_gemv_kernel<kBits, kM, 1, 8, 1, false>;
    if (c.rows == 4 && c.unroll == 4 && c.split == 1) return dot_gemv_kernel<kBits, kM, 4, 4, 1, false>;
    if (c.rows == 2 && c.unroll == 4 && c.split == 4) return dot_gemv_kernel<kBits, kM, 2, 4, 4, false>;
    if (c.rows == 2 && c.unroll == 2 && c.split == 2) return dot_gemv_kernel<kBits, kM, 2, 2, 2, false>;
  }
  return nullptr;
}

template <int kBits>
void (*pick_kernel_m(const DotGemvConfig& c, int m))(DotParams) {
  switch (m) {
    case 1: return pick_kernel<kBits, 1>(c);
    case 2: return pick_kernel<kBits, 2>(c);
    case 3: return pick_kernel<kBits, 3>(c);
    default: return pick_kernel<kBits, 4>(c);
  }
}

// Launches `kernel` (a config's instantiation, or nullptr if not compiled) on p's n rows.
void launch_kernel(void (*kernel)(DotParams), const DotParams& p, int m, const DotGemvConfig& config,
                   cudaStream_t stream, const char* what) {
  XI_CHECK(kernel != nullptr) << what << ": " << to_string(config) << " is not compiled";
  const int rows_per_cta = config.rows * kWarps / config.split;
  const dim3 grid((p.n + rows_per_cta - 1) / rows_per_cta);
  const size_t smem = config.smem_x ? static_cast<size_t>(m) * p.k * 2 : 0;
  XI_CHECK(smem <= kMaxSmemX) << what << ": x in shared memory needs m * k * 2 <= " << kMaxSmemX << " bytes, got " << smem;
  if (config.pdl)
    launch_pdl(kernel, grid, dim3(kThreads), smem, stream, p);
  else
    kernel<<<grid, kThreads, smem, stream>>>(p);
  XI_CUDA_CHECK_LAUNCH();
}

// The FP8 launchers' common parameters: e4m3 weight [n, k] with per-channel ([n]) or per-tensor scales.
DotParams fp8_params(const uint8_t* w, const float* w_scales, bool per_channel, const __nv_bfloat16* bias, void* y,
                     bool y_f32, int n, int k) {
  DotParams p{};
  p.per_channel = per_channel;
  p.w = w;
  p.scales = w_scales;
  p.bias = bias;
  p.y = y;
  p.y_f32 = y_f32;
  p.n = n;
  p.k = k;
  p.G = 1;
  return p;
}

int log2_exact(int v) {
  int s = 0;
  while ((1 << s) < v) ++s;
  return (1 << s) == v ? s : -1;
}

}  // namespace

std::string to_string(const DotGemvConfig& c) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "dot r%d u%d s%d%s%s", c.rows, c.unroll, c.split, c.smem_x ? " xs" : "",
                c.pdl ? " pdl" : "");
  return buf;
}

const DotGemvConfig* dot_gemv_configs(int* count) {
  *count = static_cast<int>(sizeof(kConfigs) / sizeof(kConfigs[0]));
  return kConfigs;
}

DotGemvConfig dot_gemv_default_config(const QuantWeight& w, int m, bool pdl) {
  // H200, gemv16-1 (--quant-dot, m = 1, 8B shapes, best of 6 schedules): int4 r4 u2 for n >= 6144 (qkv 6.7 us,
  // gate_up 22.5 us), r4 u4 otherwise (o 5.0 us), r2 u4 for long rows (down, k 14336: 14.1 us); int8 per channel
  // r2 u2 s2 for n >= 6144 (qkv 8.6, gate_up 31.0 us), r2 u4 otherwise (o 6.7, down 19.4 us). At m >= 2 the
  // CUDA-core GEMV lost to the mma GEMV on every int4 shape (compute-bound), so the backend runs it at m = 1.
  (void)m;
  DotGemvConfig c;
  c.pdl = pdl;
  const bool long_rows = w.k >= 8192;
  if (w.bits == 4) {
    c.rows = long_rows ? 2 : 4;
    c.unroll = long_rows ? 4 : (w.n >= 6144 ? 2 : 4);
  } else {
    c.rows = 2;
    c.unroll = (w.n >= 6144 && !long_rows) ? 2 : 4;
    c.split = (w.n >= 6144 && !long_rows) ? 2 : 1;
  }
  return c;
}

namespace {
// The chunk -> group shift, or -1 if the group is not a power-of-two number of chunks (31: per channel).
int group_shift(const QuantWeight& w) {
  if (w.is_signed) return 31;
  const int cols = w.bits == 4 ? kChunkCols<4> : kChunkCols<8>;
  if (w.group_size >= w.k) return 31;  // one group per row
  return w.group_size % cols == 0 ? log2_exact(w.group_size / cols) : -1;
}
}  // namespace

bool dot_gemv_supports(const QuantWeight& w, int m) {
  if (w.bits != 4 && w.bits != 8) return false;
  if ((w.is_signed && (w.bits != 8 || w.zeros != nullptr)) || w.mins != nullptr) return false;
  const int cols = w.bits == 4 ? kChunkCols<4> : kChunkCols<8>;
  return w.g_idx == nullptr && m >= 1 && m <= 4 && w.n >= 1 && w.k >= cols && w.k % cols == 0 && group_shift(w) >= 0;
}

bool fp8_dot_gemv_supports(int n, int k, int m) { return n >= 1 && k >= 16 && k % 16 == 0 && m >= 1 && m <= 4; }

void launch_fp8_dot_gemv(const Fp8GemvArgs& a, cudaStream_t stream, const DotGemvConfig& config) {
  XI_CHECK(fp8_dot_gemv_supports(a.n, a.k, a.m)) << "FP8 dot GEMV: unsupported [" << a.n << ", " << a.k << "] at m "
                                                 << a.m << " (k % 16 == 0, m 1..4)";
  XI_CHECK(reinterpret_cast<uintptr_t>(a.xq) % 16 == 0 && reinterpret_cast<uintptr_t>(a.w) % 16 == 0)
      << "FP8 dot GEMV: x and the weight must be 16-byte aligned";
  DotParams p = fp8_params(a.w, a.w_scales, a.per_channel, a.bias, a.y, a.y_f32, a.n, a.k);
  p.xq = a.xq;
  p.x_scales = a.x_scales;
  launch_kernel(pick_kernel_m<kFp8>(config, a.m), p, a.m, config, stream, "FP8 dot GEMV");
}

bool fp8_quant_dot_gemv_supports(int n, int k, int m, const DotGemvConfig& config) {
  return fp8_dot_gemv_supports(n, k, m) && config.smem_x && static_cast<size_t>(m) * k * 2 <= kMaxSmemX;
}

DotGemvConfig fp8_quant_dot_gemv_default_config(int n, int k, bool pdl) {
  // smem_x schedules only. H200, session 11 (--quant-dot, m = 1, 8B shapes, bf16 x in): r2 u4 was the best of
  // the three on qkv (8.9 us), o (7.5), gate_up (29.6) and within 2% of r4 u2 on down (25.1 vs 24.5), where
  // the two-kernel path below is faster (the CTA-wide prologue over 14336 columns; fp8_dot_gemv_fuse_pays).
  (void)n;
  (void)k;
  DotGemvConfig c;
  c.pdl = pdl;
  c.smem_x = true;
  c.rows = 2;
  c.unroll = 4;
  return c;
}

bool fp8_dot_gemv_fuse_pays(int n, int k) {
  (void)n;
  return k < 8192;
}

DotGemvConfig fp8_dot_gemv_default_config(int n, int k, bool pdl) {
  // H200, session 11 (--quant-dot, m = 1, the FP8 dot GEMV on e4m3 x, best of 9): down (k 14336) r2 u4 s4
  // 17.4 us (the pipelined mma GEMV 22.4), gate_up r2 u2 s2 29.4, o r2 u4 s4 6.3; qkv 8.7 (r2 u4 s4).
  DotGemvConfig c;
  c.pdl = pdl;
  c.rows = 2;
  if (n >= 6144 && k < 8192) {
    c.unroll = 2;
    c.split = 2;
  } else {
    c.unroll = 4;
    c.split = 4;
  }
  return c;
}

void launch_fp8_quant_dot_gemv(const Fp8QuantDotGemvArgs& a, cudaStream_t stream, const DotGemvConfig& config) {
  XI_CHECK(fp8_quant_dot_gemv_supports(a.n, a.k, a.m, config))
      << "FP8 dot GEMV with x quantization: unsupported [" << a.n << ", " << a.k << "] at m " << a.m << " with "
      << to_string(config) << " (k % 16 == 0, m 1..4, an smem_x schedule, m * k * 2 <= " << kMaxSmemX << " bytes)";
  XI_CHECK(reinterpret_cast<uintptr_t>(a.x) % 16 == 0 && reinterpret_cast<uintptr_t>(a.w) % 16 == 0)
      << "FP8 dot GEMV: x and the weight must be 16-byte aligned";
  DotParams p = fp8_params(a.w, a.w_scales, a.per_channel, a.bias, a.y, a.y_f32, a.n, a.k);
  p.x = a.x;
  p.input_scale = a.input_scale;
  launch_kernel(pick_kernel_m<kFp8Quant>(config, a.m), p, a.m, config, stream, "FP8 dot GEMV with x quantization");
}

bool dot_gemv_config_fits(const QuantWeight& w, int m, const DotGemvConfig& config) {
  return !config.smem_x || static_cast<size_t>(m) * w.k * 2 <= kMaxSmemX;
}

void launch_dot_gemv(const QuantLinearArgs& a, cudaStream_t stream, const DotGemvConfig& config) {
  const QuantWeight& w = a.w;
  XI_CHECK(dot_gemv_supports(w, a.m)) << "dot GEMV: unsupported " << describe(w) << " at m " << a.m
                                      << " (int4 / int8, a power-of-two number of 16-byte chunks per group, k a"
                                         " whole number of chunks, no g_idx, m 1..4)";
  XI_CHECK(reinterpret_cast<uintptr_t>(a.x) % 16 == 0 && reinterpret_cast<uintptr_t>(w.w) % 16 == 0)
      << "dot GEMV: x and the weight must be 16-byte aligned";
  XI_CHECK(a.ldy == 0 || a.ldy == w.n || a.m == 1)
      << "dot GEMV: no y row stride (" << a.ldy << ") at m " << a.m;
  DotParams p{};
  p.x = a.x;
  p.w = w.w;
  p.scales = w.scales;
  p.zeros = w.zeros;
  p.bias = a.bias;
  p.y = a.y;
  p.y_f32 = a.y_f32;
  p.n = w.n;
  p.k = w.k;
  p.G = w.groups();
  p.group_shift = group_shift(w);
  p.sign_xor = w.is_signed ? 0x80808080u : 0u;
  p.sym_zero = w.bits == 4 ? 8 : 128;
  launch_kernel(w.bits == 4 ? pick_kernel_m<4>(config, a.m) : pick_kernel_m<8>(config, a.m), p, a.m, config, stream,
                "dot GEMV");
}

}  // namespace xinfer::cuda
