// Paged prefill attention: flash-style (online softmax in registers) over the query tiles of prefill chunks,
// reading K/V through the block table, so chunks with cached prefixes (chunked prefill, prefix caching) see
// their whole context. Causal: query token t at positions[t] attends to keys [0, positions[t]] of its
// sequence; only KV tiles that cross a row's position are masked, tiles past every row are skipped.
//
// Grid: (q head, prefill work item = (sequence, 128-row query tile) from the host plan, last item first).
// Implementations of the same contract (bf16 in, f32 accumulate), all tested against the CPU:
//   kWgmma: sm_90a warpgroup MMA; 2 warpgroups x 64 rows, KV tiles of 128 keys, S = Q K^T from
//     128-byte-swizzled shared memory, P kept in registers as the A operand of O += P V; S of the next
//     tile and P V of this one are issued together so the softmax overlaps P V (FlashAttention-3's
//     intra-warpgroup pipelining).
//   kWgmmaSimple: the same without the overlap (S, softmax, P V in turn); measured faster than kWgmma on the
//     H200; what CudaBackend runs for long contexts at head_dim 64 (attention_plan.h prefer_wgmma_prefill).
//   kWgmmaWs: warp-specialized (FlashAttention-3's schedule): a producer warpgroup fills a two-stage ring of K / V
//     tiles through mbarriers (FP8 codes converted there), two consumer warpgroups overlap the softmax with P V
//     and take turns on the tensor cores; head_dim 128 only (prefill_ws_supports()); what CudaBackend runs for
//     long contexts at head_dim 128 (XINFER_PREFILL_WS=0: kWgmmaSimple).
//   kMmaSync: FlashAttention-2 layout with mma.sync.m16n8k16 + ldmatrix; 4 warps x 32 rows, KV tiles of
//     64 keys; what CudaBackend runs for short contexts.
// kWgmmaSimple, kWgmmaWs and kMmaSync also read FP8 caches: the next tile's codes staged by cp.async and converted in
// shared memory per tile, to bf16 for bf16 MMAs or, with PagedAttentionParams::kv_fp8_f16 (CudaBackend's
// default), to f16 for f16 MMAs (one cvt per two codes; Q rounded to f16, P packed as f16).
// K/V tiles are gathered row by row with cp.async (16-byte chunks, double-buffered); no host sync, no
// allocation (CUDA-graph safe).
//
// Supported head_dim: 64, 128 (prefill_attention_supports()); other sizes use the generic kernel.
#pragma once

#include <cuda_runtime.h>

#include "xinfer/backend/cuda/kernels/attention/paged_attention_params.h"

namespace xinfer::cuda {

enum class PrefillKernel { kWgmma, kWgmmaSimple, kWgmmaWs, kMmaSync };

bool prefill_attention_supports(int head_dim);
bool prefill_ws_supports(int head_dim);

// Runs attention for every query row of plan.prefill_items; writes only those rows of p.out.
void launch_paged_prefill_attention(const PagedAttentionParams& p, const AttentionPlanView& plan,
                                    cudaStream_t stream, PrefillKernel kernel);

}  // namespace xinfer::cuda
