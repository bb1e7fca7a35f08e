// Raising a kernel's dynamic shared-memory limit (cudaFuncAttributeMaxDynamicSharedMemorySize) before
// launches that need more than 48 KB. The attribute is per device, and the tensor-parallel ranks of one
// process launch the same kernels on several devices, so it is set once per (kernel, device, size).
#pragma once

#include <cuda_runtime.h>

#include <mutex>
#include <set>
#include <tuple>

#include "xinfer/backend/cuda/cuda_check.h"

namespace xinfer::cuda {

inline void raise_smem_limit(const void* kernel, int bytes) {
  static std::mutex mu;
  static std::set<std::tuple<const void*, int, int>> raised;  // (kernel, device, bytes)
  int device = 0;
  XI_CUDA_CHECK(cudaGetDevice(&device));
  const std::lock_guard<std::mutex> lock(mu);
  if (raised.insert({kernel, device, bytes}).second)
    XI_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
}

}  // namespace xinfer::cuda
