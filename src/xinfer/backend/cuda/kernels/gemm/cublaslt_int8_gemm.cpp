#include "xinfer/backend/cuda/kernels/gemm/cublaslt_int8_gemm.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "xinfer/backend/cuda/cuda_check.h"

namespace xinfer::cuda {

struct CublasLtInt8Gemm::Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
  std::vector<cublasLtMatmulAlgo_t> algos;  // the heuristic's, best first (+ a bucket's winner, checked)
  int chosen = 0;
  bool decided = false;  // measured, taken from the bucket, or set_algo()
  ~Plan() {
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

namespace {

std::string shape_text(const Int8GemmArgs& g, Int8GemmMode mode) {
  return std::string("int8 GEMM (") + to_string(mode) + ") m=" + std::to_string(g.m) + " n=" + std::to_string(g.n) +
         " k=" + std::to_string(g.k) + (g.y_f32 ? " f32 out" : " bf16 out") + (g.bias ? " +bias" : "");
}

}  // namespace

const char* to_string(Int8GemmMode mode) {
  return mode == Int8GemmMode::kInt32Epilogue ? "int32+epilogue" : "outer-vec scales";
}

CublasLtInt8Gemm::CublasLtInt8Gemm(size_t workspace_bytes, int chunk_rows)
    : workspace_bytes_(workspace_bytes), chunk_rows_(chunk_rows) {
  XI_CHECK(chunk_rows >= 1) << "int8 GEMM: chunk rows " << chunk_rows;
  XI_CUBLAS_CHECK(cublasLtCreate(&handle_));
  XI_CUDA_CHECK(cudaMalloc(&workspace_, workspace_bytes_));
}

CublasLtInt8Gemm::~CublasLtInt8Gemm() {
  plans_.clear();
  if (workspace_) cudaFree(workspace_);
  if (handle_) cublasLtDestroy(handle_);
}

void CublasLtInt8Gemm::set_chunk_rows(int rows) {
  XI_CHECK(rows >= 1) << "int8 GEMM: chunk rows " << rows;
  chunk_rows_ = rows;
}

AlgoQuery CublasLtInt8Gemm::query(const Plan& plan, int rows, const Int8GemmArgs& g, cudaDataType_t d_type) const {
  return AlgoQuery{handle_, plan.op, plan.a, plan.b, plan.c, plan.d, CUDA_R_8I, d_type, rows, g.n, g.k, workspace_bytes_};
}

size_t CublasLtInt8Gemm::acc_bytes(int m, int n) const {
  return static_cast<size_t>(std::min(m, chunk_rows_)) * static_cast<size_t>(n) * 4;
}

CublasLtInt8Gemm::Plan& CublasLtInt8Gemm::plan_for(Int8GemmMode mode, int rows, const Int8GemmArgs& g) {
  const Key key{static_cast<int>(mode), rows, g.n, g.k, g.y_f32, g.bias != nullptr};
  if (auto it = plans_.find(key); it != plans_.end()) return *it->second;
  auto plan = std::make_unique<Plan>();
  const bool outer = mode == Int8GemmMode::kOuterVec;
  XI_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->op, CUBLAS_COMPUTE_32I, outer ? CUDA_R_32F : CUDA_R_32I));
  const cublasOperation_t trans = CUBLAS_OP_T, no_trans = CUBLAS_OP_N;
  XI_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSA, &trans, sizeof(trans)));
  XI_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSB, &no_trans, sizeof(no_trans)));
  cudaDataType_t d_type = CUDA_R_32I;
  if (outer) {
    // A cuBLASLt that refuses an attribute for int8 has no algorithm for this mode (no plan, not a failure).
    bool ok = true;
    auto set = [&](cublasLtMatmulDescAttributes_t attr, const void* v, size_t n) {
      ok = ok && cublasLtMatmulDescSetAttribute(plan->op, attr, v, n) == CUBLAS_STATUS_SUCCESS;
    };
    const int32_t vec = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    set(CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &vec, sizeof(vec));
    set(CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &vec, sizeof(vec));
    const void* placeholder = workspace_;  // scale pointers are per call; the heuristic sees the mode
    set(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &placeholder, sizeof(placeholder));
    set(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &placeholder, sizeof(placeholder));
    if (g.bias) {
      const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
      const cudaDataType_t bias_type = CUDA_R_16BF;
      set(CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi));
      set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type));
    }
    if (!ok) return *plans_.emplace(key, std::move(plan)).first->second;
    d_type = g.y_f32 ? CUDA_R_32F : CUDA_R_16BF;
  }
  XI_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->a, CUDA_R_8I, g.k, g.n, g.k));   // w^T
  XI_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->b, CUDA_R_8I, g.k, rows, g.k));  // x^T
  XI_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->c, d_type, g.n, rows, g.n));
  XI_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->d, d_type, g.n, rows, g.n));     // y^T (or acc^T)
  // Candidates for the measured choice (int32 mode, fewer than kMeasureMaxRows rows): the padded rows' algorithms
  // too, and at the decode graph buckets the tile / split-K variants (cublaslt_algo_choice.h).
  const bool measured = !outer && measure_ && rows < kMeasureMaxRows;
  plan->algos = candidate_algos(query(*plan, rows, g, d_type), kMaxAlgos, measured,
                                measured && rows <= kVariantMaxRows && variant_rows(rows));
  return *plans_.emplace(key, std::move(plan)).first->second;
}

