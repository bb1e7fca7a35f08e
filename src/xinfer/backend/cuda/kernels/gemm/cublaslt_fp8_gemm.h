// W8A8 FP8 GEMMs through cuBLASLt: y[m, n] = (sx[m] sw[n]) * (xq[m, k] @ wq[n, k]^T) (+ bias[n]), e4m3 inputs,
// f32 accumulation (no fast accumulation: partial sums promoted to f32), y bf16 or f32. The per-token x
// per-channel scales are cuBLASLt's outer-vector scaling (CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F, CUDA
// 12.9+ on sm_90): A = wq with its [n] scales, B = xq with its [m] scales, applied to the f32 products before
// the bias epilogue. Layout as CublasLtGemm (cublaslt_gemm.h): row-major y = x w^T is column-major y^T =
// w x^T, A transposed (the only FP8 layout Hopper takes, "TN"). Descriptors and the heuristic's first
// algorithm are cached per (m, n, k, output dtype, bias); one handle and a 32 MiB workspace per instance.
// supported() asks the heuristic once per shape (false where cuBLASLt has no algorithm, e.g. k % 16 != 0).
#pragma once

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

namespace xinfer::cuda {

struct Fp8GemmArgs {
  const uint8_t* xq;          // [m, k] e4m3
  const float* x_scales;      // [m]
  const uint8_t* wq;          // [n, k] e4m3
  const float* w_scales;      // [n]
  const __nv_bfloat16* bias;  // [n] or nullptr
  void* y;                    // [m, n] bf16 or f32
  bool y_f32;
  int m, n, k;
};

class CublasLtFp8Gemm {
 public:
  explicit CublasLtFp8Gemm(size_t workspace_bytes = 32u << 20);
  ~CublasLtFp8Gemm();
  CublasLtFp8Gemm(const CublasLtFp8Gemm&) = delete;
  CublasLtFp8Gemm& operator=(const CublasLtFp8Gemm&) = delete;

  bool supported(const Fp8GemmArgs& args);
  // XI_CHECK-fails naming the shape when unsupported.
  void run(const Fp8GemmArgs& args, cudaStream_t stream);

 private:
  struct Plan;
  using Key = std::tuple<int, int, int, bool, bool>;
  Plan& plan_for(const Fp8GemmArgs& args);
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_;
  std::map<Key, std::unique_ptr<Plan>> plans_;
};

}  // namespace xinfer::cuda
