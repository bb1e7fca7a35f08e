#include "xinfer/backend/cuda/kernels/gemm/cublaslt_fp8_gemm.h"

#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "xinfer/backend/cuda/cuda_check.h"
#include "xinfer/core/logging.h"

namespace xinfer::cuda {

bool fp8_fast_accumulation() {
  static const bool on = [] {
    const char* v = std::getenv("XINFER_FP8_FAST_ACCUM");
    return v == nullptr || std::atoi(v) != 0;
  }();
  return on;
}

struct CublasLtFp8Gemm::Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
  std::vector<cublasLtMatmulAlgo_t> algos;  // candidates, the heuristic's first first (cublaslt_algo_choice.h)
  int chosen = 0;
  bool decided = false;  // measured, taken from the shared choices, or set_algo()
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
  DebugTimer timer("cuBLASLt FP8 plan");
  if (timer.enabled()) timer.detail() << shape_text(g);
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
  const int8_t fast_accum = fp8_fast_accumulation() ? 1 : 0;
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
  plan->algos = candidate_algos(query(*plan, g, d_type), kMaxAlgos, false,
                                measure_ && g.m <= max_measured_rows_ && variant_rows(g.m));
  if (every_algo_limit_ > 0 && !plan->algos.empty())
    add_every_algo(query(*plan, g, d_type), plan->algos.size() + every_algo_limit_, plan->algos);
  return *plans_.emplace(key, std::move(plan)).first->second;
}

AlgoQuery CublasLtFp8Gemm::query(const Plan& plan, const Fp8GemmArgs& g, cudaDataType_t d_type) const {
  return AlgoQuery{handle_, plan.op, plan.a, plan.b, plan.c, plan.d, CUDA_R_8F_E4M3, d_type, g.m, g.n, g.k,
                   workspace_bytes_};
}

namespace {

// Decisions shared by every CublasLtFp8Gemm of the process (see the header), by exact shape.
struct SharedChoices {
  std::mutex mu;
  std::map<std::tuple<int, int, int, bool, bool>, cublasLtMatmulAlgo_t> exact;
};
SharedChoices& shared_choices() {
  static SharedChoices c;
  return c;
}

}  // namespace

std::vector<GemmTuningEntry> CublasLtFp8Gemm::known_choices() {
  SharedChoices& shared = shared_choices();
  std::lock_guard<std::mutex> lock(shared.mu);
  std::vector<GemmTuningEntry> out;
  for (const auto& [key, algo] : shared.exact) {
    const auto& [m, n, k, y_f32, bias] = key;
    GemmTuningEntry e;
    e.key = GemmTuningKey{n, k, y_f32, bias, m};
    e.choice.kind = GemmKind::kCublasLt;
    e.choice.algo = algo;
    out.push_back(e);
  }
  return out;
}

void CublasLtFp8Gemm::add_known_choices(const std::vector<GemmTuningEntry>& entries) {
  SharedChoices& shared = shared_choices();
  std::lock_guard<std::mutex> lock(shared.mu);
  for (const GemmTuningEntry& e : entries)
    if (e.choice.kind == GemmKind::kCublasLt)
      shared.exact.try_emplace({e.key.m, e.key.n, e.key.k, e.key.y_f32, e.key.bias}, e.choice.algo);
}

