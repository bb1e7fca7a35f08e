// The KV-cache dtype as its own setting (`--kv-cache-dtype`), independent of the activation dtype.
//
//   auto   the backend's activation dtype (f32 on the CPU, bf16 on CUDA): what every attention kernel reads
//   bf16 / fp16 / f32   that dtype, where the backend's attention kernels read it; today only the activation
//          dtype is implemented on each backend, so another one is refused with a message naming the backend
//   fp8    (E4M3 with per-tensor scales) comes with the quantized CUDA kernels: refused for now, naming the
//          backend
// resolve_kv_cache_dtype() is called once by Engine::create() before the KV cache is sized; the result goes to
// backend::KvCacheSpec::dtype and into the start-up log.
#pragma once

#include <string>

#include "xinfer/core/dtype.h"
#include "xinfer/core/status.h"

namespace xinfer::engine {

enum class KvCacheDtype { kAuto, kBF16, kF16, kF32, kFP8 };
const char* kv_cache_dtype_name(KvCacheDtype d);                  // "auto", "bf16", "fp16", "f32", "fp8"
Result<KvCacheDtype> parse_kv_cache_dtype(const std::string& s);  // INVALID_ARGUMENT naming the choices

// The dtype of the KV blocks for a backend whose activations are `activation_dtype`; UNIMPLEMENTED naming
// `backend_name` for a dtype its attention kernels cannot read.
Result<DType> resolve_kv_cache_dtype(KvCacheDtype d, DType activation_dtype, const std::string& backend_name);

}  // namespace xinfer::engine
