// RoPE (rotate-half / NeoX layout, as transformers' Llama) on the q and k heads of qkv, in place, fused
// with the paged KV-cache write of the rotated k and of v (bf16; f32 math).
//
//   x[i], x[i + D/2]  <-  x[i] cos - x[i + D/2] sin,  x[i + D/2] cos + x[i] sin    (cos, sin at `position`)
//   k_cache/v_cache[slot / block_size, kv_head, slot % block_size, :] = k, v
//
// Grid (token, chunks): one thread per 16 values (8 rotated pairs of a q / k head, or 16 values of a v head),
// 16-byte accesses, where head_dim % 16 == 0 and the buffers are 16-byte aligned; otherwise one warp per
// head. Both give the same bits. Tokens with a negative slot (padding) are rotated but not cached.
//
// FP8 cache (kv_fp8): the cache holds e4m3 codes (k_cache / v_cache reinterpreted as uint8_t*), written as
// e4m3(k / k_scale) and e4m3(v / v_scale) (attention/kv_fp8.cuh: round to nearest even, saturated), with the
// scales of the token's KV head where the cache has per-head scales. The k written is the f32 rotation itself
// (the bf16 rounding of the in-place q/k result is not applied first).
//
// Key rotation (k_rotation; backend/kv_rotation.h): the f32 RoPE result of every q and k head is multiplied by
// the Walsh-Hadamard matrix of kv_rotation.h (its flat index is this kernel's (thread, value) layout: 16
// values per thread, butterflies in registers, then across the head's threads by warp shuffles) and its
// power-of-two scale; q and k are stored rotated (bf16 in place, k also to the cache). The vectorized path
// only, with the host reference's add / subtract order, so the same f32 bits.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace xinfer::cuda {

struct RopeKvWriteArgs {
  __nv_bfloat16* qkv;            // [T, (Hq + 2 * Hkv) * D], q and k rotated in place
  const float* cos_sin;          // [max_pos, D]: cos in [:, :D/2], sin in [:, D/2:]
  const int32_t* positions;      // [T]
  const int32_t* slot_mapping;   // [T]
  __nv_bfloat16* k_cache;        // [num_blocks, Hkv, block_size, D]
  __nv_bfloat16* v_cache;        // [num_blocks, Hkv, block_size, D]
  int num_tokens;
  int num_heads;
  int num_kv_heads;
  int head_dim;
  int block_size;
  bool kv_fp8 = false;   // the caches hold e4m3 codes: [num_blocks, Hkv, block_size, D] bytes each
  float k_scale = 1.0f;  // kv_fp8: stored code = e4m3(k / k_scale)
  float v_scale = 1.0f;  // kv_fp8: stored code = e4m3(v / v_scale)
  const float* k_head_scales = nullptr;  // kv_fp8, per-head scales: [num_kv_heads] (device), instead of k_scale
  const float* v_head_scales = nullptr;  // [num_kv_heads], instead of v_scale
  bool k_rotation = false;  // q and k rotated after RoPE (backend/kv_rotation.h); head_dim 16..256, a power of 2
};

void launch_rope_kv_write(const RopeKvWriteArgs& args, cudaStream_t stream);

}  // namespace xinfer::cuda
