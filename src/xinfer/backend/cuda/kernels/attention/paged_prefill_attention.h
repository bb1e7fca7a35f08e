// Paged prefill attention: flash-style (online softmax) over query tiles of prefill chunks, reading
// K/V through the block table, so chunks with cached prefixes (chunked prefill, prefix caching) see
// their whole context. Tensor cores via WMMA (bf16 in, f32 accumulate): S = Q K^T and O += P V.
//
// Grid: (prefill work item = (sequence, 64-row query tile), q head). 4 warps; warp w owns query rows
// [16w, 16w + 16) of the tile: S, P and O for those rows live in shared memory and are touched only by
// that warp, so only the K/V tile loads need block barriers.
//
// Supported head_dim: 64, 128 (prefill_attention_supports()); other sizes use the generic kernel.
#pragma once

#include <cuda_runtime.h>

#include "xinfer/backend/cuda/kernels/attention/paged_attention_params.h"

namespace xinfer::cuda {

bool prefill_attention_supports(int head_dim);

// Runs attention for every query row of plan.prefill_items.
void launch_paged_prefill_attention(const PagedAttentionParams& p, const AttentionPlanView& plan, cudaStream_t stream);

}  // namespace xinfer::cuda
