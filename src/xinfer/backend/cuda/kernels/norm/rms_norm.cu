#include "xinfer/backend/cuda/kernels/norm/rms_norm.h"

#include "xinfer/backend/cuda/cuda_check.h"
#include "xinfer/backend/cuda/kernels/pdl.cuh"
#include "xinfer/backend/cuda/kernels/quant/activation_quant.cuh"

namespace xinfer::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kVec = 8;  // bf16 per 16-byte load

__device__ float block_sum(float v) {
  __shared__ float warp_sums[kThreads / 32];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  v = lane < kThreads / 32 ? warp_sums[lane] : 0.0f;
  if (warp == 0)
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
  __shared__ float total;
  if (threadIdx.x == 0) total = v;
  __syncthreads();
  return total;
}

// Vectorized path: 16-byte loads, hidden % 8 == 0. kQuant: the optional quantized copy of out (rms_norm.h).
template <RowQuant kQuant>
__global__ void __launch_bounds__(kThreads) add_rms_norm_kernel(RmsNormArgs a) {
  pdl_release();  // the next kernel may launch now: it waits for this one's results itself
  const int row = blockIdx.x;
  uint4* res = reinterpret_cast<uint4*>(a.residual + static_cast<size_t>(row) * a.hidden);
  const uint4* del = a.delta ? reinterpret_cast<const uint4*>(a.delta + static_cast<size_t>(row) * a.hidden) : nullptr;
  const uint4* w = reinterpret_cast<const uint4*>(a.weight);
  uint4* out = reinterpret_cast<uint4*>(a.out + static_cast<size_t>(row) * a.hidden);
  const int vecs = a.hidden / kVec;
  // The norm weight is no earlier kernel's output: its first chunks (all of them up to hidden 8192) are
  // loaded while the previous kernel finishes, off the chain of dependent loads after the wait.
  constexpr int kEarly = 4;
  uint4 w_early[kEarly];
#pragma unroll
  for (int j = 0; j < kEarly; ++j) {
    const int i = static_cast<int>(threadIdx.x) + j * kThreads;
    w_early[j] = i < vecs ? __ldg(w + i) : make_uint4(0, 0, 0, 0);
  }
  pdl_wait();  // first access to earlier kernels' outputs (pdl.cuh)

  float ss = 0.0f;
  for (int i = threadIdx.x; i < vecs; i += kThreads) {
    uint4 r = res[i];
    if (del) {
      const uint4 d = del[i];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const uint32_t rw = (&r.x)[j], dw = (&d.x)[j];
        (&r.x)[j] = act_quant::bf16x2_bits(act_quant::bf16_lo(rw) + act_quant::bf16_lo(dw),
                                           act_quant::bf16_hi(rw) + act_quant::bf16_hi(dw));
      }
      res[i] = r;
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float lo = act_quant::bf16_lo((&r.x)[j]), hi = act_quant::bf16_hi((&r.x)[j]);
      ss += lo * lo;
      ss += hi * hi;
    }
  }
  const float inv = rsqrtf(block_sum(ss) / static_cast<float>(a.hidden) + a.eps);
  // Chunk i of out (x * inv * w in f32, rounded to bf16); amax, where given, takes max |value| before the
  // rounding (the row's max is rounded once: act_quant::bf16_round).
  auto normed = [&](int i, const uint4& wv, float* amax) {
    const uint4 r = res[i];
    uint4 o;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t rw = (&r.x)[j], ww = (&wv.x)[j];
      const float lo = act_quant::bf16_lo(rw) * inv * act_quant::bf16_lo(ww);
      const float hi = act_quant::bf16_hi(rw) * inv * act_quant::bf16_hi(ww);
      if (amax != nullptr) *amax = fmaxf(*amax, fmaxf(fabsf(lo), fabsf(hi)));
      (&o.x)[j] = act_quant::bf16x2_bits(lo, hi);
    }
    return o;
  };
  if constexpr (kQuant == RowQuant::kNone) {
    auto normalize = [&](int i, const uint4& wv) { out[i] = normed(i, wv, nullptr); };
#pragma unroll
    for (int j = 0; j < kEarly; ++j) {
      const int i = static_cast<int>(threadIdx.x) + j * kThreads;
      if (i < vecs) normalize(i, w_early[j]);
    }
    for (int i = static_cast<int>(threadIdx.x) + kEarly * kThreads; i < vecs; i += kThreads)
      normalize(i, __ldg(w + i));
  } else {
    // The early chunks' outputs stay in registers for their codes; later chunks (hidden past 8192) are
    // normalized again from the residual (in L1): the same bits.
    float amax = 0.0f;
    uint4 o_early[kEarly];
#pragma unroll
    for (int j = 0; j < kEarly; ++j) {
      const int i = static_cast<int>(threadIdx.x) + j * kThreads;
      if (i < vecs) {
        o_early[j] = normed(i, w_early[j], &amax);
        if (a.out != nullptr) out[i] = o_early[j];
      }
    }
    for (int i = static_cast<int>(threadIdx.x) + kEarly * kThreads; i < vecs; i += kThreads) {
      const uint4 o = normed(i, __ldg(w + i), &amax);
      if (a.out != nullptr) out[i] = o;
    }
    __shared__ float red[kThreads / 32];
    constexpr float kMax = kQuant == RowQuant::kFp8 ? act_quant::kFp8Max : act_quant::kInt8Max;
    const float scale = a.q_input_scale != nullptr
                            ? __ldg(a.q_input_scale)
                            : act_quant::bf16_round(act_quant::cta_max<kThreads>(amax, red)) / kMax;
    if (threadIdx.x == 0) a.q_scales[row] = scale;
    const float qinv = act_quant::inverse_scale(scale);
    uint2* q = reinterpret_cast<uint2*>(a.q + static_cast<size_t>(row) * a.hidden);
    constexpr bool kFp8 = kQuant == RowQuant::kFp8;
#pragma unroll
    for (int j = 0; j < kEarly; ++j) {
      const int i = static_cast<int>(threadIdx.x) + j * kThreads;
      if (i < vecs) q[i] = act_quant::codes8<kFp8>(o_early[j], qinv);
    }
    for (int i = static_cast<int>(threadIdx.x) + kEarly * kThreads; i < vecs; i += kThreads)
      q[i] = act_quant::codes8<kFp8>(normed(i, __ldg(w + i), nullptr), qinv);
  }
}

