// The W8A8-INT8 output scaling, shared by the int32 epilogue kernel (int8_scale_epilogue.cu) and the wgmma
// GEMM (w8a8_int8_wgmma.cu): the CPU oracle's order (quant/int_matmul.cpp run_w8a8_int8), f32(sw * sx) *
// f32(dot), then + bias as a separate round-to-nearest add (never contracted into an FMA with the product).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace xinfer::cuda {

__device__ __forceinline__ float int8_scaled(int32_t dot, float sx, float sw) {
  return (sw * sx) * static_cast<float>(dot);
}
__device__ __forceinline__ float int8_biased(float v, float bias) {
  return __fadd_rn(v, bias);
}
// Both, with bias[j] where bias is not null (the epilogue kernel's form).
__device__ __forceinline__ float int8_scaled(int32_t dot, float sx, float sw, const __nv_bfloat16* bias,
                                             int j) {
  const float v = int8_scaled(dot, sx, sw);
  return bias ? int8_biased(v, __bfloat162float(bias[j])) : v;
}

}  // namespace xinfer::cuda
