// silu(g) * u in f32, the one expression every SwiGLU kernel uses (silu_mul.cu, the GEMV's SwiGLU
// epilogue in gemv.cu), so fused and unfused paths round the same f32 value to bf16. The fast exponential and
// division (ex2 and rcp on the special function unit, a few ulp of f32 before the rounding to bf16): the IEEE
// division's Newton steps and range checks made the SwiGLU kernels instruction-bound (docs/PERF.md session
// 24).
#pragma once

namespace xinfer::cuda {

__device__ __forceinline__ float silu_mul_f32(float g, float u) {
  // exp(-g) as __expf computes it, but flushed to 0 below 2^-126 (no denormal fix-up), where 1 + e is 1
  // either way.
  float e;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(g * -1.4426950408889634f));
  return __fdividef(g, 1.0f + e) * u;
}

}  // namespace xinfer::cuda
