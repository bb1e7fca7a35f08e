// Host (f32) copies of a decoder layer's weights, the per-module quantized form of a layer, and the way
// back onto the backend (model::LlamaModel::replace_layer) in xinfer's formats (scheme.h).
//
// The fused matrices are split into the Hugging Face modules compressed-tensors names, in this order
// (kModules): q, k, v rows of qkv; o; gate, up rows of gate_up; down. Row ranges: q [0, Hq D),
// k [Hq D, (Hq + Hkv) D), v [(Hq + Hkv) D, (Hq + 2 Hkv) D); gate [0, I), up [I, 2I).
#pragma once

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "xinfer/backend/backend.h"
#include "xinfer/compress/scheme.h"
#include "xinfer/compress/weight_quantizer.h"
#include "xinfer/core/status.h"
#include "xinfer/model/llama.h"

namespace xinfer::compress {

struct HostLinear {
  int64_t n = 0, k = 0;
  std::vector<float> w;     // [n, k]
  std::vector<float> bias;  // [n] or empty
};

struct HostLayer {
  std::vector<float> input_norm, post_attention_norm;  // [H]
  std::vector<float> q_norm, k_norm;                   // [D] (Qwen3) or empty
  HostLinear qkv, o, gate_up, down;
};

constexpr int kNumModules = 7;
enum class Module { kQ, kK, kV, kO, kGate, kUp, kDown };
const char* module_name(int m);  // "self_attn.q_proj", ..., "mlp.down_proj"

struct ModuleRows {  // which fused matrix and which of its rows a module is
  model::LinearSite site;
  int64_t row_begin, rows;
};
ModuleRows module_rows(const model::ModelConfig& c, int m);

// Copies layer l of `model` (dense weights) to the host. FAILED_PRECONDITION if a linear is not dense.
Result<HostLayer> copy_layer(backend::Backend& backend, const model::LlamaModel& model, int l);

HostLinear& linear_of(HostLayer& layer, model::LinearSite site);
const HostLinear& linear_of(const HostLayer& layer, model::LinearSite site);

// The float weights of one module: [rows, k].
std::vector<float> module_weight(const model::ModelConfig& c, const HostLayer& layer, int m);

// Uploads `layer` onto the backend: dense (modules empty) or with every linear quantized in `scheme`
// (modules[m] in the layer's module order). Returns the weights and the buffers that own them.
struct UploadedLayer {
  model::LayerWeights weights;
  std::vector<std::shared_ptr<backend::DeviceBuffer>> buffers;
};
UploadedLayer upload_layer(backend::Backend& backend, const model::ModelConfig& c, const HostLayer& layer,
                           const std::vector<QuantizedWeight>* modules, const SchemeOptions& scheme);

}  // namespace xinfer::compress
