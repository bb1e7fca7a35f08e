#include "xinfer/model/gguf_config.h"

#include <algorithm>
#include <filesystem>

namespace xinfer::model {

bool is_gguf_path(const std::string& path) {
  std::error_code ec;
  return path.size() > 5 && path.compare(path.size() - 5, 5, ".gguf") == 0 &&
         std::filesystem::is_regular_file(path, ec);
}

std::string gguf_tensor_name(int layer, const char* name) {
  return (layer >= 0 ? "blk." + std::to_string(layer) + "." : std::string()) + name + ".weight";
}

int64_t gguf_row_of_hf_row(int64_t r, int64_t head_dim) {
  const int64_t head = r / head_dim, within = r % head_dim, half = head_dim / 2;
  return head * head_dim + 2 * (within % half) + within / half;
}

Result<ModelConfig> gguf_model_config(const GgufFile& f) {
  const std::string file = f.path();
  XI_ASSIGN_OR_RETURN(std::string arch, f.get_string("general.architecture"));
  if (arch != "llama")
    return unimplemented(file + ": unsupported general.architecture '" + arch + "' (supported: llama)");
  const std::string p = arch + ".";
  ModelConfig c;
  c.architecture = "LlamaForCausalLM";
  c.model_type = "llama";
  auto positive = [&](const std::string& key, std::optional<int64_t> fallback) -> Result<int> {
    XI_ASSIGN_OR_RETURN(int64_t v, fallback ? f.get_int_or(key, *fallback) : f.get_int(key));
    if (v <= 0 || v > (int64_t{1} << 30))
      return invalid_argument(file + ": metadata key '" + key + "': expected a positive integer, found " +
                              std::to_string(v));
    return static_cast<int>(v);
  };
  XI_ASSIGN_OR_RETURN(c.hidden_size, positive(p + "embedding_length", std::nullopt));
  XI_ASSIGN_OR_RETURN(c.num_layers, positive(p + "block_count", std::nullopt));
  XI_ASSIGN_OR_RETURN(c.intermediate_size, positive(p + "feed_forward_length", std::nullopt));
  XI_ASSIGN_OR_RETURN(c.num_heads, positive(p + "attention.head_count", std::nullopt));
  XI_ASSIGN_OR_RETURN(c.num_kv_heads, positive(p + "attention.head_count_kv", c.num_heads));
  XI_ASSIGN_OR_RETURN(c.max_position_embeddings, positive(p + "context_length", std::nullopt));
  if (f.find(p + "attention.key_length")) {
    XI_ASSIGN_OR_RETURN(c.head_dim, positive(p + "attention.key_length", std::nullopt));
  } else {
    if (c.hidden_size % c.num_heads != 0)
      return invalid_argument(file + ": " + p + "attention.head_count (" + std::to_string(c.num_heads) +
                              ") does not divide " + p + "embedding_length (" +
                              std::to_string(c.hidden_size) + ")");
    c.head_dim = c.hidden_size / c.num_heads;
  }
  if (f.find(p + "attention.value_length")) {
    XI_ASSIGN_OR_RETURN(int v, positive(p + "attention.value_length", std::nullopt));
    if (v != c.head_dim)
      return unimplemented(file + ": metadata key '" + p + "attention.value_length' " + std::to_string(v) +
                           " differs from the key length " + std::to_string(c.head_dim));
  }
  if (c.num_heads % c.num_kv_heads != 0)
    return invalid_argument(file + ": " + p + "attention.head_count_kv (" + std::to_string(c.num_kv_heads) +
                            ") does not divide " + p + "attention.head_count (" +
                            std::to_string(c.num_heads) + ")");
  if (c.head_dim % 2 != 0)
    return invalid_argument(file + ": head_dim must be even for rotary embeddings, found " +
                            std::to_string(c.head_dim));
  XI_ASSIGN_OR_RETURN(int rope_dims, positive(p + "rope.dimension_count", c.head_dim));
  if (rope_dims != c.head_dim)
    return unimplemented(
        file + ": metadata key '" + p + "rope.dimension_count' " + std::to_string(rope_dims) +
        ": partial rotary embeddings are not supported (head_dim " + std::to_string(c.head_dim) + ")");
  if (f.find(p + "vocab_size")) {
    XI_ASSIGN_OR_RETURN(c.vocab_size, positive(p + "vocab_size", std::nullopt));
  } else {
    XI_ASSIGN_OR_RETURN(const std::vector<std::string>* tokens, f.get_string_array("tokenizer.ggml.tokens"));
    c.vocab_size = static_cast<int>(tokens->size());
  }
  XI_ASSIGN_OR_RETURN(double eps, f.get_float(p + "attention.layer_norm_rms_epsilon"));
  if (!(eps > 0))
    return invalid_argument(file + ": metadata key '" + p +
                            "attention.layer_norm_rms_epsilon': expected > 0, found " + std::to_string(eps));
  c.rms_norm_eps = static_cast<float>(eps);
  XI_ASSIGN_OR_RETURN(double theta, f.get_float_or(p + "rope.freq_base", 10000.0));
  if (!(theta > 1.0))
    return invalid_argument(file + ": metadata key '" + p + "rope.freq_base': expected > 1, found " +
                            std::to_string(theta));
  c.rope_theta = static_cast<float>(theta);

  std::string scaling = "none";
  if (f.find(p + "rope.scaling.type")) {
    XI_ASSIGN_OR_RETURN(scaling, f.get_string(p + "rope.scaling.type"));
  }
  XI_ASSIGN_OR_RETURN(double factor, f.get_float_or(p + "rope.scaling.factor", 1.0));
  if (scaling == "linear" && factor != 1.0) {
    c.rope_scaling.type = RopeScalingType::kLinear;
    c.rope_scaling.factor = static_cast<float>(factor);
  } else if (scaling == "yarn") {
    c.rope_scaling.type = RopeScalingType::kYarn;
    c.rope_scaling.factor = static_cast<float>(factor);
    XI_ASSIGN_OR_RETURN(c.rope_scaling.original_max_position_embeddings,
                        positive(p + "rope.scaling.original_context_length", c.max_position_embeddings));
  } else if (scaling != "none" && scaling != "linear") {
    return unimplemented(file + ": metadata key '" + p + "rope.scaling.type': unsupported '" + scaling +
                         "' (supported: none, linear, yarn)");
  }
  if (f.find_tensor("rope_freqs.weight"))
    return unimplemented(file +
                         ": tensor 'rope_freqs.weight' (llama3 rope scaling factors) is not supported yet");
  c.tie_word_embeddings = f.find_tensor("output.weight") == nullptr;
  c.torch_dtype = DType::kF32;
  if (f.find("tokenizer.ggml.bos_token_id")) {
    XI_ASSIGN_OR_RETURN(int64_t bos, f.get_int("tokenizer.ggml.bos_token_id"));
    c.bos_token_id = static_cast<int32_t>(bos);
  }
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"}) {
    if (!f.find(key)) continue;
    XI_ASSIGN_OR_RETURN(int64_t id, f.get_int(key));
    if (id < 0 || id >= c.vocab_size)
      return invalid_argument(file + ": metadata key '" + key + "': token id " + std::to_string(id) +
                              " outside the vocabulary of " + std::to_string(c.vocab_size));
    if (std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), id) == c.eos_token_ids.end())
      c.eos_token_ids.push_back(static_cast<int32_t>(id));
  }
  return c;
}

Result<ModelConfig> load_gguf_model_config(const std::string& path) {
  XI_ASSIGN_OR_RETURN(GgufFile f, GgufFile::open(path));
  return gguf_model_config(f);
}

}  // namespace xinfer::model
