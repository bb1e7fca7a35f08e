// The weight-only quantized GEMV and the weight dequantization kernel (quant_linear.h).
#include <algorithm>
#include <cstdio>
#include <type_traits>

#include "xinfer/backend/cuda/cuda_check.h"
#include "xinfer/backend/cuda/kernels/gemm/quant_gemv_math.cuh"
#include "xinfer/backend/cuda/kernels/gemm/quant_linear.h"
#include "xinfer/backend/cuda/kernels/pdl.cuh"

namespace xinfer::cuda {
using namespace quant_gemv;
namespace {

// Steps a warp loads before it computes any of them: 4 x 2 rows x 16 bytes = 128 bytes per lane in flight
// (a first version kept 2 steps in flight and double-buffered them in registers: 38% of the int4 roofline
// at batch 1, latency-bound).
constexpr int kBatch = 4;
constexpr int kMaxSumSteps = 512;  // kSumX: k up to 65536 (int4) / 32768 (int8)

template <Kind kKind>
__device__ __forceinline__ void load_step(const Params& p, const int (&row)[2], int step, int t, StepLoad& l) {
  using G = Geometry<kKind>;
  const int col = lane_col<kKind>(step, t);
  const bool in_k = col < p.k;
  const int gi = lane_group<kKind>(p, step, col);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const size_t rb = static_cast<size_t>(row[r]) * G::row_bytes(p.k);
    l.w[r] = in_k ? load_weights(p.w + rb + (kKind == Kind::kInt4 ? col / 2 : col)) : make_uint4(0, 0, 0, 0);
    const size_t si = static_cast<size_t>(row[r]) * p.G + gi;
    l.s[r] = __ldg(p.scales + si);
    l.z[r] = p.zeros ? static_cast<int>(__ldg(p.zeros + si)) : p.sym_zero;
  }
}

// grid: tile_count(n) CTAs of 8 warps, or half that (kWide: 32 rows per CTA, each lane's 4 rows g, g + 8,
// g + 16, g + 24 share one load of x per step: two mma tiles per x fragment); see quant_linear.h.
// kNormed: x = rms_norm(residual) * norm_weight on the way in (QuantGemvFusion).
// kSumX: compute_step_sum_x (the zero point and the magic taken off with x's per-step column sums, computed
// by the CTA after pdl_wait() into sx[step][token]; at most kMaxSumSteps steps).
// kMath: 0 compute_step; 1 (kSumX) compute_step_sum_x; 2 (f16_x) compute_step_int8_f16.
// kTok: token tiles of 8 rows of x per launch (2, QuantGemvConfig::tokens16: rows 8..15 through the same
// weight fragments; the plain kernel only).
template <Kind kKind, bool kFold, int kMinBlocks, bool kNormed, bool kWide, int kMath, int kTok = 1>
__global__ void __launch_bounds__(kThreads, kMinBlocks) quant_gemv_kernel(Params p) {
  using G = Geometry<kKind>;
  constexpr bool kSumX = kMath == 1;
  static_assert(kMath == 0 || (!kFold && !kNormed), "sum_x / f16_x: unfolded scales, x as given");
  static_assert(kMath != 2 || kKind == Kind::kInt8, "f16_x: int8 weights");
  static_assert(kTok == 1 || (kMath == 0 && !kNormed), "two token tiles: the plain kernel");
  constexpr int kHalves = kWide ? 2 : 1;             // 16-row tiles per CTA
  constexpr int kSteps = kWide ? kBatch / 2 : kBatch;  // steps in flight per lane (same bytes either way)
  __shared__ float red[kHalves * kTok][kWarps][kTileRows][kTileTokens];
  __shared__ float ss_red[kHalves][kWarps][kTileTokens];
  __shared__ __align__(8) float sx[kSumX ? kMaxSumSteps : 1][kTileTokens];
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const int g = lane / 4, t = lane % 4;
  // The plain kernels (no norm) take no fusion: the SwiGLU and add_to_y branches are compiled out of them
  // (quant_gemv_fusion_supports; the pipelined kernels take add_to_y).
  constexpr bool kFusion = kNormed;
  const int tiles = tile_count(p.n, kFusion && p.swiglu_out != nullptr);
  int tile[kHalves], row[kHalves][2];
#pragma unroll
  for (int h = 0; h < kHalves; ++h) {
    tile[h] = min(static_cast<int>(blockIdx.x) * kHalves + h, tiles - 1);  // a missing last half: a copy of the
    row[h][0] = tile_row<kFusion>(p, tile[h], g, 0);                       // previous tile, not stored
    row[h][1] = tile_row<kFusion>(p, tile[h], g, 1);
  }
  const int steps = (p.k + G::kStep - 1) / G::kStep;

  float acc[kHalves][kTok][4] = {};
  float ss = 0.f;
  StepLoad l[kSteps][kHalves];
  int s = warp;
  // The first batch's weights are requested before pdl_wait() (PDL launches: they do not depend on earlier
  // kernels), x only after it; the next kernel may launch once every CTA got here (pdl.cuh).
#pragma unroll
  for (int u = 0; u < kSteps; ++u)
    if (s + u * kWarps < steps)
#pragma unroll
      for (int h = 0; h < kHalves; ++h) load_step<kKind>(p, row[h], s + u * kWarps, t, l[u][h]);
  pdl_release();
  pdl_wait();
  if constexpr (kSumX) {
    // sx[step][token] = sum of x[token] over the step's columns: 8 columns per thread, the kStep / 8 threads
    // of a step (consecutive lanes) reduced by shuffles in a fixed order; tokens >= m get 0.
    constexpr int kChunks = G::kStep / 8;
    const int tid = static_cast<int>(threadIdx.x), span = steps * G::kStep;
    for (int tok = 0; tok < kTileTokens; ++tok)
      for (int base = 0; base < span; base += kThreads * 8) {
        const int col = base + tid * 8;
        float v = 0.f;
        if (tok < p.m && col < p.k) {
          const uint4 c = load_x16(p.x + static_cast<size_t>(tok) * p.k + col);
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const uint32_t w = (&c.x)[j];
            v += __uint_as_float(w << 16) + __uint_as_float(w & 0xffff0000u);
          }
        }
#pragma unroll
        for (int o = 1; o < kChunks; o <<= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (lane % kChunks == 0 && col < span) sx[col / G::kStep][tok] = v;
      }
    __syncthreads();
  }
  while (s < steps) {
#pragma unroll
    for (int u = 0; u < kSteps; ++u)
      if (s + u * kWarps < steps) {
        uint4 xv[kTok][4];
#pragma unroll
        for (int tt = 0; tt < kTok; ++tt) load_x_step<kKind>(p, s + u * kWarps, g + 8 * tt, t, xv[tt]);
        if constexpr (kNormed) normalize_x_step<kKind>(p, s + u * kWarps, t, xv[0], ss);
        if constexpr (kMath == 2) {
          uint32_t xh[8];
#pragma unroll
          for (int j = 0; j < 8; ++j) xh[j] = bf16x2_to_f16x2((&xv[0][j / 4].x)[j % 4]);
#pragma unroll
          for (int h = 0; h < kHalves; ++h) compute_step_int8_f16(p, l[u][h], xh, acc[h][0]);
        } else if constexpr (kSumX) {
          const float2 sxs = *reinterpret_cast<const float2*>(&sx[s + u * kWarps][2 * t]);
#pragma unroll
          for (int h = 0; h < kHalves; ++h) compute_step_sum_x<kKind>(p, l[u][h], xv[0], sxs, acc[h][0]);
        } else {
#pragma unroll
          for (int h = 0; h < kHalves; ++h) compute_step<kKind, kFold, kTok>(p, l[u][h], xv, acc[h]);
        }
      }
    s += kSteps * kWarps;
    if (s >= steps) break;
#pragma unroll
    for (int u = 0; u < kSteps; ++u)
      if (s + u * kWarps < steps)
#pragma unroll
        for (int h = 0; h < kHalves; ++h) load_step<kKind>(p, row[h], s + u * kWarps, t, l[u][h]);
  }
#pragma unroll
  for (int h = 0; h < kHalves; ++h) {
    if (h > 0 && static_cast<int>(blockIdx.x) * kHalves + h >= tiles) break;  // uniform across the CTA
#pragma unroll
    for (int tt = 0; tt < kTok; ++tt)
      finish_tile<kKind, kNormed, kFusion>(p, red[h * kTok + tt], ss_red[h], tile[h], warp, lane, acc[h][tt],
                                           ss, 8 * tt);
  }
}

// One thread per weight element (a fallback and the m > 8 path: bandwidth of the bf16 writes).
__global__ void dequantize_kernel(QuantWeight w, int G, __nv_bfloat16* dst, const int32_t* col_perm) {
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
    const float s = w.scales[si];
    dst[col_perm ? static_cast<size_t>(row) * w.k + col_perm[col] : i] =
        __float2bfloat16(w.mins ? fmaf(s, static_cast<float>(v), w.mins[si]) : s * static_cast<float>(v - z));
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
    const float mn = w.mins ? __ldg(w.mins + si) : 0.f;
    auto value = [&](int j) {  // scale * (v - z), or scale * v + min (mins: GGUF Q4_1's arithmetic)
      return w.mins ? fmaf(s, static_cast<float>(v[j]), mn) : s * static_cast<float>(v[j] - z);
    };
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const __nv_bfloat162 h = __floats2bfloat162_rn(value(2 * j), value(2 * j + 1));
      o[j] = *reinterpret_cast<const uint32_t*>(&h);
    }
    *reinterpret_cast<uint4*>(dst + static_cast<size_t>(row) * w.k + col) = out;
  }
}

