#include "xinfer/backend/cuda/kernels/elementwise/argmax_rows.h"

#include <climits>
#include <cstdint>

#include "xinfer/backend/cuda/cuda_check.h"
#include "xinfer/backend/cuda/kernels/pdl.cuh"

namespace xinfer::cuda {
namespace {

constexpr int kThreads = 1024;

// Folds value v at id i into (best, idx). NaN compares false both ways and is skipped; idx == INT_MAX marks
// "nothing yet", so the first -inf is taken (lowest id), like the host's first_index_of(max).
__device__ __forceinline__ void take(float v, int i, float& best, int& idx) {
  if (v > best || (v == best && i < idx)) {
    best = v;
    idx = i;
  }
}

template <bool kVec4>
__global__ void __launch_bounds__(kThreads) argmax_rows_kernel(ArgmaxRowsArgs a) {
  pdl_release();  // the next kernel may launch now: it waits for this one's results itself
  pdl_wait();     // first access: earlier kernels in the stream may still be running (pdl.cuh)
  const float* x = a.logits + static_cast<int64_t>(blockIdx.x) * a.vocab;
  float best = -__int_as_float(0x7f800000);  // -inf
  int idx = INT_MAX;
  if constexpr (kVec4) {
    const float4* x4 = reinterpret_cast<const float4*>(x);
    const int n4 = a.vocab / 4;
    for (int j = threadIdx.x; j < n4; j += kThreads) {
      const float4 v = __ldg(x4 + j);  // ids within a thread increase, so strict > keeps the lowest
      take(v.x, 4 * j, best, idx);
      take(v.y, 4 * j + 1, best, idx);
      take(v.z, 4 * j + 2, best, idx);
      take(v.w, 4 * j + 3, best, idx);
    }
  } else {
    for (int j = threadIdx.x; j < a.vocab; j += kThreads) take(__ldg(x + j), j, best, idx);
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, best, off);
    const int oi = __shfl_xor_sync(0xffffffffu, idx, off);
    take(ov, oi, best, idx);
  }
  __shared__ float s_best[kThreads / 32];
  __shared__ int s_idx[kThreads / 32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    s_best[warp] = best;
    s_idx[warp] = idx;
  }
  __syncthreads();
  if (warp == 0) {
    best = s_best[lane];
    idx = s_idx[lane];
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, best, off);
      const int oi = __shfl_xor_sync(0xffffffffu, idx, off);
      take(ov, oi, best, idx);
    }
    if (lane == 0) a.out[blockIdx.x] = idx == INT_MAX ? 0 : idx;
  }
}

}  // namespace

void launch_argmax_rows(const ArgmaxRowsArgs& a, cudaStream_t stream) {
  if (a.rows == 0) return;
  const bool vec4 = a.vocab % 4 == 0 && reinterpret_cast<uintptr_t>(a.logits) % 16 == 0;
  if (vec4)
    launch_pdl(argmax_rows_kernel<true>, a.rows, kThreads, 0, stream, a);
  else
    launch_pdl(argmax_rows_kernel<false>, a.rows, kThreads, 0, stream, a);
}

}  // namespace xinfer::cuda
