#include "xinfer/backend/cuda/kernels/elementwise/feed_tokens.h"

#include "xinfer/backend/cuda/cuda_check.h"

namespace xinfer::cuda {
namespace {

// A plain launch (no programmatic dependent launch): it starts after the metadata copy and the kernel
// that wrote ids, and the embedding after it sees the fed ids.
__global__ void feed_tokens_kernel(FeedTokensArgs a) {
  const int t = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (t >= a.num_tokens) return;
  const int32_t r = a.sources[t];
  if (r >= 0) a.token_ids[t] = a.ids[r];
}

}  // namespace

void launch_feed_tokens(const FeedTokensArgs& a, cudaStream_t stream) {
  if (a.num_tokens == 0) return;
  constexpr int kThreads = 256;
  feed_tokens_kernel<<<(a.num_tokens + kThreads - 1) / kThreads, kThreads, 0, stream>>>(a);
  XI_CUDA_CHECK_LAUNCH();
}

}  // namespace xinfer::cuda
