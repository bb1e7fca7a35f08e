// LlamaModel: the decoder-only transformer graph shared by Llama 2/3/3.x, Mistral, Qwen2/2.5 and Qwen3,
// written once against the Backend op interface (no device code here).
//
// Per layer (pre-norm):
//   h = rms_norm(x)                          (fused with the residual add of the previous layer)
//   qkv = h @ Wqkv^T (+ bias: Qwen2)         q, k, v projections concatenated at load: [(Hq + 2Hkv) * D, H]
//   q, k = rms_norm per head (Qwen3)
//   q, k = rope(q, k); cache[k, v] = k, v    (paged; rotate-half layout as in transformers)
//   a = paged_attention(q, cache) @ Wo^T
//   x = x + a; h = rms_norm(x)
//   x = x + (silu(h @ Wgate^T) * (h @ Wup^T)) @ Wdown^T   (gate and up concatenated at load: [2I, H])
// then logits = rms_norm(x)[logit rows] @ Wlm^T (lm_head, or the embedding when tied).
//
// Weights are converted once at load to the backend's activation dtype (GGUF: kept in their block format
// where the backend supports it). Buffers for activations are
// sized for `max_tokens` tokens per step and `max_logit_rows` logit rows, allocated once.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "xinfer/backend/backend.h"
#include "xinfer/backend/communicator.h"
#include "xinfer/core/status.h"
#include "xinfer/model/model_config.h"
#include "xinfer/model/shard.h"

namespace xinfer::model {

class GgufFile;

// auto: weights from the directory's safetensors. dummy: random weights in the real shapes (N(0, 0.02),
// norm weights 1, deterministic in `seed`), generated on the backend; the model may then be a built-in
// preset name (preset_configs.h) instead of a directory.
enum class LoadFormat { kAuto, kDummy };
const char* load_format_name(LoadFormat f);                 // "auto", "dummy"
Result<LoadFormat> parse_load_format(const std::string& s);  // INVALID_ARGUMENT otherwise

struct LoadOptions {
  int max_tokens = 2048;      // most tokens one forward step may carry
  int max_logit_rows = 256;   // most rows whose logits one step may ask for
  int max_model_len = 0;      // context limit (rope table size); 0: max_position_embeddings
  bool show_progress = true;  // progress bar while converting weights
  LoadFormat load_format = LoadFormat::kAuto;
  uint64_t seed = 0;          // dummy weights
  // Dummy weights: the decoder linears random in this format (dummy_quantized.h) instead of dense.
  std::optional<quant::WeightFormat> dummy_quantization;
  // GGUF: dequantize every block-format weight at load even where the backend supports the format (the
  // float reference path of the quantized kernels; `xinfer logits --dequantize`).
  bool dequantize_gguf = false;
  // Tensor parallelism (docs/tensor_parallel.md): this model is rank tp_rank of tp_size (ModelShard), and
  // comm (one per rank, same order of collectives on every rank) joins the ranks. tp_size 1: no comm, or a
  // one-rank comm to run the tensor-parallel code path alone (tests: it must equal the plain path).
  int tp_size = 1;
  int tp_rank = 0;
  backend::Communicator* comm = nullptr;
};

struct LayerWeights {
  TensorView input_norm;         // [H]
  TensorView post_attention_norm;  // [H]
  backend::LinearWeights qkv;    // [(Hq + 2Hkv) * D, H]
  backend::LinearWeights o;      // [H, Hq * D]
  backend::LinearWeights gate_up;  // [2I, H]
  backend::LinearWeights down;   // [H, I]
  TensorView q_norm;             // [D] (Qwen3) or empty
  TensorView k_norm;             // [D] (Qwen3) or empty
};

// Sees the input of every decoder-layer linear during forward() (calibration: compress/). Called on the
// forward's thread, before the linear runs, with the rows of this step.
enum class LinearSite { kQkv = 0, kO = 1, kGateUp = 2, kDown = 3 };
const char* linear_site_name(LinearSite s);  // "qkv", "o", "gate_up", "down"
class ActivationObserver {
 public:
  virtual ~ActivationObserver() = default;
  // x: [rows, cols] f32 on the host (the linear's input), valid only during the call.
  virtual void observe(int layer, LinearSite site, const float* x, int64_t rows, int64_t cols) = 0;
};

class LlamaModel {
 public:
  // Reads config.json and the safetensors of `dir`, converts weights onto `backend`. With
  // LoadFormat::kDummy, `dir` may be a preset name and no weight file is read. A `.gguf` file instead of a
  // directory: config and weights from it (gguf_config.h; quantized linears kept where the backend
  // supports their format, dequantized at load otherwise).
  static Result<std::unique_ptr<LlamaModel>> load(const std::string& dir, backend::Backend& backend,
                                                  const LoadOptions& options);
  // Parameters of the weights load() creates (tied embeddings counted once).
  static int64_t parameter_count(const ModelConfig& config);

