#include "xinfer/engine/backend_factory.h"

#include <string>

#include "xinfer/backend/cpu/cpu_backend.h"
#if defined(XINFER_HAVE_CUDA)
#include <cuda_runtime.h>

#include "xinfer/backend/cuda/cuda_backend.h"
#endif

namespace xinfer::engine {

Status usable_cuda_device() {
#if defined(XINFER_HAVE_CUDA)
  int devices = 0;
  if (const cudaError_t err = cudaGetDeviceCount(&devices); err != cudaSuccess || devices == 0)
    return unavailable(std::string("no usable CUDA device: ") +
                       (err != cudaSuccess ? cudaGetErrorString(err) : "none found"));
  return Status();
#else
  return unimplemented("this xinfer was built without the CUDA backend; use --backend cpu");
#endif
}

Result<CudaDeviceSummary> cuda_device_summary(int device) {
  XI_RETURN_IF_ERROR(usable_cuda_device());
#if defined(XINFER_HAVE_CUDA)
  cudaDeviceProp props{};
  if (const cudaError_t err = cudaGetDeviceProperties(&props, device); err != cudaSuccess)
    return unavailable("CUDA device " + std::to_string(device) + ": " + cudaGetErrorString(err));
  return CudaDeviceSummary{props.name, props.totalGlobalMem};
#else
  (void)device;
  return unimplemented("this xinfer was built without the CUDA backend");
#endif
}

Result<std::unique_ptr<backend::Backend>> create_backend(BackendKind kind, int threads, int device) {
  if (kind == BackendKind::kCpu)
    return std::unique_ptr<backend::Backend>(
        std::make_unique<cpu::CpuBackend>(cpu::CpuBackendOptions{threads}));
#if defined(XINFER_HAVE_CUDA)
  XI_RETURN_IF_ERROR(usable_cuda_device());
  cuda::CudaBackendOptions options;
  options.device = device;
  return std::unique_ptr<backend::Backend>(std::make_unique<cuda::CudaBackend>(options));
#else
  (void)device;
  return usable_cuda_device();  // UNIMPLEMENTED in this build
#endif
}

}  // namespace xinfer::engine
