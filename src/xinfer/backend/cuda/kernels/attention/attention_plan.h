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
inline constexpr int kDecodeWarps = 8;
inline constexpr int kDecodeTileTokens = 16;
inline constexpr int kDecodeHeadsPerCta = 8;
inline constexpr int kDecodeCtasPerSm = 2;
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

}  // namespace xinfer::cuda