// A step's lanes share one group's scale unless groups are shorter than a step and the row has more than one
// (per channel: one group of k columns at any k; session 40 found k = 1040 folded, 1.6e-3 off the oracle).
bool fold_scale(const QuantWeight& w) {
  const int step = w.bits == 4 ? 128 : 64;
  return w.group_size < w.k && w.group_size % step != 0;
}

}  // namespace

std::string describe(const QuantWeight& w) {
  char buf[96];
  if (w.is_signed)
    std::snprintf(buf, sizeof(buf), "int8-channel [%d, %d]", w.n, w.k);
  else
    std::snprintf(buf, sizeof(buf), "int%d g%d%s%s%s [%d, %d]", w.bits, w.group_size, w.zeros ? " zp" : "",
                  w.mins ? " min" : "", w.g_idx ? " g_idx" : "", w.n, w.k);
  return buf;
}

bool quant_gemv_supports(const QuantWeight& w) {
  if (w.bits != 4 && w.bits != 8) return false;
  const int lane_cols = w.bits == 4 ? 32 : 16;  // a lane's columns of a step: all in k or none
  if (w.n < 1 || w.k < lane_cols || w.k % lane_cols != 0 || w.g_idx != nullptr || w.mins != nullptr)
    return false;
  if (w.is_signed) return w.bits == 8 && w.group_size == w.k && w.zeros == nullptr;
  // Each lane's columns of a step lie in one group (groups smaller than a step fold their scale into the
  // weights): int4 groups of 32, int8 groups of 16 (GGUF Q6_K repacked) and their multiples.
  return w.group_size >= lane_cols && w.group_size % lane_cols == 0;
}

