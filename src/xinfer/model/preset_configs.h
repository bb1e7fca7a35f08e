// Built-in config.json of well-known models, so `--model llama-3.1-8b --load-format dummy` needs no
// download: benchmarks run random weights in the real shapes (model/llama.h, LoadFormat::kDummy).
//
//   llama-3.1-8b    meta-llama/Llama-3.1-8B   (32 layers, hidden 4096, GQA 32/8 x 128, vocab 128256)
//   qwen2.5-7b      Qwen/Qwen2.5-7B           (28 layers, hidden 3584, GQA 28/4 x 128, qkv bias, vocab 152064)
//   llama-3.1-70b   meta-llama/Llama-3.1-70B  (80 layers, hidden 8192, GQA 64/8 x 128): 141 GB of bf16
//                   weights, more than one H200 holds; the engine refuses it until tensor parallelism
//
// A model name that is an existing directory always means the directory.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "xinfer/core/status.h"
#include "xinfer/model/model_config.h"

namespace xinfer::model {

// The config.json text of a preset, or nullopt for an unknown name.
std::optional<std::string> preset_config_json(const std::string& name);
std::vector<std::string> preset_names();

// `name_or_dir` names a directory (load_model_config) or, when no such directory exists, a preset.
// NOT_FOUND names both possibilities.
Result<ModelConfig> resolve_model_config(const std::string& name_or_dir);

// True when `name_or_dir` is not a directory but a preset name (it has no weight files).
bool is_preset(const std::string& name_or_dir);

}  // namespace xinfer::model