// Scalar path for any hidden size.
__global__ void __launch_bounds__(kThreads) add_rms_norm_scalar_kernel(RmsNormArgs a) {
  pdl_release();  // the next kernel may launch now: it waits for this one's results itself
  pdl_wait();     // first access: earlier kernels in the stream may still be running (pdl.cuh)
  const size_t base = static_cast<size_t>(blockIdx.x) * a.hidden;
  float ss = 0.0f;
  for (int i = threadIdx.x; i < a.hidden; i += kThreads) {
    float x = __bfloat162float(a.residual[base + i]);
    if (a.delta) {
      const __nv_bfloat16 r = __float2bfloat16(x + __bfloat162float(a.delta[base + i]));
      a.residual[base + i] = r;
      x = __bfloat162float(r);
    }
    ss += x * x;
  }
  const float inv = rsqrtf(block_sum(ss) / static_cast<float>(a.hidden) + a.eps);
  for (int i = threadIdx.x; i < a.hidden; i += kThreads)
    a.out[base + i] = __float2bfloat16(__bfloat162float(a.residual[base + i]) * inv * __bfloat162float(a.weight[i]));
}

}  // namespace

void launch_add_rms_norm(const RmsNormArgs& args, cudaStream_t stream) {
  if (args.rows == 0) return;
  XI_CHECK(args.q_kind == RowQuant::kNone || (args.hidden % kVec == 0 && args.q != nullptr && args.q_scales != nullptr &&
                                              reinterpret_cast<uintptr_t>(args.q) % 8 == 0))
      << "add_rms_norm: a quantized copy needs hidden % 8 == 0 (got " << args.hidden << ") and 8-byte aligned codes";
  XI_CHECK(args.out != nullptr || args.q_kind != RowQuant::kNone) << "add_rms_norm: no output";
  if (args.q_kind == RowQuant::kFp8)
    launch_pdl(add_rms_norm_kernel<RowQuant::kFp8>, args.rows, kThreads, 0, stream, args);
  else if (args.q_kind == RowQuant::kInt8)
    launch_pdl(add_rms_norm_kernel<RowQuant::kInt8>, args.rows, kThreads, 0, stream, args);
  else if (args.hidden % kVec == 0)
    launch_pdl(add_rms_norm_kernel<RowQuant::kNone>, args.rows, kThreads, 0, stream, args);
  else
    launch_pdl(add_rms_norm_scalar_kernel, args.rows, kThreads, 0, stream, args);
}

}  // namespace xinfer::cuda
