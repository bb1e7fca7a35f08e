#include "xinfer/backend/cuda/kernels/quant/quantize_activations.h"

#include <cuda_fp8.h>

#include "xinfer/backend/cuda/cuda_check.h"
#include "xinfer/backend/cuda/kernels/quant/activation_quant.cuh"

namespace xinfer::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    quantize_fp8_rows_kernel(const __nv_bfloat16* x, int k, const float* input_scale, uint8_t* q, float* scales) {
  __shared__ float red[kThreads / 32];
  const size_t row = blockIdx.x;
  const __nv_bfloat16* xr = x + row * k;
  uint8_t* qr = q + row * k;
  const float s = act_quant::row_scale<kThreads>(xr, k, input_scale, act_quant::kFp8Max, red);
  if (threadIdx.x == 0) scales[row] = s;
  const float inv = act_quant::inverse_scale(s);
  for (int i = static_cast<int>(threadIdx.x); i < k; i += kThreads) qr[i] = act_quant::to_e4m3(__bfloat162float(xr[i]), inv);
}

__global__ void __launch_bounds__(kThreads)
    quantize_int8_rows_kernel(const __nv_bfloat16* x, int k, const float* input_scale, int8_t* q, float* scales) {
  __shared__ float red[kThreads / 32];
  const size_t row = blockIdx.x;
  const __nv_bfloat16* xr = x + row * k;
  int8_t* qr = q + row * k;
  const float s = act_quant::row_scale<kThreads>(xr, k, input_scale, act_quant::kInt8Max, red);
  if (threadIdx.x == 0) scales[row] = s;
  const float inv = act_quant::inverse_scale(s);
  for (int i = static_cast<int>(threadIdx.x); i < k; i += kThreads) qr[i] = act_quant::to_int8(__bfloat162float(xr[i]), inv);
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
