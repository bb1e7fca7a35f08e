#include "xinfer/model/quantization_config.h"

#include <algorithm>
#include <regex>

#include <nlohmann/json.hpp>

#include "xinfer/core/logging.h"

namespace xinfer::model {
namespace {

using json = nlohmann::json;

std::string shown(const json& v) {
  std::string d = v.dump();
  return d.size() > 60 ? d.substr(0, 57) + "..." : d;
}

bool present(const json& j, const char* key) { return j.is_object() && j.contains(key) && !j.at(key).is_null(); }

Status field_error(const std::string& path, const std::string& what) {
  return invalid_argument("quantization_config." + path + ": " + what);
}
Status field_unsupported(const std::string& path, const json& v, const std::string& supported) {
  return unimplemented("quantization_config." + path + ": " + shown(v) + " is not supported (supported: " +
                       supported + ")");
}

Result<int> get_int(const json& j, const std::string& path, const char* key, std::optional<int> fallback) {
  if (!present(j, key)) {
    if (fallback) return *fallback;
    return field_error(path + key, "missing (expected an integer)");
  }
  const json& v = j.at(key);
  if (!v.is_number_integer()) return field_error(path + key, "expected an integer, found " + shown(v));
  return v.get<int>();
}
Result<bool> get_bool(const json& j, const std::string& path, const char* key, bool fallback) {
  if (!present(j, key)) return fallback;
  const json& v = j.at(key);
  if (!v.is_boolean()) return field_error(path + key, "expected true or false, found " + shown(v));
  return v.get<bool>();
}
Result<std::string> get_string(const json& j, const std::string& path, const char* key, std::string fallback) {
  if (!present(j, key)) return fallback;
  const json& v = j.at(key);
  if (!v.is_string()) return field_error(path + key, "expected a string, found " + shown(v));
  return v.get<std::string>();
}
Result<std::vector<std::string>> get_strings(const json& j, const std::string& path, const char* key) {
  std::vector<std::string> out;
  if (!present(j, key)) return out;
  const json& v = j.at(key);
  if (!v.is_array()) return field_error(path + key, "expected a list of strings, found " + shown(v));
  for (const json& e : v) {
    if (!e.is_string()) return field_error(path + key, "expected a list of strings, found " + shown(v));
    out.push_back(e.get<std::string>());
  }
  return out;
}

// "Linear", "re:REGEX" (re.match: anchored at the start, not the end) or an exact module name.
bool target_matches(const std::string& target, const std::string& name) {
  if (target == "Linear") return true;
  if (target.rfind("re:", 0) == 0) {
    const std::regex re(target.substr(3), std::regex::ECMAScript);
    return std::regex_search(name, re, std::regex_constants::match_continuous);
  }
  return target == name;
}

Status check_patterns(const std::vector<std::string>& patterns, const std::string& path) {
  for (const std::string& p : patterns) {
    if (p.rfind("re:", 0) != 0) continue;
    try {
      std::regex re(p.substr(3), std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      return field_error(path, "'" + p + "' is not a valid regular expression (" + e.what() + ")");
    }
  }
  return Status();
}

Result<CtQuantArgs> parse_ct_args(const json& a, const std::string& path, bool activations) {
  if (!a.is_object()) return field_error(path, "expected an object, found " + shown(a));
  CtQuantArgs r;
  XI_ASSIGN_OR_RETURN(r.num_bits, get_int(a, path + ".", "num_bits", 8));
  XI_ASSIGN_OR_RETURN(std::string type, get_string(a, path + ".", "type", "int"));
  if (type != "int" && type != "float") return field_unsupported(path + ".type", a.at("type"), "int, float");
  r.is_float = type == "float";
  XI_ASSIGN_OR_RETURN(r.symmetric, get_bool(a, path + ".", "symmetric", true));
  XI_ASSIGN_OR_RETURN(std::string strategy, get_string(a, path + ".", "strategy", ""));
  if (strategy.empty()) strategy = present(a, "group_size") ? "group" : "tensor";
  if (strategy == "tensor") r.strategy = CtStrategy::kTensor;
  else if (strategy == "channel") r.strategy = CtStrategy::kChannel;
  else if (strategy == "group") r.strategy = CtStrategy::kGroup;
  else if (strategy == "token") r.strategy = CtStrategy::kToken;
  else
    return field_unsupported(path + ".strategy", a.at("strategy"),
                             activations ? "token (dynamic), tensor (static)" : "tensor, channel, group");
  if (r.strategy == CtStrategy::kGroup) {
    XI_ASSIGN_OR_RETURN(r.group_size, get_int(a, path + ".", "group_size", std::nullopt));
    if (r.group_size <= 0) return field_error(path + ".group_size", "expected a positive integer, found " +
                                                                        std::to_string(r.group_size));
  }
  if (present(a, "dynamic")) {
    const json& d = a.at("dynamic");
    if (d.is_boolean()) r.dynamic = d.get<bool>();
    else return field_unsupported(path + ".dynamic", d, "true, false");
  }
  if (present(a, "block_structure")) return field_unsupported(path + ".block_structure", a.at("block_structure"), "none");
  const std::string bits_path = path + ".num_bits";
  if (activations) {
    if (r.num_bits != 8) return field_unsupported(bits_path, a.at("num_bits"), "8");
    if (!r.symmetric) return field_unsupported(path + ".symmetric", a.at("symmetric"), "true (asymmetric activations)");
    if (r.strategy == CtStrategy::kToken && !r.dynamic)
      return field_unsupported(path + ".dynamic", json(false), "true for strategy token");
    if (r.strategy == CtStrategy::kTensor && r.dynamic)
      return field_unsupported(path + ".dynamic", json(true), "false for strategy tensor (a static input_scale)");
    if (r.strategy != CtStrategy::kToken && r.strategy != CtStrategy::kTensor)
      return field_unsupported(path + ".strategy", json(strategy), "token (dynamic), tensor (static)");
  } else {
    if (r.is_float && r.num_bits != 8) return field_unsupported(bits_path, a.at("num_bits"), "8 for type float");
    if (!r.is_float && r.num_bits != 4 && r.num_bits != 8) return field_unsupported(bits_path, a.at("num_bits"), "4, 8");
    if (r.is_float && !r.symmetric) return field_unsupported(path + ".symmetric", json(false), "true for type float");
    if (r.strategy == CtStrategy::kToken) return field_unsupported(path + ".strategy", json(strategy), "tensor, channel, group");
    if (r.dynamic) return field_unsupported(path + ".dynamic", json(true), "false for weights");
  }
  return r;
}

Result<CtFormat> parse_ct_format(const json& v, const std::string& path) {
  const std::string kSupported = "pack-quantized, int-quantized, naive-quantized, float-quantized";
  if (!v.is_string()) return field_error(path, "expected a string, found " + shown(v));
  const std::string s = v.get<std::string>();
  if (s == "pack-quantized") return CtFormat::kPackQuantized;
  if (s == "int-quantized") return CtFormat::kIntQuantized;
  if (s == "naive-quantized") return CtFormat::kNaiveQuantized;
  if (s == "float-quantized") return CtFormat::kFloatQuantized;
  return field_unsupported(path, v, kSupported);
}

Result<QuantizationConfig> parse_compressed_tensors(const json& qc) {
  QuantizationConfig r;
  r.method = QuantMethod::kCompressedTensors;
  for (const char* key : {"sparsity_config", "transform_config"}) {
    if (present(qc, key) && !(qc.at(key).is_object() && qc.at(key).empty()))
      return field_unsupported(key, qc.at(key), "null or {}");
  }
  std::optional<CtFormat> global;
  bool global_dense = false;
  if (present(qc, "format")) {
    const json& f = qc.at("format");
    if (f.is_string() && (f.get<std::string>() == "dense")) global_dense = true;
    else if (!(f.is_string() && f.get<std::string>() == "mixed-precision")) {
      XI_ASSIGN_OR_RETURN(CtFormat g, parse_ct_format(f, "format"));
      global = g;
    }
  }
  XI_ASSIGN_OR_RETURN(r.ignore, get_strings(qc, "", "ignore"));
  XI_RETURN_IF_ERROR(check_patterns(r.ignore, "ignore"));
  if (!present(qc, "config_groups")) return field_error("config_groups", "missing");
  const json& groups = qc.at("config_groups");
  if (!groups.is_object()) return field_error("config_groups", "expected an object, found " + shown(groups));
  for (const auto& [name, g] : groups.items()) {
    const std::string path = "config_groups." + name;
    if (!g.is_object()) return field_error(path, "expected an object, found " + shown(g));
    CtScheme s;
    s.name = name;
    XI_ASSIGN_OR_RETURN(s.targets, get_strings(g, path + ".", "targets"));
    if (s.targets.empty()) return field_error(path + ".targets", "missing or empty");
    XI_RETURN_IF_ERROR(check_patterns(s.targets, path + ".targets"));
    if (present(g, "output_activations")) return field_unsupported(path + ".output_activations", g.at("output_activations"), "null");
    if (!present(g, "weights")) {
      if (present(g, "input_activations"))
        return field_unsupported(path + ".weights", json(nullptr), "quantized weights (activation-only schemes)");
      continue;  // nothing quantized
    }
    bool dense = global_dense;
    if (present(g, "format")) {
      dense = g.at("format").is_string() && g.at("format").get<std::string>() == "dense";
      if (!dense) {
        XI_ASSIGN_OR_RETURN(s.format, parse_ct_format(g.at("format"), "config_groups." + name + ".format"));
      }
    } else if (global) {
      s.format = *global;
    } else if (!dense) {
      return field_error("format", "missing (no global format and none in " + path + ")");
    }
    if (dense) return field_unsupported(path + ".format", json("dense"), "a quantized format (dense weights with "
                                                                     "a quantization scheme: the checkpoint was "
                                                                     "saved before compression)");
    XI_ASSIGN_OR_RETURN(s.weights, parse_ct_args(g.at("weights"), path + ".weights", false));
    if (present(g, "input_activations")) {
      XI_ASSIGN_OR_RETURN(CtQuantArgs a, parse_ct_args(g.at("input_activations"), path + ".input_activations", true));
      s.input_activations = a;
    }
    // Format / scheme combinations this loader reads.
    const std::string wpath = path + ".weights";
    switch (s.format) {
      case CtFormat::kPackQuantized:
        if (s.weights.is_float) return field_unsupported(wpath + ".type", json("float"), "int for pack-quantized");
        if (s.weights.strategy == CtStrategy::kTensor)
          return field_unsupported(wpath + ".strategy", json("tensor"), "channel, group for pack-quantized");
        if (s.input_activations)
          return field_unsupported(path + ".input_activations", g.at("input_activations"),
                                   "null for pack-quantized (weight-only)");
        break;
      case CtFormat::kIntQuantized:
      case CtFormat::kNaiveQuantized:
        if (s.weights.is_float) return field_unsupported(wpath + ".type", json("float"), "int for " +
                                                         std::string(ct_format_name(s.format)));
        if (s.input_activations) {
          if (s.input_activations->is_float)
            return field_unsupported(path + ".input_activations.type", json("float"), "int with int weights");
          if (s.weights.num_bits != 8 || !s.weights.symmetric ||
              (s.weights.strategy != CtStrategy::kChannel && s.weights.strategy != CtStrategy::kTensor))
            return field_unsupported(wpath, g.at("weights"),
                                     "symmetric 8-bit channel or tensor weights with int8 activations (W8A8)");
        }
        break;
      case CtFormat::kFloatQuantized:
        if (!s.weights.is_float) return field_unsupported(wpath + ".type", json("int"), "float for float-quantized");
        if (s.weights.strategy == CtStrategy::kGroup)
          return field_unsupported(wpath + ".strategy", json("group"), "tensor, channel for float-quantized");
        if (s.input_activations && !s.input_activations->is_float)
          return field_unsupported(path + ".input_activations.type", json("int"), "float with float weights");
        break;
    }
    r.schemes.push_back(std::move(s));
  }
  if (const CtScheme* lm = r.ct_scheme_for("lm_head"))
    return unimplemented("quantization_config: lm_head is quantized (config_groups." + lm->name +
                         " targets it and ignore does not list it): a quantized lm_head is not supported");
  if (present(qc, "kv_cache_scheme"))  // KV scales: read by engine/kv_cache_dtype.cpp for an FP8 cache only
    XI_LOG(INFO) << "quantization_config.kv_cache_scheme " << shown(qc.at("kv_cache_scheme"))
                 << ": its k_scale / v_scale tensors are used with --kv-cache-dtype fp8 (else ignored)";
  return r;
}

Result<QuantizationConfig> parse_gptq(const json& qc) {
  QuantizationConfig r;
  r.method = QuantMethod::kGptq;
  XI_ASSIGN_OR_RETURN(r.bits, get_int(qc, "", "bits", std::nullopt));
  if (r.bits != 4 && r.bits != 8) return field_unsupported("bits", qc.at("bits"), "4, 8");
  XI_ASSIGN_OR_RETURN(r.group_size, get_int(qc, "", "group_size", 128));
  if (r.group_size == 0 || r.group_size < -1)
    return field_error("group_size", "expected -1 or a positive integer, found " + std::to_string(r.group_size));
  XI_ASSIGN_OR_RETURN(r.desc_act, get_bool(qc, "", "desc_act", false));
  XI_ASSIGN_OR_RETURN(r.sym, get_bool(qc, "", "sym", true));
  // transformers / optimum write checkpoint_format, gptqmodel writes format; both name the zero convention.
  XI_ASSIGN_OR_RETURN(std::string fmt, get_string(qc, "", "checkpoint_format", ""));
  const char* fmt_key = "checkpoint_format";
  if (fmt.empty()) {
    XI_ASSIGN_OR_RETURN(fmt, get_string(qc, "", "format", "gptq"));
    fmt_key = "format";
  }
  if (fmt != "gptq" && fmt != "gptq_v2") return field_unsupported(fmt_key, json(fmt), "gptq, gptq_v2");
  r.gptq_v2 = fmt == "gptq_v2";
  XI_ASSIGN_OR_RETURN(bool lm_head, get_bool(qc, "", "lm_head", false));
  if (lm_head) return field_unsupported("lm_head", json(true), "false (a quantized lm_head)");
  if (present(qc, "dynamic") && !(qc.at("dynamic").is_object() && qc.at("dynamic").empty()))
    return field_unsupported("dynamic", qc.at("dynamic"), "null or {} (per-module overrides)");
  return r;
}

Result<QuantizationConfig> parse_awq(const json& qc) {
  QuantizationConfig r;
  r.method = QuantMethod::kAwq;
  // transformers' AwqConfig writes "bits"; AutoAWQ's quant_config.json writes "w_bit" / "q_group_size".
  XI_ASSIGN_OR_RETURN(r.bits, get_int(qc, "", present(qc, "bits") ? "bits" : "w_bit", std::nullopt));
  if (r.bits != 4) return field_unsupported(present(qc, "bits") ? "bits" : "w_bit", json(r.bits), "4");
  XI_ASSIGN_OR_RETURN(r.group_size, get_int(qc, "", present(qc, "group_size") ? "group_size" : "q_group_size", 128));
  if (r.group_size <= 0)
    return field_error("group_size", "expected a positive integer, found " + std::to_string(r.group_size));
  XI_ASSIGN_OR_RETURN(bool zero_point, get_bool(qc, "", "zero_point", true));
  if (!zero_point) return field_unsupported("zero_point", json(false), "true");
  XI_ASSIGN_OR_RETURN(std::string version, get_string(qc, "", "version", "gemm"));
  std::string lower = version;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  if (lower != "gemm") return field_unsupported("version", json(version), "gemm");
  XI_ASSIGN_OR_RETURN(r.modules_to_not_convert, get_strings(qc, "", "modules_to_not_convert"));
  return r;
}

}  // namespace

const char* quant_method_name(QuantMethod m) {
  switch (m) {
    case QuantMethod::kNone: return "none";
    case QuantMethod::kCompressedTensors: return "compressed-tensors";
    case QuantMethod::kGptq: return "gptq";
    case QuantMethod::kAwq: return "awq";
  }
  return "?";
}

const char* ct_strategy_name(CtStrategy s) {
  switch (s) {
    case CtStrategy::kTensor: return "tensor";
    case CtStrategy::kChannel: return "channel";
    case CtStrategy::kGroup: return "group";
    case CtStrategy::kToken: return "token";
  }
  return "?";
}

const char* ct_format_name(CtFormat f) {
  switch (f) {
    case CtFormat::kPackQuantized: return "pack-quantized";
    case CtFormat::kIntQuantized: return "int-quantized";
    case CtFormat::kNaiveQuantized: return "naive-quantized";
    case CtFormat::kFloatQuantized: return "float-quantized";
  }
  return "?";
}

const CtScheme* QuantizationConfig::ct_scheme_for(const std::string& name) const {
  if (method != QuantMethod::kCompressedTensors) return nullptr;
  for (const std::string& ig : ignore)
    if (target_matches(ig, name)) return nullptr;
  for (const CtScheme& s : schemes)
    for (const std::string& t : s.targets)
      if (target_matches(t, name)) return &s;
  return nullptr;
}

bool QuantizationConfig::quantizes(const std::string& name) const {
  switch (method) {
    case QuantMethod::kNone: return false;
    case QuantMethod::kCompressedTensors: return ct_scheme_for(name) != nullptr;
    case QuantMethod::kGptq: return name != "lm_head";
    case QuantMethod::kAwq:
      if (name == "lm_head") return false;
      for (const std::string& m : modules_to_not_convert)
        if (name.find(m) != std::string::npos) return false;
      return true;
  }
  return false;
}

std::string QuantizationConfig::to_string() const {
  auto args = [](const CtQuantArgs& a) {
    std::string s = std::string(a.is_float ? "fp" : "int") + std::to_string(a.num_bits) + " " +
                    ct_strategy_name(a.strategy);
    if (a.strategy == CtStrategy::kGroup) s += " " + std::to_string(a.group_size);
    if (!a.symmetric) s += " asym";
    if (a.dynamic) s += " dynamic";
    return s;
  };
  switch (method) {
    case QuantMethod::kNone: return "none";
    case QuantMethod::kGptq:
      return "gptq " + std::to_string(bits) + "-bit " +
             (group_size < 0 ? std::string("per-channel") : "g" + std::to_string(group_size)) +
             (desc_act ? " desc_act" : "") + (sym ? " sym" : " asym") + (gptq_v2 ? " v2" : " v1");
    case QuantMethod::kAwq: return "awq " + std::to_string(bits) + "-bit g" + std::to_string(group_size) + " gemm";
    case QuantMethod::kCompressedTensors: {
      std::string s = "compressed-tensors [";
      for (size_t i = 0; i < schemes.size(); ++i) {
        const CtScheme& g = schemes[i];
        s += (i ? "; " : "") + g.name + ": " + ct_format_name(g.format) + " w " + args(g.weights);
        if (g.input_activations) s += ", a " + args(*g.input_activations);
      }
      s += "]";
      if (!ignore.empty()) {
        s += " ignore [";
        for (size_t i = 0; i < ignore.size(); ++i) s += (i ? ", " : "") + ignore[i];
        s += "]";
      }
      return s;
    }
  }
  return "?";
}

Result<QuantizationConfig> parse_quantization_config(const json& qc) {
  if (qc.is_null()) return QuantizationConfig{};
  if (!qc.is_object()) return invalid_argument("quantization_config: expected an object, found " + shown(qc));
  if (!present(qc, "quant_method")) return field_error("quant_method", "missing");
  const json& m = qc.at("quant_method");
  if (!m.is_string()) return field_error("quant_method", "expected a string, found " + shown(m));
  const std::string method = m.get<std::string>();
  if (method == "compressed-tensors") return parse_compressed_tensors(qc);
  if (method == "gptq") return parse_gptq(qc);
  if (method == "awq") return parse_awq(qc);
  return field_unsupported("quant_method", m, "compressed-tensors, gptq, awq");
}

Status require_dense_checkpoint(const QuantizationConfig& qc, const std::string& model_dir, const std::string& what) {
  if (!qc.quantized()) return Status();
  return invalid_argument(what + " needs a dense (unquantized) checkpoint, but " + model_dir +
                          "/config.json has quantization_config (" + qc.to_string() + ")");
}

}  // namespace xinfer::model
