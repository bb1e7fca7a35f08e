// Helpers shared by the quantized-linear benches of gpu_kernel_bench (gpu_quant_linear_bench.cu,
// gpu_w8a8_gemm_bench.cu): relative L2 between two device tensors, per-call time of a CUDA-graph replay, and
// one printed row with its share of the ceiling, the 8B decoder linears; on the device, the hash that fills their
// random data.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "xinfer/backend/cuda/cuda_backend.h"
#include "xinfer/backend/cuda/cuda_check.h"
#include "xinfer/backend/cuda/device_ceilings.h"

namespace xinfer::bench {

#ifdef __CUDACC__
// The decoder linears of Llama-3.1-8B (one GPU): y[m, n] = x[m, k] w^T.
struct Linear8b {
  const char* name;
  int n, k;
};
inline constexpr Linear8b kLinears8b[] = {{"qkv", 6144, 4096}, {"o", 4096, 4096}, {"gate_up", 28672, 4096}, {"down", 4096, 14336}};

// A 32-bit integer hash (xorshift-multiply finalizer) for filling bench tensors with pseudo-random values.
__device__ inline uint32_t hash32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}
#endif

// The raw bf16 bits of a device tensor (bit-for-bit checks between two paths).
inline std::vector<uint16_t> raw_bf16_of(cuda::CudaBackend& be, const TensorView& t) {
  std::vector<uint16_t> out(static_cast<size_t>(t.numel()));
  be.to_host_raw(t, out.data());
  return out;
}

// ||a - b|| / ||b|| of two device tensors (read back as f32).
inline double rel_l2(cuda::CudaBackend& be, const TensorView& a, const TensorView& b) {
  std::vector<float> x(static_cast<size_t>(a.numel())), y(static_cast<size_t>(b.numel()));
  be.to_host_f32(a, x.data());
  be.to_host_f32(b, y.data());
  double e = 0, nn = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    e += (static_cast<double>(x[i]) - y[i]) * (static_cast<double>(x[i]) - y[i]);
    nn += static_cast<double>(y[i]) * y[i];
  }
  return std::sqrt(e / std::max(nn, 1e-30));
}

// Microseconds per call: `ops` calls of fn(i) recorded in one CUDA graph, median of the replays
// (cuda::time_on_stream), divided by ops. Decode runs as graph replays, so the host's launch cost is not in it.
inline double graph_us(cudaStream_t stream, int ops, const std::function<void(int)>& fn) {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  XI_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed));
  for (int i = 0; i < ops; ++i) fn(i);
  XI_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  XI_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  const double t = cuda::time_on_stream(stream, 3, [&](int) { XI_CUDA_CHECK(cudaGraphLaunch(exec, stream)); }) / ops;
  XI_CUDA_CHECK(cudaGraphExecDestroy(exec));
  XI_CUDA_CHECK(cudaGraphDestroy(graph));
  return t * 1e6;
}

// "what  us  achieved unit  share%": amount is flops (flops = true, TFLOP/s) or bytes (GB/s); ceiling in the
// same unit; `width` the label column.
inline void print_row(const std::string& what, double us, double amount, bool flops, double ceiling, int width) {
  const double achieved = amount / (us * 1e-6) / (flops ? 1e12 : 1e9);
  std::printf("%-*s %9.1f us %8.1f %-7s %5.1f%%\n", width, what.c_str(), us, achieved, flops ? "TFLOP/s" : "GB/s",
              100.0 * achieved / ceiling);
  std::fflush(stdout);
}

}  // namespace xinfer::bench
