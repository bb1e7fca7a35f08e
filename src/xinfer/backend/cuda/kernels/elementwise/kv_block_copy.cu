#include "xinfer/backend/cuda/kernels/elementwise/kv_block_copy.h"

#include <algorithm>
#include <cstdint>

#include "xinfer/backend/cuda/cuda_check.h"
#include "xinfer/core/check.h"

namespace xinfer::cuda {
namespace {

// Kernel parameters by value (under the classic 4 KB limit): a launch covers up to kMaxLayers layers and
// kMaxCopies copies; larger batches take several launches.
constexpr int kMaxLayers = 64;
constexpr int kMaxCopies = 256;

struct CopyParams {
  unsigned char* k[kMaxLayers];
  unsigned char* v[kMaxLayers];
  int2 copies[kMaxCopies];  // (cache block, swap block)
  unsigned char* swap;
  size_t chunk;
  size_t swap_block_bytes;
  int first_layer;  // layer index of k[0] / v[0] within the swap block
  int to_host;
};

// Grid (copy, layer of this launch, K or V).
template <typename Vec>
__global__ void __launch_bounds__(256) kv_block_copy_kernel(const __grid_constant__ CopyParams p) {
  const int2 c = p.copies[blockIdx.x];
  const int layer = blockIdx.y, kv = blockIdx.z;
  unsigned char* dev = (kv == 0 ? p.k[layer] : p.v[layer]) + static_cast<size_t>(c.x) * p.chunk;
  unsigned char* host = p.swap + static_cast<size_t>(c.y) * p.swap_block_bytes +
                        (2 * static_cast<size_t>(p.first_layer + layer) + kv) * p.chunk;
  const Vec* src = reinterpret_cast<const Vec*>(p.to_host ? dev : host);
  Vec* dst = reinterpret_cast<Vec*>(p.to_host ? host : dev);
  const size_t n = p.chunk / sizeof(Vec);
  for (size_t i = threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i];
}

}  // namespace

void launch_kv_block_copy(const KvBlockCopyLayout& l, std::span<const kv::BlockCopy> copies, bool to_host,
                          cudaStream_t stream) {
  if (copies.empty()) return;
  XI_CHECK(l.swap != nullptr && l.k.size() == l.v.size() && !l.k.empty())
      << "KV block copy without a swap space";
  for (const kv::BlockCopy& c : copies) {
    const int32_t cache_block = to_host ? c.from : c.to, swap_block = to_host ? c.to : c.from;
    XI_CHECK(cache_block >= 0 && cache_block < l.num_blocks)
        << "cache block " << cache_block << " of " << l.num_blocks;
    XI_CHECK(swap_block >= 0 && swap_block < l.num_swap_blocks)
        << "swap block " << swap_block << " of " << l.num_swap_blocks;
  }
  const int layers = static_cast<int>(l.k.size());
  bool vec16 = l.chunk % 16 == 0 && reinterpret_cast<uintptr_t>(l.swap) % 16 == 0;
  for (int i = 0; i < layers; ++i)
    vec16 = vec16 && reinterpret_cast<uintptr_t>(l.k[i]) % 16 == 0 &&
            reinterpret_cast<uintptr_t>(l.v[i]) % 16 == 0;
  CopyParams p{};
  p.swap = l.swap;
  p.chunk = l.chunk;
  p.swap_block_bytes = 2 * static_cast<size_t>(layers) * l.chunk;
  p.to_host = to_host ? 1 : 0;
  for (int first = 0; first < layers; first += kMaxLayers) {
    const int nl = std::min(kMaxLayers, layers - first);
    p.first_layer = first;
    for (int i = 0; i < nl; ++i) {
      p.k[i] = l.k[static_cast<size_t>(first + i)];
      p.v[i] = l.v[static_cast<size_t>(first + i)];
    }
    for (size_t begin = 0; begin < copies.size(); begin += kMaxCopies) {
      const int nc = static_cast<int>(std::min<size_t>(kMaxCopies, copies.size() - begin));
      for (int i = 0; i < nc; ++i) {
        const kv::BlockCopy& c = copies[begin + static_cast<size_t>(i)];
        p.copies[i] = to_host ? int2{c.from, c.to} : int2{c.to, c.from};
      }
      const dim3 grid(static_cast<unsigned>(nc), static_cast<unsigned>(nl), 2);
      if (vec16)
        kv_block_copy_kernel<uint4><<<grid, 256, 0, stream>>>(p);
      else
        kv_block_copy_kernel<unsigned char><<<grid, 256, 0, stream>>>(p);
      XI_CUDA_CHECK(cudaGetLastError());
    }
  }
}

}  // namespace xinfer::cuda
