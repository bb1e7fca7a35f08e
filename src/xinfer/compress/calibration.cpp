#include "xinfer/compress/calibration.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>

#include "xinfer/core/check.h"

namespace xinfer::compress {
namespace {

int64_t site_width(const model::ModelConfig& c, int site) {
  switch (static_cast<model::LinearSite>(site)) {
    case model::LinearSite::kQkv:
    case model::LinearSite::kGateUp: return c.hidden_size;
    case model::LinearSite::kO: return static_cast<int64_t>(c.num_heads) * c.head_dim;
    case model::LinearSite::kDown: return c.intermediate_size;
  }
  return 0;
}

}  // namespace

double SiteStats::outlier_ratio() const {
  if (channel_max.empty()) return 0;
  std::vector<float> v = channel_max;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  const double median = v[v.size() / 2];
  const double mx = *std::max_element(channel_max.begin(), channel_max.end());
  return median > 0 ? mx / median : 0.0;
}

CalibrationCollector::CalibrationCollector(const model::ModelConfig& config, const CalibrationOptions& options)
    : options_(options) {
  stats_.resize(static_cast<size_t>(config.num_layers) * kNumSites);
  for (int l = 0; l < config.num_layers; ++l)
    for (int s = 0; s < kNumSites; ++s) {
      SiteStats& st = stats_[static_cast<size_t>(l * kNumSites + s)];
      st.k = site_width(config, s);
      st.channel_max.assign(static_cast<size_t>(st.k), 0.0f);
      st.channel_sq.assign(static_cast<size_t>(st.k), 0.0);
      if (options_.hessian) st.hessian.assign(static_cast<size_t>(st.k * st.k), 0.0);
    }
}

size_t CalibrationCollector::planned_bytes(const model::ModelConfig& config, const CalibrationOptions& options) {
  size_t bytes = 0;
  for (int s = 0; s < kNumSites; ++s) {
    const auto k = static_cast<size_t>(site_width(config, s));
    bytes += k * 12 + k * static_cast<size_t>(options.max_sample_rows) * 4 + (options.hessian ? k * k * 8 : 0);
  }
  return bytes * static_cast<size_t>(config.num_layers);
}

void CalibrationCollector::observe(int layer, model::LinearSite site, const float* x, int64_t rows, int64_t cols) {
  SiteStats& st = stats_[static_cast<size_t>(layer * kNumSites + static_cast<int>(site))];
  XI_CHECK_EQ(cols, st.k) << "layer " << layer << " " << model::linear_site_name(site);
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * cols;
    for (int64_t j = 0; j < cols; ++j) {
      st.channel_max[static_cast<size_t>(j)] = std::max(st.channel_max[static_cast<size_t>(j)], std::fabs(row[j]));
      st.channel_sq[static_cast<size_t>(j)] += static_cast<double>(row[j]) * row[j];
    }
  }
  // Rows t with t * want / expected crossing an integer are kept: `want` rows spread over the expected tokens.
  const int64_t want = options_.max_sample_rows;
  for (int64_t r = 0; r < rows && st.sample_rows() < want; ++r) {
    const int64_t t = st.tokens + r;
    const bool take = options_.expected_tokens <= want ||
                      (t * want) / options_.expected_tokens != ((t + 1) * want) / options_.expected_tokens;
    if (take) st.samples.insert(st.samples.end(), x + r * cols, x + (r + 1) * cols);
  }
  st.tokens += rows;
  if (!st.hessian.empty()) {
    scratch_.assign(static_cast<size_t>(cols * cols), 0.0f);
    cblas_ssyrk(CblasRowMajor, CblasUpper, CblasTrans, static_cast<int>(cols), static_cast<int>(rows), 1.0f, x,
                static_cast<int>(cols), 0.0f, scratch_.data(), static_cast<int>(cols));
    for (int64_t i = 0; i < cols; ++i)
      for (int64_t j = i; j < cols; ++j) {
        const double v = scratch_[static_cast<size_t>(i * cols + j)];
        st.hessian[static_cast<size_t>(i * cols + j)] += v;
        if (j != i) st.hessian[static_cast<size_t>(j * cols + i)] += v;
      }
  }
}

}  // namespace xinfer::compress
