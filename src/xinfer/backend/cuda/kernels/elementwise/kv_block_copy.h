// KV block copies between the device cache and its swap space in pinned, mapped host memory (swap-to-host
// preemption; backend.h gives the swap block layout: a block's K then V rows of layer 0, then layer 1, ...).
// The device reads and writes the host memory directly (zero-copy over PCIe), so one kernel moves a whole
// batch of scattered blocks: one CTA per (copy, layer, K or V), 16-byte accesses where the sizes allow.
// Plain launches (no PDL): a copy starts after every earlier kernel and the next forward's kernels after it.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <span>
#include <vector>

#include "xinfer/kv_cache/swap_space.h"

namespace xinfer::cuda {

struct KvBlockCopyLayout {
  std::vector<unsigned char*> k, v;  // per layer: [num_blocks, chunk bytes] on the device
  size_t chunk = 0;                  // bytes of one block of one layer's K (= V)
  int num_blocks = 0;                // blocks of the device cache
  unsigned char* swap = nullptr;     // host swap space, device-addressable (mapped, UVA)
  int num_swap_blocks = 0;           // swap block bytes = 2 * layers * chunk
};

// copies: (cache block, swap block) when to_host, else (swap block, cache block); every id is checked.
void launch_kv_block_copy(const KvBlockCopyLayout& layout, std::span<const kv::BlockCopy> copies,
                          bool to_host, cudaStream_t stream);

}  // namespace xinfer::cuda
