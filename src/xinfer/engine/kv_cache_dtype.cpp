#include "xinfer/engine/kv_cache_dtype.h"

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

Result<DType> resolve_kv_cache_dtype(KvCacheDtype d, DType activation_dtype, const std::string& backend_name) {
  DType want = activation_dtype;
  switch (d) {
    case KvCacheDtype::kAuto: return activation_dtype;
    case KvCacheDtype::kBF16: want = DType::kBF16; break;
    case KvCacheDtype::kF16: want = DType::kF16; break;
    case KvCacheDtype::kF32: want = DType::kF32; break;
    case KvCacheDtype::kFP8:
      return unimplemented("kv_cache_dtype fp8 is not supported on " + backend_name +
                           " (the FP8 KV cache comes with the quantized CUDA kernels); use auto or " +
                           dtype_name(activation_dtype));
  }
  if (want != activation_dtype)
    return unimplemented(std::string("kv_cache_dtype ") + kv_cache_dtype_name(d) + " is not supported on " +
                         backend_name + ": its attention reads the KV cache in its activation dtype " +
                         dtype_name(activation_dtype) + " only; use auto or " + dtype_name(activation_dtype));
  return want;
}

}  // namespace xinfer::engine
