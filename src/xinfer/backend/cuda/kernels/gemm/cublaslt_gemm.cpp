#include "xinfer/backend/cuda/kernels/gemm/cublaslt_gemm.h"

#include "xinfer/backend/cuda/cuda_check.h"

namespace xinfer::cuda {

struct CublasLtGemm::Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
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

  cublasLtMatmulPreference_t pref = nullptr;
  XI_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  XI_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                       &workspace_bytes_, sizeof(workspace_bytes_)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  XI_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(handle_, plan->op, plan->a, plan->b, plan->d, plan->d, pref, 1,
                                                 &result, &found));
  cublasLtMatmulPreferenceDestroy(pref);
  XI_CHECK(found > 0) << "cuBLASLt: no algorithm for bf16 GEMM m=" << g.m << " n=" << g.n << " k=" << g.k
                      << (g.y_f32 ? " f32 out" : " bf16 out") << (g.bias ? " +bias" : "");
  plan->algo = result.algo;
  return *plans_.emplace(key, std::move(plan)).first->second;
}

void CublasLtGemm::run(const GemmArgs& g, cudaStream_t stream) {
  if (g.m == 0 || g.n == 0) return;
  Plan& plan = plan_for(g);
  if (g.bias) {
    const void* bias = g.bias;
    XI_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  }
  const float alpha = 1.0f, beta = 0.0f;
  XI_CUBLAS_CHECK(cublasLtMatmul(handle_, plan.op, &alpha, g.w, plan.a, g.x, plan.b, &beta, g.y, plan.d, g.y, plan.d,
                                 &plan.algo, workspace_, workspace_bytes_, stream));
}

}  // namespace xinfer::cuda
