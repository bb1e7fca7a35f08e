// Qwen3's per-head RMSNorm of q and k, in place inside qkv (bf16; f32 math):
//   for each token t and head h < Hq + Hkv:  x = qkv[t, h*D : (h+1)*D];  x = x / rms(x) * w
// with w = q_weight for q heads and k_weight for k heads. One warp per (token, head).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace xinfer::cuda {

struct QkNormArgs {
  __nv_bfloat16* qkv;              // [T, (Hq + 2 * Hkv) * D]
  const __nv_bfloat16* q_weight;   // [D]
  const __nv_bfloat16* k_weight;   // [D]
  int num_tokens;
  int num_heads;
  int num_kv_heads;
  int head_dim;
  float eps;
};

void launch_qk_norm(const QkNormArgs& args, cudaStream_t stream);

}  // namespace xinfer::cuda
