// bf16 GEMMs through cuBLASLt: y[m, n] = x[m, k] @ w[n, k]^T (+ bias[n]), f32 accumulation, output bf16
// or f32 (the lm_head writes f32 logits directly: bf16 A/B with f32 C/D, no extra conversion pass).
//
// Row-major y = x w^T is column-major y^T = w x^T: cuBLASLt's A = w (k x n col-major, transposed),
// B = x (k x m col-major), D = y^T (n x m col-major). The bias is the BIAS epilogue over D's rows.
// One handle and one workspace per instance. Algorithms come from cuBLASLt's heuristic (first result)
// and are cached per (m, n, k, output dtype, bias); a measured tuner replaces this later.
#pragma once

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

namespace xinfer::cuda {

struct GemmArgs {
  const __nv_bfloat16* x;     // [m, k]
  const __nv_bfloat16* w;     // [n, k]
  const __nv_bfloat16* bias;  // [n] or nullptr
  void* y;                    // [m, n], bf16 or f32 (y_f32)
  bool y_f32;
  int m, n, k;
};

class CublasLtGemm {
 public:
  explicit CublasLtGemm(size_t workspace_bytes = 32u << 20);
  ~CublasLtGemm();
  CublasLtGemm(const CublasLtGemm&) = delete;
  CublasLtGemm& operator=(const CublasLtGemm&) = delete;

  void run(const GemmArgs& args, cudaStream_t stream);

 private:
  struct Plan;
  using Key = std::tuple<int, int, int, bool, bool>;  // m, n, k, y_f32, bias
  Plan& plan_for(const GemmArgs& args);

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_;
  std::map<Key, std::unique_ptr<Plan>> plans_;
};

}  // namespace xinfer::cuda
