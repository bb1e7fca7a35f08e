#include "xinfer/backend/cuda/swap_space_buffer.h"

#include <sys/mman.h>

#include <algorithm>
#include <chrono>

#include "xinfer/backend/cuda/cuda_check.h"
#include "xinfer/core/check.h"
#include "xinfer/core/logging.h"

namespace xinfer::cuda {

SwapSpaceBuffer::SwapSpaceBuffer(size_t bytes) : bytes_(bytes) {
  const size_t reserved = std::max<size_t>(bytes, 1);
  void* p =
      mmap(nullptr, reserved, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  XI_CHECK(p != MAP_FAILED) << "cannot reserve " << bytes << " bytes of host memory for the KV swap space; "
                            << "lower --swap-space";
  madvise(p, reserved, MADV_HUGEPAGE);  // a hint: fewer pages to fault in and pin
  data_ = static_cast<unsigned char*>(p);
  const auto t0 = std::chrono::steady_clock::now();
  while (pinned_ < bytes_) {
    const size_t chunk = std::min(kPinChunk, bytes_ - pinned_);
    const cudaError_t err =
        cudaHostRegister(data_ + pinned_, chunk, cudaHostRegisterMapped | cudaHostRegisterPortable);
    XI_CHECK(err == cudaSuccess) << "cannot pin " << static_cast<double>(pinned_ + chunk) / (1 << 30)
                                 << " GiB of host memory for the KV swap space: " << cudaGetErrorString(err)
                                 << "; lower --swap-space";
    pinned_ += chunk;
    void* mapped = nullptr;
    XI_CUDA_CHECK(cudaHostGetDevicePointer(&mapped, data_ + pinned_ - chunk, 0));
    XI_CHECK(mapped == data_ + pinned_ - chunk) << "the device maps pinned host memory at other addresses";
  }
  XI_LOG(INFO) << "KV swap space: " << static_cast<double>(bytes_) / (1 << 30)
               << " GiB of host memory pinned in "
               << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() << " s";
}

SwapSpaceBuffer::~SwapSpaceBuffer() {
  for (size_t off = 0; off < pinned_; off += kPinChunk) cudaHostUnregister(data_ + off);
  munmap(data_, std::max<size_t>(bytes_, 1));
}

}  // namespace xinfer::cuda
