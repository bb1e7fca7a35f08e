// Paged decode attention (one query token per sequence) for bf16 Q/K/V: single-pass flash-decoding on
// tensor cores (mma.sync m16n8k16, f32 accumulation, online softmax).
//
// Grid (partition, KV head x head tile, decode): a CTA of kDecodeWarps (or decode_warps()) warps serves up to
// kDecodeHeadsPerCta query heads of one KV head (all of a GQA group up to 8, so each K/V row is read
// once) over one KV partition of decode_partition_size() tokens. Each warp takes 16-token tiles of the
// partition in turn, loading K and V rows straight into registers (16 bytes per lane, the next tile's
// loads in flight while the current one is computed); S = Q K^T and O^T = V^T P^T run on tensor cores.
// The warps' (max, sum, O) are merged through shared memory. With one partition the CTA writes the
// output; with several, each CTA writes its partial (O, max, sum) to `workspace` and the last CTA of a
// (decode, KV head, head tile) to finish - an atomic counter that it resets to 0 for the next launch -
// merges them, so one kernel launch does everything and replays of a CUDA graph stay correct.
//
// Graph safety: the grid depends only on the plan's num_decode and max_decode_len (the padded context
// of a graph bucket) and the partition size; CTAs past a sequence's length exit at once.
// Workspace: [counters (uint32, fixed region of 4096, zeroed once at allocation) | partial (max, sum) |
// partial O] floats; the counters' place does not depend on the step, so steps of any shape can follow
// each other on one buffer.
//
// Supported head_dim: 64, 128 (decode_attention_supports()); other sizes use the generic kernel. Any GQA
// group (past 8 query heads the KV rows are read once per head tile), any block size (positions are divided
// by it as a multiply: exact for powers of two, else checked at launch, kv_block_index.cuh).
//
// Fused RoPE + KV write (launch_paged_decode_attention_rope, CudaBackend::rope_paged_attention on
// decode-only steps): the same kernel reads q and the newest token's k, v unrotated from qkv, so the separate
// rope_kv_write launch goes. Every CTA rotates the q heads it serves (redundantly across partitions); the
// CTAs of the last partition rotate the newest k and attend to the new k, v from shared memory (never read
// back from the cache), and head tile 0 of them writes k and v to the cache at slot_mapping[t]. The rotation
// is rope_rotate.cuh's, as in rope_kv_write, so out and the cache are bit-identical to launch_rope_kv_write
// followed by launch_paged_decode_attention when (preconditions, the caller's) every token of the step is a
// decode and each token's slot is where its block table puts position kv_len - 1, or negative (padding: no
// write; it attends to the cache's row there, as the unfused pair does). qkv is not modified.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "xinfer/backend/cuda/kernels/attention/paged_attention_params.h"

namespace xinfer::cuda {

bool decode_attention_supports(int head_dim);

// Floats of workspace the decode kernel needs for this step (0 when one partition suffices); the buffer
// must start zeroed (the merge counters reset themselves after each launch).
size_t decode_attention_workspace_floats(int num_decode, int num_heads, int num_kv_heads, int head_dim,
                                         int max_decode_len, int partition_size);

// Upper bound of decode_attention_workspace_floats() over every step planned by decode_partition_size()
// on a GPU with num_sms SMs (split grids never exceed one wave of kDecodeCtasPerSm * num_sms CTAs).
size_t decode_attention_max_workspace_floats(int head_dim, int num_sms);

// Runs decode attention for plan.decode_seqs. workspace: [decode_attention_workspace_floats(...)] f32,
// zeroed at allocation; may be null when one partition covers max_decode_len. warps: the CTA's warps,
// decode_warps() (8, or 4 / 2 for one partition only).
void launch_paged_decode_attention(const PagedAttentionParams& p, const AttentionPlanView& plan,
                                   int partition_size, int warps, float* workspace, cudaStream_t stream);

// What the fused launch needs beyond PagedAttentionParams (whose k_cache / v_cache these alias).
struct DecodeRopeParams {
  const float* cos_sin = nullptr;  // [max_pos, head_dim] f32, 16-byte aligned: cos [:, :D/2], sin [:, D/2:]
  const int32_t* slot_mapping = nullptr;  // [T] flat KV slot of each token; < 0: no write
  __nv_bfloat16* k_cache = nullptr;       // [num_blocks, num_kv_heads, block_size, head_dim] (== p.k_cache)
  __nv_bfloat16* v_cache = nullptr;       // [num_blocks, num_kv_heads, block_size, head_dim] (== p.v_cache)
};

// launch_paged_decode_attention with RoPE and the KV write of each decode's newest token fused in (above).
void launch_paged_decode_attention_rope(const PagedAttentionParams& p, const AttentionPlanView& plan,
                                        const DecodeRopeParams& rope, int partition_size, int warps,
                                        float* workspace, cudaStream_t stream);

}  // namespace xinfer::cuda
