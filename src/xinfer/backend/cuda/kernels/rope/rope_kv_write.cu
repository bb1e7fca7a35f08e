#include "xinfer/backend/cuda/kernels/rope/rope_kv_write.h"

#include "xinfer/backend/cuda/cuda_check.h"
#include "xinfer/backend/cuda/kernels/pdl.cuh"

namespace xinfer::cuda {
namespace {

__global__ void rope_kv_write_kernel(RopeKvWriteArgs a) {
  pdl_wait();  // first: earlier kernels in the stream may still be running (pdl.cuh)
  pdl_release();
  const int t = blockIdx.x, D = a.head_dim, half = D / 2;
  const int stride = (a.num_heads + 2 * a.num_kv_heads) * D;
  __nv_bfloat16* row = a.qkv + static_cast<size_t>(t) * stride;
  const float* cs = a.cos_sin + static_cast<size_t>(a.positions[t]) * D;
  const int slot = a.slot_mapping[t];
  const size_t block = slot >= 0 ? static_cast<size_t>(slot / a.block_size) : 0;
  const int offset = slot >= 0 ? slot % a.block_size : 0;
  auto cache_row = [&](int kv_head) { return ((block * a.num_kv_heads + kv_head) * a.block_size + offset) * D; };

  for (int idx = threadIdx.x; idx < (a.num_heads + a.num_kv_heads) * half; idx += blockDim.x) {
    const int h = idx / half, i = idx % half;
    __nv_bfloat16* x = row + h * D;
    const float x1 = __bfloat162float(x[i]), x2 = __bfloat162float(x[i + half]);
    const float c = cs[i], s = cs[half + i];
    const __nv_bfloat16 y1 = __float2bfloat16(x1 * c - x2 * s), y2 = __float2bfloat16(x2 * c + x1 * s);
    x[i] = y1;
    x[i + half] = y2;
    if (h >= a.num_heads && slot >= 0) {
      __nv_bfloat16* k = a.k_cache + cache_row(h - a.num_heads);
      k[i] = y1;
      k[i + half] = y2;
    }
  }
  if (slot < 0) return;
  const __nv_bfloat16* v = row + (a.num_heads + a.num_kv_heads) * D;
  for (int idx = threadIdx.x; idx < a.num_kv_heads * D; idx += blockDim.x) {
    const int h = idx / D, d = idx % D;
    a.v_cache[cache_row(h) + d] = v[idx];
  }
}

}  // namespace

void launch_rope_kv_write(const RopeKvWriteArgs& a, cudaStream_t stream) {
  XI_CHECK_EQ(a.head_dim % 2, 0) << "rope: odd head_dim";
  if (a.num_tokens == 0) return;
  launch_pdl(rope_kv_write_kernel, a.num_tokens, 128, 0, stream, a);
}

}  // namespace xinfer::cuda
