#include "xinfer/model/preset_configs.h"

#include <filesystem>
#include <utility>

#include <nlohmann/json.hpp>

namespace xinfer::model {
namespace {

// config.json of the Hugging Face repositories (keys the parser reads; values as published).
const std::pair<const char*, const char*> kPresets[] = {
    {"llama-3.1-8b", R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "attention_bias": false, "mlp_bias": false,
  "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu", "hidden_size": 4096,
  "intermediate_size": 14336, "max_position_embeddings": 131072, "num_attention_heads": 32,
  "num_hidden_layers": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16", "vocab_size": 128256})"},
    {"qwen2.5-7b", R"({
  "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "bos_token_id": 151643, "eos_token_id": 151643,
  "hidden_act": "silu", "hidden_size": 3584, "intermediate_size": 18944, "max_position_embeddings": 131072,
  "max_window_layers": 28, "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4,
  "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 131072, "tie_word_embeddings": false,
  "torch_dtype": "bfloat16", "use_sliding_window": false, "vocab_size": 152064})"},
    {"llama-3.1-70b", R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "attention_bias": false, "mlp_bias": false,
  "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu", "hidden_size": 8192,
  "intermediate_size": 28672, "max_position_embeddings": 131072, "num_attention_heads": 64,
  "num_hidden_layers": 80, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16", "vocab_size": 128256})"},
};

}  // namespace

std::optional<std::string> preset_config_json(const std::string& name) {
  for (const auto& [n, json] : kPresets)
    if (name == n) return std::string(json);
  return std::nullopt;
}

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const auto& p : kPresets) names.emplace_back(p.first);
  return names;
}

bool is_preset(const std::string& name_or_dir) {
  std::error_code ec;
  return !std::filesystem::is_directory(name_or_dir, ec) && preset_config_json(name_or_dir).has_value();
}

Result<ModelConfig> resolve_model_config(const std::string& name_or_dir) {
  std::error_code ec;
  if (std::filesystem::is_directory(name_or_dir, ec)) return load_model_config(name_or_dir);
  const std::optional<std::string> json = preset_config_json(name_or_dir);
  if (!json) {
    std::string names;
    for (const auto& n : preset_names()) names += (names.empty() ? "" : ", ") + n;
    return not_found("model " + name_or_dir + " is neither a directory nor a built-in config (" + names + ")");
  }
  Result<ModelConfig> c = parse_model_config(nlohmann::json::parse(*json));
  if (!c.ok()) return Status(c.status().code(), "built-in config " + name_or_dir + ": " + c.status().message());
  return c;
}

}  // namespace xinfer::model
