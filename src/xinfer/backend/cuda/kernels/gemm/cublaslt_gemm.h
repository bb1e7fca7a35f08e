// bf16 GEMMs through cuBLASLt: y[m, n] = x[m, k] @ w[n, k]^T (+ bias[n]), f32 accumulation, output bf16
// or f32 (the lm_head writes f32 logits directly: bf16 A/B with f32 C/D, no extra conversion pass).
//
// Row-major y = x w^T is column-major y^T = w x^T: cuBLASLt's A = w (k x n col-major, transposed),
// B = x (k x m col-major), D = y^T (n x m col-major). The bias is the BIAS epilogue over D's rows.
// One handle and one workspace per instance. Descriptors and the heuristic's first algorithm (or its
// absence: cuBLASLt legitimately has nothing for some tiny or oddly aligned shapes, e.g. n = 1 with a bias
// and f32 output) are cached per (m, n, k, output dtype, bias); candidates() lists what the heuristic offers (and split-K variants)
// for the tuner (gemm_tuner.h), which then runs a chosen algorithm with run(args, algo).
// cublasLtMatmulAlgo_t is plain data that cuBLASLt documents as serializable for reuse with the same
// library version (gemm_tuning_cache.h stores it that way).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "xinfer/backend/cuda/kernels/gemm/gemm_args.h"

namespace xinfer::cuda {

class CublasLtGemm {
 public:
  explicit CublasLtGemm(size_t workspace_bytes = 32u << 20);
  ~CublasLtGemm();
  CublasLtGemm(const CublasLtGemm&) = delete;
  CublasLtGemm& operator=(const CublasLtGemm&) = delete;

  // With the heuristic's first algorithm; XI_CHECK-fails naming the shape if cuBLASLt has none.
  void run(const GemmArgs& args, cudaStream_t stream);
  // With `algo`, which must have passed check() for this shape and m.
  void run(const GemmArgs& args, const cublasLtMatmulAlgo_t& algo, cudaStream_t stream);
  // The same, returning false instead of failing when cuBLASLt refuses the launch (tuning).
  bool try_run(const GemmArgs& args, const cublasLtMatmulAlgo_t& algo, cudaStream_t stream);

  // The heuristic's first algorithm for this shape, or nullptr if cuBLASLt has none (cached either way:
  // after the first call per shape this is a map lookup).
  const cublasLtMatmulAlgo_t* find_heuristic(const GemmArgs& args);
  // The same, XI_CHECK-failing (naming the shape) when there is none.
  const cublasLtMatmulAlgo_t& heuristic(const GemmArgs& args);
  // Up to `max_results` algorithms from the heuristic, best guess first, then split-K variants of its
  // first algorithms that cublasLtMatmulAlgoCheck accepts; all fit the workspace, no duplicates.
  std::vector<cublasLtMatmulAlgo_t> candidates(const GemmArgs& args, int max_results);
  // cublasLtMatmulAlgoCheck for this shape and m, and the workspace it needs fits ours.
  bool check(const GemmArgs& args, const cublasLtMatmulAlgo_t& algo);

  size_t workspace_bytes() const { return workspace_bytes_; }
  // "algo 66 tile 20 stages 3 splitk 1 ..." from the algo's config attributes.
  static std::string describe(const cublasLtMatmulAlgo_t& algo);
  static bool same(const cublasLtMatmulAlgo_t& a, const cublasLtMatmulAlgo_t& b);
  // "bf16 GEMM m=9 n=1 k=8 f32 out +bias", for messages.
  static std::string shape_text(const GemmArgs& args);

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
