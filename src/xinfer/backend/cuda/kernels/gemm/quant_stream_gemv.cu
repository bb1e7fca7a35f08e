// The streaming batch-1 W8A8-FP8 GEMV (quant_stream_gemv.h: schedule, numerics, requirements).
#include "xinfer/backend/cuda/kernels/gemm/quant_stream_gemv.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "xinfer/backend/cuda/cuda_check.h"
#include "xinfer/backend/cuda/kernels/cp_async.cuh"
#include "xinfer/backend/cuda/kernels/device_launch.h"
#include "xinfer/backend/cuda/kernels/gemm/f16_pairs.cuh"
#include "xinfer/backend/cuda/kernels/mbarrier.cuh"
#include "xinfer/backend/cuda/kernels/pdl.cuh"
#include "xinfer/backend/cuda/kernels/quant/activation_quant.cuh"

namespace xinfer::cuda {
namespace {

using f16_pairs::f16x2_sum;
using f16_pairs::fp8_x_pairs;
using f16_pairs::hfma2;
using quant_gemv::e4m3x2_to_f16x2;

constexpr int kThreads = 512;  // 16 warps: the f16 math is latency-bound at 8 warps per SM (session 21)
constexpr int kWarps = kThreads / 32;
constexpr int kUnit = 16;                 // bytes (e4m3 columns) of a row per thread and load
constexpr int kMaxQ = 4;                  // rows per row lane and stage
constexpr int kMaxStages = 16;            // mbarriers
constexpr int kRingBytes = 96 * 1024;     // two CTAs per SM fit (with their per-row arrays)
constexpr int kStageTarget = 32 * 1024;   // bytes per stage where rows allow: fewer barriers per byte
constexpr int kMaxK = 4 * kThreads * kUnit;  // 32768: at most 4 units per thread (kJ)
constexpr int kMaxRowsPerCta = 256;          // 3 KB of per-row scale, bias and sum

// The schedule of one weight shape (host-computed, see the header).
struct Geometry {
  int width;       // threads per row lane: min(k / 16, 256)
  int lanes;       // row lanes: 256 / width
  int units_per;   // units per thread and row: ceil(k / 16 / width)
  int q;           // rows per lane and stage
  int stage_rows;  // lanes * q
  int stage_bytes;
  int stages;      // ring stages
  int rows_cap;    // rows per CTA at most: ceil(n / CTAs)
};

Geometry geometry_of(int k, int n, int ctas) {
  Geometry g{};
  const int units = k / kUnit;
  g.width = std::min(units, kThreads);
  g.lanes = kThreads / g.width;
  g.units_per = (units + g.width - 1) / g.width;
  g.q = std::clamp(kStageTarget / (g.lanes * k), 1, kMaxQ);
  g.stage_rows = g.lanes * g.q;
  g.stage_bytes = g.stage_rows * k;
  g.stages = std::clamp(kRingBytes / g.stage_bytes, 2, kMaxStages);
  g.rows_cap = (n + ctas - 1) / ctas;
  return g;
}

// Dynamic shared memory: the ring, then per row of the CTA its weight scale, bias and dot product (f32 each).
size_t smem_bytes(const Geometry& g) {
  return static_cast<size_t>(g.stages) * g.stage_bytes + 3 * sizeof(float) * static_cast<size_t>(g.rows_cap);
}

struct StreamParams {
  Fp8StreamGemvArgs a;
  Geometry g;
};

// kJ: the compiled bound on units per thread (g.units_per <= kJ); kQuantX: x is bf16, quantized here.
template <int kJ, bool kQuantX>
__global__ void __launch_bounds__(kThreads, 2) fp8_stream_gemv_kernel(StreamParams sp) {
  const Fp8StreamGemvArgs& p = sp.a;
  const Geometry& g = sp.g;
  extern __shared__ __align__(128) uint8_t ring[];
  float* const row_scale = reinterpret_cast<float*>(ring + static_cast<size_t>(g.stages) * g.stage_bytes);
  float* const row_bias = row_scale + g.rows_cap;
  float* const row_dot = row_bias + g.rows_cap;
  __shared__ __align__(8) uint64_t full[kMaxStages];
  __shared__ float red[2][kWarps][kMaxQ];  // per stage: each warp's sum per row (double-buffered)
  __shared__ float amax_red[kWarps];
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const int cta = static_cast<int>(blockIdx.x), ctas = static_cast<int>(gridDim.x);
  const int row_begin = static_cast<int>(static_cast<int64_t>(cta) * p.n / ctas);
  const int row_end = static_cast<int>(static_cast<int64_t>(cta + 1) * p.n / ctas);
  const int total = (row_end - row_begin + g.stage_rows - 1) / g.stage_rows;  // this CTA's stages
  const int units = p.k / kUnit;
  const int row_lane = tid / g.width, col = tid % g.width;
  const bool active = row_lane < g.lanes;  // threads past lanes * width only join the barriers
  auto rows_of = [&](int j) { return min(g.stage_rows, row_end - row_begin - j * g.stage_rows); };
  auto issue = [&](int j) {  // thread 0: stage j of this CTA into its ring slot
    const int b = j % g.stages;
    const uint32_t bytes = static_cast<uint32_t>(rows_of(j)) * static_cast<uint32_t>(p.k);
    const uint32_t bar = smem_u32(&full[b]);
    mbar_arrive_expect_tx(bar, bytes);
    bulk_copy_g2s(smem_u32(ring + static_cast<size_t>(b) * g.stage_bytes),
                  p.w + static_cast<size_t>(row_begin + j * g.stage_rows) * p.k, bytes, bar);
  };

  // The weights depend on no kernel: the first ring of them is queued before the PDL wait.
  if (tid == 0) {
    for (int b = 0; b < g.stages; ++b) mbar_init(smem_u32(&full[b]), 1);
    mbar_init_fence();
    for (int j = 0; j < min(g.stages, total); ++j) issue(j);
  }
  // The rows' scales and biases (weights too) into shared memory: the loop below reads no global memory.
  const int my_rows = row_end - row_begin;
  for (int i = tid; i < my_rows; i += kThreads) {
    row_scale[i] = __ldg(p.w_scales + (p.per_channel ? row_begin + i : 0));
    row_bias[i] = p.bias ? __bfloat162float(p.bias[row_begin + i]) : 0.f;
  }
  __syncthreads();  // the barriers are initialized before any thread waits on them
  pdl_wait();
  pdl_release();  // after the wait: the next GEMV's CTAs come only once this one streams

  // x: the thread's units as f16 pairs times 2^-8 (registers for the whole kernel) and the token's scale.
  uint32_t xp[kJ][8];
  float x_scale;
  if constexpr (kQuantX) {
    uint4 xv[kJ][2];
    float amax = 0.f;
#pragma unroll
    for (int u = 0; u < kJ; ++u) {
      const int c = col + u * g.width;
      const bool live = u < g.units_per && c < units;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        xv[u][h] = live ? __ldg(reinterpret_cast<const uint4*>(p.x + c * kUnit + h * 8)) : make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const uint32_t w = (&xv[u][h].x)[e];
          amax = fmaxf(amax, fmaxf(fabsf(__uint_as_float(w << 16)), fabsf(__uint_as_float(w & 0xffff0000u))));
        }
      }
    }
    x_scale = p.input_scale ? __ldg(p.input_scale)
                            : act_quant::cta_max<kThreads>(amax, amax_red) / act_quant::kFp8Max;
    const float inv = act_quant::inverse_scale(x_scale);
#pragma unroll
    for (int u = 0; u < kJ; ++u)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint2 codes = act_quant::codes8<true>(xv[u][h], inv);
        uint32_t v[4];
        fp8_x_pairs(codes, v);
#pragma unroll
        for (int e = 0; e < 4; ++e) xp[u][4 * h + e] = v[e];
      }
  } else {
    x_scale = __ldg(p.xs);
#pragma unroll
    for (int u = 0; u < kJ; ++u) {
      const int c = col + u * g.width;
      const uint4 codes = (u < g.units_per && c < units) ? __ldg(reinterpret_cast<const uint4*>(p.xq + c * kUnit))
                                                         : make_uint4(0, 0, 0, 0);
      uint32_t v[4];
      fp8_x_pairs(make_uint2(codes.x, codes.y), v);
#pragma unroll
      for (int e = 0; e < 4; ++e) xp[u][e] = v[e];
      fp8_x_pairs(make_uint2(codes.z, codes.w), v);
#pragma unroll
      for (int e = 0; e < 4; ++e) xp[u][4 + e] = v[e];
    }
  }
  for (int j = 0; j < total; ++j) {
    const int b = j % g.stages;
    mbar_wait(smem_u32(&full[b]), static_cast<uint32_t>((j / g.stages) & 1));
    const uint8_t* stage = ring + static_cast<size_t>(b) * g.stage_bytes;
    const int rows = rows_of(j);
    float acc[kMaxQ] = {};
    if (active) {
#pragma unroll
      for (int r = 0; r < kMaxQ; ++r) {
        const int sr = r * g.lanes + row_lane;  // the row within the stage
        if (r >= g.q || sr >= rows) continue;
#pragma unroll
        for (int u = 0; u < kJ; ++u) {
          const int c = col + u * g.width;
          if (u >= g.units_per || c >= units) continue;
          const uint4 wv = *reinterpret_cast<const uint4*>(stage + static_cast<size_t>(sr) * p.k + c * kUnit);
          uint32_t h[2] = {0u, 0u};  // two chains of 4 (columns 0..7, 8..15): half the dependent latency
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const uint32_t wd = (&wv.x)[e];
            h[e / 2] = hfma2(e4m3x2_to_f16x2(wd, false), xp[u][2 * e], h[e / 2]);
            h[e / 2] = hfma2(e4m3x2_to_f16x2(wd, true), xp[u][2 * e + 1], h[e / 2]);
          }
          acc[r] += f16x2_sum(h[0]) + f16x2_sum(h[1]);
        }
      }
    }
    float(&rb)[kWarps][kMaxQ] = red[j & 1];