bool CublasLtInt8Gemm::supported(const Int8GemmArgs& g, Int8GemmMode mode) {
  if (g.m < 1 || g.n < 1 || g.k < 1 || g.k % 4 != 0 || g.n % 4 != 0) return false;
  const int rows = mode == Int8GemmMode::kInt32Epilogue ? std::min(g.m, chunk_rows_) : g.m;
  if (plan_for(mode, rows, g).algos.empty()) return false;
  if (mode == Int8GemmMode::kInt32Epilogue && g.m % rows != 0) return !plan_for(mode, g.m % rows, g).algos.empty();
  return true;
}

int CublasLtInt8Gemm::algo_count(const Int8GemmArgs& g, Int8GemmMode mode) {
  const int rows = mode == Int8GemmMode::kInt32Epilogue ? std::min(g.m, chunk_rows_) : g.m;
  return static_cast<int>(plan_for(mode, rows, g).algos.size());
}

void CublasLtInt8Gemm::set_algo(const Int8GemmArgs& g, Int8GemmMode mode, int index) {
  const int rows = mode == Int8GemmMode::kInt32Epilogue ? std::min(g.m, chunk_rows_) : g.m;
  Plan& plan = plan_for(mode, rows, g);
  XI_CHECK(index >= 0 && index < static_cast<int>(plan.algos.size()))
      << "cuBLASLt: algorithm " << index << " of " << plan.algos.size() << " for " << shape_text(g, mode);
  plan.chosen = index;
  plan.decided = true;
}

int CublasLtInt8Gemm::chosen_algo(const Int8GemmArgs& g, Int8GemmMode mode) {
  const int rows = mode == Int8GemmMode::kInt32Epilogue ? std::min(g.m, chunk_rows_) : g.m;
  const Plan& plan = plan_for(mode, rows, g);
  return plan.decided || mode == Int8GemmMode::kOuterVec ? plan.chosen : -1;
}

