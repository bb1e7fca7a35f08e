// RTN quantizers against values worked out by hand from the definitions in weight_quantizer.h.
#include "xinfer/compress/weight_quantizer.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "xinfer/core/dtype.h"

namespace xinfer::compress {
namespace {

TEST(WeightQuantizer, SymmetricInt4PerGroup) {
  // One row, two groups of 4: scales max|w| / 7.
  const std::vector<float> w = {0.7f, -0.35f, 0.1f, 0.0f, 1.4f, 1.4f, -0.2f, 0.3f};
  WeightQuantArgs a;
  a.bits = 4;
  a.granularity = Granularity::kGroup;
  a.group_size = 4;
  const QuantizedWeight q = quantize_rtn(w.data(), 1, 8, a);
  ASSERT_EQ(q.groups(), 2);
  EXPECT_FLOAT_EQ(q.scales[0], 0.1f);
  EXPECT_FLOAT_EQ(q.scales[1], 0.2f);
  const std::vector<int8_t> want = {7, -4, 1, 0, 7, 7, -1, 2};  // -3.5 -> -4 (ties to even), 1.5 -> 2
  EXPECT_EQ(q.q, want);
  EXPECT_TRUE(q.zeros.empty());
}

TEST(WeightQuantizer, MseClipSearchesTheWeightedError) {
  // One int4 group {1.0, 0.45, 0.45, 0.45}. Max-abs scale 1/7: the 0.45s land on 3/7 = 0.4286 (error
  // 3 x 0.0214^2 = 1.4e-3, the 1.0 exact); any clip ratio p < 1 rounds 1.0 to p (error >= 0.01 from p = 0.9,
  // and p in (0.9, 1) leaves the 0.45s off the grid): unweighted, p = 1 stays. With the 1.0's column weight
  // 0 only the 0.45s count: the first grid ratio representing them exactly is p = 0.63 (scale 0.09, q = 5).
  const std::vector<float> w = {1.0f, 0.45f, 0.45f, 0.45f};
  WeightQuantArgs a;
  a.bits = 4;
  a.granularity = Granularity::kGroup;
  a.group_size = 4;
  a.mse_clip = true;
  EXPECT_FLOAT_EQ(quantize_rtn(w.data(), 1, 4, a).scales[0], 1.0f / 7.0f);
  const std::vector<double> ones = {1, 1, 1, 1}, skip_first = {0, 1, 1, 1};
  EXPECT_FLOAT_EQ(quantize_rtn(w.data(), 1, 4, a, ones.data()).scales[0], 1.0f / 7.0f);
  const QuantizedWeight q = quantize_rtn(w.data(), 1, 4, a, skip_first.data());
  EXPECT_NEAR(q.scales[0], 0.09f, 1e-7f);
  EXPECT_EQ(q.q, (std::vector<int8_t>{7, 5, 5, 5}));  // 1.0 clipped to 7 x 0.09 = 0.63
  a.mse_clip = false;
  EXPECT_FLOAT_EQ(quantize_rtn(w.data(), 1, 4, a, skip_first.data()).scales[0], 1.0f / 7.0f);  // weights unused
}

// Heavy-tailed weights w [n, k] and random column weights cw [k] in [0, 4) from a fixed LCG seed.
void heavy_tailed_case(int64_t n, int64_t k, uint32_t seed, std::vector<float>* w, std::vector<double>* cw) {
  w->resize(static_cast<size_t>(n * k));
  cw->resize(static_cast<size_t>(k));
  uint32_t state = seed;
  auto uniform = [&]() {
    state = state * 1664525u + 1013904223u;
    return (state >> 8) / 16777216.0;
  };
  for (auto& v : *w) v = static_cast<float>((uniform() - 0.5) * std::pow(uniform() + 0.05, -1.5));
  for (auto& v : *cw) v = uniform() * 4;
}

TEST(WeightQuantizer, MseClipNeverWorseThanMaxAbs) {
  // Random groups with heavy-tailed values, random column weights: the searched scale's weighted error is
  // at most the max-abs one (p = 1 is a candidate), and strictly smaller somewhere.
  const int64_t n = 16, k = 128;
  std::vector<float> w;
  std::vector<double> cw;
  heavy_tailed_case(n, k, 12345u, &w, &cw);
  for (bool symmetric : {true, false}) {
    WeightQuantArgs a;
    a.bits = 4;
    a.granularity = Granularity::kGroup;
    a.group_size = 32;
    a.symmetric = symmetric;
    const QuantizedWeight plain = quantize_rtn(w.data(), n, k, a, cw.data());
    a.mse_clip = true;
    const QuantizedWeight mse = quantize_rtn(w.data(), n, k, a, cw.data());
    std::vector<float> dp(w.size()), dm(w.size());
    plain.dequantize(dp.data());
    mse.dequantize(dm.data());
    int better = 0;
    for (int64_t r = 0; r < n; ++r)
      for (int64_t g = 0; g < k / 32; ++g) {
        double ep = 0, em = 0;
        for (int64_t c = g * 32; c < (g + 1) * 32; ++c) {
          const size_t i = static_cast<size_t>(r * k + c);
          ep += cw[static_cast<size_t>(c)] * (w[i] - dp[i]) * (w[i] - dp[i]);
          em += cw[static_cast<size_t>(c)] * (w[i] - dm[i]) * (w[i] - dm[i]);
        }
        EXPECT_LE(em, ep * (1 + 1e-12)) << "row " << r << " group " << g;
        better += em < ep;
      }
    EXPECT_GT(better, 0) << (symmetric ? "symmetric" : "zero points");
  }
}

TEST(WeightQuantizer, AsymmetricInt4ZeroPoint) {
  // lo = 0 (all positive), hi = 1.5: scale 0.1, zero = -8 - round(0) = -8; q = round(w / 0.1) - 8.
  const std::vector<float> w = {0.0f, 0.5f, 1.5f, 1.0f};
  WeightQuantArgs a;
  a.bits = 4;
  a.granularity = Granularity::kGroup;
  a.group_size = 4;
  a.symmetric = false;
  const QuantizedWeight q = quantize_rtn(w.data(), 1, 4, a);
  EXPECT_NEAR(q.scales[0], 0.1f, 1e-7);
  ASSERT_EQ(q.zeros.size(), 1u);
  EXPECT_EQ(q.zeros[0], -8);
  EXPECT_EQ(q.q, (std::vector<int8_t>{-8, -3, 7, 2}));
  std::vector<float> deq(4);
  q.dequantize(deq.data());
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(deq[static_cast<size_t>(i)], w[static_cast<size_t>(i)], 0.05f + 1e-6f);
}

TEST(WeightQuantizer, Int8ChannelAndTensor) {
  const std::vector<float> w = {1.27f, -0.5f, 0.01f, 2.54f};  // rows {1.27, -0.5}, {0.01, 2.54}
  WeightQuantArgs a;
  QuantizedWeight c = quantize_rtn(w.data(), 2, 2, a);
  EXPECT_FLOAT_EQ(c.scales[0], 0.01f);
  EXPECT_FLOAT_EQ(c.scales[1], 0.02f);
  EXPECT_EQ(c.q, (std::vector<int8_t>{127, -50, 0, 127}));  // 0.01 / 0.02 = 0.5 -> 0 (ties to even)
  a.granularity = Granularity::kTensor;
  QuantizedWeight t = quantize_rtn(w.data(), 2, 2, a);
  ASSERT_EQ(t.scales.size(), 1u);
  EXPECT_FLOAT_EQ(t.scales[0], 0.02f);
  EXPECT_EQ(t.q, (std::vector<int8_t>{64, -25, 0, 127}));  // 63.5 -> 64
}

TEST(WeightQuantizer, Fp8PerChannel) {
  const std::vector<float> w = {448.0f * 0.5f, -0.5f, 3.0f, 0.0f};
  WeightQuantArgs a;
  a.is_float = true;
  const QuantizedWeight q = quantize_rtn(w.data(), 2, 2, a);
  EXPECT_FLOAT_EQ(q.scales[0], 0.5f);
  EXPECT_FLOAT_EQ(q.scales[1], 3.0f / 448.0f);
  std::vector<float> deq(4);
  q.dequantize(deq.data());
  EXPECT_FLOAT_EQ(deq[0], 224.0f);
  EXPECT_FLOAT_EQ(deq[1], -0.5f);  // -1 is exact in e4m3
  EXPECT_NEAR(deq[2], 3.0f, 1e-6f);
  EXPECT_EQ(deq[3], 0.0f);
}

TEST(WeightQuantizer, Fp8ScaleSearchKeepsTheBestCandidate) {
  // e4m3 per channel with the scale search: each row's scale is s0 2^(i / 16) (s0 = max|w| / 448) with the
  // smallest column-weighted squared error of the 16 (ties: the smallest i), never worse than plain RTN
  // (i = 0), strictly better on some rows of random data.
  const int64_t n = 24, k = 96;
  std::vector<float> w;
  std::vector<double> cw;
  heavy_tailed_case(n, k, 777u, &w, &cw);
  WeightQuantArgs a;
  a.is_float = true;
  a.mse_clip = true;
  const QuantizedWeight q = quantize_rtn(w.data(), n, k, a, cw.data());
  std::vector<float> deq(w.size());
  q.dequantize(deq.data());
  auto error = [&](int64_t r, float s) {
    double e = 0;
    for (int64_t c = 0; c < k; ++c) {
      const float x = w[static_cast<size_t>(r * k + c)];
      const float d = s * to_float(to_fp8_e4m3(x / s));
      e += cw[static_cast<size_t>(c)] * (static_cast<double>(x) - d) * (static_cast<double>(x) - d);
    }
    return e;
  };
  int moved = 0;
  for (int64_t r = 0; r < n; ++r) {
    float amax = 0;
    for (int64_t c = 0; c < k; ++c) amax = std::max(amax, std::fabs(w[static_cast<size_t>(r * k + c)]));
    const float s0 = amax / 448.0f;
    int best = 0;
    for (int i = 1; i < kFp8ScaleSteps; ++i)
      if (error(r, s0 * static_cast<float>(std::exp2(i / 16.0))) < error(r, s0 * static_cast<float>(std::exp2(best / 16.0))))
        best = i;
    EXPECT_EQ(q.scales[static_cast<size_t>(r)], s0 * static_cast<float>(std::exp2(best / 16.0))) << "row " << r;
    EXPECT_LE(error(r, q.scales[static_cast<size_t>(r)]), error(r, s0)) << "row " << r;
    for (int64_t c = 0; c < k; ++c)
      EXPECT_EQ(deq[static_cast<size_t>(r * k + c)],
                q.scales[static_cast<size_t>(r)] * to_float(to_fp8_e4m3(w[static_cast<size_t>(r * k + c)] / q.scales[static_cast<size_t>(r)])));
    moved += best > 0;
  }
  EXPECT_GT(moved, 0);
  a.mse_clip = false;  // without the search: s0 for every row
  const QuantizedWeight plain = quantize_rtn(w.data(), n, k, a, cw.data());
  for (int64_t r = 0; r < n; ++r) {
    float amax = 0;
    for (int64_t c = 0; c < k; ++c) amax = std::max(amax, std::fabs(w[static_cast<size_t>(r * k + c)]));
    EXPECT_EQ(plain.scales[static_cast<size_t>(r)], amax / 448.0f);
  }
}

TEST(WeightQuantizer, AllZeroBlockHasScaleOne) {
  const std::vector<float> w(4, 0.0f);
  const QuantizedWeight q = quantize_rtn(w.data(), 1, 4, WeightQuantArgs{});
  EXPECT_EQ(q.scales[0], 1.0f);
  EXPECT_EQ(q.q, (std::vector<int8_t>(4, 0)));
}

TEST(WeightQuantizer, FakeQuantizeRowsPerToken) {
  std::vector<float> x = {1.27f, -0.635f, 0.0f, 0.0f, 0.0f, 0.0f};  // row 0 scale 0.01; row 1 all zero
  fake_quantize_rows(x.data(), 2, 3, ActQuant::kInt8PerToken);
  EXPECT_NEAR(x[0], 1.27f, 1e-6f);
  EXPECT_NEAR(x[1], -0.64f, 1e-6f);  // -63.5 -> -64 (ties to even)
  EXPECT_EQ(x[3], 0.0f);
  std::vector<float> y = {448.0f, 17.0f};  // scale 1: 17 -> 16 (e4m3 has 3 mantissa bits: 16, 18)
  fake_quantize_rows(y.data(), 1, 2, ActQuant::kFp8PerToken);
  EXPECT_EQ(y[0], 448.0f);
  EXPECT_EQ(y[1], 16.0f);
}

}  // namespace
}  // namespace xinfer::compress
