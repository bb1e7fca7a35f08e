#include "xinfer/compress/kv_scales.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "xinfer/backend/kv_rotation.h"
#include "xinfer/core/check.h"

namespace xinfer::compress {

namespace {
constexpr float kE4m3Max = 448.0f;
}

const char* kv_scale_strategy_name(KvScaleStrategy s) { return s == KvScaleStrategy::kTensor ? "tensor" : "attn_head"; }

Result<KvScaleStrategy> parse_kv_scale_strategy(const std::string& s) {
  if (s == "tensor") return KvScaleStrategy::kTensor;
  if (s == "attn_head" || s == "head") return KvScaleStrategy::kAttnHead;
  return invalid_argument("--kv-cache-strategy must be tensor or attn_head, got '" + s + "'");
}

KvScaleCollector::KvScaleCollector(int num_layers, int num_kv_heads, int head_dim)
    : layers_(num_layers), heads_(num_kv_heads), head_dim_(head_dim) {
  k_max_.assign(static_cast<size_t>(num_layers) * static_cast<size_t>(num_kv_heads), 0.0f);
  v_max_.assign(k_max_.size(), 0.0f);
}

void KvScaleCollector::observe(const backend::KvCache& cache, int tokens) {
  XI_CHECK_EQ(static_cast<int>(cache.layers.size()), layers_);
  const bool rotatable = backend::kv_rotation_supported(head_dim_);
  std::vector<float> row(static_cast<size_t>(head_dim_));
  for (int l = 0; l < layers_; ++l) {
    const backend::LayerKvCache& c = cache.layers[static_cast<size_t>(l)];
    XI_CHECK(c.k.dtype == DType::kF32 && c.k.device == Device::kCpu) << "KV statistics read a host f32 cache";
    XI_CHECK_EQ(c.k.shape[1], heads_);
    XI_CHECK_EQ(c.k.shape[3], head_dim_);
    const int64_t bs = c.k.shape[2];
    XI_CHECK_LE((tokens + bs - 1) / bs + 1, c.k.shape[0]) << "window longer than the cache";
    for (int p = 0; p < tokens; ++p)
      for (int h = 0; h < heads_; ++h) {
        const int64_t off = ((static_cast<int64_t>(1 + p / bs) * heads_ + h) * bs + p % bs) * head_dim_;
        const float* k = c.k.as<float>() + off;
        const float* v = c.v.as<float>() + off;
        float& km = k_max_[static_cast<size_t>(l * heads_ + h)];
        float& vm = v_max_[static_cast<size_t>(l * heads_ + h)];
        for (int d = 0; d < head_dim_; ++d) {
          km = std::max(km, std::fabs(k[d]));
          vm = std::max(vm, std::fabs(v[d]));
        }
        if (!rotatable) continue;
        std::memcpy(row.data(), k, sizeof(float) * row.size());
        backend::kv_rotate_head(row.data(), head_dim_, /*is_k=*/true);
        for (float x : row) km = std::max(km, std::fabs(x));
      }
  }
  tokens_ += tokens;
}

std::vector<float> KvScaleCollector::scales(const std::vector<float>& max, KvScaleStrategy s) const {
  std::vector<float> out;
  for (int l = 0; l < layers_; ++l) {
    const auto first = max.begin() + static_cast<std::ptrdiff_t>(l) * heads_;
    const float layer_max = *std::max_element(first, first + heads_);
    float smallest = layer_max;  // the smallest positive max of the layer, for heads that saw only zeros
    for (auto it = first; it != first + heads_; ++it)
      if (*it > 0) smallest = std::min(smallest, *it);
    auto scale = [&](float m) { return (m > 0 ? m : smallest > 0 ? smallest : 1.0f) / kE4m3Max; };
    if (s == KvScaleStrategy::kTensor) {
      out.push_back(scale(layer_max));
      continue;
    }
    for (auto it = first; it != first + heads_; ++it) out.push_back(scale(*it));
  }
  return out;
}

nlohmann::ordered_json KvScaleCollector::scheme_json(KvScaleStrategy s) {
  return {{"num_bits", 8},         {"type", "float"},  {"symmetric", true},
          {"strategy", kv_scale_strategy_name(s)}, {"group_size", nullptr}, {"dynamic", false},
          {"observer", "minmax"}, {"observer_kwargs", nlohmann::ordered_json::object()},
          {"actorder", nullptr},  {"block_structure", nullptr}};
}

nlohmann::ordered_json KvScaleCollector::report(KvScaleStrategy s) const {
  const std::vector<float> ks = k_scales(s), vs = v_scales(s);
  const size_t per = s == KvScaleStrategy::kTensor ? 1 : static_cast<size_t>(heads_);
  nlohmann::ordered_json layers = nlohmann::ordered_json::array();
  for (int l = 0; l < layers_; ++l) {
    const auto kb = ks.begin() + static_cast<std::ptrdiff_t>(l * per), vb = vs.begin() + static_cast<std::ptrdiff_t>(l * per);
    const auto [k0, k1] = std::minmax_element(kb, kb + static_cast<std::ptrdiff_t>(per));
    const auto [v0, v1] = std::minmax_element(vb, vb + static_cast<std::ptrdiff_t>(per));
    layers.push_back({{"layer", l}, {"k_scale", {*k0, *k1}}, {"v_scale", {*v0, *v1}}});
  }
  return {{"scheme", scheme_json(s)}, {"tokens", tokens_}, {"layers", layers}};
}

}  // namespace xinfer::compress
