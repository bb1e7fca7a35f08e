// Small-M bf16 GEMM ("GEMV") for decode: y[m, n] = x[m, k] @ w[n, k]^T (+ bias[n]), f32 accumulation,
// y bf16 or f32. Memory-bound: one launch streams the weight matrix once for up to 8 rows of x; more rows
// run as ceil(m / 8) launches of <= 8 rows each (the weights are read once per launch: that is the
// fallback for shapes cuBLASLt has no algorithm for, not a fast path).
//
// Work split: a CTA of 256 threads (8 warps) holds 8 / k_split row groups; a row group is
// `rows_per_warp` consecutive rows of w, read by k_split warps that interleave over k in 512-byte
// (256-element) steps per warp. Each lane loads 16 bytes (8 bf16) of every row of its group per step
// (weights bypass L1: they are read exactly once) and the matching 16 bytes of each x row (from L1/L2;
// x is tiny), multiplies in f32, then warps reduce with shuffles and the k_split partial sums meet in
// shared memory. Rows past n are clamped for loads and never stored; x rows past m read as zero.
// There is no cross-CTA split-K: splitting k across the warps of a CTA gives small-n shapes enough warps
// without a workspace or a second launch.
//
// Requirements (gemv_supports): m >= 1, n >= 1, k >= 8, k % 8 == 0, x and w 16-byte aligned (bias and y
// need no alignment; a chunk of 8 rows starts 16 * k bytes further into x, so chunks stay aligned). The
// kernel is instantiated for m buckets 1, 2, 4, 8 (m = 3 runs the 4-row kernel).
//
// PDL (pdl.cuh): with `pdl`, the launch allows programmatic dependent launch: the kernel may start while
// the previous kernel on the stream finishes; it prefetches its first weights into L2, then waits for
// the previous kernels' results (pdl_wait) before it touches x, bias or y. Once its weights are read it
// lets the next kernel launch (pdl_release). Works under stream capture, and for chunked launches (each
// chunk waits for the one before it, which waited for its own predecessor).
#pragma once

#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "xinfer/backend/cuda/kernels/gemm/gemm_args.h"

namespace xinfer::cuda {

struct GemvConfig {
  int rows_per_warp = 1;  // 1, 2 or 4
  int k_split = 1;        // warps per row group: 1, 2, 4 or 8
  bool pdl = false;       // programmatic dependent launch
  bool operator==(const GemvConfig&) const = default;
};

std::string to_string(const GemvConfig& c);  // "gemv r1 ks2 pdl"

// True if the GEMV kernel handles these arguments (see the requirements above).
bool gemv_supports(const GemmArgs& args);

// The configurations worth timing for this shape (valid ones only; pdl as given; empty if unsupported).
std::vector<GemvConfig> gemv_candidates(const GemmArgs& args, bool pdl);

// An untimed configuration for shapes nobody tuned: one row per warp, k split over as many warps (up to
// 8) as have a full 256-element step of k each; no PDL.
GemvConfig gemv_default_config(const GemmArgs& args);

// Launches the kernel (ceil(m / 8) times for m > 8); XI_CHECK-fails on unsupported arguments or
// configurations. Nothing is allocated or synchronized: safe under stream capture.
void launch_gemv(const GemmArgs& args, const GemvConfig& config, cudaStream_t stream);

}  // namespace xinfer::cuda
