#include "xinfer/backend/cuda/kernels/attention/paged_decode_attention.h"

#include <cfloat>

#include "xinfer/backend/cuda/cuda_check.h"
#include "xinfer/backend/cuda/kernels/attention/attention_dispatch.cuh"

namespace xinfer::cuda {
namespace {

template <int kD>
struct DecodeConfig {
  static constexpr int kHeadDim = kD;
  static constexpr int kThreads = 128;
  static constexpr int kLanesPerToken = kD / 8;                  // one 16-byte load per lane per row
  static constexpr int kTokenSlots = kThreads / kLanesPerToken;  // rows in flight per load round
  static constexpr int kUnroll = 4;                              // load rounds issued before first use
  static constexpr int kGroupTile = 8;                           // q heads accumulated at once (P @ V)
  static_assert(kLanesPerToken <= 32 && 32 % kLanesPerToken == 0);
};

__device__ __forceinline__ void unpack8(const uint4& v, float (&f)[8]) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 x = __bfloat1622float2(h[i]);
    f[2 * i] = x.x;
    f[2 * i + 1] = x.y;
  }
}

size_t smem_bytes(int head_dim, int group, int partition_size, int token_slots, int group_tile) {
  return sizeof(float) * (static_cast<size_t>(group) * head_dim + static_cast<size_t>(group) * partition_size +
                          static_cast<size_t>(token_slots) * group_tile * head_dim + 2 * static_cast<size_t>(group));
}

// Grid (num_decode, num_kv_heads, num_partitions); 128 threads.
template <typename Cfg>
__global__ void __launch_bounds__(Cfg::kThreads) paged_decode_kernel(PagedAttentionParams p, AttentionPlanView plan,
                                                                     int partition_size, int num_partitions,
                                                                     float* workspace) {
  constexpr int kD = Cfg::kHeadDim, kL = Cfg::kLanesPerToken, kSlots = Cfg::kTokenSlots, kU = Cfg::kUnroll;
  constexpr int kGT = Cfg::kGroupTile;
  const int di = blockIdx.x, kvh = blockIdx.y, part = blockIdx.z;
  const int seq = plan.decode_seqs[di];
  const int t = p.query_start_loc[seq];
  const int kv_len = p.positions[t] + 1;
  const int begin = part * partition_size;
  if (begin >= kv_len) return;
  const int n = min(kv_len - begin, partition_size);
  const int group = p.num_heads / p.num_kv_heads;

  extern __shared__ float smem[];
  float* q_s = smem;                                 // [group, kD], pre-scaled
  float* scores = q_s + group * kD;                  // [group, partition_size]
  float* red = scores + group * partition_size;      // [kSlots, kGT, kD]
  float* stat_max = red + kSlots * kGT * kD;         // [group]
  float* stat_sum = stat_max + group;                // [group]

  const __nv_bfloat16* q = p.qkv + static_cast<size_t>(t) * p.qkv_stride + static_cast<size_t>(kvh) * group * kD;
  for (int i = threadIdx.x; i < group * kD; i += Cfg::kThreads) q_s[i] = __bfloat162float(q[i]) * p.scale;
  __syncthreads();

  const int lane_in_tok = threadIdx.x % kL, slot = threadIdx.x / kL;
  const int32_t* table = p.block_tables + static_cast<size_t>(seq) * p.max_blocks_per_seq;
  auto row_offset = [&](int j) -> size_t {  // element offset of (position j, this lane's 8 dims)
    const int blk = table[j / p.block_size];
    return ((static_cast<size_t>(blk) * p.num_kv_heads + kvh) * p.block_size + j % p.block_size) * kD +
           lane_in_tok * 8;
  };

  // Phase 1: scores[g, j] = q_g . k_j (all lanes take part in the shuffles, also past the end).
  for (int base = 0; base < n; base += kSlots * kU) {
    uint4 kv[kU];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int j = base + u * kSlots + slot;
      kv[u] = j < n ? *reinterpret_cast<const uint4*>(p.k_cache + row_offset(begin + j)) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int j = base + u * kSlots + slot;
      float kf[8];
      unpack8(kv[u], kf);
      for (int g = 0; g < group; ++g) {
        const float4* qg = reinterpret_cast<const float4*>(q_s + g * kD + lane_in_tok * 8);
        const float4 a = qg[0], b = qg[1];
        float dot = a.x * kf[0] + a.y * kf[1] + a.z * kf[2] + a.w * kf[3] + b.x * kf[4] + b.y * kf[5] +
                    b.z * kf[6] + b.w * kf[7];
#pragma unroll
        for (int o = kL / 2; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
        if (lane_in_tok == 0 && j < n) scores[g * partition_size + j] = dot;
      }
    }
  }
  __syncthreads();

  // Phase 2: softmax statistics per head; scores become exp(s - max).
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int g = warp; g < group; g += Cfg::kThreads / 32) {
    float* sg = scores + g * partition_size;
    float m = -FLT_MAX;
    for (int j = lane; j < n; j += 32) m = fmaxf(m, sg[j]);
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    float l = 0.0f;
    for (int j = lane; j < n; j += 32) {
      const float e = __expf(sg[j] - m);
      sg[j] = e;
      l += e;
    }
    for (int o = 16; o > 0; o >>= 1) l += __shfl_xor_sync(0xffffffffu, l, o);
    if (lane == 0) {
      stat_max[g] = m;
      stat_sum[g] = l;
    }
  }
  __syncthreads();

  // Phase 3: acc[g, :] = sum_j p[g, j] * v_j, kGT heads at a time; V rows are reloaded only when group > kGT.
  for (int g0 = 0; g0 < group; g0 += kGT) {
    float acc[kGT][8];
#pragma unroll
    for (int gi = 0; gi < kGT; ++gi)
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[gi][i] = 0.0f;
    for (int base = 0; base < n; base += kSlots * kU) {
      uint4 vv[kU];
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        const int j = base + u * kSlots + slot;
        vv[u] = j < n ? *reinterpret_cast<const uint4*>(p.v_cache + row_offset(begin + j)) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        const int j = base + u * kSlots + slot;
        if (j >= n) continue;
        float vf[8];
        unpack8(vv[u], vf);
#pragma unroll
        for (int gi = 0; gi < kGT; ++gi) {
          if (g0 + gi >= group) break;
          const float pr = scores[(g0 + gi) * partition_size + j];
#pragma unroll
          for (int i = 0; i < 8; ++i) acc[gi][i] += pr * vf[i];
        }
      }
    }
