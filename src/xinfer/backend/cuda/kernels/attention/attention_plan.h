// Host-side planning of paged attention work for one step (flashinfer's plan/run split): which
// sequences are decodes (one query token: the split-KV decode kernel) and which query tiles belong to
// prefill chunks (the tiled prefill kernel). Computed once per step in CudaBackend::upload_step() and
// read by every layer's paged_attention(), so the forward stays capturable as a CUDA graph.
#pragma once

#include <cstdint>
#include <vector>

#include "xinfer/backend/backend.h"

namespace xinfer::cuda {

// Query rows per prefill tile (the prefill kernel's CTA rows); fixed so a plan serves every head_dim.
inline constexpr int kPrefillTileRows = 128;

// Decode kernel geometry (paged_decode_attention.cu), here because decode_partition_size() sizes its grid:
// a CTA of kDecodeWarps warps serves up to kDecodeHeadsPerCta query heads of one KV head over one KV
// partition; each warp takes kDecodeTileTokens-token tiles of the partition in turn; the kernel keeps
// kDecodeCtasPerSm CTAs resident per SM (launch bounds), so kDecodeCtasPerSm * num_sms CTAs are one wave.
// The kernel is also compiled with 4 and 2 warps per CTA (decode_ctas_per_sm: 16 warps resident per SM
// whatever the split, 128 registers a thread), for grids of many CTAs (decode_warps below).
inline constexpr int kDecodeWarps = 8;
inline constexpr int kDecodeTileTokens = 16;
inline constexpr int kDecodeHeadsPerCta = 8;
inline constexpr int decode_ctas_per_sm(int warps) { return 16 / warps; }
inline constexpr int kDecodeCtasPerSm = decode_ctas_per_sm(kDecodeWarps);
inline constexpr int kDecodePartitionQuantum = kDecodeWarps * kDecodeTileTokens;  // one tile per warp

struct AttentionPlanHost {
  std::vector<int32_t> decode_seqs;    // [num_decode]
  std::vector<int32_t> decode_lens;    // [num_decode] context length (cached + new) of each decode
  std::vector<int32_t> prefill_items;  // [num_items * 2] (seq, first query row of the tile in the seq)
  std::vector<int32_t> token_seq;      // [T]
  int max_decode_len = 0;
  int64_t prefill_tile_context = 0;  // sum over prefill tiles of their sequence's context after the step
  int num_decode() const { return static_cast<int>(decode_seqs.size()); }
  int num_prefill_items() const { return static_cast<int>(prefill_items.size() / 2); }
};

AttentionPlanHost build_attention_plan(const backend::StepPlan& plan);

// Prefill kernel for a step, from measurements on the H200 (Llama-3.1-8B heads, docs/PERF.md): the wgmma
// kernel without softmax/PV overlap is fastest once query tiles attend to long contexts (2048-token prompt
// 306 TFLOP/s vs 279 for mma.sync; 512 on 3584 cached 340 vs 247); mma.sync wins on short prompts (64 x 128:
// 90 vs 65; 8 x 512: 185 vs 176). The switch is the mean over query tiles of their sequence's context
// length after the step (not the keys a tile attends to causally: a 1024-token prompt counts 1024).
// FP8 caches, both kernels staging codes by cp.async and converting them in shared memory: the same bound
// (f16 MMAs, us: 2048-token prompt 123 vs 138 on mma.sync; 7 x 2048 837 vs 909; 512 on 3584 cached 106 vs
// 164; 8 x 512 109 vs 106; 96 x 128 220 vs 162; docs/PERF.md session 25).
inline constexpr int64_t kWgmmaPrefillMinContext = 1024;
bool prefer_wgmma_prefill(const AttentionPlanHost& plan);

// CTAs per (decode, KV head) for a GQA group: query heads are served kDecodeHeadsPerCta at a time.
inline int decode_head_tiles(int group) { return (group + kDecodeHeadsPerCta - 1) / kDecodeHeadsPerCta; }

// Split-KV partition size (tokens) for the decode kernel: the smallest kDecodePartitionQuantum * 2^k whose
// grid (num_decode * num_kv_heads * head tiles * partitions CTAs) fits one wave of kDecodeCtasPerSm *
// num_sms CTAs, or the whole context (one partition, no merge) when even that does not fit; one partition
// instead of two of kDecodePartitionQuantum (contexts up to 256: the merge costs more than a second tile
// per warp).
// Guarantee the workspace bound relies on: whenever there is more than one partition, the grid has at
// most kDecodeCtasPerSm * num_sms CTAs.
int decode_partition_size(int num_decode, int max_decode_len, int num_kv_heads, int group, int num_sms);

// Warps per decode CTA for a step. kDecodeWarps unless the grid of one partition per (decode, KV head, head
// tile) is more than one wave of kDecodeWarps-warp CTAs (then decode_partition_size() gives the whole context:
// no split-KV, which runs kDecodeWarps only); there `many_warps` (8, 4 or 2), or with many_warps 0 the
// measured rule: 2 warps where the context is at most kDecodeShortContext and the grid fills a wave of 2-warp
// CTAs (8 per SM), else 4. A CTA's serial chain (plan, block table, first K/V rows, the cross-warp merge) is
// latency, not bandwidth; more, smaller CTAs per SM at the same 16 warps hide it better on short contexts,
// while long ones need a CTA's warps to share the tiles (H200, 8B heads, FP8 cache, 8 / 4 / 2 warps: 480 x 192
// 93.0 / 66.9 / 62.0 us, 512 x 512 169.9 / 150.7 / 144.3, 857 x 1104 536 / 509 / 588, 64 x 1024 (512 CTAs)
// 39.2 / 36.1 / 54.6; docs/PERF.md session 14).
inline constexpr int kDecodeShortContext = 512;
int decode_warps(int num_decode, int max_decode_len, int num_kv_heads, int group, int num_sms, int many_warps);

}  // namespace xinfer::cuda
