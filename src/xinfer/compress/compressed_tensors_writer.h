// The compressed-tensors checkpoint `xinfer quantize` writes (a Hugging Face directory that xinfer, vLLM and
// transformers load, and the compressed-tensors package decompresses):
//
//   config.json        the model's config with "torch_dtype": "float32" and "quantization_config":
//                      {"quant_method": "compressed-tensors", "format": F, "quantization_status": "compressed",
//                       "config_groups": {"group_0": {"targets": ["Linear"], "weights": W, "input_activations":
//                       A or null, "output_activations": null}}, "ignore": ["lm_head", kept layers' modules],
//                       "kv_cache_scheme": null or K (--kv-cache-scheme fp8)}
//                      (--scheme none: "format": "dense", "config_groups": {}, only the KV cache's scheme)
//   model.safetensors  dense tensors in f32 (embeddings, norms, kept layers, lm_head), and per quantized module:
//     int-quantized   (w8a8-int8):  weight I8 [N, K], weight_scale F32 [N, 1] (channel) or [1] (tensor)
//     float-quantized (w8a8-fp8):   weight F8_E4M3 [N, K], weight_scale as above
//     pack-quantized  (w8a16, w4a16): weight_packed I32 [N, ceil(K / (32 / b))]: value q + 2^(b-1) of column
//                     c in bits b * (c % (32 / b)) of word c / (32 / b); weight_shape I64 [2] = (N, K);
//                     weight_scale F32 [N, G] (G = 1 per channel); asymmetric: weight_zero_point I32
//                     [ceil(N / (32 / b)), G], zero points (+ 2^(b-1)) packed the same way along rows.
//   W = {num_bits, type int|float, symmetric, strategy tensor|channel|group, group_size, dynamic false,
//        observer "minmax", actorder null|"weight"|"group" (group strategy only: compressed-tensors refuses it
//        otherwise), block_structure null, observer_kwargs {}};
//   A = {num_bits 8, type, symmetric true, strategy "token", dynamic true, observer null, ...} (W8A8 only).
//   K = {num_bits 8, type "float", symmetric true, strategy "tensor" | "attn_head", dynamic false, observer
//        "minmax", ...}, with model.layers.N.self_attn.k_scale / v_scale F32, shape [] (tensor) or [Hkv, 1, 1]
//        (attn_head), from the calibration (kv_scales.h).
//   tokenizer files    copied from a model directory; from a GGUF file, tokenizer.json and
//                      tokenizer_config.json (with the chat template) built from its metadata.
// The directory is written under a temporary name next to `out` and renamed at the end, so a failure
// leaves nothing half-written.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "xinfer/compress/safetensors_writer.h"
#include "xinfer/compress/scheme.h"
#include "xinfer/compress/weight_quantizer.h"
#include "xinfer/core/status.h"
#include "xinfer/model/model_config.h"

namespace xinfer::compress {

const char* compression_format(Scheme s);  // "int-quantized", "float-quantized", "pack-quantized"

// actorder: nullptr (none), "weight" (static groups) or "group" (g_idx written per module). kv_cache_scheme: the
// FP8 KV cache's (kv_scales.h) or null. Scheme none: format "dense", no config group.
nlohmann::ordered_json quantization_config(const SchemeOptions& scheme, const char* actorder,
                                           const std::vector<std::string>& ignore,
                                           nlohmann::ordered_json kv_cache_scheme = nullptr);

// Adds `prefix`.weight / weight_scale / ... for one module (prefix e.g. "model.layers.3.self_attn.q_proj").
void add_quantized_module(SafetensorsWriter& st, const std::string& prefix, const QuantizedWeight& q,
                          const SchemeOptions& scheme);

// config.json for a model that came without one (GGUF): the fields parse_model_config reads.
nlohmann::ordered_json config_json_from(const model::ModelConfig& c);

// INVALID_ARGUMENT (ALREADY_EXISTS-like) when `out` exists and !overwrite; checked before any work.
Status check_output_dir(const std::string& out, bool overwrite);

struct ModelDirContents {
  nlohmann::ordered_json config;                                   // config.json
  std::vector<std::pair<std::string, std::string>> text_files;     // (file name, contents)
  std::vector<std::string> copy_files;                             // paths copied under their own names
};
Status write_model_dir(const std::string& out, bool overwrite, const SafetensorsWriter& weights,
                       const ModelDirContents& contents);

}  // namespace xinfer::compress