void CublasLtFp8Gemm::choose(Plan& plan, const Fp8GemmArgs& g, cudaStream_t stream) {
  plan.decided = true;
  if (!measure_ || plan.algos.size() < 2) return;
  const AlgoQuery q = query(plan, g, g.y_f32 ? CUDA_R_32F : CUDA_R_16BF);
  const std::tuple<int, int, int, bool, bool> exact{g.m, g.n, g.k, g.y_f32, g.bias != nullptr};
  SharedChoices& shared = shared_choices();
  std::lock_guard<std::mutex> lock(shared.mu);
  if (const auto it = shared.exact.find(exact); it != shared.exact.end()) {
    if (const int i = offer_algo(q, it->second, plan.algos); i >= 0) {
      plan.chosen = i;
      return;
    }
  }
  void* ws = tune_.workspace(workspace_bytes_);
  void* y = tune_.output(static_cast<size_t>(g.m) * static_cast<size_t>(g.n) * (g.y_f32 ? 4 : 2));
  // The scale and bias pointers are the call's (read only); the output is scratch. The weight is timed in
  // copies rotated past L2, as a step streams each layer's weights from HBM: the same matrix launched again
  // would sit in L2 (qkv, o) and favour other tiles.
  set_pointers(plan, g);
  const size_t w_bytes = static_cast<size_t>(g.n) * static_cast<size_t>(g.k);
  const int copies = rotated_copies(w_bytes);
  const auto* w = copies == 1 ? g.wq : static_cast<const uint8_t*>(tune_.weight_copies(g.wq, w_bytes, copies));
  int launches = 0;
  const float alpha = 1.0f, beta = 0.0f;
  const int best = fastest_algo(static_cast<int>(plan.algos.size()), stream, tune_.stream(), [&](int i) {
    const uint8_t* wi = w + static_cast<size_t>(launches++ % copies) * w_bytes;
    return cublasLtMatmul(handle_, plan.op, &alpha, wi, plan.a, g.xq, plan.b, &beta, y, plan.c, y, plan.d,
                          &plan.algos[static_cast<size_t>(i)], ws, workspace_bytes_, tune_.stream());
  });
  if (best < 0) return;  // none launched here: run() keeps the heuristic's first (and reports its error)
  plan.chosen = best;
  shared.exact[exact] = plan.algos[static_cast<size_t>(best)];
}

void CublasLtFp8Gemm::set_pointers(Plan& plan, const Fp8GemmArgs& g) {
  XI_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &g.w_scales,
                                                 sizeof(g.w_scales)));
  XI_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &g.x_scales,
                                                 sizeof(g.x_scales)));
  if (g.bias)
    XI_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof(g.bias)));
}

int CublasLtFp8Gemm::algo_count(const Fp8GemmArgs& g) { return static_cast<int>(plan_for(g).algos.size()); }

void CublasLtFp8Gemm::set_algo(const Fp8GemmArgs& g, int index) {
  Plan& plan = plan_for(g);
  XI_CHECK(index >= 0 && index < static_cast<int>(plan.algos.size()))
      << "cuBLASLt: algorithm " << index << " of " << plan.algos.size() << " for " << shape_text(g);
  plan.chosen = index;
  plan.decided = true;
}

std::string CublasLtFp8Gemm::describe(const Fp8GemmArgs& g, int index) {
  const Plan& plan = plan_for(g);
  XI_CHECK(index >= 0 && index < static_cast<int>(plan.algos.size())) << "cuBLASLt: algorithm " << index;
  return describe_algo(plan.algos[static_cast<size_t>(index)]);
}

cublasLtMatmulAlgo_t CublasLtFp8Gemm::algo(const Fp8GemmArgs& g, int index) {
  const Plan& plan = plan_for(g);
  XI_CHECK(index >= 0 && index < static_cast<int>(plan.algos.size())) << "cuBLASLt: algorithm " << index;
  return plan.algos[static_cast<size_t>(index)];
}

int CublasLtFp8Gemm::chosen_algo(const Fp8GemmArgs& g) {
  const Plan& plan = plan_for(g);
  return plan.decided ? plan.chosen : -1;
}

bool CublasLtFp8Gemm::supported(const Fp8GemmArgs& g) { return !plan_for(g).algos.empty(); }

void CublasLtFp8Gemm::run(const Fp8GemmArgs& g, cudaStream_t stream) {
  Plan& plan = plan_for(g);
  XI_CHECK(!plan.algos.empty()) << "cuBLASLt: no algorithm for " << shape_text(g);
  if (!plan.decided) choose(plan, g, stream);
  set_pointers(plan, g);
  const float alpha = 1.0f, beta = 0.0f;
  DebugTimer timer("cuBLASLt FP8 launch", 1.0);  // a slow one: the first use of a kernel loads its module
  if (timer.enabled()) timer.detail() << shape_text(g) << ", algorithm " << plan.chosen;
  XI_CUBLAS_CHECK(cublasLtMatmul(handle_, plan.op, &alpha, g.wq, plan.a, g.xq, plan.b, &beta, g.y, plan.c, g.y, plan.d,
                                 &plan.algos[static_cast<size_t>(plan.chosen)], workspace_, workspace_bytes_, stream));
}

}  // namespace xinfer::cuda
