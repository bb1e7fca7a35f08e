#include "xinfer/backend/cuda/kernels/attention/paged_prefill_attention.h"

#include <mma.h>

#include <cfloat>

#include "xinfer/backend/cuda/cuda_check.h"
#include "xinfer/backend/cuda/kernels/attention/attention_dispatch.cuh"
#include "xinfer/backend/cuda/kernels/attention/attention_plan.h"

namespace xinfer::cuda {
namespace {

namespace wmma = nvcuda::wmma;

template <int kD>
struct PrefillConfig {
  static constexpr int kHeadDim = kD;
  static constexpr int kM = kPrefillTileRows;  // query rows per CTA
  static constexpr int kN = 64;                // KV rows per tile
  static constexpr int kThreads = 128;         // 4 warps x 16 query rows
  static constexpr int kLdQ = kD + 8;          // bf16 row pitch of Q/K/V tiles (padding against bank conflicts)
  static constexpr int kLdS = kN + 4;          // f32 pitch of S
  static constexpr int kLdP = kN + 8;          // bf16 pitch of P
  static constexpr int kLdO = kD + 4;          // f32 pitch of O
  static constexpr size_t align(size_t b) { return (b + 127) / 128 * 128; }
  static constexpr size_t kQBytes = align(sizeof(__nv_bfloat16) * kM * kLdQ);
  static constexpr size_t kKvBytes = align(sizeof(__nv_bfloat16) * kN * kLdQ);
  static constexpr size_t kSBytes = align(sizeof(float) * kM * kLdS);
  static constexpr size_t kPBytes = align(sizeof(__nv_bfloat16) * kM * kLdP);
  static constexpr size_t kOBytes = align(sizeof(float) * kM * kLdO);
  static constexpr size_t kStatBytes = align(sizeof(float) * kM * 3);
  static constexpr size_t kSmem = kQBytes + 2 * kKvBytes + kSBytes + kPBytes + kOBytes + kStatBytes;
  static_assert(kM == 16 * (kThreads / 32));
};

template <typename Cfg>
__global__ void __launch_bounds__(Cfg::kThreads) paged_prefill_kernel(PagedAttentionParams p, AttentionPlanView plan) {
  constexpr int kD = Cfg::kHeadDim, kM = Cfg::kM, kN = Cfg::kN, kLdQ = Cfg::kLdQ, kLdS = Cfg::kLdS,
                kLdP = Cfg::kLdP, kLdO = Cfg::kLdO, kVecs = kD / 8;
  extern __shared__ __align__(128) unsigned char smem[];
  auto* q_s = reinterpret_cast<__nv_bfloat16*>(smem);                                         // [kM, kLdQ]
  auto* k_s = reinterpret_cast<__nv_bfloat16*>(smem + Cfg::kQBytes);                          // [kN, kLdQ]
  auto* v_s = reinterpret_cast<__nv_bfloat16*>(smem + Cfg::kQBytes + Cfg::kKvBytes);          // [kN, kLdQ]
  auto* s_s = reinterpret_cast<float*>(smem + Cfg::kQBytes + 2 * Cfg::kKvBytes);              // [kM, kLdS]
  auto* p_s = reinterpret_cast<__nv_bfloat16*>(reinterpret_cast<unsigned char*>(s_s) + Cfg::kSBytes);  // [kM, kLdP]
  auto* o_s = reinterpret_cast<float*>(reinterpret_cast<unsigned char*>(p_s) + Cfg::kPBytes);          // [kM, kLdO]
  float* row_max = reinterpret_cast<float*>(reinterpret_cast<unsigned char*>(o_s) + Cfg::kOBytes);    // [kM]
  float* row_sum = row_max + kM;                                                                        // [kM]
  int* row_pos = reinterpret_cast<int*>(row_sum + kM);  // [kM] position of each query row, -1 past the end

  const int seq = plan.prefill_items[2 * blockIdx.x], m0 = plan.prefill_items[2 * blockIdx.x + 1];
  const int h = blockIdx.y, kvh = h / (p.num_heads / p.num_kv_heads);
  const int q_begin = p.query_start_loc[seq] + m0;
  const int rows = min(kM, p.query_start_loc[seq + 1] - q_begin);
  const int kv_end = p.positions[q_begin + rows - 1] + 1;  // causal: the last row sees the most

  for (int idx = threadIdx.x; idx < kM * kVecs; idx += Cfg::kThreads) {
    const int r = idx / kVecs, c = idx % kVecs;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r < rows) v = *reinterpret_cast<const uint4*>(p.qkv + static_cast<size_t>(q_begin + r) * p.qkv_stride + h * kD + c * 8);
    *reinterpret_cast<uint4*>(q_s + r * kLdQ + c * 8) = v;
  }
  for (int idx = threadIdx.x; idx < kM * kLdO; idx += Cfg::kThreads) o_s[idx] = 0.0f;
  for (int r = threadIdx.x; r < kM; r += Cfg::kThreads) {
    row_max[r] = -FLT_MAX;
    row_sum[r] = 0.0f;
    row_pos[r] = r < rows ? p.positions[q_begin + r] : -1;
  }
  const int32_t* table = p.block_tables + static_cast<size_t>(seq) * p.max_blocks_per_seq;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wr = warp * 16;  // this warp's first query row

