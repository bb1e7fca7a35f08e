#include "xinfer/model/model_config.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "xinfer/model/gguf_config.h"

namespace xinfer::model {
namespace {

using json = nlohmann::json;

// Supported families and the transformers config-class defaults that differ between them.
struct Family {
  const char* architecture;
  const char* model_type;
  int default_max_position_embeddings;
  std::optional<int> default_head_dim;  // Qwen3Config(head_dim=128); others derive hidden / heads
  bool qkv_bias_always;                 // Qwen2Attention hard-codes bias=True on q/k/v
  bool has_attention_bias_key;          // llama, qwen3: attention_bias adds bias to q/k/v/o
  bool has_mlp_bias_key;                // llama
  bool qk_norm;                         // qwen3
};

constexpr Family kFamilies[] = {
    {"LlamaForCausalLM", "llama", 2048, std::nullopt, false, true, true, false},
    {"MistralForCausalLM", "mistral", 4096 * 32, std::nullopt, false, false, false, false},
    {"Qwen2ForCausalLM", "qwen2", 32768, std::nullopt, true, false, false, false},
    {"Qwen3ForCausalLM", "qwen3", 32768, 128, false, true, false, true},
};

std::string supported_architectures() {
  std::string s;
  for (const Family& f : kFamilies) s += (s.empty() ? "" : ", ") + std::string(f.architecture);
  return s;
}

std::string json_type_and_value(const json& v) {
  std::string dumped = v.dump();
  if (dumped.size() > 40) dumped = dumped.substr(0, 37) + "...";
  return std::string(v.type_name()) + " " + dumped;
}

Status bad_type(const std::string& key, const char* expected, const json& found) {
  return invalid_argument("key '" + key + "': expected " + expected + ", found " + json_type_and_value(found));
}

bool present(const json& j, const char* key) { return j.contains(key) && !j.at(key).is_null(); }

// Reads an integer key; `fallback` is used when the key is absent or null, otherwise the key is required.
Result<int64_t> get_int(const json& j, const char* key, std::optional<int64_t> fallback = std::nullopt) {
  if (!present(j, key)) {
    if (fallback) return *fallback;
    return invalid_argument("missing key '" + std::string(key) + "' (expected an integer)");
  }
  const json& v = j.at(key);
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {  // 4096.0 is an integer written as a float; 4096.5 is not
    double d = v.get<double>();
    if (d == static_cast<double>(static_cast<int64_t>(d))) return static_cast<int64_t>(d);
  }
  return bad_type(key, "an integer", v);
}

Result<int> get_positive_int(const json& j, const char* key, std::optional<int64_t> fallback = std::nullopt) {
  XI_ASSIGN_OR_RETURN(int64_t v, get_int(j, key, fallback));
  if (v <= 0 || v > (int64_t{1} << 30))
    return invalid_argument("key '" + std::string(key) + "': expected a positive integer, found " +
                            std::to_string(v));
  return static_cast<int>(v);
}

Result<double> get_number(const json& j, const char* key, std::optional<double> fallback = std::nullopt) {
  if (!present(j, key)) {
    if (fallback) return *fallback;
    return invalid_argument("missing key '" + std::string(key) + "' (expected a number)");
  }
  const json& v = j.at(key);
  if (!v.is_number()) return bad_type(key, "a number", v);
  return v.get<double>();
}

Result<bool> get_bool(const json& j, const char* key, bool fallback) {
  if (!present(j, key)) return fallback;
  const json& v = j.at(key);
  if (!v.is_boolean()) return bad_type(key, "true or false", v);
  return v.get<bool>();
}

// eos_token_id / bos_token_id may be an int, a list of ints, or null.
Status append_token_ids(const json& j, const char* key, std::vector<int32_t>* out) {
  if (!present(j, key)) return Status::ok_status();
  const json& v = j.at(key);
  auto add = [&](const json& e) -> Status {
    if (!e.is_number_integer() || e.get<int64_t>() < 0 || e.get<int64_t>() > INT32_MAX)
      return bad_type(key, "a token id or a list of token ids", v);
    int32_t id = static_cast<int32_t>(e.get<int64_t>());
    if (std::find(out->begin(), out->end(), id) == out->end()) out->push_back(id);
    return Status::ok_status();
  };
  if (v.is_array()) {
    for (const json& e : v) XI_RETURN_IF_ERROR(add(e));
    return Status::ok_status();
  }
  return add(v);
}

Result<RopeScaling> parse_rope_scaling(const json& rs, int max_position_embeddings) {
  RopeScaling r;
  if (!rs.is_object()) return bad_type("rope_scaling", "an object or null", rs);
  std::string type;
  for (const char* key : {"rope_type", "type"}) {  // "type" is the legacy spelling
    if (present(rs, key)) {
      if (!rs.at(key).is_string()) return bad_type(std::string("rope_scaling.") + key, "a string", rs.at(key));
      type = rs.at(key).get<std::string>();
      break;
    }
  }
  if (type.empty() || type == "default") return r;
  if (type == "linear") r.type = RopeScalingType::kLinear;
  else if (type == "dynamic") r.type = RopeScalingType::kDynamic;
  else if (type == "llama3") r.type = RopeScalingType::kLlama3;
  else if (type == "yarn") r.type = RopeScalingType::kYarn;
  else
    return unimplemented("unsupported rope_scaling type '" + type +
                         "' (supported: default, linear, dynamic, llama3, yarn)");

  auto number = [&](const char* key, std::optional<double> fallback) -> Result<float> {
    auto v = get_number(rs, key, fallback);
    if (!v.ok()) return Status(v.status().code(), "rope_scaling (" + type + "): " + v.status().message());
    return static_cast<float>(*v);
  };
  auto integer = [&](const char* key, std::optional<int64_t> fallback) -> Result<int> {
    auto v = get_positive_int(rs, key, fallback);
    if (!v.ok()) return Status(v.status().code(), "rope_scaling (" + type + "): " + v.status().message());
    return *v;
  };

  if (r.type == RopeScalingType::kYarn) {
    XI_ASSIGN_OR_RETURN(r.original_max_position_embeddings,
                        integer("original_max_position_embeddings", max_position_embeddings));
    // transformers: a missing factor is max_position_embeddings / original_max_position_embeddings.
    XI_ASSIGN_OR_RETURN(r.factor, number("factor", static_cast<double>(max_position_embeddings) /
                                                       r.original_max_position_embeddings));
    // transformers uses `get("beta_fast") or 32`, so 0 also means the default.
    XI_ASSIGN_OR_RETURN(r.beta_fast, number("beta_fast", 32.0));
    if (r.beta_fast == 0) r.beta_fast = 32;
    XI_ASSIGN_OR_RETURN(r.beta_slow, number("beta_slow", 1.0));
    if (r.beta_slow == 0) r.beta_slow = 1;
    if (present(rs, "mscale")) {
      XI_ASSIGN_OR_RETURN(r.mscale, number("mscale", std::nullopt));
    }
    if (present(rs, "mscale_all_dim")) {
      XI_ASSIGN_OR_RETURN(r.mscale_all_dim, number("mscale_all_dim", std::nullopt));
    }
    if (present(rs, "attention_factor")) {
      XI_ASSIGN_OR_RETURN(r.attention_factor, number("attention_factor", std::nullopt));
    }
    XI_ASSIGN_OR_RETURN(r.truncate, get_bool(rs, "truncate", true));
  } else {
    XI_ASSIGN_OR_RETURN(r.factor, number("factor", std::nullopt));
  }
  if (r.type == RopeScalingType::kLlama3) {
    XI_ASSIGN_OR_RETURN(r.low_freq_factor, number("low_freq_factor", std::nullopt));
    XI_ASSIGN_OR_RETURN(r.high_freq_factor, number("high_freq_factor", std::nullopt));
    XI_ASSIGN_OR_RETURN(r.original_max_position_embeddings, integer("original_max_position_embeddings", std::nullopt));
    if (!(r.high_freq_factor > r.low_freq_factor))
      return invalid_argument("rope_scaling (llama3): high_freq_factor (" + std::to_string(r.high_freq_factor) +
                              ") must be greater than low_freq_factor (" + std::to_string(r.low_freq_factor) + ")");
  }
  if (!(r.factor >= 1.0f))
    return invalid_argument("rope_scaling (" + type + "): factor must be >= 1, found " + std::to_string(r.factor));
  return r;
}

Result<DType> parse_torch_dtype(const json& config) {
  // transformers >= 4.56 writes "dtype"; older versions "torch_dtype". Absent means float32.
  const char* key = present(config, "dtype") ? "dtype" : "torch_dtype";
  if (!present(config, key)) return DType::kF32;
  const json& v = config.at(key);
  if (!v.is_string()) return bad_type(key, "a string such as \"bfloat16\"", v);
  std::string s = v.get<std::string>();
  if (s.rfind("torch.", 0) == 0) s = s.substr(6);
  if (s == "float32" || s == "float") return DType::kF32;
  if (s == "bfloat16") return DType::kBF16;
  if (s == "float16" || s == "half") return DType::kF16;
  return unimplemented("unsupported " + std::string(key) + " '" + v.get<std::string>() +
                       "' (supported: float32, bfloat16, float16)");
}

Result<json> read_json_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot read " + path.string());
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    return json::parse(ss.str());
  } catch (const json::parse_error& e) {
    return invalid_argument(path.string() + ": invalid JSON: " + e.what());
  }
}

}  // namespace