std::string to_string(const QuantGemvConfig& c) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%s%d%s%s%s %d ctas/sm%s%s", c.stages > 0 ? "pipe" : "batch", c.stages,
                c.wide ? " wide" : "",
                c.sum_x   ? " sumx"
                : c.f16_x ? " f16x"
                          : "",
                c.tokens16 ? " x16" : "", c.ctas_per_sm, c.persistent ? " persistent" : "",
                c.pdl ? " pdl" : "");
  return buf;
}

QuantGemvConfig quant_gemv_default_config(const QuantWeight& w, bool pdl) {
  // The batch schedule: the pipelined one measured slower on every int shape of the 8B model (H200,
  // cudaq-1: int4 gate_up 35.7 vs 30.5 us, int8 o 10.5 vs 7.3 us; the int GEMVs are bound by their
  // dequantization instructions, not by the loads in flight). Per shape (cudaq-2 / cudaq-3, m = 1 and 8):
  // wide tiles for n >= 6144 with k <= 4096 (gate_up: int4 27.3 vs 31.8 us, int8 37.7 vs 45.1 us; qkv:
  // int4 7.6 vs 8.2 us at 3 CTAs per SM, int8 10.7 vs 11.5 us), 2 CTAs per SM otherwise (o, down: wide
  // tiles leave SMs idle there, 128 CTAs for n = 4096).
  // int8: 16 rows of x per launch (H100, session 36: see docs/PERF.md).
  QuantGemvConfig c;
  c.pdl = pdl;
  c.wide = w.n >= 6144 && w.k <= 4096;
  c.tokens16 = w.bits == 8;
  return c;
}

