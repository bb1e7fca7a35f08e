// e4m3 (OCP FP8 E4M3FN) codes to f32 with AVX2 + F16C, exactly: the FP8 weight GEMV (int_matmul.cpp) and the
// CPU attention's FP8 KV cache (backend/cpu/cpu_attention.cpp) both decode through here.
//
// Each code goes to f16 bits: the sign to bit 15, exponent and mantissa shifted under f16's (bias 15 against
// e4m3's 7), so the f16 is the e4m3 value times 2^-8 exactly, subnormal codes included; F16C widens it and a
// multiply by 256 restores the value (an exact f32 operation on normal operands). The NaN codes (0x7f, 0xff)
// come out as +-480 there: e4m3x16_to_f32_avx2 is for data that holds none (weights);
// e4m3x16_to_f32_nan_avx2 maps them to NaN, as to_float does (a KV cache holds one if the model produced a
// NaN).
#pragma once

#if defined(__x86_64__)
#include <immintrin.h>

#include <cstdint>
#include <limits>

namespace xinfer::quant {

// q[0] = codes p[0..7], q[1] = p[8..15] as f32; the NaN codes as +-480 (see above).
__attribute__((target("avx2,fma,f16c"))) inline void e4m3x16_to_f32_avx2(const uint8_t* p, __m256* q) {
  const __m256i b = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m256i h = _mm256_or_si256(_mm256_slli_epi16(_mm256_and_si256(b, _mm256_set1_epi16(0x80)), 8),
                                    _mm256_slli_epi16(_mm256_and_si256(b, _mm256_set1_epi16(0x7f)), 7));
  const __m256 k256 = _mm256_set1_ps(256.0f);
  q[0] = _mm256_mul_ps(_mm256_cvtph_ps(_mm256_castsi256_si128(h)), k256);
  q[1] = _mm256_mul_ps(_mm256_cvtph_ps(_mm256_extracti128_si256(h, 1)), k256);
}

// e4m3x16_to_f32_avx2 with the NaN codes as NaN: to_float's value for every code.
__attribute__((target("avx2,fma,f16c"))) inline void e4m3x16_to_f32_nan_avx2(const uint8_t* p, __m256* q) {
  e4m3x16_to_f32_avx2(p, q);
  const __m128i codes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i nan = _mm_cmpeq_epi8(_mm_and_si128(codes, _mm_set1_epi8(0x7f)), _mm_set1_epi8(0x7f));
  const __m256 nan_value = _mm256_set1_ps(std::numeric_limits<float>::quiet_NaN());
  q[0] = _mm256_blendv_ps(q[0], nan_value, _mm256_castsi256_ps(_mm256_cvtepi8_epi32(nan)));
  q[1] = _mm256_blendv_ps(q[1], nan_value, _mm256_castsi256_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(nan, 8))));
}

}  // namespace xinfer::quant
#endif