const char* rope_scaling_type_name(RopeScalingType t) {
  switch (t) {
    case RopeScalingType::kNone: return "none";
    case RopeScalingType::kLinear: return "linear";
    case RopeScalingType::kDynamic: return "dynamic";
    case RopeScalingType::kLlama3: return "llama3";
    case RopeScalingType::kYarn: return "yarn";
  }
  return "?";
}

Result<ModelConfig> parse_model_config(const json& config) {
  if (!config.is_object()) return invalid_argument("config: expected a JSON object, found " + std::string(config.type_name()));
  ModelConfig c;

  // Architecture: the first entry of "architectures", else the one implied by "model_type".
  const Family* family = nullptr;
  if (present(config, "architectures")) {
    const json& archs = config.at("architectures");
    if (!archs.is_array() || archs.empty() || !archs[0].is_string())
      return bad_type("architectures", "a non-empty list of strings", archs);
    c.architecture = archs[0].get<std::string>();
    for (const Family& f : kFamilies)
      if (c.architecture == f.architecture) family = &f;
    if (!family)
      return unimplemented("unsupported architecture '" + c.architecture + "' (supported: " +
                           supported_architectures() + ")");
  } else {
    if (!present(config, "model_type"))
      return invalid_argument("missing key 'architectures' (expected e.g. [\"LlamaForCausalLM\"]) and no 'model_type'");
    if (!config.at("model_type").is_string()) return bad_type("model_type", "a string", config.at("model_type"));
    std::string mt = config.at("model_type").get<std::string>();
    for (const Family& f : kFamilies)
      if (mt == f.model_type) family = &f;
    if (!family)
      return unimplemented("unsupported model_type '" + mt + "' and no 'architectures' (supported: " +
                           supported_architectures() + ")");
    c.architecture = family->architecture;
  }
  c.model_type = family->model_type;
  if (present(config, "model_type") && config.at("model_type").is_string())
    c.model_type = config.at("model_type").get<std::string>();

  XI_ASSIGN_OR_RETURN(c.hidden_size, get_positive_int(config, "hidden_size"));
  XI_ASSIGN_OR_RETURN(c.intermediate_size, get_positive_int(config, "intermediate_size"));
  XI_ASSIGN_OR_RETURN(c.num_layers, get_positive_int(config, "num_hidden_layers"));
  XI_ASSIGN_OR_RETURN(c.num_heads, get_positive_int(config, "num_attention_heads"));
  XI_ASSIGN_OR_RETURN(c.num_kv_heads, get_positive_int(config, "num_key_value_heads", c.num_heads));
  XI_ASSIGN_OR_RETURN(c.vocab_size, get_positive_int(config, "vocab_size"));
  XI_ASSIGN_OR_RETURN(c.max_position_embeddings,
                      get_positive_int(config, "max_position_embeddings", family->default_max_position_embeddings));

  // head_dim: explicit, else the family default when the key is absent (Qwen3: 128), else hidden / heads.
  if (present(config, "head_dim")) {
    XI_ASSIGN_OR_RETURN(c.head_dim, get_positive_int(config, "head_dim"));
  } else if (!config.contains("head_dim") && family->default_head_dim) {
    c.head_dim = *family->default_head_dim;
  } else {
    if (c.hidden_size % c.num_heads != 0)
      return invalid_argument("num_attention_heads (" + std::to_string(c.num_heads) + ") does not divide hidden_size (" +
                              std::to_string(c.hidden_size) + ") and config has no head_dim");
    c.head_dim = c.hidden_size / c.num_heads;
  }
  if (c.num_heads % c.num_kv_heads != 0)
    return invalid_argument("num_key_value_heads (" + std::to_string(c.num_kv_heads) +
                            ") does not divide num_attention_heads (" + std::to_string(c.num_heads) + ")");
  if (c.head_dim % 2 != 0)
    return invalid_argument("head_dim must be even for rotary embeddings, found " + std::to_string(c.head_dim));

  XI_ASSIGN_OR_RETURN(double eps, get_number(config, "rms_norm_eps", 1e-6));
  c.rms_norm_eps = static_cast<float>(eps);
  if (!(c.rms_norm_eps > 0)) return invalid_argument("key 'rms_norm_eps': expected a positive number, found " + std::to_string(eps));

  // transformers v5 moves rope_theta and the scaling into "rope_parameters".
  const json* rope_params = present(config, "rope_parameters") && config.at("rope_parameters").is_object()
                                ? &config.at("rope_parameters")
                                : nullptr;
  XI_ASSIGN_OR_RETURN(double theta,
                      get_number(rope_params && present(*rope_params, "rope_theta") ? *rope_params : config,
                                 "rope_theta", 10000.0));
  if (!(theta > 1.0)) return invalid_argument("key 'rope_theta': expected a number > 1, found " + std::to_string(theta));
  c.rope_theta = static_cast<float>(theta);
  if (present(config, "rope_scaling")) {
    XI_ASSIGN_OR_RETURN(c.rope_scaling, parse_rope_scaling(config.at("rope_scaling"), c.max_position_embeddings));
  } else if (rope_params) {
    XI_ASSIGN_OR_RETURN(c.rope_scaling, parse_rope_scaling(*rope_params, c.max_position_embeddings));
  }
  if (present(config, "partial_rotary_factor") || (rope_params && present(*rope_params, "partial_rotary_factor"))) {
    const json& holder = rope_params && present(*rope_params, "partial_rotary_factor") ? *rope_params : config;
    XI_ASSIGN_OR_RETURN(double prf, get_number(holder, "partial_rotary_factor"));
    if (prf != 1.0) return unimplemented("partial_rotary_factor " + std::to_string(prf) + " is not supported (only 1.0)");
  }

  if (present(config, "hidden_act")) {
    const json& act = config.at("hidden_act");
    if (!act.is_string()) return bad_type("hidden_act", "a string", act);
    std::string a = act.get<std::string>();
    if (a != "silu" && a != "swish")  // transformers' ACT2FN maps both to SiLU
      return unimplemented("unsupported hidden_act '" + a + "' (supported: silu)");
  }

  XI_ASSIGN_OR_RETURN(c.tie_word_embeddings, get_bool(config, "tie_word_embeddings", false));
  if (family->has_attention_bias_key) {
    XI_ASSIGN_OR_RETURN(c.attention_bias, get_bool(config, "attention_bias", false));
    c.o_bias = c.attention_bias;
  }
  if (family->qkv_bias_always) c.attention_bias = true;
  if (family->has_mlp_bias_key) {
    XI_ASSIGN_OR_RETURN(c.mlp_bias, get_bool(config, "mlp_bias", false));
  }
  c.qk_norm = family->qk_norm;
  XI_ASSIGN_OR_RETURN(c.torch_dtype, parse_torch_dtype(config));

  std::vector<int32_t> bos;
  XI_RETURN_IF_ERROR(append_token_ids(config, "bos_token_id", &bos));
  if (!bos.empty()) c.bos_token_id = bos[0];
  XI_RETURN_IF_ERROR(append_token_ids(config, "eos_token_id", &c.eos_token_ids));

  if (c.model_type == "mistral") {
    // MistralConfig defaults sliding_window to 4096 when the key is absent; null means full attention.
    if (!config.contains("sliding_window")) {
      c.sliding_window = 4096;
    } else if (present(config, "sliding_window")) {
      XI_ASSIGN_OR_RETURN(c.sliding_window, get_positive_int(config, "sliding_window"));
    }
  } else if (c.model_type == "qwen2" || c.model_type == "qwen3") {
    XI_ASSIGN_OR_RETURN(bool use_sw, get_bool(config, "use_sliding_window", false));
    if (use_sw && present(config, "sliding_window")) {
      XI_ASSIGN_OR_RETURN(c.sliding_window, get_positive_int(config, "sliding_window"));
    }
  }
  if (present(config, "quantization_config")) {
    XI_ASSIGN_OR_RETURN(c.quantization, parse_quantization_config(config.at("quantization_config")));
  }
  return c;
}

