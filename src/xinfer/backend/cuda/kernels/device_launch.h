// Per-device facts a kernel launch needs, read for the current device: tensor-parallel ranks of one process launch
// the same kernels on several devices, so none is kept once per process.
//   raise_smem_limit  a kernel's dynamic shared-memory limit (cudaFuncAttributeMaxDynamicSharedMemorySize), for
//                     launches past 48 KB: a per-device attribute, raised per (kernel, device) to the largest
//                     size asked so far (a limit set lower after a larger one would fail those launches);
//   sm_count          the current device's SMs (persistent grids);
//   l2_bytes          its L2 cache bytes.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <utility>

#include "xinfer/backend/cuda/cuda_check.h"

namespace xinfer::cuda {

inline void raise_smem_limit(const void* kernel, int bytes) {
  static std::mutex mu;
  static std::map<std::pair<const void*, int>, int> raised;  // (kernel, device) -> the limit set
  int device = 0;
  XI_CUDA_CHECK(cudaGetDevice(&device));
  const std::lock_guard<std::mutex> lock(mu);
  int& limit = raised[{kernel, device}];
  if (bytes > limit) {  // never lowered: a later launch of fewer bytes runs under the larger limit
    XI_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    limit = bytes;
  }
}

// One attribute of the current device.
inline int current_device_attribute(cudaDeviceAttr attr) {
  int device = 0, value = 0;
  XI_CUDA_CHECK(cudaGetDevice(&device));
  XI_CUDA_CHECK(cudaDeviceGetAttribute(&value, attr, device));
  return value;
}

inline int sm_count() { return current_device_attribute(cudaDevAttrMultiProcessorCount); }

// The current device's L2 bytes (tile orders that keep operands in L2).
inline int64_t l2_bytes() { return current_device_attribute(cudaDevAttrL2CacheSize); }

}  // namespace xinfer::cuda
