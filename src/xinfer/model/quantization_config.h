// QuantizationConfig: config.json's `quantization_config` of a quantized Hugging Face checkpoint, parsed and
// validated once (model_config.cpp calls parse_quantization_config). It says which linears are quantized and
// how their tensors are laid out; checkpoint_linear.h reads and repacks them.
//
//   compressed-tensors (quant_method "compressed-tensors"): config_groups {name: {targets, weights,
//     input_activations, format}} + ignore + a global format. A linear module (HF name, e.g.
//     "model.layers.0.self_attn.q_proj", "lm_head") uses the first group whose targets match it, unless an
//     ignore entry matches; targets/ignore entries are "Linear" (every linear), "re:REGEX" (matched from the
//     start of the name, as Python's re.match), or an exact module name.
//     Formats: pack-quantized, int-quantized, naive-quantized, float-quantized (and dense: not quantized).
//   gptq (quant_method "gptq"): bits 4/8, group_size (-1: one group per row), desc_act, sym,
//     checkpoint_format "gptq" (v1: qzeros hold zero - 1) or "gptq_v2"; every decoder-layer linear.
//   awq (quant_method "awq"): bits 4, group_size, zero_point true, version "gemm"; every decoder-layer linear
//     except those whose name contains an entry of modules_to_not_convert.
//
// Invariants after parsing: every scheme is one this loader can read (bits, strategies, types, activation
// modes checked here; tensor shapes are checked at load); regexes compile. Anything else is UNIMPLEMENTED or
// INVALID_ARGUMENT naming the field ("quantization_config.config_groups.group_0.weights.strategy: ...").
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "xinfer/core/status.h"

namespace xinfer::model {

enum class QuantMethod { kNone, kCompressedTensors, kGptq, kAwq };
const char* quant_method_name(QuantMethod m);  // "none", "compressed-tensors", "gptq", "awq"

// compressed-tensors QuantizationArgs (the fields that change the layout or the arithmetic).
enum class CtStrategy { kTensor, kChannel, kGroup, kToken };
const char* ct_strategy_name(CtStrategy s);  // "tensor", "channel", "group", "token"
struct CtQuantArgs {
  int num_bits = 8;
  bool is_float = false;  // type "float" (FP8 E4M3) instead of "int"
  bool symmetric = true;
  CtStrategy strategy = CtStrategy::kTensor;
  int group_size = 0;     // kGroup only
  bool dynamic = false;   // activations: computed per forward (kToken) instead of a stored input_scale
};

enum class CtFormat { kPackQuantized, kIntQuantized, kNaiveQuantized, kFloatQuantized };
const char* ct_format_name(CtFormat f);  // "pack-quantized", ...

struct CtScheme {
  std::string name;  // config_groups key
  std::vector<std::string> targets;
  CtFormat format = CtFormat::kPackQuantized;  // the group's "format", else the global one
  CtQuantArgs weights;
  std::optional<CtQuantArgs> input_activations;  // W8A8 when set
};

struct QuantizationConfig {
  QuantMethod method = QuantMethod::kNone;
  // compressed-tensors
  std::vector<CtScheme> schemes;
  std::vector<std::string> ignore;
  // gptq / awq
  int bits = 0;
  int group_size = 0;  // -1: per channel (one group spanning K)
  bool desc_act = false;
  bool sym = true;
  bool gptq_v2 = false;  // checkpoint_format gptq_v2: qzeros hold the zero itself
  std::vector<std::string> modules_to_not_convert;  // awq

  bool quantized() const { return method != QuantMethod::kNone; }
  // The scheme of linear module `name`, or nullptr when it stays dense (ignored, or no target matches).
  // compressed-tensors only.
  const CtScheme* ct_scheme_for(const std::string& name) const;
  // Whether the checkpoint stores linear `name` quantized (any method).
  bool quantizes(const std::string& name) const;
  // "gptq 4-bit g128 desc_act sym v1", "compressed-tensors [group_0: pack-quantized int4 group 128 ...]".
  std::string to_string() const;
};

// `qc` is the value of config.json's "quantization_config". Errors name the field.
Result<QuantizationConfig> parse_quantization_config(const nlohmann::json& qc);

// For commands that need float weights (xinfer quantize): INVALID_ARGUMENT "<what> needs a dense
// (unquantized) checkpoint, but <model_dir>/config.json has quantization_config (gptq 4-bit ...)" when
// `qc` is quantized.
Status require_dense_checkpoint(const QuantizationConfig& qc, const std::string& model_dir, const std::string& what);

}  // namespace xinfer::model