  const ModelConfig& config() const { return config_; }
  const LoadOptions& options() const { return options_; }
  int max_model_len() const { return max_model_len_; }
  size_t weight_bytes() const { return weight_bytes_; }

  // Runs one step over the tokens described by `step`, writing K/V into `kv`.
  // Returns logits [step.num_logit_rows, vocab] on the device, valid until the next forward().
  TensorView forward(const backend::StepMeta& step, const backend::KvCache& kv);

  // Calibration and quantization search (compress/), a narrow in-memory API:
  // with an observer set, forward() takes the unfused op path and copies each linear's input to the host
  // for it (slower; nullptr restores the fused path). The observer must outlive its use. Under tensor
  // parallelism (LoadOptions::comm) the sharded path keeps its ops and reports this rank's inputs: whole rows
  // for qkv / gate_up, the rank's columns for o / down (calibration itself runs on one rank).
  void set_observer(ActivationObserver* observer) { observer_ = observer; }
  // This rank's share of the model (ModelShard::whole() without tensor parallelism).
  const ModelShard& shard() const { return shard_; }
  const LayerWeights& layer(int l) const { return layers_[static_cast<size_t>(l)]; }
  // This rank's rows of the embedding table, [shard().local_vocab(), H] (the whole table without TP).
  const backend::LinearWeights& embedding() const { return embed_; }
  const TensorView& final_norm() const { return final_norm_; }
  const backend::LinearWeights& lm_head() const { return lm_head_; }
  // Replaces layer l's weights (norms and linears, same shapes, any format the backend supports) by `w`,
  // whose tensors live in `buffers` (owned from now on; the previous replacement's buffers are freed).
  void replace_layer(int l, const LayerWeights& w, std::vector<std::shared_ptr<backend::DeviceBuffer>> buffers);

 private:
  LlamaModel(ModelConfig config, backend::Backend& backend, LoadOptions options);
  Status load_weights(const std::string& dir);  // dir unused for dummy weights
  Status load_gguf_weights(const GgufFile& file);  // gguf_weights.cpp
  void make_rope_table();                          // cos_sin_ for max_model_len_ positions
  void allocate_workspace();
  void forward_observed(const backend::StepMeta& step, const backend::KvCache& kv);  // the unfused path
  // Tensor parallel layers: the o / down partials all-reduced before they enter the residual.
  void forward_sharded(const backend::StepMeta& step, const backend::KvCache& kv);

  ModelConfig config_;
  backend::Backend& backend_;
  LoadOptions options_;
  int max_model_len_ = 0;
  size_t weight_bytes_ = 0;

  std::vector<std::shared_ptr<backend::DeviceBuffer>> owned_;  // weights and workspace
  backend::LinearWeights embed_;  // [local_vocab, H] (this rank's rows; [V, H] unsharded): dense, or a GGUF
                                  // block format (embedding_weights())
  std::vector<LayerWeights> layers_;
  std::vector<std::vector<std::shared_ptr<backend::DeviceBuffer>>> replaced_;  // [layer]: replace_layer()'s
  ActivationObserver* observer_ = nullptr;
  TensorView final_norm_;  // [H]
  backend::LinearWeights lm_head_;  // [local_vocab, H] (tied: embed_ itself)
  TensorView cos_sin_;     // [max_model_len, D]

  // Workspace, [max_tokens, ...] each; forward() uses the first T rows.
  TensorView residual_, normed_, qkv_, attn_, proj_, gate_up_, mlp_;
  TensorView last_hidden_;  // [max_logit_rows, H]
  TensorView logits_;       // [max_logit_rows, V]
  ModelShard shard_;
  TensorView local_logits_;  // tensor parallel: [max_logit_rows, shard_.local_vocab()] before the all-gather
};

}  // namespace xinfer::model
