// The W8A8-INT8 GEMM's epilogue (cublaslt_int8_gemm.h kInt32Epilogue): int32 dot products to bf16 / f32 with
// the per-token x per-channel scales and the bias, in the CPU oracle's order: f32(sw * sx) * f32(acc) + bias.
// Four consecutive outputs per thread (16-byte int32 loads) where n % 4 == 0 and the pointers allow it,
// else one; a grid-stride loop over [m, n]. No allocation, graph-capturable.
#include <algorithm>

#include "xinfer/backend/cuda/cuda_check.h"
#include "xinfer/backend/cuda/kernels/gemm/cublaslt_int8_gemm.h"
#include "xinfer/backend/cuda/kernels/gemm/int8_scale.cuh"

namespace xinfer::cuda {
namespace {

template <int kVec>
__global__ void int8_scale_epilogue_kernel(const int32_t* __restrict__ acc, const float* __restrict__ xs,
                                           const float* __restrict__ ws, const __nv_bfloat16* __restrict__ bias,
                                           void* y, bool y_f32, int m, int n) {
  const size_t total = static_cast<size_t>(m) * n / kVec;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t e = i * kVec;
    const int t = static_cast<int>(e / n), j = static_cast<int>(e % n);
    const float sx = __ldg(xs + t);
    if constexpr (kVec == 4) {
      const int4 a = __ldcs(reinterpret_cast<const int4*>(acc) + i);  // read once: streaming
      const float4 sw = __ldg(reinterpret_cast<const float4*>(ws + j));
      const float v0 = int8_scaled(a.x, sx, sw.x, bias, j), v1 = int8_scaled(a.y, sx, sw.y, bias, j + 1);
      const float v2 = int8_scaled(a.z, sx, sw.z, bias, j + 2), v3 = int8_scaled(a.w, sx, sw.w, bias, j + 3);
      if (y_f32) {
        reinterpret_cast<float4*>(y)[i] = make_float4(v0, v1, v2, v3);
      } else {
        __nv_bfloat162 lo = __floats2bfloat162_rn(v0, v1), hi = __floats2bfloat162_rn(v2, v3);
        uint2 packed;
        packed.x = *reinterpret_cast<uint32_t*>(&lo);
        packed.y = *reinterpret_cast<uint32_t*>(&hi);
        reinterpret_cast<uint2*>(y)[i] = packed;
      }
    } else {
      const float v = int8_scaled(acc[e], sx, __ldg(ws + j), bias, j);
      if (y_f32)
        static_cast<float*>(y)[e] = v;
      else
        static_cast<__nv_bfloat16*>(y)[e] = __float2bfloat16(v);
    }
  }
}

}  // namespace

void launch_int8_scale_epilogue(const int32_t* acc, const float* x_scales, const float* w_scales,
                                const __nv_bfloat16* bias, void* y, bool y_f32, int m, int n, cudaStream_t stream) {
  if (m <= 0 || n <= 0) return;
  auto aligned = [](const void* p, uintptr_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; };
  const bool vec = n % 4 == 0 && aligned(acc, 16) && aligned(w_scales, 16) && aligned(y, y_f32 ? 16 : 8);
  const size_t items = static_cast<size_t>(m) * n / (vec ? 4 : 1);
  const unsigned blocks = static_cast<unsigned>(std::min<size_t>((items + 255) / 256, 132 * 16));
  if (vec)
    int8_scale_epilogue_kernel<4><<<blocks, 256, 0, stream>>>(acc, x_scales, w_scales, bias, y, y_f32, m, n);
  else
    int8_scale_epilogue_kernel<1><<<blocks, 256, 0, stream>>>(acc, x_scales, w_scales, bias, y, y_f32, m, n);
  XI_CUDA_CHECK_LAUNCH();
}

}  // namespace xinfer::cuda
