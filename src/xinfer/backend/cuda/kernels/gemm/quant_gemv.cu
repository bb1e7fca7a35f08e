// The weight-only quantized GEMV and the weight dequantization kernel (quant_linear.h).
#include <algorithm>
#include <cstdio>
#include <type_traits>

#include "xinfer/backend/cuda/cuda_check.h"
#include "xinfer/backend/cuda/kernels/gemm/quant_linear.h"
#include "xinfer/backend/cuda/kernels/pdl.cuh"

namespace xinfer::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kTileRows = 16;  // weight rows per CTA (one mma M tile)
constexpr int kTileTokens = 8;  // rows of x per launch (one mma N tile)
// Steps a warp loads before it computes any of them: 4 x 2 rows x 16 bytes = 128 bytes per lane in flight
// (a first version kept 2 steps in flight and double-buffered them in registers: 38% of the int4 roofline
// at batch 1, latency-bound).
constexpr int kBatch = 4;

struct Params {
  const __nv_bfloat16* x;     // [m, k]
  const uint8_t* w;           // [n, row_bytes]
  const float* scales;        // [n, G]
  const uint8_t* zeros;       // [n, G] or nullptr
  const __nv_bfloat16* bias;  // [n] or nullptr
  void* y;                    // [m, n]
  bool y_f32;
  int m, n, k, group, G;
  uint32_t sign_xor;  // 0x80808080 for i8 values (-> u8 = v + 128, zero 128), else 0
  int sym_zero;       // the zero point of symmetric weights
};

// Weights are read once: past L1, 256-byte L2 lines (as gemv.cu).
__device__ __forceinline__ uint4 load_weights(const uint8_t* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}
__device__ __forceinline__ uint4 load_x(const __nv_bfloat16* p) { return __ldg(reinterpret_cast<const uint4*>(p)); }

