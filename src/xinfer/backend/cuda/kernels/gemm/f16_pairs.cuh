// f16x2 arithmetic of the CUDA-core decode GEMVs (quant_dot_gemv.cu, quant_stream_gemv.cu): packed f16 FMAs on
// 32-bit registers and the e4m3 activation pairs those GEMVs multiply their weights with.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "xinfer/backend/cuda/kernels/gemm/quant_gemv_math.cuh"

namespace xinfer::cuda::f16_pairs {

__device__ __forceinline__ uint32_t hfma2(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}
__device__ __forceinline__ uint32_t hmul2(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}
__device__ __forceinline__ float f16x2_sum(uint32_t v) {
  const __half2 h = *reinterpret_cast<const __half2*>(&v);
  return __low2float(h) + __high2float(h);
}

// 8 e4m3 x values (a.x: columns 0..3, a.y: 4..7) as natural f16x2 pairs times 2^-8, exact (products with an
// e4m3 weight stay <= 448 * 448 / 256 = 784, so 8 of them sum in f16 without overflow).
__device__ __forceinline__ void fp8_x_pairs(const uint2& a, uint32_t (&xp)[4]) {
  constexpr uint32_t kInv256 = 0x1C001C00u;
  using quant_gemv::e4m3x2_to_f16x2;
  xp[0] = hmul2(e4m3x2_to_f16x2(a.x, false), kInv256);
  xp[1] = hmul2(e4m3x2_to_f16x2(a.x, true), kInv256);
  xp[2] = hmul2(e4m3x2_to_f16x2(a.y, false), kInv256);
  xp[3] = hmul2(e4m3x2_to_f16x2(a.y, true), kInv256);
}

}  // namespace xinfer::cuda::f16_pairs
