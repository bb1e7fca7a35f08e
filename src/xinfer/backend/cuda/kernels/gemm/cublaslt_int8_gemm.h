// W8A8-INT8 GEMMs (SmoothQuant's format) through cuBLASLt's integer tensor cores:
//   y[m, n] = (sx[m] sw[n]) * (xq[m, k] . wq[n, k]) (+ bias[n]),  xq, wq int8, exact int32 accumulation,
// y bf16 or f32. The scale is applied as the CPU oracle does (quant/int_matmul.cpp run_w8a8_int8):
// f32(sw[n] * sx[m]) * f32(dot), then + bias, so with f32 output and no bias the result is the oracle's bits.
// Two ways to run it (Int8GemmMode):
//   kInt32Epilogue  cuBLASLt int8 x int8 -> int32 (CUBLAS_COMPUTE_32I, scale type 32I, alpha 1, beta 0) into
//                   the caller's int32 workspace acc [rows, n], then our epilogue kernel (scales, bias, the
//                   bf16 / f32 store). m runs in chunks of chunk_rows() rows (default 2048: acc is at most
//                   2048 x n int32, 235 MB for Llama-3.1-8B's gate_up). Measured on an H200 (docs/PERF.md,
//                   int8-1): chunks small enough for the sums to stay in L2 (16-64 MiB) made the GEMMs so
//                   small that gate_up at m = 2048 took 528-782 us against 389 us unchunked; 2048-row chunks
//                   cost what m = 2048 costs (e.g. down at m = 8192: 663 us vs 775 us unchunked).
//   kOuterVec       one cuBLASLt call with A / B CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F (the FP8 path's
//                   per-channel x per-token scaling), compute 32I, scale type 32F, bias epilogue, bf16 / f32 D:
//                   only where the heuristic offers an algorithm for it (supported()).
// Layout as the FP8 GEMM (cublaslt_fp8_gemm.h): row-major y = x w^T is column-major y^T = w x^T, A = w
// transposed ("TN", the layout the IMMA kernels take), k and n multiples of 4 (16-byte rows wanted).
// Plans (descriptors and the heuristic's algorithms, up to kMaxAlgos) are cached per (mode, rows, n, k, out
// dtype, bias). Which algorithm runs (kInt32Epilogue): measured (cublaslt_algo_choice.h), because the heuristic's
// first choice loses 10-46% at 256-512 rows on an H200 (docs/PERF.md session 10: o m=280 31.2 vs 16.9 us,
// gate_up m=512 128.6 vs 86.6 us) while it is the best at 2048-4096: at the first call of a plan with fewer than
// kMeasureMaxRows rows and more than one candidate, reading the call's xq / wq (values do not change the time)
// into int32 scratch; the exact int32 sums make every algorithm's result identical. The winner is offered to later
// plans of the same power-of-two row bucket, except at the decode graph buckets (variant_rows), whose plans also
// time the tile / split-K variants and keep their winner to themselves. set_algo() (the bench)
// overrides it; set_measure(false) keeps the heuristic's first algorithm.
#pragma once

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "xinfer/backend/cuda/kernels/gemm/cublaslt_algo_choice.h"

namespace xinfer::cuda {

struct Int8GemmArgs {
  const int8_t* xq;           // [m, k]
  const float* x_scales;      // [m]
  const int8_t* wq;           // [n, k]
  const float* w_scales;      // [n]
  const __nv_bfloat16* bias;  // [n] or nullptr
  void* y;                    // [m, n] bf16 or f32
  bool y_f32;
  int m, n, k;
  int32_t* acc;               // kInt32Epilogue: [chunk_rows(n), n] int32 workspace (CublasLtInt8Gemm::acc_bytes)
};

enum class Int8GemmMode { kInt32Epilogue, kOuterVec };
const char* to_string(Int8GemmMode mode);

// y[m, n] = f32(w_scales[j] * x_scales[t]) * f32(acc[t, j]) (+ bias[j]), stored bf16 or f32.
// acc: [m, n] int32   x_scales: [m]   w_scales: [n]   bias: [n] or nullptr   y: [m, n]
void launch_int8_scale_epilogue(const int32_t* acc, const float* x_scales, const float* w_scales,
                                const __nv_bfloat16* bias, void* y, bool y_f32, int m, int n, cudaStream_t stream);

class CublasLtInt8Gemm {
 public:
  // The graph buckets whose plans time the tile / split-K variants: up to 256 rows (this path measures every plan
  // lazily, in the step that first runs it; the FP8 GEMM's start-up measurement covers the larger buckets).
  static constexpr int kVariantMaxRows = 256;
  static constexpr int kMaxAlgos = 8;
  explicit CublasLtInt8Gemm(size_t workspace_bytes = 32u << 20, int chunk_rows = 2048);
  ~CublasLtInt8Gemm();
  CublasLtInt8Gemm(const CublasLtInt8Gemm&) = delete;
  CublasLtInt8Gemm& operator=(const CublasLtInt8Gemm&) = delete;

  // Rows of one kInt32Epilogue call and the acc bytes it needs for m rows.
  int chunk_rows() const { return chunk_rows_; }
  size_t acc_bytes(int m, int n) const;
  void set_chunk_rows(int rows);  // >= 1 (the bench)

  bool supported(const Int8GemmArgs& args, Int8GemmMode mode);
  // XI_CHECK-fails naming the shape when unsupported.
  void run(const Int8GemmArgs& args, cudaStream_t stream, Int8GemmMode mode = Int8GemmMode::kInt32Epilogue);
  // The heuristic's algorithms for this call's (first chunk's) shape, and which one run() takes (bench).
  int algo_count(const Int8GemmArgs& args, Int8GemmMode mode);
  void set_algo(const Int8GemmArgs& args, Int8GemmMode mode, int index);
  // The algorithm run() took last for this call's (first chunk's) shape (-1 before any run()).
  int chosen_algo(const Int8GemmArgs& args, Int8GemmMode mode);
  void set_measure(bool measure) { measure_ = measure; }
  // Rows from which the heuristic's first algorithm is trusted (measured best there).
  static constexpr int kMeasureMaxRows = 2048;

 private:
  struct Plan;
  using Key = std::tuple<int, int, int, int, bool, bool>;  // mode, rows, n, k, y_f32, bias
  Plan& plan_for(Int8GemmMode mode, int rows, const Int8GemmArgs& args);
  // Picks plan's algorithm at its first run (see the top); xq: this chunk's [rows, k].
  void choose(Plan& plan, int rows, const Int8GemmArgs& args, const int8_t* xq, cudaStream_t stream);
  AlgoQuery query(const Plan& plan, int rows, const Int8GemmArgs& args, cudaDataType_t d_type) const;
  using BucketKey = std::tuple<int, int, int, bool, bool>;  // row bucket, n, k, y_f32, bias
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_;
  int chunk_rows_;
  std::map<Key, std::unique_ptr<Plan>> plans_;
  bool measure_ = true;
  std::map<BucketKey, cublasLtMatmulAlgo_t> bucket_choice_;  // measured winners by row bucket
  AlgoTuneScratch tune_;                                     // private: measuring never touches the caller's
};

}  // namespace xinfer::cuda
