// SmoothQuant (Xiao et al., 2023) for one decoder layer, folded exactly into the weights:
//
//   s_j = max|X_j|^alpha / max|W_j|^(1 - alpha)   (max|W_j| over the output rows of the linears reading
//                                                   input channel j; s_j = 1 where either max is 0)
//   X' = X diag(s)^-1, W' = W diag(s): the product X W^T is unchanged, the activation outliers move into
//   the weights. Where the division goes (exact in real arithmetic):
//     qkv      input_norm[j] /= s_j                       (its output is qkv's input)
//     gate_up  post_attention_norm[j] /= s_j
//     down     up_proj row j (and its bias) /= s_j        (silu(gate_j) * up_j is linear in up_j)
//     o        v_proj row (g, d) (and its bias) /= s_gd   (attention output of head h is a convex mix of
//              the v rows of its kv head g: one factor per (g, d), shared by the Hq / Hkv query heads
//              of g, from the max over them of max|X| and of max|W|)
//   Order: o and down first (they rescale rows of v and up), then qkv and gate_up (columns).
//
// Alpha: fixed, or searched per smoothing group on a grid (0, step, ..., 1), plus "no smoothing" (s = 1,
// reported as alpha -1), minimising the group's relative quantized-output error on the calibration
// samples X [m, K] (calibration.h):
//   err(alpha) = ||fq(X / s) Q(W s)^T - X W^T||_F^2 / ||X W^T||_F^2
// with Q the scheme's weight RTN (per Hugging Face module; max-abs scales, also under --weight-clip mse, whose
// scale search only the final weights get) and fq the per-token activation fake quantization.
#pragma once

#include <array>
#include <optional>
#include <vector>

#include "xinfer/compress/calibration.h"
#include "xinfer/compress/host_layer.h"
#include "xinfer/compress/scheme.h"

namespace xinfer::compress {

struct SmoothOptions {
  std::optional<double> alpha;  // fixed alpha; nullopt: search
  double grid_step = 0.05;
};

struct SmoothGroupResult {
  double alpha = 0;             // -1: left unsmoothed (the search found s = 1 best)
  double error = 0;             // relative quantized-output error with the chosen factors
  double error_unsmoothed = 0;  // the same without smoothing (s = 1)
  float s_min = 1, s_max = 1;
};

// The quantized-output error above for a site's linear `lin` with factors s ([K], empty: 1).
double quantized_output_error(const model::ModelConfig& c, const HostLinear& lin, model::LinearSite site,
                              const SiteStats& stats, const std::vector<float>& s, const SchemeOptions& scheme);

// s [K] for a site from the activation maxima and the linear's weights (GQA handled for o).
std::vector<float> smoothing_factors(const model::ModelConfig& c, const HostLinear& lin, model::LinearSite site,
                                     const std::vector<float>& channel_max, double alpha);

// Folds s ([K] of `site`) into the layer as described above.
void fold_smoothing(const model::ModelConfig& c, HostLayer& layer, model::LinearSite site, const std::vector<float>& s);

// Smooths layer l in place (all four groups); factors[site] receives s.
std::array<SmoothGroupResult, kNumSites> smooth_layer(const model::ModelConfig& c, HostLayer& layer,
                                                      const CalibrationCollector& calib, int l,
                                                      const SchemeOptions& scheme, const SmoothOptions& options,
                                                      std::array<std::vector<float>, kNumSites>* factors);

}  // namespace xinfer::compress
