// RTN quantizers against values worked out by hand from the definitions in weight_quantizer.h.
#include "xinfer/compress/weight_quantizer.h"

#include <cmath>
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