  for (int n0 = 0; n0 < kv_end; n0 += kN) {
    __syncthreads();  // previous tile's P @ V is done with k_s / v_s
    for (int idx = threadIdx.x; idx < kN * kVecs; idx += Cfg::kThreads) {
      const int r = idx / kVecs, c = idx % kVecs, j = n0 + r;
      uint4 kv = make_uint4(0, 0, 0, 0), vv = make_uint4(0, 0, 0, 0);
      if (j < kv_end) {
        const size_t off = ((static_cast<size_t>(table[j / p.block_size]) * p.num_kv_heads + kvh) * p.block_size +
                            j % p.block_size) * kD + c * 8;
        kv = *reinterpret_cast<const uint4*>(p.k_cache + off);
        vv = *reinterpret_cast<const uint4*>(p.v_cache + off);
      }
      *reinterpret_cast<uint4*>(k_s + r * kLdQ + c * 8) = kv;
      *reinterpret_cast<uint4*>(v_s + r * kLdQ + c * 8) = vv;
    }
    __syncthreads();

    // S[wr:wr+16, :] = Q K^T
    {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[kN / 16];
#pragma unroll
      for (int c = 0; c < kN / 16; ++c) wmma::fill_fragment(acc[c], 0.0f);
#pragma unroll
      for (int k = 0; k < kD / 16; ++k) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
        wmma::load_matrix_sync(a, q_s + wr * kLdQ + k * 16, kLdQ);
#pragma unroll
        for (int c = 0; c < kN / 16; ++c) {
          wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> b;
          wmma::load_matrix_sync(b, k_s + c * 16 * kLdQ + k * 16, kLdQ);
          wmma::mma_sync(acc[c], a, b, acc[c]);
        }
      }
#pragma unroll
      for (int c = 0; c < kN / 16; ++c) wmma::store_matrix_sync(s_s + wr * kLdS + c * 16, acc[c], kLdS, wmma::mem_row_major);
    }
    __syncwarp();

    // Online softmax for this warp's rows; rescales O rows by exp(old max - new max).
    for (int r = wr; r < wr + 16; ++r) {
      const int qp = row_pos[r];
      float sv[kN / 32];
      float mx = -FLT_MAX;
#pragma unroll
      for (int i = 0; i < kN / 32; ++i) {
        const int c = lane + 32 * i;
        sv[i] = n0 + c <= qp ? s_s[r * kLdS + c] * p.scale : -FLT_MAX;
        mx = fmaxf(mx, sv[i]);
      }
      for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      const float m_old = row_max[r];
      const float m_new = fmaxf(m_old, mx);
      float sum = 0.0f;
#pragma unroll
      for (int i = 0; i < kN / 32; ++i) {
        const int c = lane + 32 * i;
        const float pr = n0 + c <= qp ? __expf(sv[i] - m_new) : 0.0f;
        const __nv_bfloat16 pb = __float2bfloat16(pr);
        p_s[r * kLdP + c] = pb;
        sum += __bfloat162float(pb);  // the sum matches the bf16 P that multiplies V
      }
      for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
      const float alpha = m_old == -FLT_MAX ? 0.0f : __expf(m_old - m_new);
      for (int d = lane; d < kD; d += 32) o_s[r * kLdO + d] *= alpha;
      __syncwarp();
      if (lane == 0) {
        row_max[r] = m_new;
        row_sum[r] = row_sum[r] * alpha + sum;
      }
    }
    __syncwarp();

    // O[wr:wr+16, :] += P V
#pragma unroll
    for (int c = 0; c < kD / 16; ++c) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::load_matrix_sync(acc, o_s + wr * kLdO + c * 16, kLdO, wmma::mem_row_major);
#pragma unroll
      for (int k = 0; k < kN / 16; ++k) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> b;
        wmma::load_matrix_sync(a, p_s + wr * kLdP + k * 16, kLdP);
        wmma::load_matrix_sync(b, v_s + k * 16 * kLdQ + c * 16, kLdQ);
        wmma::mma_sync(acc, a, b, acc);
      }
      wmma::store_matrix_sync(o_s + wr * kLdO + c * 16, acc, kLdO, wmma::mem_row_major);
    }
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < rows * kD; idx += Cfg::kThreads) {
    const int r = idx / kD, d = idx % kD;
    p.out[static_cast<size_t>(q_begin + r) * p.num_heads * kD + h * kD + d] =
        __float2bfloat16(o_s[r * kLdO + d] / row_sum[r]);
  }
}

template <int kD>
void launch_prefill(const PagedAttentionParams& p, const AttentionPlanView& plan, cudaStream_t stream) {
  using Cfg = PrefillConfig<kD>;
  static const bool attr_set = [] {
    XI_CUDA_CHECK(cudaFuncSetAttribute(paged_prefill_kernel<Cfg>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(Cfg::kSmem)));
    return true;
  }();
  (void)attr_set;
  paged_prefill_kernel<Cfg><<<dim3(plan.num_prefill_items, p.num_heads), Cfg::kThreads, Cfg::kSmem, stream>>>(p, plan);
  XI_CUDA_CHECK_LAUNCH();
}

}  // namespace

bool prefill_attention_supports(int head_dim) { return head_dim == 64 || head_dim == 128; }

void launch_paged_prefill_attention(const PagedAttentionParams& p, const AttentionPlanView& plan, cudaStream_t stream) {
  if (plan.num_prefill_items == 0) return;
  XI_CHECK_EQ(p.num_heads % p.num_kv_heads, 0);
  dispatch_fast_head_dim(p.head_dim, [&]<int kD>() { launch_prefill<kD>(p, plan, stream); });
}

}  // namespace xinfer::cuda
