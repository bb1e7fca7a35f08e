#include "xinfer/model/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "xinfer/core/check.h"

namespace xinfer::model {
namespace {

// theta^(2i/d) for i in [0, d/2): the exponent is a float32 division (as torch's arange(...).float() / dim);
// the power is taken in double and rounded once to float32.
std::vector<float> pos_freqs(double theta, int dim) {
  std::vector<float> f(static_cast<size_t>(dim / 2));
  const float base = static_cast<float>(theta);  // torch promotes the Python scalar base to float32
  for (int i = 0; i < dim / 2; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
    f[static_cast<size_t>(i)] = static_cast<float>(std::pow(static_cast<double>(base), static_cast<double>(exponent)));
  }
  return f;
}

std::vector<float> default_inv_freq(double theta, int dim) {
  std::vector<float> f = pos_freqs(theta, dim);
  for (float& x : f) x = 1.0f / x;
  return f;
}

// transformers' llama3 rule in float32, in the order its tensor ops evaluate: `scalar / tensor` is
// reciprocal(tensor) * scalar, and Python scalars are rounded to float32 when they meet a float32 tensor.
std::vector<float> llama3_inv_freq(const ModelConfig& c) {
  std::vector<float> inv = default_inv_freq(c.rope_theta, c.head_dim);
  const RopeScaling& rs = c.rope_scaling;
  const float factor = rs.factor;
  const float low = rs.low_freq_factor, high = rs.high_freq_factor;
  const float old_ctx = static_cast<float>(rs.original_max_position_embeddings);
  const auto low_freq_wavelen = static_cast<float>(static_cast<double>(rs.original_max_position_embeddings) / low);
  const auto high_freq_wavelen = static_cast<float>(static_cast<double>(rs.original_max_position_embeddings) / high);
  const auto freq_span = static_cast<float>(static_cast<double>(high) - static_cast<double>(low));
  const auto two_pi = static_cast<float>(2.0 * std::numbers::pi);
  for (float& f : inv) {
    const float wavelen = (1.0f / f) * two_pi;
    if (wavelen < high_freq_wavelen) continue;  // high frequency: kept
    if (wavelen > low_freq_wavelen) {           // low frequency: interpolated by factor
      f = f / factor;
      continue;
    }
    const float smooth = ((1.0f / wavelen) * old_ctx - low) / freq_span;  // medium: blend the two
    f = (1.0f - smooth) * f / factor + smooth * f;
  }
  return inv;
}

double yarn_mscale(double scale, double mscale) { return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

// Dimension index whose wavelength makes `rotations` turns over `max_pos` positions (the YaRN paper, eq. 17).
double yarn_correction_dim(double rotations, int dim, double base, int max_pos) {
  return (dim * std::log(max_pos / (rotations * 2.0 * std::numbers::pi))) / (2.0 * std::log(base));
}

std::vector<float> yarn_inv_freq(const ModelConfig& c) {
  const RopeScaling& rs = c.rope_scaling;
  const int dim = c.head_dim;
  const std::vector<float> pos = pos_freqs(c.rope_theta, dim);
  double low = yarn_correction_dim(rs.beta_fast, dim, c.rope_theta, rs.original_max_position_embeddings);
  double high = yarn_correction_dim(rs.beta_slow, dim, c.rope_theta, rs.original_max_position_embeddings);
  if (rs.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // avoids a zero-width ramp
  const float lo = static_cast<float>(low), span = static_cast<float>(high - low);
  std::vector<float> inv(pos.size());
  for (size_t i = 0; i < pos.size(); ++i) {
    const float ramp = std::clamp((static_cast<float>(i) - lo) / span, 0.0f, 1.0f);
    const float extrapolation_factor = 1.0f - ramp;
    const float extrapolation = 1.0f / pos[i];
    const float interpolation = 1.0f / (rs.factor * pos[i]);  // factor rounded to float32 first
    inv[i] = interpolation * (1.0f - extrapolation_factor) + extrapolation * extrapolation_factor;
  }
  return inv;
}

}  // namespace

std::vector<float> rope_inv_freq(const ModelConfig& config) {
  XI_CHECK(config.head_dim > 0 && config.head_dim % 2 == 0) << "head_dim " << config.head_dim;
  switch (config.rope_scaling.type) {
    case RopeScalingType::kNone:
    case RopeScalingType::kDynamic:  // at its base length, dynamic NTK leaves the base unchanged
      return default_inv_freq(config.rope_theta, config.head_dim);
    case RopeScalingType::kLinear: {
      std::vector<float> f = default_inv_freq(config.rope_theta, config.head_dim);
      for (float& x : f) x /= config.rope_scaling.factor;
      return f;
    }
    case RopeScalingType::kLlama3: return llama3_inv_freq(config);
    case RopeScalingType::kYarn: return yarn_inv_freq(config);
  }
  XI_CHECK(false) << "unknown rope scaling type";
  return {};
}

float rope_attention_scaling(const ModelConfig& config) {
  const RopeScaling& rs = config.rope_scaling;
  if (rs.type != RopeScalingType::kYarn) return 1.0f;
  if (rs.attention_factor) return *rs.attention_factor;
  // transformers: `if mscale and mscale_all_dim` (both present and non-zero).
  if (rs.mscale && rs.mscale_all_dim && *rs.mscale != 0 && *rs.mscale_all_dim != 0)
    return static_cast<float>(yarn_mscale(rs.factor, *rs.mscale) / yarn_mscale(rs.factor, *rs.mscale_all_dim));
  return static_cast<float>(yarn_mscale(rs.factor, 1.0));
}

}  // namespace xinfer::model
