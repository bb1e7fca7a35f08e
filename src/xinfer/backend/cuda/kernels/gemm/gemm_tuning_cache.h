// The GEMM tuner's on-disk cache: one JSON file holding, per device key (GPU name, SM count, CUDA
// runtime, cuBLASLt and GEMV kernel versions: anything that changes which candidate wins or whether a
// stored cuBLASLt algorithm is valid), the choice for each (shape, tuned m):
//
//   {"format": 1,
//    "devices": {"NVIDIA H200|sm90|132 SMs|cudart 13000|cublasLt 130100|gemv 1": [
//       {"n": 4096, "k": 4096, "y_f32": false, "bias": false, "m": 1, "kind": "gemv",
//        "rows_per_warp": 1, "k_split": 2, "pdl": true, "us": 8.7, "heuristic_us": 14.5},
//       {..., "kind": "cublaslt", "algo": "<128 hex digits: cublasLtMatmulAlgo_t::data>"},
//       {..., "kind": "heuristic"},
//       {..., "kind": "gemv", ..., "heuristic_us": null},  // cuBLASLt has no algorithm for the shape
//       {..., "kind": "none", "us": 0, "heuristic_us": null}]}}  // nothing can compute it
//
// Loading never trusts the file: a missing file or device section is NOT_FOUND; anything unreadable or
// malformed is DATA_LOSS (the caller retunes). Saving merges into what is there (other devices' sections
// are kept; a corrupt file is replaced) and writes a temporary file that is renamed over the old one, so
// a reader never sees half a file.
#pragma once

#include <string>
#include <vector>

#include "xinfer/backend/cuda/kernels/gemm/gemm_choice.h"
#include "xinfer/core/status.h"

namespace xinfer::cuda {

struct GemmTuningEntry {
  GemmTuningKey key;
  GemmChoice choice;
};

Result<std::vector<GemmTuningEntry>> load_gemm_tuning_cache(const std::string& path, const std::string& device_key);

// A section as a tuner takes it (GemmTuner::tune, CudaBackend::measure_w8a8_gemms): kLoaded with its entries;
// kNew (no entries) when the file or the section does not exist yet; kUnreadable (no entries) when the file
// is unreadable or malformed, with a warning naming `what` in the log: the caller measures again, and its
// save replaces the file.
struct CachedGemmChoices {
  enum class State { kLoaded, kNew, kUnreadable };
  State state = State::kNew;
  std::vector<GemmTuningEntry> entries;
};
CachedGemmChoices read_gemm_tuning_cache(const std::string& path, const std::string& device_key,
                                         const std::string& what);

// Stores `entries` under `device_key`, replacing stored entries with the same key, keeping the others.
Status save_gemm_tuning_cache(const std::string& path, const std::string& device_key,
                              const std::vector<GemmTuningEntry>& entries);

// $XINFER_GEMM_TUNING_CACHE if set, else $XDG_CACHE_HOME/xinfer/gemm_tuning.json, else
// $HOME/.cache/xinfer/gemm_tuning.json; "" if none of these variables is set.
std::string default_gemm_tuning_cache_path();

}  // namespace xinfer::cuda
