// SmoothQuant folding is exact: the bundled model (8 layers, GQA 8/4) with every smoothing group folded
// (norms, v rows, up rows divided; weight columns multiplied) gives the original logits within f32
// rounding, both for the calibrated factors and for random ones spread over 4 decades. Also: the observed
// (unfused) forward gives the fused forward's logits, and the observer sees every linear's input.
#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "xinfer/compress/calibration.h"
#include "xinfer/compress/host_layer.h"
#include "xinfer/compress/smooth_quant.h"
#include "bundled_model_fixture.h"
#include "xinfer/engine/perplexity.h"
#include "xinfer/model/llama.h"

namespace xinfer::compress {
namespace {

struct Fixture : test_support::BundledModel {
  std::vector<int32_t> tokens;
  Fixture() {
    for (int i = 0; i < 48; ++i) tokens.push_back((i * 7919 + 13) % model->config().vocab_size);
  }
  std::vector<float> logits() { return runner->run(tokens, 0, 0); }
};

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, static_cast<double>(std::fabs(x)));
  return m;
}
double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, static_cast<double>(std::fabs(a[i] - b[i])));
  return m;
}

TEST(SmoothFold, ObservedForwardEqualsFusedAndSeesEveryLinear) {
  Fixture f;
  const std::vector<float> fused = f.logits();
  CalibrationCollector calib(f.model->config(), CalibrationOptions{});
  f.model->set_observer(&calib);
  const std::vector<float> observed = f.logits();
  f.model->set_observer(nullptr);
  EXPECT_LE(max_diff(fused, observed), 1e-5 * max_abs(fused));
  for (int l = 0; l < f.model->config().num_layers; ++l)
    for (int s = 0; s < kNumSites; ++s) {
      const SiteStats& st = calib.stats(l, static_cast<model::LinearSite>(s));
      EXPECT_EQ(st.tokens, 48);
      EXPECT_GT(st.channel_max[0], 0.0f);
    }
}

TEST(SmoothFold, SmoothedUnquantizedModelGivesTheOriginalLogits) {
  Fixture f;
  const std::vector<float> before = f.logits();
  CalibrationOptions co;
  co.max_sample_rows = 32;
  CalibrationCollector calib(f.model->config(), co);
  f.model->set_observer(&calib);
  f.logits();
  f.model->set_observer(nullptr);
  const model::ModelConfig& c = f.model->config();
  SchemeOptions scheme;  // w8a8-int8, channel weights (only the search's error uses it)
  for (int l = 0; l < c.num_layers; ++l) {
    auto h = copy_layer(*f.backend, *f.model, l);
    ASSERT_TRUE(h.ok()) << h.status().to_string();
    SmoothOptions so;
    so.alpha = 0.5;
    smooth_layer(c, *h, calib, l, scheme, so, nullptr);
    UploadedLayer up = upload_layer(*f.backend, c, *h, nullptr, scheme);
    f.model->replace_layer(l, up.weights, std::move(up.buffers));
  }
  const std::vector<float> after = f.logits();
  const double tol = 2e-5 * max_abs(before);
  EXPECT_LE(max_diff(before, after), tol) << "max |logit| " << max_abs(before);
}

TEST(SmoothFold, RandomFactorsOverFourDecadesAreExactToo) {
  Fixture f;
  const std::vector<float> before = f.logits();
  const model::ModelConfig& c = f.model->config();
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  for (int l = 0; l < c.num_layers; ++l) {
    auto h = copy_layer(*f.backend, *f.model, l);
    ASSERT_TRUE(h.ok());
    for (model::LinearSite site : {model::LinearSite::kO, model::LinearSite::kDown, model::LinearSite::kQkv,
                                   model::LinearSite::kGateUp}) {
      const HostLinear& lin = linear_of(*h, site);
      std::vector<float> xmax(static_cast<size_t>(lin.k));
      for (float& v : xmax) v = std::pow(10.0f, u(rng));
      // smoothing_factors keeps one factor per (kv head, dim) for o, as folding into v requires.
      const std::vector<float> s = smoothing_factors(c, lin, site, xmax, 0.9);
      fold_smoothing(c, *h, site, s);
    }
    UploadedLayer up = upload_layer(*f.backend, c, *h, nullptr, SchemeOptions{});
    f.model->replace_layer(l, up.weights, std::move(up.buffers));
  }
  const std::vector<float> after = f.logits();
  EXPECT_LE(max_diff(before, after), 1e-4 * max_abs(before)) << "max |logit| " << max_abs(before);
}

TEST(SmoothFold, FactorsSharedByTheQueryHeadsOfAKvHead) {
  Fixture f;
  const model::ModelConfig& c = f.model->config();
  auto h = copy_layer(*f.backend, *f.model, 0);
  ASSERT_TRUE(h.ok());
  std::vector<float> xmax(static_cast<size_t>(h->o.k));
  for (size_t i = 0; i < xmax.size(); ++i) xmax[i] = 1.0f + static_cast<float>(i % 37);
  const std::vector<float> s = smoothing_factors(c, h->o, model::LinearSite::kO, xmax, 0.5);
  const int per = c.num_heads / c.num_kv_heads, D = c.head_dim;
  ASSERT_GT(per, 1);
  for (int hq = 0; hq < c.num_heads; ++hq)
    for (int d = 0; d < D; ++d)
      EXPECT_EQ(s[static_cast<size_t>(hq * D + d)], s[static_cast<size_t>((hq / per) * per * D + d)]);
}

}  // namespace
}  // namespace xinfer::compress
