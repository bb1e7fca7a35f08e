#include "xinfer/compress/smooth_quant.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>

#include "xinfer/core/check.h"

namespace xinfer::compress {
namespace {

// Modules (by index into kModules) that make up a site's fused linear.
std::vector<int> site_modules(model::LinearSite site) {
  switch (site) {
    case model::LinearSite::kQkv: return {0, 1, 2};
    case model::LinearSite::kO: return {3};
    case model::LinearSite::kGateUp: return {4, 5};
    case model::LinearSite::kDown: return {6};
  }
  return {};
}

// y [m, n] = x [m, k] w^T (w [n, k])
void matmul_nt(const float* x, const float* w, int64_t m, int64_t n, int64_t k, float* y) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k),
              1.0f, x, static_cast<int>(k), w, static_cast<int>(k), 0.0f, y, static_cast<int>(n));
}

}  // namespace

std::vector<float> smoothing_factors(const model::ModelConfig& c, const HostLinear& lin, model::LinearSite site,
                                     const std::vector<float>& channel_max, double alpha) {
  const int64_t k = lin.k;
  XI_CHECK_EQ(static_cast<int64_t>(channel_max.size()), k);
  std::vector<float> wmax(static_cast<size_t>(k), 0.0f);
  for (int64_t r = 0; r < lin.n; ++r)
    for (int64_t j = 0; j < k; ++j) wmax[static_cast<size_t>(j)] = std::max(wmax[static_cast<size_t>(j)], std::fabs(lin.w[static_cast<size_t>(r * k + j)]));
  std::vector<float> xmax = channel_max;
  if (site == model::LinearSite::kO) {  // one factor per (kv head, dim): maxima over the query heads of the group
    const int64_t D = c.head_dim, per = c.num_heads / c.num_kv_heads;
    for (int64_t g = 0; g < c.num_kv_heads; ++g)
      for (int64_t d = 0; d < D; ++d) {
        float xm = 0, wm = 0;
        for (int64_t h = g * per; h < (g + 1) * per; ++h) {
          xm = std::max(xm, xmax[static_cast<size_t>(h * D + d)]);
          wm = std::max(wm, wmax[static_cast<size_t>(h * D + d)]);
        }
        for (int64_t h = g * per; h < (g + 1) * per; ++h) {
          xmax[static_cast<size_t>(h * D + d)] = xm;
          wmax[static_cast<size_t>(h * D + d)] = wm;
        }
      }
  }
  std::vector<float> s(static_cast<size_t>(k), 1.0f);
  for (int64_t j = 0; j < k; ++j) {
    const double xm = xmax[static_cast<size_t>(j)], wm = wmax[static_cast<size_t>(j)];
    if (xm <= 0 || wm <= 0) continue;
    const double v = std::pow(xm, alpha) / std::pow(wm, 1.0 - alpha);
    s[static_cast<size_t>(j)] = static_cast<float>(std::clamp(v, 1e-5, 1e5));
  }
  return s;
}

void fold_smoothing(const model::ModelConfig& c, HostLayer& layer, model::LinearSite site, const std::vector<float>& s) {
  HostLinear& lin = linear_of(layer, site);
  const int64_t k = lin.k;
  XI_CHECK_EQ(static_cast<int64_t>(s.size()), k);
  for (int64_t r = 0; r < lin.n; ++r)
    for (int64_t j = 0; j < k; ++j) lin.w[static_cast<size_t>(r * k + j)] *= s[static_cast<size_t>(j)];
  auto divide_row = [](HostLinear& l, int64_t row, float f) {
    for (int64_t j = 0; j < l.k; ++j) l.w[static_cast<size_t>(row * l.k + j)] /= f;
    if (!l.bias.empty()) l.bias[static_cast<size_t>(row)] /= f;
  };
  switch (site) {
    case model::LinearSite::kQkv:
      for (int64_t j = 0; j < k; ++j) layer.input_norm[static_cast<size_t>(j)] /= s[static_cast<size_t>(j)];
      break;
    case model::LinearSite::kGateUp:
      for (int64_t j = 0; j < k; ++j) layer.post_attention_norm[static_cast<size_t>(j)] /= s[static_cast<size_t>(j)];
      break;
    case model::LinearSite::kDown:
      for (int64_t j = 0; j < k; ++j) divide_row(layer.gate_up, c.intermediate_size + j, s[static_cast<size_t>(j)]);
      break;
    case model::LinearSite::kO: {
      const int64_t D = c.head_dim, per = c.num_heads / c.num_kv_heads;
      const int64_t v0 = static_cast<int64_t>(c.num_heads + c.num_kv_heads) * D;
      for (int64_t g = 0; g < c.num_kv_heads; ++g)
        for (int64_t d = 0; d < D; ++d) divide_row(layer.qkv, v0 + g * D + d, s[static_cast<size_t>(g * per * D + d)]);
      break;
    }
  }
}

