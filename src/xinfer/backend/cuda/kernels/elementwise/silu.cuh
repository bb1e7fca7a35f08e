// silu(g) * u in f32, the one expression every SwiGLU kernel uses (silu_mul.cu, the GEMV's SwiGLU
// epilogue in gemv.cu), so fused and unfused paths round the same f32 value to bf16.
#pragma once

namespace xinfer::cuda {

__device__ __forceinline__ float silu_mul_f32(float g, float u) { return g / (1.0f + __expf(-g)) * u; }

}  // namespace xinfer::cuda
