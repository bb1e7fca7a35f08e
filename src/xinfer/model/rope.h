// Rotary position embedding frequencies, with the semantics of Hugging Face transformers'
// modeling_rope_utils (ROPE_INIT_FUNCTIONS), so that logits match transformers.
//
//   default:  inv_freq[i] = 1 / theta^(2i / d)                      i in [0, d/2), d = head_dim
//   linear:   inv_freq[i] / factor
//   dynamic:  the default frequencies at the base length (NTK rescaling beyond max_position_embeddings is
//             not applied: the caller limits context to max_position_embeddings)
//   llama3:   wavelengths longer than original_max / low_freq_factor are divided by factor, shorter than
//             original_max / high_freq_factor are kept, those between are interpolated smoothly
//   yarn:     per-dimension ramp between interpolated (/factor) and extrapolated frequencies, plus an
//             attention scaling (rope_attention_scaling) that multiplies cos and sin
//
// Arithmetic follows transformers' float32 tensor ops in the same order; theta^x is evaluated in double
// and rounded once, so values agree with transformers to within 1 ulp.
#pragma once

#include <vector>

#include "xinfer/model/model_config.h"

namespace xinfer::model {

// [head_dim / 2] inverse frequencies; the rotation angle of pair i at position p is p * inv_freq[i].
std::vector<float> rope_inv_freq(const ModelConfig& config);

// Factor applied to cos and sin: 1.0 except for yarn (0.1 * ln(factor) + 1 by default).
float rope_attention_scaling(const ModelConfig& config);

}  // namespace xinfer::model