#pragma unroll
    for (int gi = 0; gi < kGT; ++gi)
#pragma unroll
      for (int i = 0; i < 8; ++i) red[(slot * kGT + gi) * kD + lane_in_tok * 8 + i] = acc[gi][i];
    __syncthreads();
    for (int idx = threadIdx.x; idx < kGT * kD; idx += Cfg::kThreads) {
      const int gi = idx / kD, d = idx % kD, g = g0 + gi;
      if (g >= group) continue;
      float sum = 0.0f;
#pragma unroll
      for (int s = 0; s < kSlots; ++s) sum += red[(s * kGT + gi) * kD + d];
      const int h = kvh * group + g;
      const float o = sum / stat_sum[g];
      if (num_partitions == 1) {
        p.out[static_cast<size_t>(t) * p.num_heads * kD + h * kD + d] = __float2bfloat16(o);
      } else {
        const size_t row = (static_cast<size_t>(di) * p.num_heads + h) * num_partitions + part;
        workspace[row * (kD + 2) + d] = o;
        if (d == 0) {
          workspace[row * (kD + 2) + kD] = stat_max[g];
          workspace[row * (kD + 2) + kD + 1] = stat_sum[g];
        }
      }
    }
    __syncthreads();
  }
}

// Merges split-KV partials. Grid (num_decode, num_heads); threads loop over head_dim.
__global__ void decode_reduce_kernel(PagedAttentionParams p, AttentionPlanView plan, int partition_size,
                                     int num_partitions, const float* workspace) {
  const int di = blockIdx.x, h = blockIdx.y, D = p.head_dim;
  const int seq = plan.decode_seqs[di];
  const int t = p.query_start_loc[seq];
  const int parts = (p.positions[t] + partition_size) / partition_size;  // ceil((pos + 1) / size)
  const float* rows = workspace + (static_cast<size_t>(di) * p.num_heads + h) * num_partitions * (D + 2);
  float m = -FLT_MAX;
  for (int i = 0; i < parts; ++i) m = fmaxf(m, rows[i * (D + 2) + D]);
  float total = 0.0f;
  for (int i = 0; i < parts; ++i) total += rows[i * (D + 2) + D + 1] * __expf(rows[i * (D + 2) + D] - m);
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float o = 0.0f;
    for (int i = 0; i < parts; ++i) {
      const float w = rows[i * (D + 2) + D + 1] * __expf(rows[i * (D + 2) + D] - m);
      o += w * rows[i * (D + 2) + d];
    }
    p.out[static_cast<size_t>(t) * p.num_heads * D + static_cast<size_t>(h) * D + d] = __float2bfloat16(o / total);
  }
}

template <int kD>
void launch_decode(const PagedAttentionParams& p, const AttentionPlanView& plan, int partition_size, float* workspace,
                   cudaStream_t stream) {
  using Cfg = DecodeConfig<kD>;
  const int group = p.num_heads / p.num_kv_heads;
  const int parts = (plan.max_decode_len + partition_size - 1) / partition_size;
  const size_t smem = smem_bytes(kD, group, partition_size, Cfg::kTokenSlots, Cfg::kGroupTile);
  static const bool attr_set = [] {
    XI_CUDA_CHECK(cudaFuncSetAttribute(paged_decode_kernel<Cfg>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       160 * 1024));
    return true;
  }();
  (void)attr_set;
  XI_CHECK_LE(smem, static_cast<size_t>(160 * 1024)) << "decode attention: group " << group << " too large";
  XI_CHECK(parts == 1 || workspace != nullptr) << "decode attention: split-KV needs a workspace";
  const dim3 grid(plan.num_decode, p.num_kv_heads, parts);
  paged_decode_kernel<Cfg><<<grid, Cfg::kThreads, smem, stream>>>(p, plan, partition_size, parts, workspace);
  XI_CUDA_CHECK_LAUNCH();
  if (parts > 1) {
    decode_reduce_kernel<<<dim3(plan.num_decode, p.num_heads), 128, 0, stream>>>(p, plan, partition_size, parts,
                                                                                 workspace);
    XI_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace

bool decode_attention_supports(int head_dim) { return head_dim == 64 || head_dim == 128; }

size_t decode_attention_workspace_floats(int num_decode, int num_heads, int head_dim, int max_decode_len,
                                         int partition_size) {
  const int parts = (max_decode_len + partition_size - 1) / partition_size;
  if (parts <= 1) return 0;
  return static_cast<size_t>(num_decode) * num_heads * parts * (head_dim + 2);
}

void launch_paged_decode_attention(const PagedAttentionParams& p, const AttentionPlanView& plan, int partition_size,
                                   float* workspace, cudaStream_t stream) {
  if (plan.num_decode == 0) return;
  XI_CHECK_EQ(p.num_heads % p.num_kv_heads, 0);
  dispatch_fast_head_dim(p.head_dim, [&]<int kD>() { launch_decode<kD>(p, plan, partition_size, workspace, stream); });
}

}  // namespace xinfer::cuda
