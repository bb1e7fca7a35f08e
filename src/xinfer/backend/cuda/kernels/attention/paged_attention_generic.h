// Generic paged attention for any head_dim <= 256 (the tiny test models use 8, 16, 32): one CTA per
// (token, q head), as the CPU reference computes each head. Keys are scored 128 at a time with an online softmax;
// each thread owns up to two output dims. Simple and slow: used only for head dims the fast decode and
// prefill kernels are not instantiated for.
#pragma once

#include <cuda_runtime.h>

#include "xinfer/backend/cuda/kernels/attention/paged_attention_params.h"

namespace xinfer::cuda {

inline constexpr int kGenericAttentionMaxHeadDim = 256;

// Attention for every token of the step (decodes and prefill rows alike).
void launch_paged_attention_generic(const PagedAttentionParams& p, const AttentionPlanView& plan, cudaStream_t stream);

}  // namespace xinfer::cuda
