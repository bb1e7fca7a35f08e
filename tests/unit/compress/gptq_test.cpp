// GPTQ: with an identity Hessian no error is propagated (U diagonal), so it equals RTN when the
// parameters are fixed up front; on correlated inputs it lowers the output error ||X (W - Q)^T|| below RTN's.
#include "xinfer/compress/gptq.h"

#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace xinfer::compress {
namespace {

double output_error(const std::vector<float>& x, const std::vector<float>& w, const QuantizedWeight& q, int64_t m) {
  std::vector<float> deq(static_cast<size_t>(q.n * q.k));
  q.dequantize(deq.data());
  double e = 0;
  for (int64_t t = 0; t < m; ++t)
    for (int64_t r = 0; r < q.n; ++r) {
      double s = 0;
      for (int64_t c = 0; c < q.k; ++c) s += x[static_cast<size_t>(t * q.k + c)] * (w[static_cast<size_t>(r * q.k + c)] - deq[static_cast<size_t>(r * q.k + c)]);
      e += s * s;
    }
  return e;
}

TEST(Gptq, IdentityHessianEqualsRtnPerChannel) {
  const int64_t n = 5, k = 40;
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  std::vector<float> w(static_cast<size_t>(n * k));
  for (float& v : w) v = nd(rng);
  std::vector<double> h(static_cast<size_t>(k * k), 0.0);
  for (int64_t i = 0; i < k; ++i) h[static_cast<size_t>(i * k + i)] = 1.0;
  WeightQuantArgs a;  // int8 channel
  a.bits = 4;
  GptqOptions o;
  o.block_size = 16;
  EXPECT_EQ(quantize_gptq(w.data(), n, k, h.data(), a, o).q, quantize_rtn(w.data(), n, k, a).q);
  o.act_order = true;
  EXPECT_EQ(quantize_gptq(w.data(), n, k, h.data(), a, o).q, quantize_rtn(w.data(), n, k, a).q);
}

class GptqCorrelated : public ::testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(GptqCorrelated, BeatsRtnOnTheCalibrationInputs) {
  const auto [group, act_order] = GetParam();
  const int64_t n = 24, k = 96, m = 512;
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  // Correlated inputs with a few large channels (as LLM activations have).
  std::vector<float> basis(static_cast<size_t>(8 * k));
  for (float& v : basis) v = nd(rng);
  std::vector<float> x(static_cast<size_t>(m * k));
  for (int64_t t = 0; t < m; ++t) {
    float coef[8];
    for (float& v : coef) v = 0.4f * nd(rng);  // one mix of the basis per token
    for (int64_t c = 0; c < k; ++c) {
      float v = 0.3f * nd(rng);
      for (int b = 0; b < 8; ++b) v += coef[b] * basis[static_cast<size_t>(b * k + c)];
      x[static_cast<size_t>(t * k + c)] = c % 17 == 0 ? 6.0f * v : v;
    }
  }
  std::vector<float> w(static_cast<size_t>(n * k));
  for (float& v : w) v = 0.05f * nd(rng);
  std::vector<double> h(static_cast<size_t>(k * k), 0.0);
  for (int64_t t = 0; t < m; ++t)
    for (int64_t i = 0; i < k; ++i)
      for (int64_t j = 0; j < k; ++j) h[static_cast<size_t>(i * k + j)] += x[static_cast<size_t>(t * k + i)] * x[static_cast<size_t>(t * k + j)];
  WeightQuantArgs a;
  a.bits = 4;
  a.granularity = Granularity::kGroup;
  a.group_size = group;
  GptqOptions o;
  o.block_size = 32;
  o.act_order = act_order;
  const double rtn = output_error(x, w, quantize_rtn(w.data(), n, k, a), m);
  const double gptq = output_error(x, w, quantize_gptq(w.data(), n, k, h.data(), a, o), m);
  EXPECT_LT(gptq, 0.5 * rtn) << "rtn " << rtn << " gptq " << gptq;
}

INSTANTIATE_TEST_SUITE_P(Groups, GptqCorrelated,
                         ::testing::Combine(::testing::Values(32, 96), ::testing::Bool()));

TEST(Gptq, DeadInputColumnIsZeroed) {
  const int64_t n = 2, k = 4;
  const std::vector<float> w = {1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<double> h(16, 0.0);
  for (int i = 0; i < 3; ++i) h[static_cast<size_t>(i * 4 + i)] = 1.0;  // column 3 never active
  const QuantizedWeight q = quantize_gptq(w.data(), n, k, h.data(), WeightQuantArgs{}, GptqOptions{});
  EXPECT_EQ(q.q[3], 0);
  EXPECT_EQ(q.q[7], 0);
}

}  // namespace
}  // namespace xinfer::compress