#pragma unroll
    for (int r = 0; r < kMaxQ; ++r) {
      if (r >= g.q) break;  // uniform
      float v = acc[r];
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
      if (lane == 0) rb[warp][r] = v;
    }
    __syncthreads();  // every thread is done with slot b, and rb is complete
    if (tid == 0 && j + g.stages < total) {
      fence_proxy_async_shared();  // the slot's reads above before the copy that overwrites it
      issue(j + g.stages);
    }
    if (tid < rows) {  // row tid of the stage: lane tid % lanes, its row r = tid / lanes, that lane's warps in order
      const int r = tid / g.lanes, w0 = (tid % g.lanes) * g.width / 32, w1 = w0 + (g.width + 31) / 32;
      float dot = 0.f;
      for (int w = w0; w < w1; ++w) dot += rb[w][r];
      row_dot[j * g.stage_rows + tid] = dot;
    }
  }
  __syncthreads();
  for (int i = tid; i < my_rows; i += kThreads) {
    const float v = row_dot[i] * 256.f * x_scale * row_scale[i] + row_bias[i];
    const int row = row_begin + i;
    if (p.y_f32)
      static_cast<float*>(p.y)[row] = v;
    else
      static_cast<__nv_bfloat16*>(p.y)[row] = __float2bfloat16(v);
  }
}