Result<ModelConfig> load_model_config(const std::string& model_dir) {
  if (is_gguf_path(model_dir)) return load_gguf_model_config(model_dir);  // a .gguf file: its metadata
  namespace fs = std::filesystem;
  const fs::path dir(model_dir);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return not_found("model directory " + model_dir + " does not exist");
  const fs::path config_path = dir / "config.json";
  if (!fs::exists(config_path, ec)) return not_found("no config.json in " + model_dir);
  XI_ASSIGN_OR_RETURN(json config, read_json_file(config_path));
  Result<ModelConfig> parsed = parse_model_config(config);
  if (!parsed.ok()) return Status(parsed.status().code(), config_path.string() + ": " + parsed.status().message());
  ModelConfig c = std::move(parsed).value();

  const fs::path gen_path = dir / "generation_config.json";
  if (fs::exists(gen_path, ec)) {
    XI_ASSIGN_OR_RETURN(json gen, read_json_file(gen_path));
    if (!gen.is_object()) return invalid_argument(gen_path.string() + ": expected a JSON object");
    Status s = append_token_ids(gen, "eos_token_id", &c.eos_token_ids);
    if (s.ok() && !c.bos_token_id) {
      std::vector<int32_t> bos;
      s = append_token_ids(gen, "bos_token_id", &bos);
      if (!bos.empty()) c.bos_token_id = bos[0];
    }
    if (!s.ok()) return Status(s.code(), gen_path.string() + ": " + s.message());
  }
  return c;
}

