// Paged decode attention (one query token per sequence) for bf16 Q/K/V with f32 accumulation.
//
// Grid: (decode sequence, KV head, KV partition). A CTA loads each K/V row of its partition once and
// uses it for all Hq / Hkv query heads of the KV head (GQA/MQA grouping). Each lane reads 16 bytes
// (8 bf16) of a row; D / 8 lanes cover one row, so a warp reads 32 / (D / 8) rows per load, coalesced
// within a block's rows. With more than one partition (split-KV, long contexts or small batches), each
// CTA writes its normalized partial output plus (max, sum) to `workspace` and a reduction kernel
// merges them.
//
// Supported head_dim: 64, 128 (decode_attention_supports()); other sizes use the generic kernel.
#pragma once

#include <cuda_runtime.h>

#include "xinfer/backend/cuda/kernels/attention/paged_attention_params.h"

namespace xinfer::cuda {

bool decode_attention_supports(int head_dim);

// Floats of workspace the decode kernel needs for this configuration (0 when one partition suffices).
size_t decode_attention_workspace_floats(int num_decode, int num_heads, int head_dim, int max_decode_len,
                                         int partition_size);

// Runs decode attention for plan.decode_seqs. workspace: [decode_attention_workspace_floats(...)] f32.
void launch_paged_decode_attention(const PagedAttentionParams& p, const AttentionPlanView& plan,
                                   int partition_size, float* workspace, cudaStream_t stream);

}  // namespace xinfer::cuda
