#include "xinfer/backend/cuda/kernels/norm/qk_norm.h"

#include "xinfer/backend/cuda/cuda_check.h"
#include "xinfer/backend/cuda/kernels/pdl.cuh"

namespace xinfer::cuda {
namespace {

constexpr int kWarps = 4;

__global__ void __launch_bounds__(kWarps * 32) qk_norm_kernel(QkNormArgs a) {
  pdl_release();  // the next kernel may launch now: it waits for this one's results itself
  pdl_wait();     // first access: earlier kernels in the stream may still be running (pdl.cuh)
  const int heads = a.num_heads + a.num_kv_heads;
  const int item = blockIdx.x * kWarps + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (item >= a.num_tokens * heads) return;
  const int t = item / heads, h = item % heads, D = a.head_dim;
  __nv_bfloat16* x = a.qkv + static_cast<size_t>(t) * (heads + a.num_kv_heads) * D + static_cast<size_t>(h) * D;
  const __nv_bfloat16* w = h < a.num_heads ? a.q_weight : a.k_weight;
  float ss = 0.0f;
  for (int d = lane; d < D; d += 32) {
    const float v = __bfloat162float(x[d]);
    ss += v * v;
  }
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  const float inv = rsqrtf(ss / static_cast<float>(D) + a.eps);
  for (int d = lane; d < D; d += 32) x[d] = __float2bfloat16(__bfloat162float(x[d]) * inv * __bfloat162float(w[d]));
}

}  // namespace

void launch_qk_norm(const QkNormArgs& a, cudaStream_t stream) {
  const int64_t items = static_cast<int64_t>(a.num_tokens) * (a.num_heads + a.num_kv_heads);
  if (items == 0) return;
  launch_pdl(qk_norm_kernel, static_cast<unsigned>((items + kWarps - 1) / kWarps), kWarps * 32, 0, stream, a);
}

}  // namespace xinfer::cuda
