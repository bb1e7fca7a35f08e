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

const char* kv_rotation_choice_name(KvRotationChoice r) {
  switch (r) {
    case KvRotationChoice::kAuto: return "auto";
    case KvRotationChoice::kHadamard: return "hadamard";
    case KvRotationChoice::kNone: return "none";
  }
  return "?";
}

Result<KvRotationChoice> parse_kv_cache_rotation(const std::string& s) {
  if (s == "auto") return KvRotationChoice::kAuto;
  if (s == "hadamard") return KvRotationChoice::kHadamard;
  if (s == "none") return KvRotationChoice::kNone;
  return invalid_argument("kv_cache_rotation must be one of auto, hadamard, none; got '" + s + "'");
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
    os << "; keys rotated: " << (k_rotation == backend::KvRotation::kHadamard ? "hadamard" : "none") << ")";
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

// The scales in tensor `name` into out[0, heads): a scalar (shape [] or [1]) for every head, or one per head
// (compressed-tensors' attn_head strategy: [heads] or [heads, 1, 1]); each positive and finite.
Status read_scales(const model::WeightFiles& files, const std::string& name, const std::string& model_dir, int heads,
                   float* out) {
  XI_ASSIGN_OR_RETURN(const TensorView t, files.get(name));
  const int64_t n = t.numel();
  if (n != 1 && n != heads)
    return invalid_argument("KV-cache scale " + name + " in " + model_dir + " has " + std::to_string(n) +
                            " elements (shape " + t.shape.to_string() + "): expected 1 (per tensor) or " +
                            std::to_string(heads) + " (one per KV head)");
  if (t.dtype != DType::kF32 && t.dtype != DType::kBF16 && t.dtype != DType::kF16)
    return invalid_argument("KV-cache scale " + name + " in " + model_dir + ": dtype " + dtype_name(t.dtype) +
                            ", expected F32, BF16 or F16");
  std::vector<float> v(static_cast<size_t>(n));
  convert_to_f32(t.dtype, t.data, v.data(), static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    if (!(v[static_cast<size_t>(i)] > 0) || !std::isfinite(v[static_cast<size_t>(i)]))
      return invalid_argument("KV-cache scale " + name + " in " + model_dir +
                              (n > 1 ? " (head " + std::to_string(i) + ")" : std::string()) + " is " +
                              std::to_string(v[static_cast<size_t>(i)]) + ": must be positive and finite");
  for (int h = 0; h < heads; ++h) out[h] = v[n == 1 ? 0 : static_cast<size_t>(h)];
  return Status::ok_status();
}

}  // namespace

Result<KvCacheSettings> resolve_kv_cache(const KvCacheRequest& req, const std::string& model_dir,
                                         const model::ModelConfig& mc, bool read_checkpoint,
                                         const backend::Backend& be) {
  KvCacheSettings s;
  const backend::BackendInfo info = be.info();
  XI_ASSIGN_OR_RETURN(s.dtype, resolve_kv_cache_dtype(req.dtype, info.activation_dtype, info.name,
                                                      be.supports_kv_cache_dtype(DType::kFP8E4M3)));
  const float scale = req.scale;
  if (!(scale >= 0) || !std::isfinite(scale))
    return invalid_argument("kv_cache_scale must be positive (0: the checkpoint's scales or 1.0), got " +
                            std::to_string(scale));
  if (s.dtype != DType::kFP8E4M3) {
    if (scale > 0) XI_LOG(WARN) << "kv_cache_scale " << scale << " ignored: the KV cache is " << dtype_name(s.dtype);
    if (req.rotation == KvRotationChoice::kHadamard)
      XI_LOG(WARN) << "kv_cache_rotation hadamard ignored: the KV cache is " << dtype_name(s.dtype)
                   << " (keys are rotated in FP8 caches only)";
    return s;
  }
  const bool rotatable = backend::kv_rotation_supported(mc.head_dim);
  if (req.rotation == KvRotationChoice::kHadamard && !rotatable)
    return invalid_argument("kv_cache_rotation hadamard needs a power-of-two head_dim in [16, 256]; the model's is " +
                            std::to_string(mc.head_dim) + " (use auto or none)");
  s.k_rotation = req.rotation != KvRotationChoice::kNone && rotatable ? backend::KvRotation::kHadamard
                                                                      : backend::KvRotation::kNone;
  s.num_kv_heads = mc.num_kv_heads;
  const size_t count = static_cast<size_t>(mc.num_layers) * static_cast<size_t>(mc.num_kv_heads);
  if (scale > 0) {
    s.k_scales.assign(count, scale);
    s.v_scales.assign(count, scale);
    s.scales_source = "--kv-cache-scale";
    return s;
  }
  s.k_scales.assign(count, 1.0f);
  s.v_scales.assign(count, 1.0f);
  s.scales_source = "1.0 (default)";
  auto default_scales = [&] {  // as vLLM does, say what 1.0 costs and where calibrated scales come from
    XI_LOG(WARN) << "fp8 KV cache: the checkpoint has no k_scale / v_scale and no --kv-cache-scale was given: scale "
                    "1.0 in every layer; calibrated scales lose less accuracy (SmolLM2, WikiText-2: +0.29% PPL over "
                    "the bf16 cache against +0.56% at 1.0, docs/kv_cache.md); `xinfer quantize --scheme none "
                    "--kv-cache-scheme fp8` writes them";
    return s;
  };
  const bool dir = read_checkpoint && std::filesystem::is_directory(model_dir);
  const std::string scheme = dir ? kv_cache_scheme(model_dir) : std::string();
  if (!dir) return default_scales();
  auto files = model::WeightFiles::open(model_dir);
  if (!files.ok()) return s;  // the model loader reports a missing or broken checkpoint
  auto name = [](int l, const char* what) { return "model.layers." + std::to_string(l) + ".self_attn." + what; };
  const bool any = files->contains(name(0, "k_scale")) || files->contains(name(0, "v_scale"));
  if (!any) {
    if (!scheme.empty())
      return invalid_argument("quantization_config.kv_cache_scheme " + scheme + " in " + model_dir +
                              "/config.json, but the checkpoint has no " + name(0, "k_scale") + " / " +
                              name(0, "v_scale") + " tensors");
    return default_scales();
  }
  const int heads = mc.num_kv_heads;
  bool per_head = false;
  for (int l = 0; l < mc.num_layers; ++l) {
    float* k = s.k_scales.data() + static_cast<size_t>(l) * static_cast<size_t>(heads);
    float* v = s.v_scales.data() + static_cast<size_t>(l) * static_cast<size_t>(heads);
    XI_RETURN_IF_ERROR(read_scales(*files, name(l, "k_scale"), model_dir, heads, k));
    XI_RETURN_IF_ERROR(read_scales(*files, name(l, "v_scale"), model_dir, heads, v));
    per_head = per_head || std::any_of(k, k + heads, [&](float x) { return x != k[0]; }) ||
               std::any_of(v, v + heads, [&](float x) { return x != v[0]; });
  }
  s.scales_source = per_head ? "checkpoint k_scale / v_scale per head" : "checkpoint k_scale / v_scale";
  return s;
}

}  // namespace xinfer::engine
