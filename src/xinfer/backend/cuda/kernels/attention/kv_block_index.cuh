// Block-table lookups of the paged attention kernels without an integer division per key: j / block_size as
// the high word of j * ceil(2^32 / block_size). Exact when block_size is a power of two (the inverse is
// 2^32 / block_size) and otherwise for every j < 2^32 / block_size: with e = inverse * block_size - 2^32 <
// block_size, the product overshoots j / block_size by j e / (block_size 2^32) < 1 / block_size, which never
// crosses the next integer. The launchers check the bound on the host (check_kv_block_index).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "xinfer/backend/cuda/cuda_check.h"

namespace xinfer::cuda {

// Fails unless every position of a sequence of max_blocks_per_seq blocks divides exactly.
inline void check_kv_block_index(int block_size, int max_blocks_per_seq) {
  XI_CHECK((block_size & (block_size - 1)) == 0 ||
           static_cast<uint64_t>(max_blocks_per_seq) * block_size * block_size <= (uint64_t{1} << 32))
      << "block size " << block_size << " with " << max_blocks_per_seq
      << " blocks per sequence: positions past the exact range of the attention kernels' block division";
}

struct KvBlockDivider {
  uint32_t block_size;
  uint64_t inverse;  // ceil(2^32 / block_size) = floor((2^32 - 1) / block_size) + 1: a 32-bit division
  __host__ __device__ __forceinline__ explicit KvBlockDivider(int bs)
      : block_size(static_cast<uint32_t>(bs)),
        inverse(uint64_t{0xffffffffu / static_cast<uint32_t>(bs)} + 1) {}
  // j / block_size; j % block_size is j - block(j) * block_size.
  __host__ __device__ __forceinline__ uint32_t block(uint32_t j) const {
    return static_cast<uint32_t>((static_cast<uint64_t>(j) * inverse) >> 32);
  }
};

}  // namespace xinfer::cuda
