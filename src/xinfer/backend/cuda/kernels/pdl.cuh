// Programmatic dependent launch (PDL, sm_90): a kernel started with launch_pdl() may be scheduled onto the
// GPU while the kernel before it in the stream is still finishing, which hides most of the launch gap
// between two short kernels (decode steps run ~10 kernels per layer; at batch 1 the gaps add up).
//
// Contract for a kernel launched with launch_pdl():
//   - it calls pdl_wait() before its first read or write of global memory that earlier kernels in the
//     stream may touch, so it never sees partial results. Before the wait it may read only memory that no
//     kernel of the current chain writes: weights, constants (norm weights, RoPE cos/sin), the step's
//     metadata (positions, slots, block tables: uploaded before the forward) and K/V rows of earlier
//     positions. With early releases (below) the kernels still running may reach back past the previous
//     one, to the last kernel that waited before it released;
//   - it may call pdl_release() once it no longer needs to hold back the next kernel's launch (the next
//     kernel still waits for this one's completion in its own pdl_wait()). Light kernels release at once,
//     even before their own wait: the next kernel's CTAs then start early and fetch what does not depend
//     on earlier results (a GEMV's weights, attention's older K/V rows) while the chain drains. The next
//     kernel launches only once every CTA of this one has released (so it never takes this one's slots).
// Without PDL (plain <<<>>> launch) both calls are no-ops, so kernels work either way. Works inside CUDA
// graph capture (programmatic dependency edges).
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "xinfer/backend/cuda/cuda_check.h"

namespace xinfer::cuda {

// Blocks until every kernel this one depends on has completed and its memory operations are visible.
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

// Allows the dependent kernel (the next one in the stream) to begin launching.
__device__ __forceinline__ void pdl_release() { asm volatile("griddepcontrol.launch_dependents;" :::); }

// kernel<<<grid, block, smem, stream>>>(args...) with the programmatic-stream-serialization attribute.
template <typename... KernelArgs, typename... Args>
void launch_pdl(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = 1;
  XI_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

}  // namespace xinfer::cuda
