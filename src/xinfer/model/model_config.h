// ModelConfig: the architecture hyper-parameters of a Hugging Face decoder-only model, parsed from its
// config.json (and generation_config.json for extra EOS ids). One struct covers every supported family:
//
//   LlamaForCausalLM    (model_type llama:   Llama 2, 3, 3.1 with llama3 rope scaling, 3.2 with tied embeddings)
//   MistralForCausalLM  (model_type mistral: optional sliding_window)
//   Qwen2ForCausalLM    (model_type qwen2:   q/k/v projections have a bias; Qwen2 and Qwen2.5)
//   Qwen3ForCausalLM    (model_type qwen3:   RMSNorm on q and k per head; head_dim need not be hidden/heads)
//
// Invariants of a ModelConfig returned by parse_model_config():
//   all sizes > 0; num_kv_heads divides num_heads (GQA; MQA when num_kv_heads == 1); head_dim is even;
//   when config.json has no head_dim, num_heads divides hidden_size and head_dim = hidden_size / num_heads;
//   torch_dtype is kF32, kBF16 or kF16; rope_scaling.type is one of RopeScalingType.
// Keys missing from config.json take the defaults of the transformers config class of that model type
// (e.g. num_key_value_heads = num_attention_heads, rope_theta = 10000, Qwen3 head_dim = 128).
// A `quantization_config` (compressed-tensors, GPTQ, AWQ) is parsed into `quantization` by
// parse_quantization_config (quantization_config.h); its errors name the field.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "xinfer/core/dtype.h"
#include "xinfer/core/status.h"
#include "xinfer/model/quantization_config.h"

namespace xinfer::model {

enum class RopeScalingType { kNone, kLinear, kDynamic, kLlama3, kYarn };
const char* rope_scaling_type_name(RopeScalingType t);  // "none", "linear", "dynamic", "llama3", "yarn"

// config.json "rope_scaling" (or transformers v5 "rope_parameters"). Fields not used by `type` keep defaults.
struct RopeScaling {
  RopeScalingType type = RopeScalingType::kNone;
  float factor = 1.0f;                         // linear, dynamic, llama3, yarn
  float low_freq_factor = 1.0f;                // llama3
  float high_freq_factor = 4.0f;               // llama3
  int original_max_position_embeddings = 8192; // llama3, yarn (yarn default: max_position_embeddings)
  float beta_fast = 32.0f;                     // yarn
  float beta_slow = 1.0f;                      // yarn
  std::optional<float> mscale;                 // yarn
  std::optional<float> mscale_all_dim;         // yarn
  std::optional<float> attention_factor;       // yarn: overrides the mscale-derived attention scaling
  bool truncate = true;                        // yarn: floor/ceil the correction range
};

struct ModelConfig {
  std::string architecture;  // "LlamaForCausalLM" | "MistralForCausalLM" | "Qwen2ForCausalLM" | "Qwen3ForCausalLM"
  std::string model_type;    // "llama" | "mistral" | "qwen2" | "qwen3"
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;  // config head_dim, or hidden_size / num_heads
  int vocab_size = 0;
  int max_position_embeddings = 0;
  float rms_norm_eps = 1e-6f;
  float rope_theta = 10000.0f;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v projections have a bias: Qwen2 always; llama/qwen3 attention_bias key
  bool o_bias = false;          // o_proj has a bias: llama/qwen3 attention_bias key (never Qwen2)
  bool mlp_bias = false;        // llama's mlp_bias key
  bool qk_norm = false;         // Qwen3: q_norm / k_norm weights [head_dim] per layer
  DType torch_dtype = DType::kF32;
  std::optional<int32_t> bos_token_id;
  std::vector<int32_t> eos_token_ids;  // config eos_token_id (int or list) then new ids from generation_config.json
  std::optional<int> sliding_window;   // Mistral (null in most configs); Qwen2/3 only when use_sliding_window
  QuantizationConfig quantization;     // config.json quantization_config (method kNone when absent)

  // Longest sequence this implementation runs exactly as Hugging Face does: max_position_embeddings, or the
  // sliding window when one is set and shorter. Attention here is always full (no window), which equals
  // windowed attention only while every position is within the window of every key: sequences up to
  // `sliding_window` tokens. The engine caps max_model_len at this and refuses a longer one.
  int context_limit() const;
  // Why context_limit() is what it is, for error messages: "the model's max_position_embeddings 32768", or
  // "config.json's sliding_window 4096 (windowed attention is not implemented: ...)".
  std::string context_limit_reason() const;

  // One-line summary for the start-up log, e.g.
  // "LlamaForCausalLM: 16 layers, hidden 2048, heads 32/8 x 64, ffn 8192, vocab 128256, ctx 131072, bf16, ..."
  std::string to_string() const;
};

// Validates and converts a parsed config.json. Errors: UNIMPLEMENTED for unsupported architecture,
// rope_scaling type, torch_dtype or hidden_act; INVALID_ARGUMENT for missing or ill-typed keys and
// inconsistent head counts. Messages name the key, what was expected and what was found.
Result<ModelConfig> parse_model_config(const nlohmann::json& config);

// Reads DIR/config.json (NOT_FOUND if absent) and merges eos ids from DIR/generation_config.json if present.
// Error messages are prefixed with the file path.
Result<ModelConfig> load_model_config(const std::string& model_dir);

}  // namespace xinfer::model
