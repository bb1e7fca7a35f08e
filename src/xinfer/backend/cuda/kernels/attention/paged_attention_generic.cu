#include "xinfer/backend/cuda/kernels/attention/paged_attention_generic.h"

#include <cfloat>

#include "xinfer/backend/cuda/cuda_check.h"
#include "xinfer/backend/cuda/kernels/attention/kv_fp8.cuh"

namespace xinfer::cuda {
namespace {

constexpr int kThreads = 128;

// Block-wide reduction (max or sum) of one float per thread; all threads get the result.
template <bool kMax>
__device__ float block_reduce(float v, float* scratch) {
  for (int o = 16; o > 0; o >>= 1) {
    const float w = __shfl_xor_sync(0xffffffffu, v, o);
    v = kMax ? fmaxf(v, w) : v + w;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // scratch may still be read from the previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float r = scratch[0];
  for (int i = 1; i < kThreads / 32; ++i) r = kMax ? fmaxf(r, scratch[i]) : r + scratch[i];
  return r;
}

// One cache element as f32: bf16, or an e4m3 code (its scale is applied outside: qk_scale_of, v_scale_of).
template <bool kFp8>
__device__ __forceinline__ float kv_at(const void* row, int d) {
  if constexpr (kFp8)
    return e4m3_to_float(static_cast<const uint8_t*>(row)[d]);
  else
    return __bfloat162float(static_cast<const __nv_bfloat16*>(row)[d]);
}

// Grid (T, num_heads).
template <bool kFp8>
__global__ void __launch_bounds__(kThreads) paged_attention_generic_kernel(PagedAttentionParams p, AttentionPlanView plan) {
  const int t = blockIdx.x, h = blockIdx.y, D = p.head_dim;
  const int kvh = h / (p.num_heads / p.num_kv_heads);
  const int seq = plan.token_seq[t];
  const int n = p.positions[t] + 1;
  __shared__ float q_s[kGenericAttentionMaxHeadDim];
  __shared__ float p_s[kThreads];
  __shared__ float scratch[kThreads / 32];
  const __nv_bfloat16* q = p.qkv + static_cast<size_t>(t) * p.qkv_stride + static_cast<size_t>(h) * D;
  const float qk_scale = qk_scale_of(p, kvh);
  for (int d = threadIdx.x; d < D; d += kThreads) q_s[d] = __bfloat162float(q[d]) * qk_scale;
  __syncthreads();
  const int32_t* table = p.block_tables + static_cast<size_t>(seq) * p.max_blocks_per_seq;
  constexpr size_t kElemBytes = kFp8 ? 1 : 2;
  auto row = [&](const __nv_bfloat16* cache, int j) -> const void* {
    return reinterpret_cast<const unsigned char*>(cache) +
           ((static_cast<size_t>(table[j / p.block_size]) * p.num_kv_heads + kvh) * p.block_size + j % p.block_size) *
               D * kElemBytes;
  };
  float m = -FLT_MAX, l = 0.0f, acc0 = 0.0f, acc1 = 0.0f;
  const int d0 = threadIdx.x, d1 = threadIdx.x + kThreads;
  for (int c0 = 0; c0 < n; c0 += kThreads) {
    const int j = c0 + threadIdx.x;
    float s = -FLT_MAX;
    if (j < n) {
      const void* k = row(p.k_cache, j);
      float dot = 0.0f;
      for (int d = 0; d < D; ++d) dot += q_s[d] * kv_at<kFp8>(k, d);
      s = dot;
    }
    const float m_new = fmaxf(m, block_reduce<true>(s, scratch));
    const float pr = j < n ? __expf(s - m_new) : 0.0f;
    const float alpha = __expf(m - m_new);  // m = -FLT_MAX on the first chunk: alpha = 0, acc = 0 anyway
    l = l * alpha + block_reduce<false>(pr, scratch);
    m = m_new;
    p_s[threadIdx.x] = pr;
    __syncthreads();
    acc0 *= alpha;
    acc1 *= alpha;
    const int count = min(kThreads, n - c0);
    for (int jj = 0; jj < count; ++jj) {
      const void* v = row(p.v_cache, c0 + jj);
      if (d0 < D) acc0 += p_s[jj] * kv_at<kFp8>(v, d0);
      if (d1 < D) acc1 += p_s[jj] * kv_at<kFp8>(v, d1);
    }
    __syncthreads();
  }
  __nv_bfloat16* o = p.out + static_cast<size_t>(t) * p.num_heads * D + static_cast<size_t>(h) * D;
  const float v_scale = v_scale_of(p, kvh);
  if (d0 < D) o[d0] = __float2bfloat16(acc0 / l * v_scale);
  if (d1 < D) o[d1] = __float2bfloat16(acc1 / l * v_scale);
}

}  // namespace

void launch_paged_attention_generic(const PagedAttentionParams& p, const AttentionPlanView& plan, cudaStream_t stream) {
  XI_CHECK(p.head_dim > 0 && p.head_dim <= kGenericAttentionMaxHeadDim) << "unsupported head_dim: " << p.head_dim;
  XI_CHECK_EQ(p.num_heads % p.num_kv_heads, 0);
  if (p.num_tokens == 0) return;
  if (p.kv_fp8)
    paged_attention_generic_kernel<true><<<dim3(p.num_tokens, p.num_heads), kThreads, 0, stream>>>(p, plan);
  else
    paged_attention_generic_kernel<false><<<dim3(p.num_tokens, p.num_heads), kThreads, 0, stream>>>(p, plan);
  XI_CUDA_CHECK_LAUNCH();
}

}  // namespace xinfer::cuda