QuantGemvConfig fp8_gemv_default_config(int n, int k, bool pdl) {
  // H200, cudaq-1 (m = 1): 8 stages for n <= 4096 (o 7.2 vs 7.9 us, down 22.9 vs 25.0 us), 4 stages at 2
  // CTAs per SM for the wide ones (qkv 8.8 vs 11.4 us, gate_up 32.0 vs 35.5 us).
  // 16 rows of x per launch (H100, session 36: see docs/PERF.md).
  QuantGemvConfig c;
  c.pdl = pdl;
  c.stages = n <= 4096 ? 8 : 4;
  c.ctas_per_sm = 2;
  c.tokens16 = true;
  (void)k;
  return c;
}

QuantGemvConfig w8a8_int8_gemv_default_config(int n, int k, int m, bool pdl) {
  // H200, int8-1: the FP8 GEMV's choice, except one row on the large weights, where the persistent 8-stage
  // ring was best (m = 1: gate_up 30.1 vs 33.2 us, down 21.5 vs 22.0 us; at m = 8 gate_up 43.2 vs 34.5 us,
  // and qkv at m = 1 10.5 vs 8.2 us, hence the limits).
  QuantGemvConfig c = fp8_gemv_default_config(n, k, pdl);
  if (m == 1 && (n >= 16384 || k >= 8192)) {
    c.stages = 8;
    c.ctas_per_sm = 2;
    c.persistent = true;
  }
  return c;
}

