// The RoPE rotation of one (x[i], x[i + D/2]) pair (rotate-half / NeoX layout), shared by every kernel that
// rotates: rope_kv_write.cu (q and k in place) and the fused decode attention (paged_decode_attention.cu,
// q and the newest k in registers). The fused path must give the same bits as rope_kv_write, so the
// arithmetic is spelled out with round-to-nearest intrinsics: the compiler may not contract or reorder them
// differently in the two kernels.
//
//   y1 = x1 cos - x2 sin = fma(x1, cos, -(x2 sin)),   y2 = x2 cos + x1 sin = fma(x2, cos, x1 sin)
//
// in f32 on bf16 inputs, each result rounded to bf16 (nearest even) once.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace xinfer::cuda {

// The f32 rotation itself, before any rounding to bf16 (the FP8 K write quantizes it directly).
__device__ __forceinline__ void rope_rotate_f32(float a, float b, float c, float s, float& y1, float& y2) {
  y1 = __fmaf_rn(a, c, -__fmul_rn(b, s));
  y2 = __fmaf_rn(b, c, __fmul_rn(a, s));
}

__device__ __forceinline__ void rope_rotate(__nv_bfloat16 x1, __nv_bfloat16 x2, float c, float s,
                                            __nv_bfloat16& y1, __nv_bfloat16& y2) {
  float r1, r2;
  rope_rotate_f32(__bfloat162float(x1), __bfloat162float(x2), c, s, r1, r2);
  y1 = __float2bfloat16_rn(r1);
  y2 = __float2bfloat16_rn(r2);
}

// Rotates 8 consecutive pairs held as two 16-byte vectors: lo = x[i0 .. i0 + 7], hi = x[i0 + D/2 .. + 7],
// with cos = c[0 .. 7] and sin = s[0 .. 7] (the table row at i0 and at D/2 + i0).
__device__ __forceinline__ void rope_rotate8(uint4& lo, uint4& hi, const float* c, const float* s) {
  __nv_bfloat16* x1 = reinterpret_cast<__nv_bfloat16*>(&lo);
  __nv_bfloat16* x2 = reinterpret_cast<__nv_bfloat16*>(&hi);
#pragma unroll
  for (int e = 0; e < 8; ++e) rope_rotate(x1[e], x2[e], c[e], s[e], x1[e], x2[e]);
}

}  // namespace xinfer::cuda
