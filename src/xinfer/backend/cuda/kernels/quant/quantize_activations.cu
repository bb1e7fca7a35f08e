#include "xinfer/backend/cuda/kernels/quant/quantize_activations.h"

#include <cuda_fp8.h>

#include "xinfer/backend/cuda/cuda_check.h"

namespace xinfer::cuda {
namespace {

constexpr int kThreads = 256;

// The row's scale: *input_scale, or max |x| / qmax (the CTA's reduction), as the oracle computes it.
__device__ float row_scale(const __nv_bfloat16* xr, int k, const float* input_scale, float qmax) {
  if (input_scale) return __ldg(input_scale);
  __shared__ float red[kThreads / 32];
  __shared__ float s_shared;
  float amax = 0.f;
  for (int i = static_cast<int>(threadIdx.x); i < k; i += kThreads) amax = fmaxf(amax, fabsf(__bfloat162float(xr[i])));
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = amax;
  __syncthreads();
  if (threadIdx.x == 0) {
    float a = red[0];
    for (int w = 1; w < kThreads / 32; ++w) a = fmaxf(a, red[w]);
    s_shared = a / qmax;
  }
  __syncthreads();
  return s_shared;
}

__global__ void __launch_bounds__(kThreads)
    quantize_fp8_rows_kernel(const __nv_bfloat16* x, int k, const float* input_scale, uint8_t* q, float* scales) {
  const size_t row = blockIdx.x;
  const __nv_bfloat16* xr = x + row * k;
  uint8_t* qr = q + row * k;
  const float s = row_scale(xr, k, input_scale, 448.0f);
  if (threadIdx.x == 0) scales[row] = s;
  const float inv = s == 0.f ? 0.f : 1.0f / s;
  for (int i = static_cast<int>(threadIdx.x); i < k; i += kThreads) {
    const float v = __bfloat162float(xr[i]) * inv;
    qr[i] = static_cast<uint8_t>(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));
  }
}

__global__ void __launch_bounds__(kThreads)
    quantize_int8_rows_kernel(const __nv_bfloat16* x, int k, const float* input_scale, int8_t* q, float* scales) {
  const size_t row = blockIdx.x;
  const __nv_bfloat16* xr = x + row * k;
  int8_t* qr = q + row * k;
  const float s = row_scale(xr, k, input_scale, 127.0f);
  if (threadIdx.x == 0) scales[row] = s;
  const float inv = s == 0.f ? 0.f : 1.0f / s;
  for (int i = static_cast<int>(threadIdx.x); i < k; i += kThreads) {
    const float v = fminf(fmaxf(rintf(__bfloat162float(xr[i]) * inv), -127.0f), 127.0f);  // rintf: nearest even
    qr[i] = static_cast<int8_t>(static_cast<int>(v));
  }
}

__global__ void broadcast_kernel(const float* value, int n, float* out) {
  const float v = __ldg(value);
  for (int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); i < n; i += static_cast<int>(gridDim.x * blockDim.x))
    out[i] = v;
}

}  // namespace

void launch_quantize_fp8_rows(const __nv_bfloat16* x, int m, int k, const float* input_scale, uint8_t* q,
                              float* scales, cudaStream_t stream) {
  if (m <= 0) return;
  quantize_fp8_rows_kernel<<<m, kThreads, 0, stream>>>(x, k, input_scale, q, scales);
  XI_CUDA_CHECK_LAUNCH();
}

void launch_quantize_int8_rows(const __nv_bfloat16* x, int m, int k, const float* input_scale, int8_t* q,
                               float* scales, cudaStream_t stream) {
  if (m <= 0) return;
  quantize_int8_rows_kernel<<<m, kThreads, 0, stream>>>(x, k, input_scale, q, scales);
  XI_CUDA_CHECK_LAUNCH();
}

void launch_broadcast_scale(const float* value, int n, float* out, cudaStream_t stream) {
  broadcast_kernel<<<(n + 255) / 256, 256, 0, stream>>>(value, n, out);
  XI_CUDA_CHECK_LAUNCH();
}

}  // namespace xinfer::cuda
