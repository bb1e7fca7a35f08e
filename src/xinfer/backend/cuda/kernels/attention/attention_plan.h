// Host-side planning of paged attention work for one step (flashinfer's plan/run split): which
// sequences are decodes (one query token: the split-KV decode kernel) and which query tiles belong to
// prefill chunks (the tiled prefill kernel). Computed once per step in CudaBackend::upload_step() and
// read by every layer's paged_attention(), so the forward stays capturable as a CUDA graph.
#pragma once

#include <cstdint>
#include <vector>

#include "xinfer/backend/backend.h"

namespace xinfer::cuda {

// Query rows per prefill tile (the prefill kernel's kM); fixed so a plan serves every head_dim.
inline constexpr int kPrefillTileRows = 64;

struct AttentionPlanHost {
  std::vector<int32_t> decode_seqs;    // [num_decode]
  std::vector<int32_t> prefill_items;  // [num_items * 2] (seq, first query row of the tile in the seq)
  std::vector<int32_t> token_seq;      // [T]
  int max_decode_len = 0;
  int num_decode() const { return static_cast<int>(decode_seqs.size()); }
  int num_prefill_items() const { return static_cast<int>(prefill_items.size() / 2); }
};

AttentionPlanHost build_attention_plan(const backend::StepPlan& plan);

// Split-KV partition size (tokens) for the decode kernel: small enough that batch * kv_heads * partitions
// fills the GPU, capped so the per-CTA score buffer (group * partition floats) fits in shared memory.
int decode_partition_size(int num_decode, int max_decode_len, int num_kv_heads, int group, int num_sms);

}  // namespace xinfer::cuda