__device__ __forceinline__ uint32_t bf16x2_sub(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("sub.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}
__device__ __forceinline__ uint32_t bf16x2_mul(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  uint32_t d;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
}

// d += A[16 x 16] * B[16 x 8] (bf16 in, f32 accumulate), the standard m16n8k16 fragments.
__device__ __forceinline__ void mma(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                    uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// One step's loads of one lane: 16 bytes of weight rows g and g + 8, and their group's scale and zero.
struct StepLoad {
  uint4 w[2];
  float s[2];
  int z[2];
};

template <int kBits>
struct Geometry {
  static constexpr int kStep = kBits == 4 ? 128 : 64;        // columns of k per warp step
  static constexpr int kLaneCols = kStep / 4;                 // consecutive columns per lane per step
  static constexpr int kRowBytes(int k) { return kBits == 4 ? k / 2 : k; }
};

template <int kBits>
__device__ __forceinline__ void load_step(const Params& p, const int (&row)[2], int step, int t, StepLoad& l) {
  using G = Geometry<kBits>;
  const int col = step * G::kStep + t * G::kLaneCols;
  // The last step may end inside k (k % step != 0): lanes past k load no weights (their x reads as 0 too),
  // but they still scale their C columns (rows 2t, 2t + 1 of x) by the step's group scale (unfolded
  // scales): their group is the step's first column's.
  const bool in_k = col < p.k;
  const int gi = (in_k ? col : step * G::kStep) / p.group;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const size_t rb = static_cast<size_t>(row[r]) * G::kRowBytes(p.k);
    l.w[r] = in_k ? load_weights(p.w + rb + (kBits == 4 ? col / 2 : col)) : make_uint4(0, 0, 0, 0);
    const size_t si = static_cast<size_t>(row[r]) * p.G + gi;
    l.s[r] = __ldg(p.scales + si);
    l.z[r] = p.zeros ? static_cast<int>(__ldg(p.zeros + si)) : p.sym_zero;
  }
}

// One step: the lane's 32 (int4) or 16 (int8) columns of rows g, g + 8 times x rows 0..7 into acc
// (kFold: the scale is in the bf16 weights; else the step is scaled in f32 here).
template <int kBits, bool kFold>
__device__ __forceinline__ void compute_step(const Params& p, const StepLoad& l, int step, int g, int t,
                                             float (&acc)[4]) {
  using G = Geometry<kBits>;
  const int col = step * G::kStep + t * G::kLaneCols;
  float d[4] = {0.f, 0.f, 0.f, 0.f};
  float(&sum)[4] = kFold ? acc : d;
  const bool live = g < p.m && col < p.k;  // x rows past m and columns past k are zeros
  const __nv_bfloat16* xrow = p.x + static_cast<size_t>(g) * p.k + col;
  if constexpr (kBits == 4) {
    uint4 xv[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) xv[i] = live ? load_x(xrow + i * 8) : make_uint4(0, 0, 0, 0);
    uint32_t zz[2], ss[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      zz[r] = (0x4300u | static_cast<uint32_t>(l.z[r])) * 0x00010001u;  // bf16 128 + z, both halves
      if constexpr (kFold) ss[r] = pack_bf16x2(l.s[r], l.s[r]);
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      // Nibbles e0..e7 of word i (columns i * 8 + 0..7): pairs (e0, e4), (e1, e5), (e2, e6), (e3, e7).
      uint32_t a[2][4];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const uint32_t wd = r == 0 ? (&l.w[0].x)[i] : (&l.w[1].x)[i];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          uint32_t v = bf16x2_sub(((wd >> (4 * j)) & 0x000F000Fu) | 0x43004300u, zz[r]);
          if constexpr (kFold) v = bf16x2_mul(v, ss[r]);
          a[r][j] = v;
        }
      }
      const uint32_t x01 = (&xv[i].x)[0], x23 = (&xv[i].x)[1], x45 = (&xv[i].x)[2], x67 = (&xv[i].x)[3];
      const uint32_t x04 = __byte_perm(x01, x45, 0x5410), x15 = __byte_perm(x01, x45, 0x7632);
      const uint32_t x26 = __byte_perm(x23, x67, 0x5410), x37 = __byte_perm(x23, x67, 0x7632);
      mma(sum, a[0][0], a[1][0], a[0][1], a[1][1], x04, x15);
      mma(sum, a[0][2], a[1][2], a[0][3], a[1][3], x26, x37);
    }
  } else {
    uint4 xv[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) xv[i] = live ? load_x(xrow + i * 8) : make_uint4(0, 0, 0, 0);
    float zf[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) zf[r] = 8388608.0f + static_cast<float>(l.z[r]);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      // Bytes e0..e3 of word i (columns i * 4 + 0..3) -> bf16 pairs (e0, e1), (e2, e3) through f32.
      uint32_t a[2][2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const uint32_t wd = ((r == 0 ? (&l.w[0].x)[i] : (&l.w[1].x)[i])) ^ p.sign_xor;
        float f[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          f[j] = __uint_as_float(__byte_perm(wd, 0x4B000000u, 0x7650 + j)) - zf[r];
          if constexpr (kFold) f[j] *= l.s[r];
        }
        a[r][0] = pack_bf16x2(f[0], f[1]);
        a[r][1] = pack_bf16x2(f[2], f[3]);
      }
      const uint32_t x01 = (&xv[i / 2].x)[(i % 2) * 2], x23 = (&xv[i / 2].x)[(i % 2) * 2 + 1];
      mma(sum, a[0][0], a[1][0], a[0][1], a[1][1], x01, x23);
    }
  }
  if constexpr (!kFold) {
    acc[0] = fmaf(d[0], l.s[0], acc[0]);
    acc[1] = fmaf(d[1], l.s[0], acc[1]);
    acc[2] = fmaf(d[2], l.s[1], acc[2]);
    acc[3] = fmaf(d[3], l.s[1], acc[3]);
  }
}

// grid: ceil(n / 16) CTAs of 8 warps; see quant_linear.h.
template <int kBits, bool kFold, int kMinBlocks>
__global__ void __launch_bounds__(kThreads, kMinBlocks) quant_gemv_kernel(Params p) {
  using G = Geometry<kBits>;
  __shared__ float red[kWarps][kTileRows][kTileTokens];
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const int g = lane / 4, t = lane % 4;
  const int n0 = static_cast<int>(blockIdx.x) * kTileRows;
  const int row[2] = {min(n0 + g, p.n - 1), min(n0 + g + 8, p.n - 1)};
  const int steps = (p.k + G::kStep - 1) / G::kStep;

  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  StepLoad l[kBatch];
  int s = warp;
  // The first batch's weights are requested before pdl_wait() (PDL launches: they do not depend on earlier
  // kernels), x only after it; the next kernel may launch once every CTA got here (pdl.cuh).
#pragma unroll
  for (int u = 0; u < kBatch; ++u)
    if (s + u * kWarps < steps) load_step<kBits>(p, row, s + u * kWarps, t, l[u]);
  pdl_release();
  pdl_wait();
  while (s < steps) {
#pragma unroll
    for (int u = 0; u < kBatch; ++u)
      if (s + u * kWarps < steps) compute_step<kBits, kFold>(p, l[u], s + u * kWarps, g, t, acc);
    s += kBatch * kWarps;
    if (s >= steps) break;
#pragma unroll
    for (int u = 0; u < kBatch; ++u)
      if (s + u * kWarps < steps) load_step<kBits>(p, row, s + u * kWarps, t, l[u]);
  }
  // C fragment: acc[0], acc[1] = (row g, tokens 2t, 2t + 1); acc[2], acc[3] = (row g + 8, same tokens).
  red[warp][g][2 * t] = acc[0];
  red[warp][g][2 * t + 1] = acc[1];
  red[warp][g + 8][2 * t] = acc[2];
  red[warp][g + 8][2 * t + 1] = acc[3];
  __syncthreads();
  const int tid = static_cast<int>(threadIdx.x);
  if (tid < kTileRows * kTileTokens) {
    const int r = tid % kTileRows, tok = tid / kTileRows, n = n0 + r;
    if (tok < p.m && n < p.n) {
      float v = 0.f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) v += red[w][r][tok];
      if (p.bias) v += __bfloat162float(p.bias[n]);
      const size_t i = static_cast<size_t>(tok) * p.n + n;
      if (p.y_f32)
        static_cast<float*>(p.y)[i] = v;
      else
        static_cast<__nv_bfloat16*>(p.y)[i] = __float2bfloat16(v);
    }
  }
}

