// Tensor-core pieces shared by the paged attention kernels (decode: paged_decode_attention.cu; prefill:
// paged_prefill_attention.cu): the m16n8k16 MMA in bf16 or f16, packing f32 pairs into bf16 / f16 operand
// words, Q rounded from bf16 to f16, and the softmax's exp2.
//
// Operand type: bf16 for bf16 caches; f16 for the kernels' f16 variants over FP8 caches
// (PagedAttentionParams::kv_fp8_f16): every e4m3 code converts to f16 in one instruction per pair
// (kv_fp8.cuh), P in [0, 1] keeps 3 more bits than in bf16, and Q goes from bf16 to f16 exactly wherever
// 2^-14 <= |q| <= 65504.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace xinfer::cuda {

// d (16x8 f32) += a (16x16, row-major) * b (16x8; b0 / b1 hold the k pairs of column lane / 4), operands in
// f16 (kF16) or bf16.
template <bool kF16>
__device__ __forceinline__ void mma_16816(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                          uint32_t b0, uint32_t b1) {
  if constexpr (kF16)
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x (the lower k index) in the low half
  return *reinterpret_cast<const uint32_t*>(&v);
}
__device__ __forceinline__ uint32_t pack_f16x2(float lo, float hi) {
  const __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}
// An operand word of two f32 values in the kernel's operand type.
template <bool kF16>
__device__ __forceinline__ uint32_t pack_operand(float lo, float hi) {
  return kF16 ? pack_f16x2(lo, hi) : pack_bf16x2(lo, hi);
}

// 8 bf16 -> 8 f16 (Q of the f16 variants; exact for |q| in [2^-14, 65504], nearest otherwise).
__device__ __forceinline__ uint4 bf16x8_to_f16x8(const uint4& v) {
  auto cvt = [](uint32_t w) {
    return pack_f16x2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
  };
  return make_uint4(cvt(v.x), cvt(v.y), cvt(v.z), cvt(v.w));
}

__device__ __forceinline__ float fast_exp2(float x) {  // ex2.approx(-inf) = +0
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace xinfer::cuda
