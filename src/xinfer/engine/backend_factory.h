// create_backend: builds a backend by kind for the commands that run a model outside an Engine (`xinfer
// generate`, `xinfer logits`). The concrete backends are private to the engine library: this file and
// engine.cpp are the only places that name them, so the server and the CLI link neither directly.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "xinfer/backend/backend.h"
#include "xinfer/core/status.h"
#include "xinfer/engine/engine_config.h"

namespace xinfer::engine {

// OK when this build has the CUDA backend and a CUDA device is usable; UNAVAILABLE (no device, with the
// runtime's reason) or UNIMPLEMENTED (built without CUDA) otherwise. The check before any CudaBackend is
// made.
Status usable_cuda_device();

// CUDA device `device`'s name and memory, read without making a backend (a command's defaults may depend on
// them, e.g. `xinfer bench`'s batch limits); the errors of usable_cuda_device().
struct CudaDeviceSummary {
  std::string name;
  size_t total_memory = 0;  // bytes
};
Result<CudaDeviceSummary> cuda_device_summary(int device = 0);

// kCpu: a CpuBackend with `threads` threads (0: all cores). kCuda: a CudaBackend on `device` (a
// tensor-parallel rank r: device r, made on the rank's own thread) with default options; UNAVAILABLE when no
// CUDA device is usable, UNIMPLEMENTED in a build without CUDA.
Result<std::unique_ptr<backend::Backend>> create_backend(BackendKind kind, int threads, int device = 0);

}  // namespace xinfer::engine
