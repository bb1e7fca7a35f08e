// What the GEMM tuner (gemm_tuner.h) chose for one linear shape at one tuned row count m, and the key it
// is filed under (in memory and in the on-disk cache, gemm_tuning_cache.h).
//   kHeuristic: cuBLASLt's heuristic first algorithm (also what an untuned shape gets)
//   kCublasLt:  another cuBLASLt algorithm (heuristic top-N or a split-K variant), stored as its bytes
//   kGemv:      the GEMV kernel (gemv.h) with this configuration: timed against cuBLASLt for m <= 8, and
//               the only candidate at any m where cuBLASLt has no algorithm (then in chunks of 8 rows)
//   kNone:      nothing can compute the shape (no cuBLASLt algorithm, and the GEMV kernel needs
//               k % 8 == 0): running it fails with a message naming the shape
#pragma once

#include <cublasLt.h>

#include <compare>
#include <cstdint>
#include <optional>

#include "xinfer/backend/cuda/kernels/gemm/gemv.h"

namespace xinfer::cuda {

enum class GemmKind : uint8_t { kHeuristic, kCublasLt, kGemv, kNone };

inline const char* gemm_kind_name(GemmKind k) {
  switch (k) {
    case GemmKind::kHeuristic: return "heuristic";
    case GemmKind::kCublasLt: return "cublaslt";
    case GemmKind::kGemv: return "gemv";
    case GemmKind::kNone: return "none";
  }
  return "?";
}

struct GemmChoice {
  GemmKind kind = GemmKind::kHeuristic;
  cublasLtMatmulAlgo_t algo{};  // kCublasLt
  GemvConfig gemv;              // kGemv
  float us = 0;                 // measured time of this choice at the tuned m (0 for kNone)
  // Measured time of cuBLASLt's heuristic first algorithm at the tuned m; absent when cuBLASLt has no
  // algorithm for the shape (or refused to launch it).
  std::optional<float> heuristic_us;
};

// A linear shape at one tuned m.
struct GemmTuningKey {
  int n = 0, k = 0;
  bool y_f32 = false;
  bool bias = false;
  int m = 0;
  auto operator<=>(const GemmTuningKey&) const = default;
};

}  // namespace xinfer::cuda