int ModelConfig::context_limit() const {
  if (sliding_window && (max_position_embeddings <= 0 || *sliding_window < max_position_embeddings))
    return *sliding_window;
  return max_position_embeddings;
}

std::string ModelConfig::context_limit_reason() const {
  if (context_limit() == max_position_embeddings)
    return "the model's max_position_embeddings " + std::to_string(max_position_embeddings);
  return "config.json's sliding_window " + std::to_string(*sliding_window) +
         " (windowed attention is not implemented: longer sequences would attend past the window and diverge "
         "from the reference model)";
}

std::string ModelConfig::to_string() const {
  std::ostringstream os;
  os << architecture << ": " << num_layers << " layers, hidden " << hidden_size << ", heads " << num_heads << "/"
     << num_kv_heads << " x " << head_dim << ", ffn " << intermediate_size << ", vocab " << vocab_size << ", ctx "
     << max_position_embeddings << ", " << dtype_name(torch_dtype) << ", rope theta " << rope_theta;
  if (rope_scaling.type != RopeScalingType::kNone)
    os << " (" << rope_scaling_type_name(rope_scaling.type) << " x" << rope_scaling.factor << ")";
  os << ", eps " << rms_norm_eps;
  if (tie_word_embeddings) os << ", tied embeddings";
  if (attention_bias) os << ", qkv bias";
  if (o_bias) os << ", o bias";
  if (mlp_bias) os << ", mlp bias";
  if (qk_norm) os << ", qk norm";
  if (sliding_window) os << ", sliding window " << *sliding_window;
  if (quantization.quantized()) os << ", " << quantization.to_string();
  os << ", bos " << (bos_token_id ? std::to_string(*bos_token_id) : "none") << ", eos [";
  for (size_t i = 0; i < eos_token_ids.size(); ++i) os << (i ? ", " : "") << eos_token_ids[i];
  os << "]";
  return os.str();
}

}  // namespace xinfer::model
