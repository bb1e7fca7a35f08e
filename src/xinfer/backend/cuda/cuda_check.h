// XI_CUDA_CHECK(call): aborts with the CUDA error string, the call, file and line when a CUDA runtime
// call fails. XI_CUDA_CHECK_LAUNCH() checks the last kernel launch. XI_CUBLAS_CHECK(call) does the same
// for cuBLAS / cuBLASLt status codes.
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

#define XI_CUBLAS_CHECK(call)                                                             \
  do {                                                                                    \
    const int xi_st_ = static_cast<int>(call);                                            \
    XI_CHECK(xi_st_ == 0) << #call << ": cuBLAS status " << xi_st_;                       \
  } while (0)