namespace {

Params base_params(const QuantWeight& w, const __nv_bfloat16* bias, bool y_f32) {
  Params p{};
  p.w = w.w;
  p.scales = w.scales;
  p.zeros = w.zeros;
  p.bias = bias;
  p.y_f32 = y_f32;
  p.n = w.n;
  p.ldy = w.n;
  p.k = w.k;
  p.group = w.group_size;
  p.G = w.groups();
  p.sign_xor = w.is_signed ? 0x80808080u : 0u;
  p.sym_zero = w.bits == 4 ? 8 : 128;
  return p;
}

// One launch of <= 8 rows of x (16 with tokens16) in the configured schedule.
void launch_rows(Kind kind, bool fold, const Params& p, const QuantGemvConfig& config, cudaStream_t stream) {
  if (config.stages > 0) return launch_pipelined(kind, fold, p, config, stream);
  XI_CHECK(!is_w8a8(kind)) << "quant GEMV: the W8A8 GEMVs run the pipelined schedule only (stages 4 or 8)";
  const int tiles = tile_count(p.n, p.swiglu_out != nullptr);
  const dim3 grid(config.wide ? (tiles + 1) / 2 : tiles);
  const bool normed = p.norm_weight != nullptr;
  auto launch = [&](auto kind_c, auto fold_c) {
    constexpr Kind kK = decltype(kind_c)::value;
    constexpr bool kF = decltype(fold_c)::value;
    void (*kernel)(Params) = nullptr;
    if constexpr (!kF) {
      if (config.sum_x) {
        XI_CHECK(!normed) << "quant GEMV: sum_x with the folded norm is not compiled";
        if (config.wide)
          kernel = quant_gemv_kernel<kK, false, 2, false, true, 1>;
        else if (config.ctas_per_sm == 3)
          kernel = quant_gemv_kernel<kK, false, 3, false, false, 1>;
        else
          kernel = quant_gemv_kernel<kK, false, 2, false, false, 1>;
      }
      if constexpr (kK == Kind::kInt8) {
        if (config.f16_x) {
          XI_CHECK(!normed) << "quant GEMV: f16_x with the folded norm is not compiled";
          if (config.wide)
            kernel = quant_gemv_kernel<kK, false, 2, false, true, 2>;
          else if (config.ctas_per_sm == 3)
            kernel = quant_gemv_kernel<kK, false, 3, false, false, 2>;
          else
            kernel = quant_gemv_kernel<kK, false, 2, false, false, 2>;
        }
      }
    }
    XI_CHECK(kernel != nullptr || (!config.sum_x && !config.f16_x))
        << "quant GEMV: sum_x needs unfolded scales (group % step == 0); f16_x unfolded int8";
    if constexpr (kK == Kind::kInt8) {
      if (config.tokens16 && p.m > kTileTokens)
        kernel = config.wide ? quant_gemv_kernel<kK, kF, 2, false, true, 0, 2>
                             : quant_gemv_kernel<kK, kF, 2, false, false, 0, 2>;
    }
    if (kernel == nullptr) {
      if (config.wide)
        kernel = normed ? quant_gemv_kernel<kK, kF, 2, true, true, 0> : quant_gemv_kernel<kK, kF, 2, false, true, 0>;
      else if (config.ctas_per_sm == 3)
        kernel = normed ? quant_gemv_kernel<kK, kF, 3, true, false, 0> : quant_gemv_kernel<kK, kF, 3, false, false, 0>;
      else
        kernel = normed ? quant_gemv_kernel<kK, kF, 2, true, false, 0> : quant_gemv_kernel<kK, kF, 2, false, false, 0>;
    }
    if (config.pdl)
      launch_pdl(kernel, grid, dim3(kThreads), 0, stream, p);
    else
      kernel<<<grid, kThreads, 0, stream>>>(p);
  };
  using T = std::true_type;
  using F = std::false_type;
  using K4 = std::integral_constant<Kind, Kind::kInt4>;
  using K8 = std::integral_constant<Kind, Kind::kInt8>;
  if (kind == Kind::kInt4)
    fold ? launch(K4{}, T{}) : launch(K4{}, F{});
  else
    fold ? launch(K8{}, T{}) : launch(K8{}, F{});
  XI_CUDA_CHECK_LAUNCH();
}

void check_config(const QuantGemvConfig& c) {
  XI_CHECK(c.ctas_per_sm == 2 || c.ctas_per_sm == 3) << "quant GEMV: ctas_per_sm " << c.ctas_per_sm;
  XI_CHECK(c.stages == 0 || c.stages == 4 || c.stages == 8) << "quant GEMV: stages " << c.stages;
  XI_CHECK(!c.wide || (c.stages == 0 && c.ctas_per_sm == 2)) << "quant GEMV: wide tiles: batch schedule, 2 CTAs per SM";
  XI_CHECK(!c.sum_x || c.stages == 0) << "quant GEMV: sum_x: batch schedule only";
  XI_CHECK(!c.f16_x || (c.stages == 0 && !c.sum_x)) << "quant GEMV: f16_x: batch schedule only, not with sum_x";
  XI_CHECK(!c.tokens16 || (c.ctas_per_sm == 2 && !c.sum_x && !c.f16_x))
      << "quant GEMV: tokens16: 2 CTAs per SM, not with sum_x / f16_x";
}

}  // namespace

bool quant_gemv_fusion_supports(const QuantWeight& w, int m, const QuantGemvFusion& f, const QuantGemvConfig& c) {
  const bool any = f.add_to_y || f.norm_weight || f.swiglu_out;
  if (!any) return true;
  if (c.tokens16) return false;  // fusion takes one token tile
  if (m < 1 || m > kTileTokens || (f.add_to_y && f.norm_weight)) return false;
  if (f.add_to_y && c.stages == 0) return false;  // the plain batch kernels have no fused epilogue
  if (f.swiglu_out && (f.norm_weight == nullptr || w.n % 2 != 0)) return false;
  if (f.norm_weight && c.stages > 0 && !((c.stages == 4 && c.ctas_per_sm == 3) || (c.stages == 8 && c.ctas_per_sm == 2)))
    return false;
  return f.norm_weight == nullptr || reinterpret_cast<uintptr_t>(f.norm_weight) % 16 == 0;
}

