// Decode graph buckets: the row counts a decode-only step is padded to for a CUDA graph
// (engine/model_runner.h), and the rows at which the W8A8 GEMMs time their algorithm variants at start-up
// (backend/cuda/kernels/gemm/cublaslt_algo_choice.h variant_rows). Powers of two up to 128 (small
// steps stream the weights: extra rows cost little), then multiples of 64 up to kMaxDecodeGraphRows: past 128
// rows the GEMMs, the lm_head and the sampling grow with the rows, and doubling ran a step of 260 sequences
// on 512 rows. (On the four benchmark rows, whose decode steps sit below 256 rows, near 411 or past 512, the
// change measured within noise: docs/PERF.md session 22.) GEMM tiles of 128 rows make a finer step pay little
// more. Up to 1024 rows since session 27 (the offline default of 1024 sequences): steps of 513-1024 rows
// replay a graph with measured GEMM choices instead of running eagerly (host launch 2.3 -> 0.8 ms per step at
// ~860 rows). Device-agnostic: the CPU backend has no graphs, but the engine's padding rule is the same.
#pragma once

namespace xinfer::backend {

inline constexpr int kMaxDecodeGraphRows = 1024;
inline constexpr int kDecodeGraphRowStep = 64;  // bucket step past 128 rows

// The smallest bucket holding `rows` decode rows, or 0 when rows < 1 or rows > kMaxDecodeGraphRows.
constexpr int decode_graph_bucket(int rows) {
  if (rows < 1 || rows > kMaxDecodeGraphRows) return 0;
  if (rows > 128) return (rows + kDecodeGraphRowStep - 1) / kDecodeGraphRowStep * kDecodeGraphRowStep;
  int b = 1;
  while (b < rows) b *= 2;
  return b;
}

}  // namespace xinfer::backend
