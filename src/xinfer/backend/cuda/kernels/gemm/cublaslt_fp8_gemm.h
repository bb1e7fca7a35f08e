// W8A8 FP8 GEMMs through cuBLASLt: y[m, n] = (sx[m] sw[n]) * (xq[m, k] @ wq[n, k]^T) (+ bias[n]), e4m3
// inputs, f32 accumulation (fast accumulation on by default, see plan_for), y bf16 or f32. The per-token x
// per-channel scales are cuBLASLt's outer-vector scaling (CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F, CUDA
// 12.9+ on sm_90): A = wq with its [n] scales, B = xq with its [m] scales, applied to the f32 products before
// the bias epilogue. Layout as CublasLtGemm (cublaslt_gemm.h): row-major y = x w^T is column-major y^T =
// w x^T, A transposed (the only FP8 layout Hopper takes, "TN"). Descriptors and the candidate algorithms are
// cached per (m, n, k, output dtype, bias); one handle and a 32 MiB workspace per instance. supported() asks
// the heuristic once per shape (false where cuBLASLt has no algorithm, e.g. k % 16 != 0). Which algorithm
// runs: at the decode graph buckets (variant_rows: 2, 4, .., 128, 192, .., 1024), measured at the shape's
// first call (cublaslt_algo_choice.h, the weight rotated past L2) among the heuristic's algorithm (cuBLASLt
// 13 offers one per shape for outer-vector FP8) and the ~250 tile / cluster / custom-option and split-K
// variants of it that the shape accepts: up to 1.7x faster there on an H200 (docs/PERF.md sessions 13, 27),
// or taken from the tuning cache file (add_known_choices). Other row counts take the heuristic's algorithm:
// its winner changes from one count to the next and timing every new count cost more than it saved.
// Algorithms differ in their f32 summation order, so the decisions are shared by every instance of the
// process (by exact shape): two engines of one process compute every FP8 linear alike (two processes may not,
// where two candidates time within noise). set_algo() (the bench) overrides; set_measure(false) keeps the
// heuristic's first.
#pragma once

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "xinfer/backend/cuda/kernels/gemm/cublaslt_algo_choice.h"
#include "xinfer/backend/cuda/kernels/gemm/gemm_tuning_cache.h"

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

// Whether the FP8 GEMMs sum with fast accumulation (the default; XINFER_FP8_FAST_ACCUM=0 turns it off, read
// once per process): cuBLASLt's plans, and whether our wgmma FP8 GEMM (fast accumulation only) may run.
bool fp8_fast_accumulation();

class CublasLtFp8Gemm {
 public:
  explicit CublasLtFp8Gemm(size_t workspace_bytes = 32u << 20);
  ~CublasLtFp8Gemm();
  CublasLtFp8Gemm(const CublasLtFp8Gemm&) = delete;
  CublasLtFp8Gemm& operator=(const CublasLtFp8Gemm&) = delete;

  static constexpr int kMaxAlgos = 8;

  bool supported(const Fp8GemmArgs& args);
  // XI_CHECK-fails naming the shape when unsupported.
  void run(const Fp8GemmArgs& args, cudaStream_t stream);
  // The candidates for this call's shape, and which one run() takes (bench; -1 before it is decided).
  int algo_count(const Fp8GemmArgs& args);
  void set_algo(const Fp8GemmArgs& args, int index);
  int chosen_algo(const Fp8GemmArgs& args);
  std::string describe(const Fp8GemmArgs& args, int index);  // candidate index's cuBLASLt configuration
  cublasLtMatmulAlgo_t algo(const Fp8GemmArgs& args, int index);  // candidate index itself
  void set_measure(bool measure) { measure_ = measure; }
  // The largest decode graph bucket whose plans time their variants (default 256). A measured plan made while
  // serving (a prefill chunk of exactly a bucket's rows past what the start-up measurement covered) would stall
  // its step for the timing and allocate scratch while the KV cache holds the memory, so
  // CudaBackend::measure_w8a8_gemms raises it to the buckets it measures (up to --max-num-seqs) and no further.
  void set_max_measured_rows(int rows) { max_measured_rows_ = rows; }

  // The process's measured decisions (every instance's, by exact shape) as tuning-cache entries (kind
  // kCublasLt), and decisions to take instead of measuring (from the cache file): a measured plan offers the
  // known algorithm first and keeps it where its shape accepts it (offer_algo), without timing. Bump
  // kChoiceVersion when the candidates change, so a cache file of the older search is not taken for this
  // one's.
  static constexpr int kChoiceVersion = 1;
  static std::vector<GemmTuningEntry> known_choices();
  static void add_known_choices(const std::vector<GemmTuningEntry>& entries);
  // Frees the measurement's scratch (weight copies, output, workspace) once the start-up measurement is done.
  void release_tuning_scratch() { tune_.release(); }
  // Plans made after this offer, past their usual candidates, up to `limit` of every algorithm cuBLASLt has
  // for the shape (add_every_algo; the bench's wide search). 0: the usual candidates only.
  void set_every_algo_limit(size_t limit) { every_algo_limit_ = limit; }

 private:
  struct Plan;
  using Key = std::tuple<int, int, int, bool, bool>;
  Plan& plan_for(const Fp8GemmArgs& args);
  AlgoQuery query(const Plan& plan, const Fp8GemmArgs& args, cudaDataType_t d_type) const;
  void choose(Plan& plan, const Fp8GemmArgs& args, cudaStream_t stream);
  void set_pointers(Plan& plan, const Fp8GemmArgs& args);
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_;
  std::map<Key, std::unique_ptr<Plan>> plans_;
  bool measure_ = true;
  size_t every_algo_limit_ = 0;
  int max_measured_rows_ = 256;
  AlgoTuneScratch tune_;
};

}  // namespace xinfer::cuda