void launch_quant_gemv(const QuantLinearArgs& a, cudaStream_t stream, QuantGemvConfig config,
                       const QuantGemvFusion& fusion) {
  check_config(config);
  const QuantWeight& w = a.w;
  XI_CHECK(quant_gemv_supports(w)) << "quant GEMV: unsupported weight " << describe(w);
  XI_CHECK(a.m >= 1) << "quant GEMV: m " << a.m;
  XI_CHECK(reinterpret_cast<uintptr_t>(a.x) % 16 == 0 && reinterpret_cast<uintptr_t>(w.w) % 16 == 0)
      << "quant GEMV: x and the weight must be 16-byte aligned";
  XI_CHECK(!config.sum_x || (!fold_scale(w) && (w.k + (w.bits == 4 ? 127 : 63)) / (w.bits == 4 ? 128 : 64) <= kMaxSumSteps))
      << "quant GEMV: sum_x needs unfolded scales and at most " << kMaxSumSteps << " steps (" << describe(w) << ")";
  XI_CHECK(!config.f16_x || (w.bits == 8 && !fold_scale(w)))
      << "quant GEMV: f16_x needs int8 with unfolded scales (" << describe(w) << ")";
  XI_CHECK(config.stages == 0 || w.zeros == nullptr || reinterpret_cast<uintptr_t>(w.zeros) % 4 == 0)
      << "quant GEMV: the pipelined schedule needs 4-byte aligned zero points (" << describe(w) << ")";
  XI_CHECK(quant_gemv_fusion_supports(w, a.m, fusion, config) && (!a.y_f32 || (!fusion.add_to_y && !fusion.norm_weight)))
      << "quant GEMV: unsupported fusion for " << describe(w) << " at m " << a.m << ", " << to_string(config)
      << " (one fusion, bf16 y, m <= 8, pipelined; the norm at 4 x 3 or 8 x 2; SwiGLU with the norm, even n)";
  Params p = base_params(w, a.bias, a.y_f32);
  p.add_to_y = fusion.add_to_y;
  p.norm_weight = fusion.norm_weight;
  p.eps = fusion.eps;
  p.swiglu_out = fusion.swiglu_out;
  const Kind kind = w.bits == 4 ? Kind::kInt4 : Kind::kInt8;
  XI_CHECK(!config.tokens16 || (kind == Kind::kInt8 && config.stages == 0 && !fusion.add_to_y &&
                                !fusion.norm_weight && !fusion.swiglu_out))
      << "quant GEMV: tokens16 takes int8 weights in the batch schedule without fusion (" << describe(w)
      << ")";
  XI_CHECK(a.ldy == 0 || (a.ldy >= w.n && !fusion.add_to_y && !fusion.swiglu_out))
      << "quant GEMV: y row stride " << a.ldy << " for " << describe(w)
      << " (>= n, not with add_to_y / SwiGLU)";
  if (a.ldy > 0) p.ldy = a.ldy;
  const bool fold = fold_scale(w);
  const size_t y_row = static_cast<size_t>(p.ldy) * (a.y_f32 ? 4 : 2);
  const int per_launch = config.tokens16 ? 2 * kTileTokens : kTileTokens;
  for (int m0 = 0; m0 < a.m; m0 += per_launch) {
    p.x = a.x + static_cast<size_t>(m0) * w.k;
    p.y = static_cast<char*>(a.y) + m0 * y_row;
    p.m = std::min(per_launch, a.m - m0);
    launch_rows(kind, fold, p, config, stream);
  }
}

bool fp8_gemv_supports(int n, int k) { return n >= 1 && k >= 16 && k % 16 == 0; }

