#include "xinfer/backend/cuda/device_ceilings.h"

#include <algorithm>
#include <vector>

#include "xinfer/backend/cuda/cuda_backend.h"
#include "xinfer/backend/cuda/cuda_check.h"
#include "xinfer/backend/cuda/kernels/gemm/cublaslt_gemm.h"

namespace xinfer::cuda {

double time_on_stream(cudaStream_t stream, int reps, const std::function<void(int)>& op) {
  cudaEvent_t a, b;
  XI_CUDA_CHECK(cudaEventCreate(&a));
  XI_CUDA_CHECK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) op(i);
  std::vector<double> runs;
  for (int r = 0; r < 5; ++r) {
    XI_CUDA_CHECK(cudaEventRecord(a, stream));
    for (int i = 0; i < reps; ++i) op(i);
    XI_CUDA_CHECK(cudaEventRecord(b, stream));
    XI_CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    XI_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    runs.push_back(ms / 1e3 / reps);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(runs.begin(), runs.end());
  return runs[2];
}

backend::DeviceCeilings measure_device_ceilings(CudaBackend& be) {
  backend::DeviceCeilings c;
  cudaStream_t s = be.stream();
  {
    const size_t copy_bytes = size_t{2} << 30;
    auto src = be.allocate(DType::kU8, Shape{static_cast<int64_t>(copy_bytes)});
    auto dst = be.allocate(DType::kU8, Shape{static_cast<int64_t>(copy_bytes)});
    XI_CUDA_CHECK(cudaMemsetAsync(src.view.data, 0x5a, copy_bytes, s));
    const double t = time_on_stream(s, 5, [&](int) {
      XI_CUDA_CHECK(cudaMemcpyAsync(dst.view.data, src.view.data, copy_bytes, cudaMemcpyDeviceToDevice, s));
    });
    c.copy_gbs = 2.0 * static_cast<double>(copy_bytes) / t / 1e9;
    be.synchronize();
  }
  {
    CublasLtGemm gemm;
    const int g = 8192;
    auto a = be.random_normal(DType::kBF16, Shape{g, g}, 1, 1.0f);
    auto b = be.random_normal(DType::kBF16, Shape{g, g}, 2, 1.0f);
    auto out = be.allocate(DType::kBF16, Shape{g, g});
    const double t = time_on_stream(s, 10, [&](int) {
      gemm.run({static_cast<__nv_bfloat16*>(a.view.data), static_cast<__nv_bfloat16*>(b.view.data), nullptr,
                out.view.data, false, g, g, g}, s);
    });
    c.bf16_gemm_tflops = 2.0 * g * g * static_cast<double>(g) / t / 1e12;
    be.synchronize();
  }
  return c;
}

}  // namespace xinfer::cuda