void CublasLtInt8Gemm::choose(Plan& plan, int rows, const Int8GemmArgs& g, const int8_t* xq, cudaStream_t stream) {
  plan.decided = true;
  if (!measure_ || rows >= kMeasureMaxRows || plan.algos.size() < 2) return;
  const AlgoQuery q = query(plan, rows, g, CUDA_R_32I);
  // A graph bucket's plan times its own variants and shares nothing (its winner may be a tile shape that loses
  // at the bucket's other row counts).
  const bool own = rows <= kVariantMaxRows && variant_rows(rows);
  const BucketKey bucket{algo_row_bucket(rows), g.n, g.k, g.y_f32, g.bias != nullptr};
  if (auto it = bucket_choice_.find(bucket); !own && it != bucket_choice_.end()) {
    if (const int i = offer_algo(q, it->second, plan.algos); i >= 0) {
      plan.chosen = i;
      return;
    }
  }
  void* ws = tune_.workspace(workspace_bytes_);
  auto* acc = static_cast<int32_t*>(tune_.output(static_cast<size_t>(rows) * static_cast<size_t>(g.n) * 4));
  const int32_t alpha = 1, beta = 0;
  const int best = fastest_algo(static_cast<int>(plan.algos.size()), stream, tune_.stream(), [&](int i) {
    return cublasLtMatmul(handle_, plan.op, &alpha, g.wq, plan.a, xq, plan.b, &beta, acc, plan.c, acc, plan.d,
                          &plan.algos[static_cast<size_t>(i)], ws, workspace_bytes_, tune_.stream());
  });
  if (best < 0) return;  // none launched here: run() keeps the heuristic's first (and reports its error)
  plan.chosen = best;
  if (!own) bucket_choice_[bucket] = plan.algos[static_cast<size_t>(best)];
}

void CublasLtInt8Gemm::run(const Int8GemmArgs& g, cudaStream_t stream, Int8GemmMode mode) {
  XI_CHECK(g.k % 4 == 0 && g.n % 4 == 0) << "cuBLASLt: " << shape_text(g, mode) << " needs k and n multiples of 4";
  if (mode == Int8GemmMode::kOuterVec) {
    Plan& plan = plan_for(mode, g.m, g);
    XI_CHECK(!plan.algos.empty()) << "cuBLASLt: no algorithm for " << shape_text(g, mode);
    XI_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &g.w_scales,
                                                   sizeof(g.w_scales)));
    XI_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &g.x_scales,
                                                   sizeof(g.x_scales)));
    if (g.bias)
      XI_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof(g.bias)));
    const float alpha = 1.0f, beta = 0.0f;
    XI_CUBLAS_CHECK(cublasLtMatmul(handle_, plan.op, &alpha, g.wq, plan.a, g.xq, plan.b, &beta, g.y, plan.c, g.y,
                                   plan.d, &plan.algos[static_cast<size_t>(plan.chosen)], workspace_, workspace_bytes_,
                                   stream));
    return;
  }
  XI_CHECK(g.acc != nullptr) << "cuBLASLt: " << shape_text(g, mode) << " needs its int32 workspace";
  const int chunk = chunk_rows_;
  const size_t y_row = static_cast<size_t>(g.n) * (g.y_f32 ? 4 : 2);
  const int32_t alpha = 1, beta = 0;
  for (int m0 = 0; m0 < g.m; m0 += chunk) {
    const int rows = std::min(chunk, g.m - m0);
    Plan& plan = plan_for(mode, rows, g);
    XI_CHECK(!plan.algos.empty()) << "cuBLASLt: no algorithm for " << shape_text(g, mode) << " (" << rows << " rows)";
    if (!plan.decided) choose(plan, rows, g, g.xq + static_cast<size_t>(m0) * g.k, stream);
    XI_CUBLAS_CHECK(cublasLtMatmul(handle_, plan.op, &alpha, g.wq, plan.a, g.xq + static_cast<size_t>(m0) * g.k, plan.b,
                                   &beta, g.acc, plan.c, g.acc, plan.d, &plan.algos[static_cast<size_t>(plan.chosen)],
                                   workspace_, workspace_bytes_, stream));
    launch_int8_scale_epilogue(g.acc, g.x_scales + m0, g.w_scales, g.bias, static_cast<char*>(g.y) + m0 * y_row,
                               g.y_f32, rows, g.n, stream);
  }
}

}  // namespace xinfer::cuda
