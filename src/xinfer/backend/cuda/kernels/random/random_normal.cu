#include "xinfer/backend/cuda/kernels/random/random_normal.h"

#include <cuda_bf16.h>

#include <algorithm>

#include "xinfer/backend/counter_rng.h"
#include "xinfer/backend/cuda/cuda_check.h"

namespace xinfer::cuda {
namespace {

template <typename T>
__global__ void random_normal_kernel(T* out, size_t n, uint64_t seed, float stddev) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n; i += stride) {
    const float v = backend::counter_normal(seed, i, stddev);
    if constexpr (sizeof(T) == 4) out[i] = v;
    else out[i] = __float2bfloat16(v);
  }
}

}  // namespace

void launch_random_normal(const RandomNormalArgs& a, cudaStream_t stream) {
  if (a.n == 0) return;
  const int threads = 256;
  const int blocks = static_cast<int>(std::min<size_t>((a.n + threads - 1) / threads, 132 * 32));
  if (a.out_f32)
    random_normal_kernel<<<blocks, threads, 0, stream>>>(static_cast<float*>(a.out), a.n, a.seed, a.stddev);
  else
    random_normal_kernel<<<blocks, threads, 0, stream>>>(static_cast<__nv_bfloat16*>(a.out), a.n, a.seed, a.stddev);
  XI_CUDA_CHECK_LAUNCH();
}

}  // namespace xinfer::cuda
