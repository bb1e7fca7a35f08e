// XI_CUDA_CHECK(call): aborts with the CUDA error string, the call, file and line when a CUDA runtime
// call fails. XI_CUDA_CHECK_LAUNCH() checks the last kernel launch.
#pragma once

#include <cuda_runtime.h>

#include "xinfer/core/check.h"

#define XI_CUDA_CHECK(call)                                                                   \
  do {                                                                                        \
    cudaError_t xi_err_ = (call);                                                             \
    XI_CHECK(xi_err_ == cudaSuccess) << #call << ": " << cudaGetErrorName(xi_err_) << " ("   \
                                     << cudaGetErrorString(xi_err_) << ")";                   \
  } while (0)

#define XI_CUDA_CHECK_LAUNCH() XI_CUDA_CHECK(cudaGetLastError())