// One thread per weight element (a fallback and the m > 8 path: bandwidth of the bf16 writes).
__global__ void dequantize_kernel(QuantWeight w, int G, __nv_bfloat16* dst) {
  const size_t total = static_cast<size_t>(w.n) * w.k;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const int row = static_cast<int>(i / w.k), col = static_cast<int>(i % w.k);
    const int gi = w.g_idx ? __ldg(w.g_idx + col) : col / w.group_size;
    const size_t si = static_cast<size_t>(row) * G + gi;
    int v, z;
    if (w.bits == 4) {
      const uint8_t b = w.w[static_cast<size_t>(row) * (w.k / 2) + col / 2];
      v = (col & 1) ? b >> 4 : b & 15;
      z = w.zeros ? w.zeros[si] : 8;
    } else if (w.is_signed) {
      v = static_cast<int8_t>(w.w[i]);
      z = 0;
    } else {
      v = w.w[i];
      z = w.zeros ? w.zeros[si] : 128;
    }
    dst[i] = __float2bfloat16(w.scales[si] * static_cast<float>(v - z));
  }
}

// The common layout (no g_idx, k % 8 == 0, group % 8 == 0): one thread per 8 consecutive weights of a row
// (4 bytes of int4 or 8 of int8 in, one 16-byte bf16 vector out, one scale / zero lookup). The scalar kernel
// above measured 117 us for the 6144 x 4096 int4 weight (25 M elements), ~8x its bytes' bandwidth time.
__global__ void dequantize8_kernel(QuantWeight w, int G, __nv_bfloat16* dst) {
  const int chunks = w.k / 8;
  const size_t total = static_cast<size_t>(w.n) * chunks;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const int row = static_cast<int>(i / chunks), col = static_cast<int>(i % chunks) * 8;
    const size_t si = static_cast<size_t>(row) * G + col / w.group_size;
    const float s = __ldg(w.scales + si);
    int v[8];
    int z;
    if (w.bits == 4) {
      const uint32_t b = __ldg(reinterpret_cast<const uint32_t*>(w.w + static_cast<size_t>(row) * (w.k / 2) + col / 2));
#pragma unroll
      for (int j = 0; j < 8; ++j) v[j] = (b >> (4 * j)) & 15;
      z = w.zeros ? __ldg(w.zeros + si) : 8;
    } else {
      const uint2 b = __ldg(reinterpret_cast<const uint2*>(w.w + static_cast<size_t>(row) * w.k + col));
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const uint32_t byte = ((j < 4 ? b.x : b.y) >> (8 * (j % 4))) & 0xff;
        v[j] = w.is_signed ? static_cast<int>(static_cast<int8_t>(byte)) : static_cast<int>(byte);
      }
      z = w.is_signed ? 0 : (w.zeros ? __ldg(w.zeros + si) : 128);
    }
    uint4 out;
    uint32_t* o = &out.x;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const __nv_bfloat162 h = __floats2bfloat162_rn(s * static_cast<float>(v[2 * j] - z), s * static_cast<float>(v[2 * j + 1] - z));
      o[j] = *reinterpret_cast<const uint32_t*>(&h);
    }
    *reinterpret_cast<uint4*>(dst + static_cast<size_t>(row) * w.k + col) = out;
  }
}

bool fold_scale(const QuantWeight& w) {
  const int step = w.bits == 4 ? 128 : 64;
  return w.group_size % step != 0;
}

}  // namespace

