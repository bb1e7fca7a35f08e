// Reference for the sampling checks (the host Sampler's unit tests and the device sampling GPU tests),
// written from the definitions in engine/sampler.h and backend.h (not from either implementation): the
// filtered distribution in double, the logit adjustments from SamplingParams, and a chi-squared
// goodness-of-fit statistic. Host-only.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <vector>

#include "xinfer/engine/sampling_params.h"

namespace xinfer::test_ref {

struct Filter {
  float temperature = 1.0f;
  int top_k = 0;       // <= 0 or >= vocab: off
  float top_p = 1.0f;  // 1: off
  float min_p = 0.0f;  // 0: off
};

struct Expected {
  std::vector<double> prob;
  // Distance of top_p from the nearest cumulative mass at which the kept set would change (1 if top-p is
  // off): cases keep it well above float rounding so that exact thresholds are what is tested.
  double top_p_margin = 1.0;
};

// softmax(logits / T); min_p keeps p >= min_p * max p; top_k keeps logits >= the k-th largest (all ties);
// renormalize; top_p keeps, most likely first (ties -> lower id), each token whose preceding mass is < top_p;
// renormalize. -inf logits have probability 0.
inline Expected expected_distribution(const std::vector<float>& logits, const Filter& f) {
  const size_t V = logits.size();
  Expected r;
  std::vector<double>& prob = r.prob;
  prob.assign(V, 0.0);
  double mx = -INFINITY;
  for (float l : logits) mx = std::max(mx, static_cast<double>(l) / f.temperature);
  double z = 0;
  for (size_t i = 0; i < V; ++i) z += prob[i] = std::exp(static_cast<double>(logits[i]) / f.temperature - mx);
  for (double& x : prob) x /= z;
  std::vector<bool> keep(V, true);
  if (f.min_p > 0) {
    const double pmax = *std::max_element(prob.begin(), prob.end());
    for (size_t i = 0; i < V; ++i) keep[i] = keep[i] && prob[i] >= f.min_p * pmax;
  }
  if (f.top_k > 0 && static_cast<size_t>(f.top_k) < V) {
    std::vector<float> sorted = logits;
    std::sort(sorted.begin(), sorted.end(), std::greater<float>());
    const float kth = sorted[static_cast<size_t>(f.top_k) - 1];
    for (size_t i = 0; i < V; ++i) keep[i] = keep[i] && logits[i] >= kth;
  }
  auto renormalize = [&] {
    double s = 0;
    for (size_t i = 0; i < V; ++i) s += keep[i] ? prob[i] : 0.0;
    for (size_t i = 0; i < V; ++i) prob[i] = keep[i] ? prob[i] / s : 0.0;
  };
  renormalize();
  if (f.top_p < 1) {
    std::vector<size_t> order(V);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return prob[a] > prob[b]; });
    double before = 0;
    r.top_p_margin = 1.0;
    for (size_t i : order) {
      if (!keep[i] || prob[i] == 0) continue;
      r.top_p_margin = std::min(r.top_p_margin, std::abs(before - f.top_p));
      if (before < f.top_p) {
        before += prob[i];
      } else {
        keep[i] = false;
      }
    }
    renormalize();
  }
  return r;
}

// The host Sampler's logit adjustments from the request's parameters (sampler.h order): min_tokens masks
// stop ids and EOS (unless ignore_eos) -> + logit_bias -> repetition on prompt and output tokens (once per
// distinct token) -> presence and frequency on output counts.
inline std::vector<float> adjusted_logits(std::vector<float> l, const engine::SamplingParams& p,
                                          const std::vector<int32_t>& prompt, const std::vector<int32_t>& output,
                                          const std::vector<int32_t>& eos) {
  const float inf = std::numeric_limits<float>::infinity();
  if (static_cast<int64_t>(output.size()) < p.min_tokens) {
    for (int32_t t : p.stop_token_ids) l[static_cast<size_t>(t)] = -inf;
    if (!p.ignore_eos)
      for (int32_t t : eos) l[static_cast<size_t>(t)] = -inf;
  }
  for (const auto& [t, b] : p.logit_bias) l[static_cast<size_t>(t)] += b;
  if (p.repetition_penalty != 1.0f) {
    std::set<int32_t> seen(prompt.begin(), prompt.end());
    seen.insert(output.begin(), output.end());
    for (int32_t t : seen) {
      float& x = l[static_cast<size_t>(t)];
      x = x > 0 ? x / p.repetition_penalty : x * p.repetition_penalty;
    }
  }
  std::map<int32_t, int> counts;
  for (int32_t t : output) ++counts[t];
  if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f)
    for (const auto& [t, c] : counts) l[static_cast<size_t>(t)] -= p.presence_penalty + p.frequency_penalty * static_cast<float>(c);
  return l;
}

struct ChiSquared {
  double stat = 0;
  int df = 0;
  int64_t impossible_draws = 0;  // draws of tokens with expected probability 0
  // The statistic's mean is df and its sd sqrt(2 df); 6 sd + 10 is far in the tail.
  bool plausible() const { return impossible_draws == 0 && stat < df + 6 * std::sqrt(2.0 * df) + 10; }
};

// Tokens with expected count < 5 are pooled into one bucket.
inline ChiSquared chi_squared(const std::vector<int64_t>& counts, const std::vector<double>& expected, int64_t draws) {
  ChiSquared r;
  double pooled_obs = 0, pooled_exp = 0;
  int buckets = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    const double e = expected[i] * static_cast<double>(draws);
    if (expected[i] == 0) {
      r.impossible_draws += counts[i];
    } else if (e < 5) {
      pooled_obs += static_cast<double>(counts[i]);
      pooled_exp += e;
    } else {
      r.stat += (static_cast<double>(counts[i]) - e) * (static_cast<double>(counts[i]) - e) / e;
      ++buckets;
    }
  }
  if (pooled_exp > 0) {
    r.stat += (pooled_obs - pooled_exp) * (pooled_obs - pooled_exp) / pooled_exp;
    ++buckets;
  }
  r.df = std::max(1, buckets - 1);
  return r;
}

}  // namespace xinfer::test_ref
