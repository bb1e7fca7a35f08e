#include "xinfer/backend/cuda/kernels/gemm/cublaslt_gemm.h"

#include <algorithm>
#include <cstring>

#include "xinfer/backend/cuda/cuda_check.h"
#include "xinfer/core/logging.h"
#include "xinfer/backend/cuda/kernels/gemm/cublaslt_algo_choice.h"

namespace xinfer::cuda {

struct CublasLtGemm::Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  bool heuristic_known = false;  // the heuristic was asked
  bool have_heuristic = false;   // ... and offered an algorithm
  cublasLtMatmulAlgo_t heuristic{};
  ~Plan() {
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

CublasLtGemm::CublasLtGemm(size_t workspace_bytes) : workspace_bytes_(workspace_bytes) {
  XI_CUBLAS_CHECK(cublasLtCreate(&handle_));
  XI_CUDA_CHECK(cudaMalloc(&workspace_, workspace_bytes_));
}

CublasLtGemm::~CublasLtGemm() {
  plans_.clear();
  if (workspace_) cudaFree(workspace_);
  if (handle_) cublasLtDestroy(handle_);
}

CublasLtGemm::Plan& CublasLtGemm::plan_for(const GemmArgs& g) {
  const Key key{g.m, g.n, g.k, g.y_f32, g.bias != nullptr};
  auto it = plans_.find(key);
  if (it != plans_.end()) return *it->second;

  auto plan = std::make_unique<Plan>();
  XI_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t trans = CUBLAS_OP_T, no_trans = CUBLAS_OP_N;
  XI_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSA, &trans, sizeof(trans)));
  XI_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSB, &no_trans, sizeof(no_trans)));
  if (g.bias) {
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    const cudaDataType_t bias_type = CUDA_R_16BF;
    XI_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    XI_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                                   sizeof(bias_type)));
  }
  const cudaDataType_t d_type = g.y_f32 ? CUDA_R_32F : CUDA_R_16BF;
  XI_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->a, CUDA_R_16BF, g.k, g.n, g.k));  // w^T
  XI_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->b, CUDA_R_16BF, g.k, g.m, g.k));  // x^T
  XI_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->d, d_type, g.n, g.m, g.n));       // y^T
  return *plans_.emplace(key, std::move(plan)).first->second;
}

std::string CublasLtGemm::shape_text(const GemmArgs& g) {
  return "bf16 GEMM m=" + std::to_string(g.m) + " n=" + std::to_string(g.n) + " k=" + std::to_string(g.k) +
         (g.y_f32 ? " f32 out" : " bf16 out") + (g.bias ? " +bias" : "");
}

const cublasLtMatmulAlgo_t* CublasLtGemm::find_heuristic(const GemmArgs& g) {
  Plan& plan = plan_for(g);
  if (!plan.heuristic_known) {
    DebugTimer timer("cuBLASLt bf16 heuristic");
    if (timer.enabled()) timer.detail() << shape_text(g);
    const std::vector<cublasLtMatmulAlgo_t> first = candidates(g, 1);
    plan.heuristic_known = true;
    plan.have_heuristic = !first.empty();
    if (plan.have_heuristic) plan.heuristic = first[0];
  }
  return plan.have_heuristic ? &plan.heuristic : nullptr;
}

const cublasLtMatmulAlgo_t& CublasLtGemm::heuristic(const GemmArgs& g) {
  const cublasLtMatmulAlgo_t* algo = find_heuristic(g);
  XI_CHECK(algo != nullptr) << "cuBLASLt: no algorithm for " << shape_text(g);
  return *algo;
}

std::vector<cublasLtMatmulAlgo_t> CublasLtGemm::candidates(const GemmArgs& g, int max_results) {
  Plan& plan = plan_for(g);
  cublasLtMatmulPreference_t pref = nullptr;
  XI_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  XI_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                       &workspace_bytes_, sizeof(workspace_bytes_)));
  std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<size_t>(std::max(max_results, 1)));
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle_, plan.op, plan.a, plan.b, plan.d, plan.d, pref,
                                                           static_cast<int>(results.size()), results.data(), &found);
  cublasLtMatmulPreferenceDestroy(pref);
  std::vector<cublasLtMatmulAlgo_t> out;
  if (st != CUBLAS_STATUS_SUCCESS) return out;
  auto add = [&](const cublasLtMatmulAlgo_t& algo) {
    for (const auto& o : out)
      if (same(o, algo)) return;
    out.push_back(algo);
  };
  for (int i = 0; i < found; ++i)
    if (results[static_cast<size_t>(i)].state == CUBLAS_STATUS_SUCCESS &&
        results[static_cast<size_t>(i)].workspaceSize <= workspace_bytes_)
      add(results[static_cast<size_t>(i)].algo);
  if (max_results <= 1) return out;

  // Split-K variants of the first two (cublaslt_algo_choice.h).
  const size_t heuristic_count = std::min<size_t>(out.size(), 2);
  const std::vector<cublasLtMatmulAlgo_t> bases(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(heuristic_count));
  for (const cublasLtMatmulAlgo_t& base : bases)
    add_split_k_variants(base, g.k, [&](const cublasLtMatmulAlgo_t& v) { return check(g, v); }, out);
  return out;
}

bool CublasLtGemm::check(const GemmArgs& g, const cublasLtMatmulAlgo_t& algo) {
  Plan& plan = plan_for(g);
  cublasLtMatmulHeuristicResult_t result{};
  const cublasStatus_t st =
      cublasLtMatmulAlgoCheck(handle_, plan.op, plan.a, plan.b, plan.d, plan.d, &algo, &result);
  return st == CUBLAS_STATUS_SUCCESS && result.state == CUBLAS_STATUS_SUCCESS &&
         result.workspaceSize <= workspace_bytes_;
}

void CublasLtGemm::run(const GemmArgs& g, cudaStream_t stream) {
  if (g.m == 0 || g.n == 0) return;
  run(g, heuristic(g), stream);
}

void CublasLtGemm::run(const GemmArgs& g, const cublasLtMatmulAlgo_t& algo, cudaStream_t stream) {
  XI_CHECK(try_run(g, algo, stream)) << "cuBLASLt " << shape_text(g) << " failed with " << describe(algo);
}

bool CublasLtGemm::try_run(const GemmArgs& g, const cublasLtMatmulAlgo_t& algo, cudaStream_t stream) {
  if (g.m == 0 || g.n == 0) return true;
  Plan& plan = plan_for(g);
  if (g.bias) {
    const void* bias = g.bias;
    XI_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  }
  const float alpha = 1.0f, beta = 0.0f;
  return cublasLtMatmul(handle_, plan.op, &alpha, g.w, plan.a, g.x, plan.b, &beta, g.y, plan.d, g.y, plan.d, &algo,
                        workspace_, workspace_bytes_, stream) == CUBLAS_STATUS_SUCCESS;
}

std::string CublasLtGemm::describe(const cublasLtMatmulAlgo_t& algo) { return describe_algo(algo); }

bool CublasLtGemm::same(const cublasLtMatmulAlgo_t& a, const cublasLtMatmulAlgo_t& b) { return same_algo(a, b); }

}  // namespace xinfer::cuda
