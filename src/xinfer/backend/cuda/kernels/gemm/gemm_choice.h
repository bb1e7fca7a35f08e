// What the GEMM tuner (gemm_tuner.h) chose for one linear shape at one tuned row count m, and the key it
// is filed under (in memory and in the on-disk cache, gemm_tuning_cache.h).
//   kHeuristic: cuBLASLt's heuristic first algorithm (also what an untuned shape gets)
//   kCublasLt:  another cuBLASLt algorithm (heuristic top-N or a split-K variant), stored as its bytes
//   kGemv:      the small-M GEMV kernel (gemv.h) with this configuration (m <= 8 only)
#pragma once

#include <cublasLt.h>

#include <compare>
#include <cstdint>

#include "xinfer/backend/cuda/kernels/gemm/gemv.h"

namespace xinfer::cuda {

enum class GemmKind : uint8_t { kHeuristic, kCublasLt, kGemv };

inline const char* gemm_kind_name(GemmKind k) {
  switch (k) {
    case GemmKind::kHeuristic: return "heuristic";
    case GemmKind::kCublasLt: return "cublaslt";
    case GemmKind::kGemv: return "gemv";
  }
  return "?";
}

struct GemmChoice {
  GemmKind kind = GemmKind::kHeuristic;
  cublasLtMatmulAlgo_t algo{};  // kCublasLt
  GemvConfig gemv;              // kGemv
  float us = 0;                 // measured time of this choice at the tuned m
  float heuristic_us = 0;       // measured time of the heuristic's first algorithm at the tuned m
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