std::string describe(const QuantWeight& w) {
  char buf[96];
  if (w.is_signed)
    std::snprintf(buf, sizeof(buf), "int8-channel [%d, %d]", w.n, w.k);
  else
    std::snprintf(buf, sizeof(buf), "int%d g%d%s%s [%d, %d]", w.bits, w.group_size, w.zeros ? " zp" : "",
                  w.g_idx ? " g_idx" : "", w.n, w.k);
  return buf;
}

bool quant_gemv_supports(const QuantWeight& w) {
  if (w.bits != 4 && w.bits != 8) return false;
  const int lane_cols = w.bits == 4 ? 32 : 16;  // a lane's columns of a step: all in k or none
  if (w.n < 1 || w.k < lane_cols || w.k % lane_cols != 0 || w.g_idx != nullptr) return false;
  if (w.is_signed) return w.bits == 8 && w.group_size == w.k && w.zeros == nullptr;
  return w.group_size >= 32 && w.group_size % 32 == 0;
}

void launch_quant_gemv(const QuantLinearArgs& a, cudaStream_t stream, QuantGemvConfig config) {
  XI_CHECK(config.ctas_per_sm == 2 || config.ctas_per_sm == 3) << "quant GEMV: ctas_per_sm " << config.ctas_per_sm;
  const QuantWeight& w = a.w;
  XI_CHECK(quant_gemv_supports(w)) << "quant GEMV: unsupported weight " << describe(w);
  XI_CHECK(a.m >= 1) << "quant GEMV: m " << a.m;
  XI_CHECK(reinterpret_cast<uintptr_t>(a.x) % 16 == 0 && reinterpret_cast<uintptr_t>(w.w) % 16 == 0)
      << "quant GEMV: x and the weight must be 16-byte aligned";
  Params p{};
  p.w = w.w;
  p.scales = w.scales;
  p.zeros = w.zeros;
  p.bias = a.bias;
  p.y_f32 = a.y_f32;
  p.n = w.n;
  p.k = w.k;
  p.group = w.group_size;
  p.G = w.groups();
  p.sign_xor = w.is_signed ? 0x80808080u : 0u;
  p.sym_zero = w.bits == 4 ? 8 : 128;
  const bool fold = fold_scale(w);
  const dim3 grid((w.n + kTileRows - 1) / kTileRows);
  const size_t y_row = static_cast<size_t>(w.n) * (a.y_f32 ? 4 : 2);
  for (int m0 = 0; m0 < a.m; m0 += kTileTokens) {
    p.x = a.x + static_cast<size_t>(m0) * w.k;
    p.y = static_cast<char*>(a.y) + m0 * y_row;
    p.m = std::min(kTileTokens, a.m - m0);
    auto launch = [&](auto bits, auto fold_c) {
      constexpr int kB = decltype(bits)::value;
      constexpr bool kF = decltype(fold_c)::value;
      auto* kernel = config.ctas_per_sm == 3 ? quant_gemv_kernel<kB, kF, 3> : quant_gemv_kernel<kB, kF, 2>;
      if (config.pdl)
        launch_pdl(kernel, grid, dim3(kThreads), 0, stream, p);
      else
        kernel<<<grid, kThreads, 0, stream>>>(p);
    };
    using T = std::true_type;
    using F = std::false_type;
    if (w.bits == 4)
      fold ? launch(std::integral_constant<int, 4>{}, T{}) : launch(std::integral_constant<int, 4>{}, F{});
    else
      fold ? launch(std::integral_constant<int, 8>{}, T{}) : launch(std::integral_constant<int, 8>{}, F{});
    XI_CUDA_CHECK_LAUNCH();
  }
}

void launch_dequantize_weight(const QuantWeight& w, __nv_bfloat16* dst, cudaStream_t stream) {
  XI_CHECK(w.bits == 4 || w.bits == 8) << "dequantize: bits " << w.bits;
  XI_CHECK(w.bits == 8 || w.k % 2 == 0) << "dequantize: int4 needs an even k, got " << describe(w);
  const bool vec = w.g_idx == nullptr && w.k % 8 == 0 && w.group_size % 8 == 0 &&
                   reinterpret_cast<uintptr_t>(w.w) % 8 == 0 && reinterpret_cast<uintptr_t>(dst) % 16 == 0;
  const size_t total = static_cast<size_t>(w.n) * w.k / (vec ? 8 : 1);
  const unsigned blocks = static_cast<unsigned>(std::min<size_t>((total + 255) / 256, 132 * 64));
  if (vec)
    dequantize8_kernel<<<blocks, 256, 0, stream>>>(w, w.groups(), dst);
  else
    dequantize_kernel<<<blocks, 256, 0, stream>>>(w, w.groups(), dst);
  XI_CUDA_CHECK_LAUNCH();
}

}  // namespace xinfer::cuda
