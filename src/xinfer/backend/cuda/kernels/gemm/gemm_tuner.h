// GemmTuner: runs every bf16 linear with the implementation measured fastest on this GPU for its shape
// and row count, and does the measuring.
//
// tune(shapes) times, for each shape (n, k, output dtype, bias) and each tuned m (powers of two below
// max_m, then max_m: tuned_ms()), the candidates: cuBLASLt's heuristic top-N algorithms plus split-K
// variants (cublaslt_gemm.h) and, for m <= 8, every GEMV configuration (gemv.h). Timing uses CUDA
// events on scratch buffers (random values; the weights rotate among copies that together exceed L2 so
// the timing reads HBM as the model does): one warm-up, then the median of 3 runs of a few launches.
// The fastest wins; the heuristic keeps its place unless beaten by more than 1%. Where cuBLASLt has no
// algorithm at all (it has none for some tiny shapes, e.g. n = 1 with a bias and f32 output) that is a
// valid outcome: the heuristic time is absent and the GEMV configurations compete alone, at any m (in
// chunks of 8 rows); if the GEMV kernel cannot take the shape either (k % 8 != 0) the point is kNone and
// tune() logs a warning naming the shape. Choices are cached on disk (gemm_tuning_cache.h), so a second
// start only re-validates them (cublasLtMatmulAlgoCheck; a stored heuristic/none outcome must still hold),
// and in memory for the process (a second engine in one process computes every linear exactly as the
// first did, even without a cache file).
//
// Shapes with normed_input (gemm_args.h) get a second table at their tuned m <= 8: every GEMV configuration
// with the RMSNorm's scale folded in (gemv.h GemvFusion::norm_weight) timed against what it replaces,
// the add + RMSNorm kernel (rms_norm.h) plus the plain point's chosen time. normed_gemv_for() gives the
// fused configuration only where it measured faster. These points are cheap (GEMV launches only): they are
// measured at every tune() (shared within the process like the others), not stored in the cache file.
//
// run(args) maps m to the smallest tuned m >= m of its shape (the largest when m is past all of them):
//   that choice is cuBLASLt  -> the algorithm, if cublasLtMatmulAlgoCheck accepts it for this m,
//                               else the heuristic's first algorithm;
//   GEMV tuned at m <= 8     -> the GEMV kernel if m <= 8, else the heuristic;
//   GEMV tuned past 8 rows   -> the GEMV kernel (chosen there because cuBLASLt had nothing);
//   nothing tuned            -> the heuristic's first algorithm (the behaviour before tuning).
// Whenever that ends at the heuristic but cuBLASLt has no algorithm for this exact m, the GEMV kernel
// runs instead (the bucket's configuration if it was a GEMV, else gemv_default_config); a GEMV whose
// arguments it cannot take (alignment is checked per call) falls back to the heuristic. If neither
// exists, run() XI_CHECK-fails naming the shape (kNone). The resolution is cached per exact
// (m, n, k, dtype, bias), so after a shape's first call run() is a map lookup plus one launch (or
// ceil(m / 8) GEMV launches): safe while a CUDA graph is being recorded. tune() itself synchronizes,
// allocates and measures: call it before any recording (it checks).
#pragma once

#include <cuda_runtime.h>

#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "xinfer/backend/cuda/kernels/gemm/cublaslt_gemm.h"
#include "xinfer/backend/cuda/kernels/gemm/gemm_args.h"
#include "xinfer/backend/cuda/kernels/gemm/gemm_choice.h"

