#include "xinfer/backend/cuda/kernels/gemm/cublaslt_fp8_gemm.h"

#include <cstdlib>
#include <string>

#include "xinfer/backend/cuda/cuda_check.h"

namespace xinfer::cuda {

struct CublasLtFp8Gemm::Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
  bool have_algo = false;
  cublasLtMatmulAlgo_t algo{};
  ~Plan() {
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

namespace {

std::string shape_text(const Fp8GemmArgs& g) {
  return "fp8 GEMM m=" + std::to_string(g.m) + " n=" + std::to_string(g.n) + " k=" + std::to_string(g.k) +
         (g.y_f32 ? " f32 out" : " bf16 out") + (g.bias ? " +bias" : "");
}

}  // namespace

CublasLtFp8Gemm::CublasLtFp8Gemm(size_t workspace_bytes) : workspace_bytes_(workspace_bytes) {
  XI_CUBLAS_CHECK(cublasLtCreate(&handle_));
  XI_CUDA_CHECK(cudaMalloc(&workspace_, workspace_bytes_));
}

CublasLtFp8Gemm::~CublasLtFp8Gemm() {
  plans_.clear();
  if (workspace_) cudaFree(workspace_);
  if (handle_) cublasLtDestroy(handle_);
}

CublasLtFp8Gemm::Plan& CublasLtFp8Gemm::plan_for(const Fp8GemmArgs& g) {
  const Key key{g.m, g.n, g.k, g.y_f32, g.bias != nullptr};
  if (auto it = plans_.find(key); it != plans_.end()) return *it->second;
  auto plan = std::make_unique<Plan>();
  XI_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t trans = CUBLAS_OP_T, no_trans = CUBLAS_OP_N;
  XI_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSA, &trans, sizeof(trans)));
  XI_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSB, &no_trans, sizeof(no_trans)));
  const int32_t outer = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
  XI_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &outer, sizeof(outer)));
  XI_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &outer, sizeof(outer)));
  // Fast accumulation (the partial sums kept in the tensor cores' reduced precision instead of promoted to f32
  // along k), as the peers' FP8 GEMMs run (CUTLASS's FP8FastAccum schedules in vLLM and TensorRT-LLM). On an
  // H200 (docs/PERF.md session 12) it cut a 2048-token FP8 layer from 857 to 811 us and raised 128/128
  // throughput 6.4%, at a relative L2 error of 1.4e-3 against the f64 oracle at k = 4096 (f32 out; bf16
  // output rounding alone is ~1e-3). XINFER_FP8_FAST_ACCUM=0 turns it off.
  static const int8_t fast_accum = [] {
    const char* v = std::getenv("XINFER_FP8_FAST_ACCUM");
    return static_cast<int8_t>(v == nullptr || std::atoi(v) != 0);
  }();
  XI_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast_accum, sizeof(fast_accum)));
  // Scale pointers are per call; a placeholder lets the heuristic see the scaling mode.
  const void* placeholder = workspace_;
  XI_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &placeholder, sizeof(placeholder)));
  XI_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &placeholder, sizeof(placeholder)));
  if (g.bias) {
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    const cudaDataType_t bias_type = CUDA_R_16BF;
    XI_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    XI_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type)));
  }
  const cudaDataType_t d_type = g.y_f32 ? CUDA_R_32F : CUDA_R_16BF;
  XI_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->a, CUDA_R_8F_E4M3, g.k, g.n, g.k));  // w^T
  XI_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->b, CUDA_R_8F_E4M3, g.k, g.m, g.k));  // x^T
  // C is not read (beta 0) but its type must be the output's (bf16 or f32) for FP8 with a 16-bit D.
  XI_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->c, d_type, g.n, g.m, g.n));
  XI_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->d, d_type, g.n, g.m, g.n));  // y^T
  cublasLtMatmulPreference_t pref = nullptr;
  XI_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  XI_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes_,
                                                       sizeof(workspace_bytes_)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  // XINFER_FP8_GEMM_PAD_ROWS=R (A/B switch while measured): for m > R not a multiple of R, take the algorithm the
  // heuristic gives for m rounded up to R rows, if cublasLtMatmulAlgoCheck accepts it for the real m. On an H200
  // the one algorithm it offers is tile-quantised in m with period 128: gate_up 106.6 us at m = 280 but 73.3 at
  // 384 (docs/PERF.md session 10), so the padded shape's tiling may be the faster one for the real rows. Measured in the
  // engine (round B): decode steps of ~280 rows 13.13 -> 12.31 ms, of ~480 rows 12.86 -> 13.57 ms: mixed, so off.
  static const int pad_rows = [] {
    const char* v = std::getenv("XINFER_FP8_GEMM_PAD_ROWS");
    return v ? std::atoi(v) : 0;
  }();
  if (pad_rows > 0 && g.m > pad_rows && g.m % pad_rows != 0) {
    const int mp = (g.m + pad_rows - 1) / pad_rows * pad_rows;
    cublasLtMatrixLayout_t bp = nullptr, dp = nullptr;
    XI_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&bp, CUDA_R_8F_E4M3, g.k, mp, g.k));
    XI_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&dp, d_type, g.n, mp, g.n));
    cublasLtMatmulHeuristicResult_t padded{};
    int found_padded = 0;
    const cublasStatus_t sp = cublasLtMatmulAlgoGetHeuristic(handle_, plan->op, plan->a, bp, dp, dp, pref, 1, &padded,
                                                             &found_padded);
    cublasLtMatrixLayoutDestroy(bp);
    cublasLtMatrixLayoutDestroy(dp);
    cublasLtMatmulHeuristicResult_t check{};
    if (sp == CUBLAS_STATUS_SUCCESS && found_padded > 0 && padded.state == CUBLAS_STATUS_SUCCESS &&
        cublasLtMatmulAlgoCheck(handle_, plan->op, plan->a, plan->b, plan->c, plan->d, &padded.algo, &check) ==
            CUBLAS_STATUS_SUCCESS &&
        check.state == CUBLAS_STATUS_SUCCESS && check.workspaceSize <= workspace_bytes_) {
      cublasLtMatmulPreferenceDestroy(pref);
      plan->have_algo = true;
      plan->algo = padded.algo;
      return *plans_.emplace(key, std::move(plan)).first->second;
    }
  }
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle_, plan->op, plan->a, plan->b, plan->c, plan->d, pref,
                                                           1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  plan->have_algo = st == CUBLAS_STATUS_SUCCESS && found > 0 && result.state == CUBLAS_STATUS_SUCCESS;
  if (plan->have_algo) plan->algo = result.algo;
  return *plans_.emplace(key, std::move(plan)).first->second;
}

bool CublasLtFp8Gemm::supported(const Fp8GemmArgs& g) { return plan_for(g).have_algo; }

void CublasLtFp8Gemm::run(const Fp8GemmArgs& g, cudaStream_t stream) {
  Plan& plan = plan_for(g);
  XI_CHECK(plan.have_algo) << "cuBLASLt: no algorithm for " << shape_text(g);
  XI_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &g.w_scales,
                                                 sizeof(g.w_scales)));
  XI_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &g.x_scales,
                                                 sizeof(g.x_scales)));
  if (g.bias)
    XI_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof(g.bias)));
  const float alpha = 1.0f, beta = 0.0f;
  XI_CUBLAS_CHECK(cublasLtMatmul(handle_, plan.op, &alpha, g.wq, plan.a, g.xq, plan.b, &beta, g.y, plan.c, g.y, plan.d,
                                 &plan.algo, workspace_, workspace_bytes_, stream));
}

}  // namespace xinfer::cuda
