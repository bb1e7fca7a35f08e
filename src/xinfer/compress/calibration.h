// Calibration statistics of every decoder-layer linear input, gathered by observing forward passes
// (model::ActivationObserver) over calibration windows:
//
//   channel_max [K]   max over all calibration tokens of |x[t, j]| (SmoothQuant's max|X_j|)
//   channel_sq [K]    sum over all calibration tokens of x[t, j]^2 (the Hessian's diagonal; MSE clip weights)
//   hessian [K, K]    sum over tokens of x_t x_t^T, in double (GPTQ's H up to the factor 2/m)
//   samples [m, K]    up to `max_sample_rows` input rows, taken evenly over the tokens (error of candidate
//                     quantizations in the alpha search)
//   tokens            calibration tokens seen
// per (layer, site), site = qkv (input_norm's output), o (attention output), gate_up (post-attention norm
// output), down (silu(gate) * up). The Hessian accumulates in f32 per forward (cblas_ssyrk) and is added in
// double.
#pragma once

#include <cstdint>
#include <vector>

#include "xinfer/model/llama.h"

namespace xinfer::compress {

constexpr int kNumSites = 4;

struct SiteStats {
  int64_t k = 0;
  int64_t tokens = 0;
  std::vector<float> channel_max;  // [k]
  std::vector<double> channel_sq;  // [k]
  std::vector<double> hessian;     // [k, k] or empty (not collected)
  std::vector<float> samples;      // [sample_rows, k]
  int64_t sample_rows() const { return k ? static_cast<int64_t>(samples.size()) / k : 0; }
  // Largest channel max / median channel max (activation outliers).
  double outlier_ratio() const;
};

struct CalibrationOptions {
  bool hessian = false;          // GPTQ needs it
  int64_t max_sample_rows = 256;  // per site
  int64_t expected_tokens = 0;   // total tokens that will be observed (spreads the samples); 0: take the first
};

class CalibrationCollector : public model::ActivationObserver {
 public:
  CalibrationCollector(const model::ModelConfig& config, const CalibrationOptions& options);
  // x: [rows, cols]
  void observe(int layer, model::LinearSite site, const float* x, int64_t rows, int64_t cols) override;
  const SiteStats& stats(int layer, model::LinearSite site) const {
    return stats_[static_cast<size_t>(layer * kNumSites + static_cast<int>(site))];
  }
  // Bytes the statistics will take (for the memory check before calibration).
  static size_t planned_bytes(const model::ModelConfig& config, const CalibrationOptions& options);
  // The calibration windows observed (token ids), kept for true-sequential GPTQ.
  void set_windows(std::vector<std::vector<int32_t>> w) { windows_ = std::move(w); }
  const std::vector<std::vector<int32_t>>& windows() const { return windows_; }

 private:
  CalibrationOptions options_;
  std::vector<SiteStats> stats_;  // [layer * kNumSites + site]
  std::vector<float> scratch_;
  std::vector<std::vector<int32_t>> windows_;
};

}  // namespace xinfer::compress
