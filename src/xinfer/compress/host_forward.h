// Host (f32) forward of one decoder layer over calibration windows, linear by linear, for GPTQ's
// true-sequential quantization (GPTQ's `--true-sequential`, llm-compressor's sequential pipeline): each
// linear's input is handed to a hook before the linear runs, and the hook returns the weights the linear
// then uses (e.g. the ones it has just quantized from that input's Hessian), so every later linear sees
// the outputs of the already-quantized earlier ones: q/k/v, then o, then gate/up, then down; and the next
// layer sees this layer's quantized output.
//
// The arithmetic is LlamaModel::forward's (model/llama.h) in f32 on the host: RMSNorm x / sqrt(mean x^2 +
// eps) * w; q/k/v (+ bias); Qwen3 q/k RMSNorm per head; rotate-half RoPE with rope_inv_freq /
// rope_attention_scaling (model/rope.h); causal softmax(q k^T / sqrt(D)) v with GQA (q head h reads kv
// head h / (Hq / Hkv)); o (+ bias) added to the residual; post-attention RMSNorm; gate/up (+ bias);
// silu(gate) * up; down (+ bias) added to the residual. Full attention within each window (windows are
// independent sequences at positions 0..len-1; a sliding window shorter than a window is refused by
// the caller).
//
// Layout: hidden [T, H] holds the windows one after another (T = sum of window_lens); site inputs are
// [T, K] with K = H (qkv, gate_up), Hq D (o), I (down).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "xinfer/compress/host_layer.h"
#include "xinfer/compress/weight_quantizer.h"
#include "xinfer/model/llama.h"
#include "xinfer/model/model_config.h"

namespace xinfer::compress {

// Called once per site with its input x: [rows, k] (before any activation rounding). Returns the site's
// weights [n, k] (the fused matrix: q, k, v rows for qkv; gate, up for gate_up) the linear runs with, or
// nullptr for the layer's own float weights. The returned buffer must live until the call returns.
using SiteInputHook = std::function<const float*(model::LinearSite site, const float* x, int64_t rows, int64_t k)>;

// hidden: [T, H] layer input, replaced by the layer output. act: rounding of every linear's input
// (per token, W8A8 schemes) applied after the hook has seen it.
void host_layer_forward(const model::ModelConfig& c, const HostLayer& layer, const std::vector<int64_t>& window_lens,
                        std::vector<float>& hidden, const SiteInputHook& hook, ActQuant act);

// h += x^T x for x: [rows, k] (h: [k, k] in double; f32 products summed in chunks of 512 rows).
void add_outer_products(const float* x, int64_t rows, int64_t k, std::vector<double>& h);

}  // namespace xinfer::compress
