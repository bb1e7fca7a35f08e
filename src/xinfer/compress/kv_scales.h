// FP8 KV-cache scales calibrated by `xinfer quantize --kv-cache-scheme fp8` (docs/quantize.md): over the
// calibration windows, per layer and KV head, the largest |k| (after RoPE) and |v| the cache receives; then
// scale = max / 448, e4m3's largest value (llm-compressor's static minmax observer for kv_cache_scheme), per
// tensor (the layer's heads together; compressed-tensors strategy "tensor") or per KV head ("attn_head").
//
// The k max covers the keys as they are and as xinfer's FP8 cache stores them (Hadamard-rotated where the head
// dim allows it, backend/kv_rotation.h): a checkpoint then saturates no key in an engine that keeps them as
// they are (vLLM) nor in xinfer's rotated cache.
//
// observe() reads a CPU (host, f32) KV cache after a window of `tokens` positions ran through it, laid out as
// engine::WindowLogits does: position p at block 1 + p / block_size, row p % block_size.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "xinfer/backend/backend.h"
#include "xinfer/core/status.h"

namespace xinfer::compress {

enum class KvScaleStrategy { kTensor, kAttnHead };
const char* kv_scale_strategy_name(KvScaleStrategy s);                 // "tensor", "attn_head"
Result<KvScaleStrategy> parse_kv_scale_strategy(const std::string& s);  // INVALID_ARGUMENT naming the choices

class KvScaleCollector {
 public:
  KvScaleCollector(int num_layers, int num_kv_heads, int head_dim);
  // cache: f32, host memory, [blocks, num_kv_heads, block_size, head_dim] per layer.
  void observe(const backend::KvCache& cache, int tokens);
  int64_t tokens() const { return tokens_; }
  // [num_layers, num_kv_heads] max |k| (the plain and rotated keys' larger) and max |v|.
  const std::vector<float>& k_max() const { return k_max_; }
  const std::vector<float>& v_max() const { return v_max_; }
  // The dequantization scales: [num_layers] (tensor) or [num_layers, num_kv_heads] (attn_head), each
  // max / 448 (a head that saw only zeros gets the smallest positive max of its layer, or 1 / 448).
  std::vector<float> k_scales(KvScaleStrategy s) const { return scales(k_max_, s); }
  std::vector<float> v_scales(KvScaleStrategy s) const { return scales(v_max_, s); }
  // quantization_config.kv_cache_scheme for the strategy.
  static nlohmann::ordered_json scheme_json(KvScaleStrategy s);
  // Per layer: the k / v scale ranges, for the quantize report.
  nlohmann::ordered_json report(KvScaleStrategy s) const;

 private:
  std::vector<float> scales(const std::vector<float>& max, KvScaleStrategy s) const;
  int layers_, heads_, head_dim_;
  int64_t tokens_ = 0;
  std::vector<float> k_max_, v_max_;
};

}  // namespace xinfer::compress