namespace {

void launch_w8a8_gemv(Kind kind, const Fp8GemvArgs& a, cudaStream_t stream, QuantGemvConfig config) {
  const char* what = kind == Kind::kFp8 ? "FP8 GEMV" : "W8A8-INT8 GEMV";
  check_config(config);
  XI_CHECK(config.stages > 0) << what << ": the pipelined schedule only (stages 4 or 8)";
  XI_CHECK(fp8_gemv_supports(a.n, a.k)) << what << ": unsupported [" << a.n << ", " << a.k << "] (k % 16 == 0)";
  XI_CHECK(a.m >= 1) << what << ": m " << a.m;
  XI_CHECK(kind == Kind::kFp8 || a.per_channel) << what << ": per-channel weight scales only";
  XI_CHECK(reinterpret_cast<uintptr_t>(a.xq) % 16 == 0 && reinterpret_cast<uintptr_t>(a.w) % 16 == 0)
      << what << ": x and the weight must be 16-byte aligned";
  Params p{};
  p.w = a.w;
  p.scales = a.w_scales;
  p.per_channel = a.per_channel;
  p.bias = a.bias;
  p.y_f32 = a.y_f32;
  p.n = a.n;
  p.ldy = a.n;
  p.k = a.k;
  p.group = a.k;
  p.G = 1;
  const size_t y_row = static_cast<size_t>(a.n) * (a.y_f32 ? 4 : 2);
  const int per_launch = config.tokens16 ? 2 * kTileTokens : kTileTokens;
  for (int m0 = 0; m0 < a.m; m0 += per_launch) {
    p.xq = a.xq + static_cast<size_t>(m0) * a.k;
    p.xs = a.x_scales + m0;
    p.y = static_cast<char*>(a.y) + m0 * y_row;
    p.m = std::min(per_launch, a.m - m0);
    launch_rows(kind, false, p, config, stream);
  }
}

}  // namespace

void launch_fp8_gemv(const Fp8GemvArgs& a, cudaStream_t stream, QuantGemvConfig config) {
  launch_w8a8_gemv(Kind::kFp8, a, stream, config);
}

void launch_w8a8_int8_gemv(const Fp8GemvArgs& a, cudaStream_t stream, QuantGemvConfig config) {
  launch_w8a8_gemv(Kind::kW8A8Int8, a, stream, config);
}

__global__ void gather_columns_kernel(const __nv_bfloat16* x, const int32_t* perm, int m, int k,
                                      __nv_bfloat16* out) {
  const size_t total = static_cast<size_t>(m) * k;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t r = i / k;
    out[i] = x[r * k + __ldg(perm + i % k)];
  }
}

void launch_gather_columns(const __nv_bfloat16* x, const int32_t* perm, int m, int k, __nv_bfloat16* out,
                           cudaStream_t stream) {
  const size_t total = static_cast<size_t>(m) * k;
  if (total == 0) return;
  const unsigned blocks = static_cast<unsigned>(std::min<size_t>((total + 255) / 256, 132 * 8));
  gather_columns_kernel<<<blocks, 256, 0, stream>>>(x, perm, m, k, out);
  XI_CUDA_CHECK_LAUNCH();
}

void launch_dequantize_weight(const QuantWeight& w, __nv_bfloat16* dst, cudaStream_t stream,
                              const int32_t* col_perm) {
  XI_CHECK(w.bits == 4 || w.bits == 8) << "dequantize: bits " << w.bits;
  XI_CHECK(w.bits == 8 || w.k % 2 == 0) << "dequantize: int4 needs an even k, got " << describe(w);
  const bool vec = w.g_idx == nullptr && col_perm == nullptr && w.k % 8 == 0 && w.group_size % 8 == 0 &&
                   reinterpret_cast<uintptr_t>(w.w) % 8 == 0 && reinterpret_cast<uintptr_t>(dst) % 16 == 0;
  const size_t total = static_cast<size_t>(w.n) * w.k / (vec ? 8 : 1);
  const unsigned blocks = static_cast<unsigned>(std::min<size_t>((total + 255) / 256, 132 * 64));
  if (vec)
    dequantize8_kernel<<<blocks, 256, 0, stream>>>(w, w.groups(), dst);
  else
    dequantize_kernel<<<blocks, 256, 0, stream>>>(w, w.groups(), dst, col_perm);
  XI_CUDA_CHECK_LAUNCH();
}

}  // namespace xinfer::cuda
