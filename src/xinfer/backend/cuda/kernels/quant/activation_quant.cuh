// The arithmetic of the per-token activation quantization (quantize_activations.h), shared by its kernels
// and by the kernels that quantize their x themselves (quant_dot_gemv.cu's FP8 GEMV with the quantization
// fused), so that both give the same codes and scales to the bit:
//   s = *input_scale (static) or max_i |x_i| / qmax (dynamic; the maximum does not depend on the order in
//   which a CTA reduces it), inv = s == 0 ? 0 : 1 / s (IEEE division), code = convert(x_i * inv).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace xinfer::cuda::act_quant {

constexpr float kFp8Max = 448.0f;
constexpr float kInt8Max = 127.0f;

// The two bf16 of a 32-bit word as f32 (exact): the low half, the high half.
__device__ __forceinline__ float bf16_lo(uint32_t w) {
  return __uint_as_float(w << 16);
}
__device__ __forceinline__ float bf16_hi(uint32_t w) {
  return __uint_as_float(w & 0xffff0000u);
}

// max |x| of the two bf16 of a 32-bit word.
__device__ __forceinline__ float bf16x2_abs_max(uint32_t w) {
  return fmaxf(fabsf(bf16_lo(w)), fabsf(bf16_hi(w)));
}

// The maximum of v over a CTA of kThreads threads (every thread gets it). `red`: kThreads / 32 floats of
// shared memory, free again when this returns.
template <int kThreads>
__device__ float cta_max(float v, float* red) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  float a = red[0];
#pragma unroll
  for (int w = 1; w < kThreads / 32; ++w) a = fmaxf(a, red[w]);
  __syncthreads();  // red may be reused
  return a;
}

// max |x[0, k)| for a CTA of kThreads threads (every thread gets it). `red`: kThreads / 32 floats of shared
// memory, free again when this returns. 16-byte loads where x allows them.
template <int kThreads>
__device__ float cta_abs_max(const __nv_bfloat16* x, int k, float* red) {
  float amax = 0.f;
  if (k % 8 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0) {
    for (int i = static_cast<int>(threadIdx.x) * 8; i < k; i += kThreads * 8) {
      const uint4 v = __ldg(reinterpret_cast<const uint4*>(x + i));
#pragma unroll
      for (int j = 0; j < 4; ++j) amax = fmaxf(amax, bf16x2_abs_max((&v.x)[j]));
    }
  } else {
    for (int i = static_cast<int>(threadIdx.x); i < k; i += kThreads) amax = fmaxf(amax, fabsf(__bfloat162float(x[i])));
  }
  return cta_max<kThreads>(amax, red);
}

// The row's scale: the static one, or the CTA's max |x| / qmax.
template <int kThreads>
__device__ float row_scale(const __nv_bfloat16* x, int k, const float* input_scale, float qmax, float* red) {
  return input_scale ? __ldg(input_scale) : cta_abs_max<kThreads>(x, k, red) / qmax;
}

__device__ __forceinline__ float inverse_scale(float s) { return s == 0.f ? 0.f : 1.0f / s; }

__device__ __forceinline__ uint8_t to_e4m3(float x, float inv) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(x * inv, __NV_SATFINITE, __NV_E4M3));
}

// SmoothQuant's symmetric int8 code: round to nearest even, clamped to [-127, 127] (clamping first gives the
// same code: the bounds are integers; a NaN clamps to -127 either way).
__device__ __forceinline__ int8_t to_int8(float x, float inv) {
  return static_cast<int8_t>(__float2int_rn(fminf(fmaxf(x * inv, -kInt8Max), kInt8Max)));
}

// Two f32 rounded to bf16 (nearest even: two __float2bfloat16's bits) in one word, lo in the low half.
__device__ __forceinline__ uint32_t bf16x2_bits(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// The f32 max |x| of a value before its bf16 rounding gives, rounded, the max of the rounded values (rounding
// to nearest is monotonic and symmetric): a row's scale from f32 values the kernel then rounds.
__device__ __forceinline__ float bf16_round(float x) {
  return __bfloat162float(__float2bfloat16(x));
}

// The codes of the 4 bf16 in two words under inv: e4m3 (one cvt per pair, the bits of to_e4m3) or int8 bytes,
// the first value in the low byte.
template <bool kFp8>
__device__ __forceinline__ uint32_t codes4(uint32_t w0, uint32_t w1, float inv) {
  if constexpr (kFp8) {
    const uint32_t c0 = __nv_cvt_float2_to_fp8x2(make_float2(bf16_lo(w0) * inv, bf16_hi(w0) * inv),
                                                 __NV_SATFINITE, __NV_E4M3);
    const uint32_t c1 = __nv_cvt_float2_to_fp8x2(make_float2(bf16_lo(w1) * inv, bf16_hi(w1) * inv),
                                                 __NV_SATFINITE, __NV_E4M3);
    return c0 | c1 << 16;
  } else {
    const uint32_t b0 = static_cast<uint8_t>(to_int8(bf16_lo(w0), inv)),
                   b1 = static_cast<uint8_t>(to_int8(bf16_hi(w0), inv));
    const uint32_t b2 = static_cast<uint8_t>(to_int8(bf16_lo(w1), inv)),
                   b3 = static_cast<uint8_t>(to_int8(bf16_hi(w1), inv));
    return b0 | b1 << 8 | b2 << 16 | b3 << 24;
  }
}

// The codes of 8 bf16 values (one 16-byte vector) under one row's inverse scale: e4m3 or int8 bytes.
template <bool kFp8>
__device__ __forceinline__ uint2 codes8(const uint4& v, float inv) {
  return make_uint2(codes4<kFp8>(v.x, v.y, inv), codes4<kFp8>(v.z, v.w, inv));
}

}  // namespace xinfer::cuda::act_quant
