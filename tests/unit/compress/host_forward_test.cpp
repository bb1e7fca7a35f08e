// host_layer_forward (true-sequential GPTQ's host forward) equals LlamaModel's forward: on the bundled model
// (8 layers, GQA 8/4), two windows of different lengths run layer by layer on the host give every linear
// the inputs the model's observer sees (Hessians x^T x within f32 rounding), and the last layer's output
// normed by the final norm gives the model's logits. A hook's returned weights are the ones used.
#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "xinfer/compress/calibration.h"
#include "xinfer/compress/host_forward.h"
#include "xinfer/compress/host_layer.h"
#include "bundled_model_fixture.h"
#include "xinfer/engine/perplexity.h"
#include "xinfer/model/llama.h"

namespace xinfer::compress {
namespace {

struct Fixture : test_support::BundledModel {
  std::vector<std::vector<int32_t>> windows;
  Fixture() {
    for (int len : {40, 23}) {
      std::vector<int32_t> w;
      for (int i = 0; i < len; ++i) w.push_back((i * 7919 + 13 * len) % model->config().vocab_size);
      windows.push_back(w);
    }
  }
  std::vector<float> embed() const {
    const int64_t H = model->config().hidden_size;
    std::vector<float> h;
    for (const auto& w : windows)
      for (int32_t t : w) {
        h.resize(h.size() + static_cast<size_t>(H));
        backend->to_host_f32(model->embedding().weight.rows(t, t + 1), &h[h.size() - static_cast<size_t>(H)]);
      }
    return h;
  }
};

double rel_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += a[i] * a[i];
  }
  return std::sqrt(num / den);
}

TEST(HostForward, SiteInputsAndLogitsEqualTheModelForward) {
  Fixture f;
  const model::ModelConfig& c = f.model->config();
  CalibrationOptions co;
  co.hessian = true;
  CalibrationCollector calib(c, co);
  f.model->set_observer(&calib);
  std::vector<std::vector<float>> logits;
  for (const auto& w : f.windows) logits.push_back(f.runner->run(w, 0, 0));
  f.model->set_observer(nullptr);

  std::vector<int64_t> lens;
  for (const auto& w : f.windows) lens.push_back(static_cast<int64_t>(w.size()));
  std::vector<float> hidden = f.embed();
  for (int l = 0; l < c.num_layers; ++l) {
    auto layer = copy_layer(*f.backend, *f.model, l);
    ASSERT_TRUE(layer.ok());
    int calls = 0;
    host_layer_forward(c, *layer, lens, hidden,
                       [&](model::LinearSite site, const float* x, int64_t rows, int64_t k) -> const float* {
                         std::vector<double> h(static_cast<size_t>(k * k), 0.0);
                         add_outer_products(x, rows, k, h);
                         EXPECT_EQ(rows, 63);
                         EXPECT_LT(rel_diff(calib.stats(l, site).hessian, h), 1e-5)
                             << "layer " << l << " " << model::linear_site_name(site);
                         EXPECT_EQ(static_cast<int>(site), calls++);  // qkv, o, gate_up, down in order
                         return nullptr;
                       },
                       ActQuant::kNone);
    EXPECT_EQ(calls, 4);
  }
  // Final norm and the (tied or separate) lm_head on the host: the model's logits.
  const int64_t H = c.hidden_size, V = c.vocab_size;
  std::vector<float> norm(static_cast<size_t>(H)), head(static_cast<size_t>(V * H));
  f.backend->to_host_f32(f.model->final_norm(), norm.data());
  f.backend->to_host_f32(f.model->lm_head().weight, head.data());
  double worst = 0, scale = 0;
  int64_t t = 0;
  for (size_t w = 0; w < f.windows.size(); ++w)
    for (size_t p = 0; p < f.windows[w].size(); ++p, ++t) {
      const float* x = &hidden[static_cast<size_t>(t * H)];
      double ss = 0;
      for (int64_t j = 0; j < H; ++j) ss += static_cast<double>(x[j]) * x[j];
      const double inv = 1.0 / std::sqrt(ss / static_cast<double>(H) + c.rms_norm_eps);
      for (int64_t v = 0; v < V; ++v) {
        double y = 0;
        for (int64_t j = 0; j < H; ++j) y += x[j] * inv * norm[static_cast<size_t>(j)] * head[static_cast<size_t>(v * H + j)];
        const double ref = logits[w][p * static_cast<size_t>(V) + static_cast<size_t>(v)];
        worst = std::max(worst, std::fabs(y - ref));
        scale = std::max(scale, std::fabs(ref));
      }
    }
  EXPECT_LT(worst, 1e-4 * scale) << "max |logit| " << scale;
}

TEST(HostForward, HookWeightsAreTheOnesUsed) {
  Fixture f;
  const model::ModelConfig& c = f.model->config();
  std::vector<int64_t> lens{static_cast<int64_t>(f.windows[0].size())};
  f.windows.resize(1);
  const std::vector<float> in = f.embed();
  auto layer = copy_layer(*f.backend, *f.model, 0);
  ASSERT_TRUE(layer.ok());
  // Zero down_proj through the hook: the layer output is then input + attention only, which equals the
  // output of a layer whose down weights are zero.
  std::vector<float> zeros(layer->down.w.size(), 0.0f);
  std::vector<float> a = in;
  host_layer_forward(c, *layer, lens, a,
                     [&](model::LinearSite site, const float*, int64_t, int64_t) -> const float* {
                       return site == model::LinearSite::kDown ? zeros.data() : nullptr;
                     },
                     ActQuant::kNone);
  HostLayer zeroed = *layer;
  zeroed.down.w = zeros;
  std::vector<float> b = in;
  host_layer_forward(c, zeroed, lens, b, nullptr, ActQuant::kNone);
  EXPECT_EQ(a, b);
  std::vector<float> full = in;
  host_layer_forward(c, *layer, lens, full, nullptr, ActQuant::kNone);
  EXPECT_NE(a, full);
}

}  // namespace
}  // namespace xinfer::compress