template <bool kQuantX>
void (*pick_kernel(int units_per))(StreamParams) {
  if (units_per <= 1) return fp8_stream_gemv_kernel<1, kQuantX>;
  if (units_per <= 2) return fp8_stream_gemv_kernel<2, kQuantX>;
  return fp8_stream_gemv_kernel<4, kQuantX>;
}

}  // namespace

bool fp8_stream_gemv_supports(int n, int k, int m) {
  if (m != 1 || n < 1 || k < kUnit || k % kUnit != 0 || k > kMaxK) return false;
  const int units = k / kUnit;
  return units > kThreads || units % 32 == 0;
}

void launch_fp8_stream_gemv(const Fp8StreamGemvArgs& a, cudaStream_t stream, bool pdl) {
  XI_CHECK(fp8_stream_gemv_supports(a.n, a.k, 1))
      << "FP8 stream GEMV: unsupported [" << a.n << ", " << a.k << "] (k % 16 == 0, k <= " << kMaxK
      << ", k % 512 == 0 up to 8192)";
  const void* x = a.x != nullptr ? static_cast<const void*>(a.x) : static_cast<const void*>(a.xq);
  XI_CHECK(x != nullptr && (a.x != nullptr || a.xs != nullptr)) << "FP8 stream GEMV: no x (bf16, or codes and scale)";
  XI_CHECK(reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(a.w) % 16 == 0)
      << "FP8 stream GEMV: x and the weight must be 16-byte aligned";
  // One CTA per SM, more where a CTA would hold more than kMaxRowsPerCta rows.
  const int ctas = std::max(std::min(a.n, sm_count()), (a.n + kMaxRowsPerCta - 1) / kMaxRowsPerCta);
  const StreamParams sp{a, geometry_of(a.k, a.n, ctas)};
  auto* kernel = a.x != nullptr ? pick_kernel<true>(sp.g.units_per) : pick_kernel<false>(sp.g.units_per);
  const int smem = static_cast<int>(smem_bytes(sp.g));
  raise_smem_limit(reinterpret_cast<const void*>(kernel), smem);
  const dim3 grid(static_cast<unsigned>(ctas));
  static const bool no_pdl = [] {  // XINFER_FP8_STREAM_PDL=0: plain launches (an A/B switch, read once)
    const char* v = std::getenv("XINFER_FP8_STREAM_PDL");
    return v != nullptr && std::strcmp(v, "0") == 0;
  }();
  if (pdl && !no_pdl)
    launch_pdl(kernel, grid, dim3(kThreads), static_cast<size_t>(smem), stream, sp);
  else
    kernel<<<grid, kThreads, smem, stream>>>(sp);
  XI_CUDA_CHECK_LAUNCH();
}

}  // namespace xinfer::cuda
