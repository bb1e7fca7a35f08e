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

// The heuristic's algorithms (up to max_algos, best first); with pad_rows, also those of the rows rounded up
// to a multiple of 128 (rows > 128 only); with variants, also the tile / cluster / custom-option and split-K
// variants of the heuristic's first (add_config_variants, add_split_k_variants); each only where the real
// rows accept it. Empty when cuBLASLt has none.
std::vector<cublasLtMatmulAlgo_t> candidate_algos(const AlgoQuery& q, int max_algos, bool pad_rows, bool variants);

// The row counts whose plans time the ~250 variants (variant_rows): the decode graph buckets from 2 rows
// (backend/decode_graph_buckets.h: 2, 4, .., 128, 192, .., 1024), which the graph-replayed decode steps run
// at. On an H200 the best variant beats the heuristic's first by up to 1.7x there (FP8 down at 128 rows: 22.5
// vs 38.5 us, PERF.md session 13; qkv at 448 rows 31.5 vs 19.1 us with L2-resident weights, session 27),
// while at other rows the winner changes from one row count to the next and timing every new count costs more
// than it saves (a 128/128 run measuring each step's rows lost 40%).
bool variant_rows(int rows);

using AlgoCheck = std::function<bool(const cublasLtMatmulAlgo_t&)>;
// Split-K variants of base (2, 4, 8, 16 splits while k / splits >= 256, its first supported reduction scheme)
// that check accepts, appended to algos where new. Small m leaves most SMs idle unless k is split.
void add_split_k_variants(const cublasLtMatmulAlgo_t& base, int k, const AlgoCheck& check,
                          std::vector<cublasLtMatmulAlgo_t>& algos);
// base in each tile shape it supports (CUBLASLT_ALGO_CAP_TILE_IDS), with its own cluster shape and custom
// option and with one CTA per cluster and custom option 0, where check accepts it, appended to algos where
// new: tiles of 72 .. 232 rows fill the SMs where 128 leaves a partial wave, and cuBLASLt's heuristic offers
// one configuration for outer-vector FP8 (PERF.md session 27: FP8 qkv at 448 rows 31.5 -> 19.1 us).
void add_config_variants(const cublasLtMatmulAlgo_t& base, const AlgoCheck& check,
                         std::vector<cublasLtMatmulAlgo_t>& algos);
// Every algorithm cuBLASLt has for q's operation and types (cublasLtMatmulAlgoGetIds), in each tile shape,
// stage count and cluster shape it supports, unsplit and split in 2 or 4 along k (k / splits >= 1024), that q
// accepts, appended to algos where new, until algos holds max_algos. Thousands of checks per shape: a search
// for the bench and for start-up measurements that cache their winners, not for a plan made while serving.
void add_every_algo(const AlgoQuery& q, size_t max_algos, std::vector<cublasLtMatmulAlgo_t>& algos);
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
  // `copies` back-to-back copies of the device matrix w (`bytes` each; made on stream()).
  const void* weight_copies(const void* w, size_t bytes, int copies);
  void release();  // frees the buffers (they grow again on the next use)

 private:
  cudaStream_t stream_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  void* output_ = nullptr;
  size_t output_bytes_ = 0;
  void* weights_ = nullptr;
  size_t weights_bytes_ = 0;
};

// How many copies of a weight of `bytes` a timing rotates through so that L2 cannot hold them all (twice the
// device's L2 in total, 1 to 8 copies).
int rotated_copies(size_t bytes);

// Times launch(i) on tune_stream for i in [0, count) (one warm-up, best of three runs of 4 launches) and
// returns the fastest index, or -1 when none launches. The first that launches is the reference (normally the
// heuristic's first) and keeps its place unless beaten by more than 1%. Past kFinalists + 1 candidates a
// first pass (one warm-up, 2 launches each) keeps the reference and the kFinalists fastest for that timing.
// caller_stream: its queued work finishes first when it is not recording a graph (so it does not share the
// GPU with the timed launches).
inline constexpr int kFinalists = 8;
int fastest_algo(int count, cudaStream_t caller_stream, cudaStream_t tune_stream,
                 const std::function<cublasStatus_t(int)>& launch);

}  // namespace xinfer::cuda
