// SwapSpaceBuffer: the KV swap space of the CUDA backend (swap-to-host preemption, backend.h): host memory
// the copy kernel reads and writes directly (kernels/elementwise/kv_block_copy.h). It is reserved as one
// range of addresses, with transparent huge pages requested, and pinned (registered with the driver, mapped
// into the device's address space at the same addresses) when it is created, a GiB at a time: about 2.5 GB/s
// on an H200 host, against 1.3 GB/s for cudaHostAlloc. Pinning while steps run stalls them (the registration
// holds the driver while the engine launches), so it happens at start-up, before any step.
#pragma once

#include <cstddef>

#include "xinfer/backend/backend.h"

namespace xinfer::cuda {

class SwapSpaceBuffer final : public backend::DeviceBuffer {
 public:
  static constexpr size_t kPinChunk = size_t{1} << 30;
  // Aborts with the size and the CUDA error when the host cannot pin it all.
  explicit SwapSpaceBuffer(size_t bytes);
  ~SwapSpaceBuffer() override;
  SwapSpaceBuffer(const SwapSpaceBuffer&) = delete;
  SwapSpaceBuffer& operator=(const SwapSpaceBuffer&) = delete;

  void* data() const override { return data_; }
  size_t bytes() const override { return bytes_; }

 private:
  unsigned char* data_ = nullptr;
  size_t bytes_;
  size_t pinned_ = 0;  // [0, pinned_) is registered
};

}  // namespace xinfer::cuda
