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

// The same codes and scales with 16-byte vectors and the row in registers (k <= kThreads * kVecs * 8): each
// thread loads its vectors, then (after the CTA's max) writes their codes, 8 bytes per store.
template <bool kFp8, int kVecs>
__global__ void __launch_bounds__(kThreads)
    quantize_rows_vec_kernel(const __nv_bfloat16* x, int k, const float* input_scale, uint8_t* q,
                             float* scales) {
  __shared__ float red[kThreads / 32];
  const size_t row = blockIdx.x;
  const uint4* xr = reinterpret_cast<const uint4*>(x + row * k);
  const int vecs = k / 8;
  uint4 v[kVecs];
#pragma unroll
  for (int j = 0; j < kVecs; ++j) {
    const int i = static_cast<int>(threadIdx.x) + j * kThreads;
    v[j] = i < vecs ? __ldg(xr + i) : make_uint4(0, 0, 0, 0);
  }
  float s;
  if (input_scale != nullptr) {
    s = __ldg(input_scale);
  } else {
    float amax = 0.f;
#pragma unroll
    for (int j = 0; j < kVecs; ++j)
#pragma unroll
      for (int w = 0; w < 4; ++w) amax = fmaxf(amax, act_quant::bf16x2_abs_max((&v[j].x)[w]));
    s = act_quant::cta_max<kThreads>(amax, red) / (kFp8 ? act_quant::kFp8Max : act_quant::kInt8Max);
  }
  if (threadIdx.x == 0) scales[row] = s;
  const float inv = act_quant::inverse_scale(s);
  uint2* qr = reinterpret_cast<uint2*>(q + row * k);
#pragma unroll
  for (int j = 0; j < kVecs; ++j) {
    const int i = static_cast<int>(threadIdx.x) + j * kThreads;
    if (i < vecs) qr[i] = act_quant::codes8<kFp8>(v[j], inv);
  }
}

// false (nothing launched) where the vectorized kernel does not apply: k % 8, alignment, rows longer than 16384.
template <bool kFp8>
bool launch_quantize_rows_vec(const __nv_bfloat16* x, int m, int k, const float* input_scale, uint8_t* q,
                              float* scales, cudaStream_t stream) {
  if (k % 8 != 0 || reinterpret_cast<uintptr_t>(x) % 16 != 0 || reinterpret_cast<uintptr_t>(q) % 8 != 0)
    return false;
  const int per_thread = (k / 8 + kThreads - 1) / kThreads;
  if (per_thread <= 2)
    quantize_rows_vec_kernel<kFp8, 2><<<m, kThreads, 0, stream>>>(x, k, input_scale, q, scales);
  else if (per_thread <= 4)
    quantize_rows_vec_kernel<kFp8, 4><<<m, kThreads, 0, stream>>>(x, k, input_scale, q, scales);
  else if (per_thread <= 8)
    quantize_rows_vec_kernel<kFp8, 8><<<m, kThreads, 0, stream>>>(x, k, input_scale, q, scales);
  else
    return false;
  XI_CUDA_CHECK_LAUNCH();
  return true;
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
  if (launch_quantize_rows_vec<true>(x, m, k, input_scale, q, scales, stream)) return;
  quantize_fp8_rows_kernel<<<m, kThreads, 0, stream>>>(x, k, input_scale, q, scales);
  XI_CUDA_CHECK_LAUNCH();
}

void launch_quantize_int8_rows(const __nv_bfloat16* x, int m, int k, const float* input_scale, int8_t* q,
                               float* scales, cudaStream_t stream) {
  if (m <= 0) return;
  if (launch_quantize_rows_vec<false>(x, m, k, input_scale, reinterpret_cast<uint8_t*>(q), scales, stream))
    return;
  quantize_int8_rows_kernel<<<m, kThreads, 0, stream>>>(x, k, input_scale, q, scales);
  XI_CUDA_CHECK_LAUNCH();
}

void launch_broadcast_scale(const float* value, int n, float* out, cudaStream_t stream) {
  broadcast_kernel<<<(n + 255) / 256, 256, 0, stream>>>(value, n, out);
  XI_CUDA_CHECK_LAUNCH();
}

}  // namespace xinfer::cuda
