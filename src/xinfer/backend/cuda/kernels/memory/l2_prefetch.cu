#include "xinfer/backend/cuda/kernels/memory/l2_prefetch.h"

#include <algorithm>
#include <cstdint>

#include "xinfer/backend/cuda/cuda_check.h"
#include "xinfer/backend/cuda/kernels/pdl.cuh"

namespace xinfer::cuda {
namespace {

constexpr uint32_t kChunk = 32 * 1024;  // bytes per prefetch instruction
constexpr int kThreads = 32;
constexpr int kMaxCtas = 128;

struct PrefetchArgs {
  L2PrefetchRange ranges[kMaxL2PrefetchRanges];
  int count;
};

__global__ void __launch_bounds__(kThreads) l2_prefetch_kernel(PrefetchArgs a) {
  pdl_release();  // the next kernel may launch now: this one touches no data any kernel writes
  // Chunk c of the ranges laid end to end; each thread takes every (grid * block)-th chunk.
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  size_t c = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  size_t first = 0;  // chunk index of range r's first chunk
  for (int r = 0; r < a.count; ++r) {
    const size_t bytes = a.ranges[r].bytes, chunks = (bytes + kChunk - 1) / kChunk;
    for (; c < first + chunks; c += stride) {
      const size_t off = (c - first) * kChunk;
      const uint32_t size = static_cast<uint32_t>(min(static_cast<size_t>(kChunk), bytes - off));
      const char* p = static_cast<const char*>(a.ranges[r].ptr) + off;
      asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(size) : "memory");
    }
    first += chunks;
  }
  pdl_wait();  // completes only after the kernels before it: later kernels' waits then cover those too
}

}  // namespace

void launch_l2_prefetch(const L2PrefetchRange* ranges, int count, cudaStream_t stream) {
  for (int begin = 0; begin < count; begin += kMaxL2PrefetchRanges) {
    PrefetchArgs a{};
    size_t chunks = 0;
    for (int r = begin; r < std::min(count, begin + kMaxL2PrefetchRanges); ++r) {
      if (ranges[r].bytes == 0) continue;
      XI_CHECK(reinterpret_cast<uintptr_t>(ranges[r].ptr) % 16 == 0 && ranges[r].bytes % 16 == 0)
          << "l2 prefetch: range not 16-byte aligned";
      a.ranges[a.count++] = ranges[r];
      chunks += (ranges[r].bytes + kChunk - 1) / kChunk;
    }
    if (chunks == 0) continue;
    const int ctas = static_cast<int>(std::min<size_t>(kMaxCtas, (chunks + kThreads - 1) / kThreads));
    launch_pdl(l2_prefetch_kernel, ctas, kThreads, 0, stream, a);
  }
}

}  // namespace xinfer::cuda
