// FP8 (OCP E4M3FN) KV-cache elements on the device: the store rounding of rope_kv_write and the in-register
// dequantization of the attention kernels (decode, prefill, generic). backend.h gives the cache's contract:
// an element stands for e4m3 * scale (one scale per layer for K, one for V, or one per layer and KV head).
//
//   store: e4m3_from_float(x / scale): the IEEE division's quotient (div_by_scale), then round to nearest
//   even
//          with saturation to +-448
//          (cvt.rn.satfinite.e4m3x2.f32), as the CPU backend's to_fp8_e4m3(x / scale). NaN stays NaN (0x7f).
//   read:  e4m3 -> bf16 exactly (every e4m3 value is a bf16 value); the scales are applied outside the
//          tensor-core work: the K scale folds into the softmax scale, the V scale into the output
//          normalization (PagedAttentionParams::scale / v_scale).
//
// The exact conversion: with the 7 exponent-and-mantissa bits of a code at f32 bits [26:20] and its sign at
// bit 31, the f32 is the code's value times 2^-120 for normal codes (exponent bias 127 vs 7) and for
// subnormal ones (an f32 subnormal with the same 3 mantissa bits) alike; one f32 multiply by 2^120 (exact:
// no ftz in our builds, docs/cuda_backend.md) gives the value. The NaN codes 0x7f / 0xff read as +-480; the
// stores never write them for finite inputs.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "xinfer/backend/cuda/kernels/attention/paged_attention_params.h"

namespace xinfer::cuda {

// The score scale (softmax scale times the K scale) and the output scale (the V scale) of KV head kvh: the
// layer's (folded by the caller into p.scale / p.v_scale) or the head's own (p.k_head_scales / v_head_scales).
__device__ __forceinline__ float qk_scale_of(const PagedAttentionParams& p, int kvh) {
  return p.k_head_scales != nullptr ? __fmul_rn(p.scale, __ldg(p.k_head_scales + kvh)) : p.scale;
}
__device__ __forceinline__ float v_scale_of(const PagedAttentionParams& p, int kvh) {
  return p.v_head_scales != nullptr ? __ldg(p.v_head_scales + kvh) : p.v_scale;
}

// The f32 value of the e4m3 code in bits [7:0] of `w` shifted left by `byte` bytes (byte = 0..3).
template <int kByte>
__device__ __forceinline__ float e4m3_byte_to_float(uint32_t w) {
  constexpr int kSign = 24 - 8 * kByte, kBody = 20 - 8 * kByte;  // left shifts that place bit 7 / bits 6..0
  const uint32_t sign = (kSign >= 0 ? w << kSign : w >> -kSign) & 0x80000000u;
  const uint32_t body = (kBody >= 0 ? w << kBody : w >> -kBody) & 0x07f00000u;
  return __fmul_rn(__uint_as_float(sign | body), 0x1p120f);
}

__device__ __forceinline__ float e4m3_to_float(uint8_t code) { return e4m3_byte_to_float<0>(code); }

__device__ __forceinline__ uint32_t pack_bf16x2_exact(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // exact for e4m3 values
  return *reinterpret_cast<const uint32_t*>(&v);
}

// 4 codes (byte i of w = element i) -> 4 bf16 (elements 0, 1 in .x low / high half; 2, 3 in .y).
__device__ __forceinline__ uint2 e4m3x4_to_bf16x4(uint32_t w) {
  return make_uint2(pack_bf16x2_exact(e4m3_byte_to_float<0>(w), e4m3_byte_to_float<1>(w)),
                    pack_bf16x2_exact(e4m3_byte_to_float<2>(w), e4m3_byte_to_float<3>(w)));
}

// 16 codes of one 16-byte load -> bf16 elements 0..7 (half 0) or 8..15 (half 1), as one 16-byte vector.
__device__ __forceinline__ uint4 e4m3x16_half_to_bf16x8(const uint4& v, int half) {
  const uint2 a = e4m3x4_to_bf16x4(half == 0 ? v.x : v.z);
  const uint2 b = e4m3x4_to_bf16x4(half == 0 ? v.y : v.w);
  return make_uint4(a.x, a.y, b.x, b.y);
}

// The f16 variant (PagedAttentionParams::kv_fp8_f16, decode kernel only): every e4m3 value is also an f16
// value, and cvt.rn.f16x2.e4m3x2 converts two codes in one instruction (the low byte to the low half).
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint32_t two_codes) {
  uint32_t r;
  const uint16_t h = static_cast<uint16_t>(two_codes);
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(r) : "h"(h));
  return r;
}
// 4 codes -> 4 f16 (codes 0, 1 in .x, codes 2, 3 in .y). The word split into its two 16-bit halves inside
// the asm lets ptxas feed the high half to the conversion directly (no shift per pair).
__device__ __forceinline__ uint2 e4m3x4_to_f16x4(uint32_t four_codes) {
  uint2 r;
  asm("{\n"
      ".reg .b16 lo, hi;\n"
      "mov.b32 {lo, hi}, %2;\n"
      "cvt.rn.f16x2.e4m3x2 %0, lo;\n"
      "cvt.rn.f16x2.e4m3x2 %1, hi;\n"
      "}\n"
      : "=r"(r.x), "=r"(r.y)
      : "r"(four_codes));
  return r;
}
// 16 codes of one 16-byte load -> f16 elements 0..7 (half 0) or 8..15 (half 1), as one 16-byte vector.
__device__ __forceinline__ uint4 e4m3x16_half_to_f16x8(const uint4& v, int half) {
  const uint2 a = e4m3x4_to_f16x4(half == 0 ? v.x : v.z), b = e4m3x4_to_f16x4(half == 0 ? v.y : v.w);
  return make_uint4(a.x, a.y, b.x, b.y);
}

// x / scale rounded to nearest even, as the IEEE division, without its branches (the division's range checks
// kept a thread's 16 conversions from overlapping): with inv = RN(1 / scale), q = RN(x inv) is within an ulp
// of x / scale, the remainder x - q scale is exact in one fma, and q + rem inv rounded once is RN(x / scale)
// (Markstein's theorem) wherever nothing overflows or underflows (|x| >= 2^-100 keeps the remainder normal).
// Past that the codes agree anyway: an overflowing q is kept (it saturates to +-448 like the true quotient),
// a zero q keeps x's sign (the correction would add +0 to -0), and quotients below 2^-100 / scale code to +-0
// whatever their last bits. NaN stays NaN.
__device__ __forceinline__ float div_by_scale(float x, float scale, float inv) {
  const float q = __fmul_rn(x, inv);
  const float rq = __fmaf_rn(-q, scale, x);
  const float q2 = __fmaf_rn(rq, inv, q);
  return isinf(q) || q == 0.0f ? q : q2;
}

// x -> the code of x / scale (see above); inv: __frcp_rn(scale), computed once per scale by the caller.
__device__ __forceinline__ uint8_t e4m3_from_float(float x, float scale, float inv) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(div_by_scale(x, scale, inv), __NV_SATFINITE, __NV_E4M3));
}
__device__ __forceinline__ uint8_t e4m3_from_float(float x, float scale) {
  return e4m3_from_float(x, scale, __frcp_rn(scale));
}

// The codes of a / scale (low byte) and b / scale (high byte): one conversion for the pair, the same codes.
__device__ __forceinline__ uint16_t e4m3x2_from_float(float a, float b, float scale, float inv) {
  return __nv_cvt_float2_to_fp8x2(make_float2(div_by_scale(a, scale, inv), div_by_scale(b, scale, inv)),
                                  __NV_SATFINITE, __NV_E4M3);
}

}  // namespace xinfer::cuda
