// Parameters shared by the paged attention kernels (decode, prefill, generic) and the host-made work
// partition they read (AttentionPlan, built once per step by build_attention_plan()).
//
// Layouts: qkv [T, (Hq + 2 * Hkv) * D] (q heads first; only q is read), K/V cache
// [num_blocks, Hkv, block_size, D], out [T, Hq * D]. Query head h reads KV head h / (Hq / Hkv).
// Token t of sequence s at position p attends to positions [0, p] of s (causal, paged through
// block_tables[s]).
//
// FP8 KV cache (kv_fp8): k_cache / v_cache point at e4m3 codes (kv_fp8.cuh), same layout, 1 byte per element;
// an element stands for code * k_scale (K) or code * v_scale (V). The kernels fold the K scale into `scale`
// (the caller passes softmax scale * k_scale) and multiply the output by v_scale (1 for bf16 caches), or
// take each KV head's scales from k_head_scales / v_head_scales (per-head scales). The
// decode and generic kernels and the mma.sync, kWgmmaSimple and kWgmmaWs prefill kernels read FP8 caches; kWgmma (the
// softmax / P V overlap) does not.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace xinfer::cuda {

struct PagedAttentionParams {
  const __nv_bfloat16* qkv;      // [T, qkv_stride]
  const __nv_bfloat16* k_cache;  // [num_blocks, num_kv_heads, block_size, head_dim]
  const __nv_bfloat16* v_cache;  // [num_blocks, num_kv_heads, block_size, head_dim]
  __nv_bfloat16* out;            // [T, num_heads * head_dim]
  const int32_t* query_start_loc;  // [num_seqs + 1]
  const int32_t* positions;        // [T]
  const int32_t* block_tables;     // [num_seqs, max_blocks_per_seq]
  int max_blocks_per_seq;
  int num_tokens;
  int num_heads;
  int num_kv_heads;
  int head_dim;
  int block_size;
  int qkv_stride;  // (num_heads + 2 * num_kv_heads) * head_dim
  float scale;     // softmax scale, usually 1 / sqrt(head_dim) (times k_scale for an FP8 cache)
  float v_scale = 1.0f;  // output multiplier: the FP8 cache's V scale, 1 for bf16
  // FP8 caches whose heads have scales of their own ([num_kv_heads] each, device memory), or nullptr: KV head
  // h's scores are scaled by scale * k_head_scales[h] (scale then holds the softmax scale alone) and its output
  // by v_head_scales[h] (v_scale unused). kv_fp8.cuh qk_scale_of / v_scale_of.
  const float* k_head_scales = nullptr;
  const float* v_head_scales = nullptr;
  bool kv_fp8 = false;   // k_cache / v_cache hold e4m3 codes (reinterpret them as const uint8_t*)
  // kv_fp8, decode and prefill kernels: codes -> f16 (one cvt per two codes) and f16 MMAs (Q rounded to f16,
  // P in f16) instead of codes -> bf16 by integer ops and bf16 MMAs. CudaBackend sets it by default
  // (CudaBackend::set_fp8_kv_f16_mma); false here, for direct launches, is the bf16-MMA variant.
  bool kv_fp8_f16 = false;
  // kv_fp8, decode kernel: how the K/V tiles ahead of the one in registers are fetched (an experiment;
  // CudaBackend::set_fp8_kv_decode_prefetch): 0 = the next tile's register loads only; 1 = also the tile two
  // ahead prefetched into L2; 2 = the tiles one and two ahead staged in shared memory by cp.async.
  int kv_fp8_prefetch = 0;
};

// Device views of a step's attention work partition (arrays live in the backend's step buffer).
struct AttentionPlanView {
  int num_decode = 0;          // sequences with exactly one query token
  int max_decode_len = 0;      // longest context among them, or the padded context of a graph bucket
  int num_prefill_items = 0;   // query tiles of sequences with more than one query token
  const int32_t* decode_seqs = nullptr;    // [num_decode] sequence index of each decode
  const int32_t* decode_lens = nullptr;    // [num_decode] context length (cached + new) of each decode
  const int32_t* prefill_items = nullptr;  // [num_prefill_items, 2] (sequence, first query row of the tile)
  const int32_t* token_seq = nullptr;      // [T] sequence index of each token
};

}  // namespace xinfer::cuda