namespace xinfer::cuda {

struct GemmTunerOptions {
  bool show_progress = true;
  std::string cache_path;        // "": no cache file (CudaBackend passes default_gemm_tuning_cache_path())
  int cublaslt_candidates = 16;  // heuristic results requested per point
  bool gemv = true;              // time the GEMV kernel for m <= 8
  bool gemv_pdl = true;          // GEMV with programmatic dependent launch (needs driver >= 12.3)
  bool reuse_process_choices = true;  // take choices another tuner of this process measured
};

// The GEMV with the RMSNorm's scale folded in, for a normed_input shape at one tuned m <= 8: the fastest
// configuration, its time, and the time of the composition it replaces (add + RMSNorm, then the plain choice).
struct NormedGemvChoice {
  GemvConfig gemv;
  float us = 0;
  float composed_us = 0;
  bool faster() const { return us < composed_us; }
};

struct GemmTuneSummary {
  int points = 0;  // (shape, m) points asked for
  int cached = 0;  // of which taken from the cache file
  int tuned = 0;   // of which measured now
  int gemv = 0, cublaslt = 0, heuristic = 0, none = 0;  // choices by kind, over all points
  int no_cublaslt = 0;  // points where cuBLASLt has no algorithm (heuristic time absent)
  int normed = 0, normed_faster = 0;  // normed_input points (m <= 8), and where the fused GEMV was faster
  double seconds = 0;
  // Summed over the shapes at m = 1 that cuBLASLt has an algorithm for: chosen vs heuristic.
  double m1_us = 0, m1_heuristic_us = 0;
  std::string cache;                      // the cache file and what happened to it
  std::string to_string() const;          // the one-line log summary
};

class GemmTuner {
 public:
  explicit GemmTuner(size_t cublaslt_workspace_bytes = 32u << 20);

  void run(const GemmArgs& args, cudaStream_t stream);
  // Measures (or takes from the cache) every point of `shapes` not tuned yet. Synchronizes `stream`.
  GemmTuneSummary tune(const std::vector<GemmShape>& shapes, const GemmTunerOptions& options, cudaStream_t stream);
  // The implementation run(args) uses, resolved for args' exact m (kind kHeuristic when untuned and
  // cuBLASLt has an algorithm; kNone when nothing can compute args).
  GemmChoice choice_for(const GemmArgs& args);
  // For a normed_input shape at m <= 8: the GEMV configuration with the norm folded in (norm_weight), if
  // it measured faster than the composition at the bucket m (the smallest tuned m >=
  // m), else nullopt (also when the shape was not tuned as normed_input).
  std::optional<GemvConfig> normed_gemv_for(const GemmArgs& args) const;
  // Forgets every choice (run() falls back to the heuristic until the next tune()).
  void clear();

  // Powers of two below max_m, then max_m.
  static std::vector<int> tuned_ms(int max_m);
  // GPU name, SM count, CUDA runtime, cuBLASLt and GEMV kernel versions (the cache file's section key).
  const std::string& device_key() const { return device_key_; }
  const std::map<GemmTuningKey, GemmChoice>& table() const { return table_; }
  const std::map<GemmTuningKey, NormedGemvChoice>& normed_table() const { return normed_; }
  CublasLtGemm& cublaslt() { return cublaslt_; }

 private:
  struct Scratch;
  GemmChoice measure(const GemmShape& shape, int m, Scratch& scratch, const GemmTunerOptions& options,
                     cudaStream_t stream);
  NormedGemvChoice measure_normed(const GemmShape& shape, int m, Scratch& scratch, const GemmTunerOptions& options,
                                  cudaStream_t stream);
  void tune_normed(const std::vector<GemmShape>& shapes, const GemmTunerOptions& options, cudaStream_t stream,
                   GemmTuneSummary* sum);
  bool valid(const GemmTuningKey& key, const GemmChoice& choice);
  GemmChoice resolve(const GemmArgs& args);

  CublasLtGemm cublaslt_;
  std::string device_key_;
  bool pdl_supported_ = false;
  std::map<GemmTuningKey, GemmChoice> table_;  // by (n, k, y_f32, bias, tuned m)
  std::map<GemmTuningKey, GemmChoice> resolved_;  // by (n, k, y_f32, bias, exact m): what run() uses
  std::map<GemmTuningKey, NormedGemvChoice> normed_;  // by (n, k, y_f32, bias, tuned m <= 8)
};

}  // namespace xinfer::cuda
