// Vector math of the CPU attention (cpu_attention.cpp), AVX2 + FMA; tests/unit/model/simd_math_test.cpp. (Its
// e4m3 decoding is quant/e4m3_simd.h, shared with the FP8 weight GEMV.)
//
// exp_nonpositive_pd_avx2: exp of four doubles at once, for the softmax weights, which are exp(score - max)
// in double: glibc's scalar exp took a quarter of the attention's time at long prompts. Method: n = round(x /
// ln 2), r = x - n ln 2 (ln 2 in two parts, so r is exact to ~2^-60), |r| <= ln 2 / 2; exp(r) by its Taylor
// series to degree 13 (the first term left out is |r|^14 / 14! < 4e-18, 0.02 ulp of exp(r)) in Horner form
// with FMAs; then times 2^n, built in the exponent bits. Measured against std::exp (simd_math_test.cpp):
// within 1 ulp over [-708, 0]. Only x <= 0 is served (the softmax subtracts the maximum first); below -708 it
// returns 0 (exp(-708) = 3.3e-308 is near the smallest normal double; below, results would take subnormal
// microcode assists): such a weight adds nothing to a denominator that holds exp(0) = 1, and the weights
// below FLT_MIN are 0 in the V sum anyway.
#pragma once

#if defined(__x86_64__)
#include <immintrin.h>

namespace xinfer::cpu {

__attribute__((target("avx2,fma"))) inline __m256d exp_nonpositive_pd_avx2(__m256d x) {
  const __m256d lowest = _mm256_set1_pd(-708.0);  // n >= -1021 from here up: 2^n * exp(r) stays normal
  const __m256d underflow = _mm256_cmp_pd(x, lowest, _CMP_LT_OQ);
  x = _mm256_max_pd(lowest, x);  // a NaN x passes (max_pd returns its second operand then): exp(NaN) = NaN
  const __m256d n = _mm256_round_pd(_mm256_mul_pd(x, _mm256_set1_pd(1.4426950408889634)),  // x * log2(e)
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  // ln 2 = hi + lo: hi keeps 32 significant bits, so n * hi is exact for |n| < 2^21.
  __m256d r = _mm256_fnmadd_pd(n, _mm256_set1_pd(6.93147180369123816490e-01), x);
  r = _mm256_fnmadd_pd(n, _mm256_set1_pd(1.90821492927058770002e-10), r);
  // 1 + r (1 + r/2 (1 + r/3 (... (1 + r/13)))) as sum_k r^k / k!: the coefficients 1/k!, k = 13 .. 0.
  constexpr double kInvFactorial[] = {1.0 / 6227020800.0,
                                      1.0 / 479001600.0,
                                      1.0 / 39916800.0,
                                      1.0 / 3628800.0,
                                      1.0 / 362880.0,
                                      1.0 / 40320.0,
                                      1.0 / 5040.0,
                                      1.0 / 720.0,
                                      1.0 / 120.0,
                                      1.0 / 24.0,
                                      1.0 / 6.0,
                                      0.5,
                                      1.0,
                                      1.0};
  __m256d p = _mm256_set1_pd(kInvFactorial[0]);
  for (int k = 1; k < 14; ++k) p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(kInvFactorial[k]));
  // 2^n for n in [-1021, 0]: the biased exponent n + 1023 in bits 52..62.
  const __m256i bits = _mm256_slli_epi64(
      _mm256_add_epi64(_mm256_cvtepi32_epi64(_mm256_cvtpd_epi32(n)), _mm256_set1_epi64x(1023)), 52);
  return _mm256_andnot_pd(underflow, _mm256_mul_pd(p, _mm256_castsi256_pd(bits)));
}

}  // namespace xinfer::cpu
#endif
