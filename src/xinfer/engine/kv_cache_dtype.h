// The KV-cache dtype as its own setting (`--kv-cache-dtype`), independent of the activation dtype.
//
//   auto   the backend's activation dtype (f32 on the CPU, bf16 on CUDA): what every attention kernel reads
//   bf16 / fp16 / f32   that dtype, where the backend's attention kernels read it; today only the activation
//          dtype is implemented on each backend, so another one is refused with a message naming the backend
//   fp8 (alias fp8_e4m3)   OCP E4M3FN elements, 1 byte each (half of bf16: twice the blocks in the same
//          memory), with scales per layer (per tensor) or per layer and KV head: stored e4m3(x / scale) (round
//          to nearest even, saturated to +-448), read e4m3 * scale. Scales: `--kv-cache-scale S` for K and V
//          of every layer when given; else the checkpoint's compressed-tensors `kv_cache_scheme` tensors
//          model.layers.N.self_attn.k_scale / v_scale where present: scalars (strategy "tensor") or one per KV
//          head (strategy "attn_head": [num_kv_heads] or [num_kv_heads, 1, 1]); else 1.0.
//          Keys are stored rotated (`--kv-cache-rotation`, backend/kv_rotation.h): auto = a Hadamard rotation
//          of q and k for FP8 caches where head_dim allows it (a power of two, 16..256), none otherwise.
// resolve_kv_cache() is called once by Engine::create() (and `xinfer eval`) before the KV cache is sized; its
// result goes to backend::KvCacheSpec (dtype, scales, rotation) and into the start-up log.
#pragma once

#include <string>
#include <vector>

#include "xinfer/backend/backend.h"
#include "xinfer/core/dtype.h"
#include "xinfer/core/status.h"
#include "xinfer/model/model_config.h"

namespace xinfer::engine {

enum class KvCacheDtype { kAuto, kBF16, kF16, kF32, kFP8 };
const char* kv_cache_dtype_name(KvCacheDtype d);                  // "auto", "bf16", "fp16", "f32", "fp8"
Result<KvCacheDtype> parse_kv_cache_dtype(const std::string& s);  // INVALID_ARGUMENT naming the choices

// The dtype of the KV blocks for a backend whose activations are `activation_dtype`; UNIMPLEMENTED naming
// `backend_name` for a dtype its attention kernels cannot read (fp8: unless fp8_supported).
Result<DType> resolve_kv_cache_dtype(KvCacheDtype d, DType activation_dtype, const std::string& backend_name,
                                     bool fp8_supported = false);

enum class KvRotationChoice { kAuto, kHadamard, kNone };
const char* kv_rotation_choice_name(KvRotationChoice r);                     // "auto", "hadamard", "none"
Result<KvRotationChoice> parse_kv_cache_rotation(const std::string& s);    // INVALID_ARGUMENT naming the choices

// What the user asked for (`--kv-cache-dtype`, `--kv-cache-scale`, `--kv-cache-rotation`).
struct KvCacheRequest {
  KvCacheDtype dtype = KvCacheDtype::kAuto;
  float scale = 0.0f;  // > 0: K and V of every layer; 0: the checkpoint's scales, else 1.0
  KvRotationChoice rotation = KvRotationChoice::kAuto;
};

// What the KV blocks hold: their dtype and, for FP8, the dequantization scales (x = e4m3 * scale) of every
// layer's KV heads, and whether keys are stored rotated.
struct KvCacheSettings {
  DType dtype = DType::kF32;
  int num_kv_heads = 0;                   // the model's: the scales' second dimension
  std::vector<float> k_scales, v_scales;  // [num_layers, num_kv_heads] each (FP8), or empty
  backend::KvRotation k_rotation = backend::KvRotation::kNone;
  std::string scales_source;              // for the log: "1.0 (default)", "--kv-cache-scale", "checkpoint ..."
  void apply_to(backend::KvCacheSpec& spec) const {  // the spec's own heads: kv_head_begin (a rank's) is kept
    spec.dtype = dtype;
    spec.k_scales = k_scales;
    spec.v_scales = v_scales;
    spec.total_kv_heads = num_kv_heads;
    spec.k_rotation = k_rotation;
  }
  // "fp8_e4m3 (scales: checkpoint k_scale / v_scale per head, k 0.0213..0.118, v 0.00931..0.0412; keys
  // rotated: hadamard)"
  std::string to_string() const;
};

// The KV dtype (resolve_kv_cache_dtype against `be`) and, for FP8, the scales and the rotation for model `mc`:
// req.scale > 0 for every layer's K and V; req.scale == 0: the checkpoint's k_scale / v_scale tensors in
// model_dir (a Hugging Face directory; none for a GGUF file or dummy weights) where present, else 1.0.
// INVALID_ARGUMENT for a negative scale, a scale tensor that is not positive and finite (naming it), of
// another size than 1 or num_kv_heads, one of K/V without the other, or `hadamard` asked for a head_dim it is
// not defined for.
Result<KvCacheSettings> resolve_kv_cache(const KvCacheRequest& req, const std::string& model_dir,
                                         const model::ModelConfig& mc, bool read_checkpoint,
                                         const backend::Backend& be);

}  // namespace xinfer::engine
