// The measured cuBLASLt algorithm choice the W8A8 GEMMs share (cublaslt_int8_gemm.h, cublaslt_fp8_gemm.h).
//
// cuBLASLt's heuristic is right at large M but loses 10-46% at 256-512 rows on an H200, and its tiles are
// quantised in m with period 128 (docs/PERF.md sessions 10 and 13): a plan's candidates are the heuristic's
// algorithms for its rows, those it gives for the rows rounded up to 128, and at the decode graph buckets the tile
// and split-K variants of its first, each where cublasLtMatmulAlgoCheck accepts it for the real rows
// (candidate_algos). The first call of a plan times every candidate (fastest_algo) on a private stream and
// workspace (AlgoTuneScratch), writing only scratch memory, so it is safe while the caller's stream records a CUDA
// graph (relaxed capture mode) or has work in flight. The INT8 GEMM offers a winner to later plans of the same
// row bucket (offer_algo), so a serving run measures each (n, k, bucket) once.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace xinfer::cuda {

// A plan's matrix layouts (column-major, as cuBLASLt sees them): a = w^T [k, n], b = x^T [k, rows],
// c / d = y^T [n, rows]; b_type / d_type their element types (for the padded-rows layouts).
struct AlgoQuery {
  cublasLtHandle_t handle;
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t a, b, c, d;
  cudaDataType_t b_type, d_type;
  int rows, n, k;
  size_t workspace_bytes;
};

// The heuristic's algorithms (up to max_algos, best first); with pad_rows, also those of the rows rounded up to a
// multiple of 128 (rows > 128 only); with variants, also the tile-shape and split-K variants of the heuristic's
// first (add_tile_variants, add_split_k_variants); each only where the real rows accept it. Empty when cuBLASLt
// has none.
std::vector<cublasLtMatmulAlgo_t> candidate_algos(const AlgoQuery& q, int max_algos, bool pad_rows, bool variants);

// The row counts whose plans time the ~100 tile / split-K variants (variant_rows): the decode graph buckets
// from 2 to 256 rows (backend/decode_graph_buckets.h: 2, 4, .., 128, 192, 256), which the graph-replayed
// decode steps of up to 256 sequences run at. On an H200 the best variant beats the heuristic's first by up
// to 1.7x there (FP8 down at 128 rows: 22.5 vs 38.5 us, PERF.md session 13), while at other rows the winner
// changes from one row count to the next and timing every new count costs more than it saves (a 128/128 run
// measuring each step's rows lost 40%). The buckets above 256 (320 .. 512) keep the heuristic's: within 5% of
// the best at 384-512 rows (session 13), and timing them at start-up doubled its cost (7 s) without a
// measured gain (session 22).
bool variant_rows(int rows);

using AlgoCheck = std::function<bool(const cublasLtMatmulAlgo_t&)>;
// Split-K variants of base (2, 4, 8, 16 splits while k / splits >= 256, its first supported reduction scheme)
// that check accepts, appended to algos where new. Small m leaves most SMs idle unless k is split.
void add_split_k_variants(const cublasLtMatmulAlgo_t& base, int k, const AlgoCheck& check,
                          std::vector<cublasLtMatmulAlgo_t>& algos);
// base with each other tile shape it supports (CUBLASLT_ALGO_CAP_TILE_IDS) that check accepts: smaller tiles
// fill the GPU at shapes whose tile count is below the SM count (FP8 qkv / o at a few hundred rows).
void add_tile_variants(const cublasLtMatmulAlgo_t& base, const AlgoCheck& check, std::vector<cublasLtMatmulAlgo_t>& algos);
bool same_algo(const cublasLtMatmulAlgo_t& a, const cublasLtMatmulAlgo_t& b);
// "algo 66 tile 20 stages 3 splitk 1 ..." from the algo's config attributes.
std::string describe_algo(const cublasLtMatmulAlgo_t& algo);

// `algo` as a candidate of q: its index in algos if there, else appended when cublasLtMatmulAlgoCheck accepts it
// for q (index of the new entry); -1 when q cannot take it.
int offer_algo(const AlgoQuery& q, const cublasLtMatmulAlgo_t& algo, std::vector<cublasLtMatmulAlgo_t>& algos);

// Power-of-two bucket of a row count (plans of other rows than variant_rows that share a measured winner).
int algo_row_bucket(int rows);

// A private stream, workspace and output scratch for the measurements (allocated on first use).
class AlgoTuneScratch {
 public:
  AlgoTuneScratch() = default;
  ~AlgoTuneScratch();
  AlgoTuneScratch(const AlgoTuneScratch&) = delete;
  AlgoTuneScratch& operator=(const AlgoTuneScratch&) = delete;
  cudaStream_t stream();
  void* workspace(size_t bytes);
  void* output(size_t bytes);  // at least `bytes`, contents undefined

 private:
  cudaStream_t stream_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  void* output_ = nullptr;
  size_t output_bytes_ = 0;
};

// Times launch(i) on tune_stream for i in [0, count) (one warm-up, best of three runs of 4 launches) and returns the
// fastest index, or -1 when none launches. The first that launches is the reference (normally the heuristic's
// first) and keeps its place unless beaten by more than 1%. caller_stream: its queued work finishes first when it
// is not recording a graph (so it does not share the GPU with the timed launches).
int fastest_algo(int count, cudaStream_t caller_stream, cudaStream_t tune_stream,
                 const std::function<cublasStatus_t(int)>& launch);

}  // namespace xinfer::cuda
