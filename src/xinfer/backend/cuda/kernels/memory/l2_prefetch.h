// L2 weight prefetch: a tiny kernel that asks the memory system to bring byte ranges of global memory
// into L2 (cp.async.bulk.prefetch.L2, sm_90: fire and forget, nothing lands in registers or shared memory).
// The decode chain launches it ahead of the weight-streaming kernels (weight_prefetch_plan.h), so that the
// GEMV of a small batch finds its weights in L2 and HBM keeps streaming while the light kernels between the
// GEMVs (norms, RoPE, attention, SwiGLU) run.
// Launched with PDL (pdl.cuh): it releases the next kernel at once, issues its prefetches, then waits for
// the kernels before it (the chain's order stays: anything after it waits for everything before it).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace xinfer::cuda {

struct L2PrefetchRange {
  const void* ptr = nullptr;  // 16-byte aligned
  size_t bytes = 0;           // a multiple of 16
};

constexpr int kMaxL2PrefetchRanges = 8;

// Prefetches every range into L2 (launches one kernel per kMaxL2PrefetchRanges ranges; none when empty).
void launch_l2_prefetch(const L2PrefetchRange* ranges, int count, cudaStream_t stream);

}  // namespace xinfer::cuda