double quantized_output_error(const model::ModelConfig& c, const HostLinear& lin, model::LinearSite site,
                              const SiteStats& stats, const std::vector<float>& s, const SchemeOptions& scheme) {
  const int64_t m = stats.sample_rows(), k = lin.k, n = lin.n;
  if (m == 0) return 0;
  std::vector<float> y0(static_cast<size_t>(m * n)), y(static_cast<size_t>(m * n));
  matmul_nt(stats.samples.data(), lin.w.data(), m, n, k, y0.data());
  std::vector<float> x = stats.samples;
  std::vector<float> w = lin.w;
  if (!s.empty()) {
    for (int64_t r = 0; r < m; ++r)
      for (int64_t j = 0; j < k; ++j) x[static_cast<size_t>(r * k + j)] /= s[static_cast<size_t>(j)];
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < k; ++j) w[static_cast<size_t>(r * k + j)] *= s[static_cast<size_t>(j)];
  }
  fake_quantize_rows(x.data(), m, k, activation_quant(scheme.scheme));
  // Plain max-abs scales here even with --weight-clip mse: the search runs this for every alpha of every
  // group, and the scale search's 16 (fp8) or 80 (int) candidates per row made it ~16x slower (over 30 min
  // for SmolLM2 on 2 cores); the final weights get the searched scales (model_quantizer.cpp).
  WeightQuantArgs args = weight_args(scheme);
  args.mse_clip = false;
  for (int mod : site_modules(site)) {
    const ModuleRows mr = module_rows(c, mod);
    float* rows = &w[static_cast<size_t>(mr.row_begin * k)];
    const QuantizedWeight q = quantize_rtn(rows, mr.rows, k, args);
    q.dequantize(rows);
  }
  matmul_nt(x.data(), w.data(), m, n, k, y.data());
  double num = 0, den = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    const double d = static_cast<double>(y[i]) - y0[i];
    num += d * d;
    den += static_cast<double>(y0[i]) * y0[i];
  }
  return den > 0 ? num / den : 0.0;
}

std::array<SmoothGroupResult, kNumSites> smooth_layer(const model::ModelConfig& c, HostLayer& layer,
                                                      const CalibrationCollector& calib, int l,
                                                      const SchemeOptions& scheme, const SmoothOptions& options,
                                                      std::array<std::vector<float>, kNumSites>* factors) {
  std::array<SmoothGroupResult, kNumSites> results;
  const model::LinearSite order[] = {model::LinearSite::kO, model::LinearSite::kDown, model::LinearSite::kQkv,
                                     model::LinearSite::kGateUp};
  for (model::LinearSite site : order) {
    const SiteStats& st = calib.stats(l, site);
    const HostLinear& lin = linear_of(layer, site);
    SmoothGroupResult& res = results[static_cast<size_t>(site)];
    res.error_unsmoothed = quantized_output_error(c, lin, site, st, {}, scheme);
    std::vector<double> alphas;
    if (options.alpha) {
      alphas.push_back(*options.alpha);
    } else {
      const int steps = static_cast<int>(std::lround(1.0 / options.grid_step));
      for (int i = 0; i <= steps; ++i) alphas.push_back(std::min(1.0, i * options.grid_step));
    }
    std::vector<float> best;
    res.error = -1;
    if (!options.alpha) {  // the search may also leave the group unsmoothed (alpha -1 in the result)
      res.error = res.error_unsmoothed;
      res.alpha = -1;
      best.assign(static_cast<size_t>(lin.k), 1.0f);
    }
    for (double a : alphas) {
      std::vector<float> s = smoothing_factors(c, lin, site, st.channel_max, a);
      const double err = quantized_output_error(c, lin, site, st, s, scheme);
      if (res.error < 0 || err < res.error) {
        res.error = err;
        res.alpha = a;
        best = std::move(s);
      }
    }
    res.s_min = *std::min_element(best.begin(), best.end());
    res.s_max = *std::max_element(best.begin(), best.end());
    fold_smoothing(c, layer, site, best);
    if (factors) (*factors)[static_cast<size_t>(site)] = std::move(best);
  }
  return results;
}

}  // namespace xinfer::compress
