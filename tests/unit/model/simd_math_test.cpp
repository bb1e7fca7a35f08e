// The CPU's vector math against scalar references: exp_nonpositive_pd_avx2 (backend/cpu/simd_math.h) against
// glibc's std::exp (within 1 ulp over [-708, 0], exactly 1 at 0, 0 below); the e4m3 decoders
// (quant/e4m3_simd.h) against to_float for all 256 codes (the same bits; NaN codes NaN, or +-480 where NaN is
// not expected). Skipped where the CPU has no AVX2 + FMA + F16C.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>

#include "xinfer/backend/cpu/simd_math.h"
#include "xinfer/core/dtype.h"
#include "xinfer/quant/cpu_features.h"
#include "xinfer/quant/e4m3_simd.h"

namespace xinfer {
namespace {

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) void exp4(const double* x, double* y) {
  _mm256_storeu_pd(y, cpu::exp_nonpositive_pd_avx2(_mm256_loadu_pd(x)));
}

int64_t ulps(double a, double b) {
  int64_t ia, ib;
  std::memcpy(&ia, &a, 8);
  std::memcpy(&ib, &b, 8);
  return ia > ib ? ia - ib : ib - ia;  // both positive: the distance in representable doubles
}

TEST(SimdMath, ExpWithinOneUlpOfStdExpForNonPositiveArguments) {
  if (!quant::detail::cpu_has_avx2_fma()) GTEST_SKIP() << "no AVX2 + FMA";
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> wide(-708.0, 0.0), narrow(-1.0, 0.0);
  int64_t worst = 0;
  int64_t off = 0;
  const int kN = 1 << 20;
  for (int i = 0; i < kN; i += 4) {
    double x[4], y[4];
    for (double& v : x) v = i % 8 == 0 ? wide(rng) : narrow(rng);  // softmax arguments are mostly near 0
    exp4(x, y);
    for (int l = 0; l < 4; ++l) {
      const int64_t u = ulps(y[l], std::exp(x[l]));
      worst = std::max(worst, u);
      off += u != 0;
    }
  }
  std::printf("[ simd exp ] worst %lld ulp over %d arguments; %.1f%% not glibc's bits\n",
              static_cast<long long>(worst), kN, 100.0 * static_cast<double>(off) / kN);
  EXPECT_LE(worst, 1);
}

TEST(SimdMath, ExpEdgesOfItsRange) {
  if (!quant::detail::cpu_has_avx2_fma()) GTEST_SKIP() << "no AVX2 + FMA";
  const double x[4] = {0.0, -0.0, -708.0, -5e-300};
  double y[4];
  exp4(x, y);
  EXPECT_EQ(y[0], 1.0);
  EXPECT_EQ(y[1], 1.0);
  EXPECT_LE(ulps(y[2], std::exp(-708.0)), 1);
  EXPECT_EQ(y[3], 1.0);
  const double under[4] = {-708.001, -745.2, -1e6, -INFINITY};
  exp4(under, y);
  for (double v : y) EXPECT_EQ(v, 0.0);  // exp below the normal range: 0 (see simd_math.h)
  const double nan[4] = {std::nan(""), 0.0, std::nan(""),
                         -1.0};  // a NaN score must not become a weight of ~0
  exp4(nan, y);
  EXPECT_TRUE(std::isnan(y[0]) && std::isnan(y[2]));
  EXPECT_EQ(y[1], 1.0);
}

__attribute__((target("avx2,fma,f16c"))) void e4m3x16(const uint8_t* codes, float* plain, float* with_nan) {
  __m256 q[2];
  quant::e4m3x16_to_f32_avx2(codes, q);
  _mm256_storeu_ps(plain, q[0]);
  _mm256_storeu_ps(plain + 8, q[1]);
  quant::e4m3x16_to_f32_nan_avx2(codes, q);
  _mm256_storeu_ps(with_nan, q[0]);
  _mm256_storeu_ps(with_nan + 8, q[1]);
}

TEST(SimdMath, E4m3ToF32IsToFloatForEveryCode) {
  if (!quant::detail::cpu_has_avx2_fma()) GTEST_SKIP() << "no AVX2 + FMA + F16C";
  for (int c0 = 0; c0 < 256; c0 += 16) {
    uint8_t codes[16];
    for (int l = 0; l < 16; ++l) codes[l] = static_cast<uint8_t>(c0 + l);
    float plain[16], with_nan[16];
    e4m3x16(codes, plain, with_nan);
    for (int l = 0; l < 16; ++l) {
      const float want = to_float(fp8_e4m3{codes[l]});
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(with_nan[l])) << "code " << c0 + l;
        EXPECT_EQ(plain[l], codes[l] & 0x80 ? -480.0f : 480.0f) << "code " << c0 + l;
      } else {
        EXPECT_EQ(std::memcmp(&with_nan[l], &want, sizeof(float)), 0)
            << "code " << c0 + l << ": " << with_nan[l] << " vs " << want;
        EXPECT_EQ(std::memcmp(&plain[l], &want, sizeof(float)), 0)
            << "code " << c0 + l << ": " << plain[l] << " vs " << want;
      }
    }
  }
}
#endif

}  // namespace
}  // namespace xinfer
