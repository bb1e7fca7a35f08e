#include "xinfer/engine/kv_cache_dtype.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "xinfer/core/logging.h"
#include "xinfer/model/safetensors.h"

namespace xinfer::engine {

const char* kv_cache_dtype_name(KvCacheDtype d) {
  switch (d) {
    case KvCacheDtype::kAuto: return "auto";
    case KvCacheDtype::kBF16: return "bf16";
    case KvCacheDtype::kF16: return "fp16";
    case KvCacheDtype::kF32: return "f32";
    case KvCacheDtype::kFP8: return "fp8";
  }
  return "?";
}

Result<KvCacheDtype> parse_kv_cache_dtype(const std::string& s) {
  if (s == "auto") return KvCacheDtype::kAuto;
  if (s == "bf16" || s == "bfloat16") return KvCacheDtype::kBF16;
  if (s == "fp16" || s == "f16" || s == "float16" || s == "half") return KvCacheDtype::kF16;
  if (s == "f32" || s == "fp32" || s == "float32" || s == "float") return KvCacheDtype::kF32;
  if (s == "fp8" || s == "fp8_e4m3") return KvCacheDtype::kFP8;
  return invalid_argument("kv_cache_dtype must be one of auto, bf16, fp16, f32, fp8; got '" + s + "'");
}

Result<DType> resolve_kv_cache_dtype(KvCacheDtype d, DType activation_dtype, const std::string& backend_name,
                                     bool fp8_supported) {
  DType want = activation_dtype;
  switch (d) {
    case KvCacheDtype::kAuto: return activation_dtype;
    case KvCacheDtype::kBF16: want = DType::kBF16; break;
    case KvCacheDtype::kF16: want = DType::kF16; break;
    case KvCacheDtype::kF32: want = DType::kF32; break;
    case KvCacheDtype::kFP8:
      if (fp8_supported) return DType::kFP8E4M3;
      return unimplemented("kv_cache_dtype fp8 is not supported on " + backend_name +
                           ": its rope_kv_write and attention kernels read and write the KV cache in " +
                           dtype_name(activation_dtype) + " only; use auto or " + dtype_name(activation_dtype));
  }
  if (want != activation_dtype)
    return unimplemented(std::string("kv_cache_dtype ") + kv_cache_dtype_name(d) + " is not supported on " +
                         backend_name + ": its attention reads the KV cache in its activation dtype " +
                         dtype_name(activation_dtype) + " only; use auto or " + dtype_name(activation_dtype));
  return want;
}

std::string KvCacheSettings::to_string() const {
  std::ostringstream os;
  os << dtype_name(dtype);
  if (dtype == DType::kFP8E4M3) {
    os << " (scales: " << scales_source;
    if (!k_scales.empty()) {
      const auto [k0, k1] = std::minmax_element(k_scales.begin(), k_scales.end());
      const auto [v0, v1] = std::minmax_element(v_scales.begin(), v_scales.end());
      os << ", k " << *k0 << ".." << *k1 << ", v " << *v0 << ".." << *v1;
    }
    os << ")";
  }
  return os.str();
}

namespace {

// quantization_config.kv_cache_scheme of model_dir/config.json: its JSON text, or empty when absent / null.
std::string kv_cache_scheme(const std::string& model_dir) {
  std::ifstream in(std::filesystem::path(model_dir) / "config.json");
  if (!in) return {};
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("quantization_config")) return {};
  const nlohmann::json& qc = j.at("quantization_config");
  if (!qc.is_object() || !qc.contains("kv_cache_scheme") || qc.at("kv_cache_scheme").is_null()) return {};
  return qc.at("kv_cache_scheme").dump();
}

// The positive finite scalar `name` (shape [] or [1]); per-head tensors are refused.
Result<float> read_scale(const model::WeightFiles& files, const std::string& name, const std::string& model_dir) {
  XI_ASSIGN_OR_RETURN(const TensorView t, files.get(name));
  const int64_t n = t.numel();
  if (n != 1)
    return unimplemented("KV-cache scale " + name + " in " + model_dir + " has " + std::to_string(n) +
                         " elements (shape " + t.shape.to_string() +
                         "): only per-tensor (scalar) scales are supported for the FP8 KV cache");
  if (t.dtype != DType::kF32 && t.dtype != DType::kBF16 && t.dtype != DType::kF16)
    return invalid_argument("KV-cache scale " + name + " in " + model_dir + ": dtype " + dtype_name(t.dtype) +
                            ", expected F32, BF16 or F16");
  float v = 0;
  convert_to_f32(t.dtype, t.data, &v, 1);
  if (!(v > 0) || !std::isfinite(v))
    return invalid_argument("KV-cache scale " + name + " in " + model_dir + " is " + std::to_string(v) +
                            ": must be positive and finite");
  return v;
}

}  // namespace

Result<KvCacheSettings> resolve_kv_cache(KvCacheDtype d, float scale, const std::string& model_dir, int num_layers,
                                         bool read_checkpoint, const backend::Backend& be) {
  KvCacheSettings s;
  const backend::BackendInfo info = be.info();
  XI_ASSIGN_OR_RETURN(s.dtype, resolve_kv_cache_dtype(d, info.activation_dtype, info.name,
                                                      be.supports_kv_cache_dtype(DType::kFP8E4M3)));
  if (!(scale >= 0) || !std::isfinite(scale))
    return invalid_argument("kv_cache_scale must be positive (0: the checkpoint's scales or 1.0), got " +
                            std::to_string(scale));
  if (s.dtype != DType::kFP8E4M3) {
    if (scale > 0) XI_LOG(WARN) << "kv_cache_scale " << scale << " ignored: the KV cache is " << dtype_name(s.dtype);
    return s;
  }
  const auto layers = static_cast<size_t>(num_layers);
  if (scale > 0) {
    s.k_scales.assign(layers, scale);
    s.v_scales.assign(layers, scale);
    s.scales_source = "--kv-cache-scale";
    return s;
  }
  s.k_scales.assign(layers, 1.0f);
  s.v_scales.assign(layers, 1.0f);
  s.scales_source = "1.0 (default)";
  const bool dir = read_checkpoint && std::filesystem::is_directory(model_dir);
  const std::string scheme = dir ? kv_cache_scheme(model_dir) : std::string();
  if (!dir) return s;
  auto files = model::WeightFiles::open(model_dir);
  if (!files.ok()) return s;  // the model loader reports a missing or broken checkpoint
  auto name = [](size_t l, const char* what) {
    return "model.layers." + std::to_string(l) + ".self_attn." + what;
  };
  const bool any = files->contains(name(0, "k_scale")) || files->contains(name(0, "v_scale"));
  if (!any) {
    if (!scheme.empty())
      return invalid_argument("quantization_config.kv_cache_scheme " + scheme + " in " + model_dir +
                              "/config.json, but the checkpoint has no " + name(0, "k_scale") + " / " +
                              name(0, "v_scale") + " tensors");
    return s;
  }
  for (size_t l = 0; l < layers; ++l) {
    XI_ASSIGN_OR_RETURN(s.k_scales[l], read_scale(*files, name(l, "k_scale"), model_dir));
    XI_ASSIGN_OR_RETURN(s.v_scales[l], read_scale(*files, name(l, "v_scale"), model_dir));
  }
  s.scales_source = "checkpoint k_scale / v_scale";
  return s;
}

}  // namespace xinfer::engine
