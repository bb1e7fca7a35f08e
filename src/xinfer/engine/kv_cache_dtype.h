// The KV-cache dtype as its own setting (`--kv-cache-dtype`), independent of the activation dtype.
//
//   auto   the backend's activation dtype (f32 on the CPU, bf16 on CUDA): what every attention kernel reads
//   bf16 / fp16 / f32   that dtype, where the backend's attention kernels read it; today only the activation
//          dtype is implemented on each backend, so another one is refused with a message naming the backend
//   fp8 (alias fp8_e4m3)   OCP E4M3FN elements, 1 byte each (half of bf16: twice the blocks in the same
//          memory), with per-tensor scales per layer: stored e4m3(x / scale) (round to nearest even,
//          saturated to +-448), read e4m3 * scale. Scales: `--kv-cache-scale S` for K and V of every layer
//          when given; else the checkpoint's compressed-tensors `kv_cache_scheme` tensors
//          model.layers.N.self_attn.k_scale / v_scale (scalars) where present; else 1.0. Per-head scales
//          ([num_kv_heads] tensors) are refused, naming the tensor.
// resolve_kv_cache() is called once by Engine::create() (and `xinfer eval`) before the KV cache is sized; its
// result goes to backend::KvCacheSpec (dtype, k_scales, v_scales) and into the start-up log.
#pragma once

#include <string>
#include <vector>

#include "xinfer/backend/backend.h"
#include "xinfer/core/dtype.h"
#include "xinfer/core/status.h"

namespace xinfer::engine {

enum class KvCacheDtype { kAuto, kBF16, kF16, kF32, kFP8 };
const char* kv_cache_dtype_name(KvCacheDtype d);                  // "auto", "bf16", "fp16", "f32", "fp8"
Result<KvCacheDtype> parse_kv_cache_dtype(const std::string& s);  // INVALID_ARGUMENT naming the choices

// The dtype of the KV blocks for a backend whose activations are `activation_dtype`; UNIMPLEMENTED naming
// `backend_name` for a dtype its attention kernels cannot read (fp8: unless fp8_supported).
Result<DType> resolve_kv_cache_dtype(KvCacheDtype d, DType activation_dtype, const std::string& backend_name,
                                     bool fp8_supported = false);

// What the KV blocks hold: their dtype and, for FP8, per-layer dequantization scales (x = e4m3 * scale).
struct KvCacheSettings {
  DType dtype = DType::kF32;
  std::vector<float> k_scales, v_scales;  // [num_layers] each (FP8), or empty
  std::string scales_source;              // for the log: "1.0 (default)", "--kv-cache-scale", "checkpoint"
  void apply_to(backend::KvCacheSpec& spec) const {
    spec.dtype = dtype;
    spec.k_scales = k_scales;
    spec.v_scales = v_scales;
  }
  std::string to_string() const;  // "fp8_e4m3 (scales: checkpoint, k 0.0213..0.118, v 0.00931..0.0412)"
};

// The KV dtype (resolve_kv_cache_dtype against `be`) and, for FP8, the scales: `scale` > 0 for every layer's
// K and V; scale == 0: the checkpoint's k_scale / v_scale tensors in model_dir (a Hugging Face directory;
// none for a GGUF file or dummy weights) where present, else 1.0. INVALID_ARGUMENT for a negative scale,
// a scale tensor that is not a positive finite scalar (naming it) or one of K/V without the other;
// UNIMPLEMENTED for per-head scale tensors.
Result<KvCacheSettings> resolve_kv_cache(KvCacheDtype d, float scale, const std::string& model_dir, int num_layers,
                                         bool read_checkpoint, const backend::Backend& be);

}  // namespace xinfer::engine
