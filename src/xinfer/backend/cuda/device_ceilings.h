// The card's own ceilings, measured rather than taken from a datasheet (device/METHOD.md): device-to-
// device copy bandwidth (2 GiB, bytes read + written) and the cuBLASLt bf16 GEMM rate at 8192^3 on random
// data. Benchmarks (gpu_kernel_bench, `xinfer bench`) report achieved figures as a fraction of these.
//
// Timing: CUDA events around `reps` calls after 3 warm-up calls, median of 5 such runs.
#pragma once

#include <cuda_runtime.h>

#include <functional>

#include "xinfer/backend/backend.h"

namespace xinfer::cuda {

class CudaBackend;

// Median seconds per call of op(i) over 5 runs of `reps` calls on `stream`.
double time_on_stream(cudaStream_t stream, int reps, const std::function<void(int)>& op);

// Allocates ~4.4 GiB temporarily on `backend` (freed before returning); about a second of device time.
backend::DeviceCeilings measure_device_ceilings(CudaBackend& backend);

}  // namespace xinfer::cuda
