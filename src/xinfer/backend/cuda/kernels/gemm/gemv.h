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
// shared memory. Rows past n are clamped for loads and never stored; x rows past m read as zero. With
// swiglu_out (below) a row group is rows_per_warp / 2 consecutive gate / up pairs instead, pairs past n / 2
// clamped to the last one.
// There is no cross-CTA split-K: splitting k across the warps of a CTA gives small-n shapes enough warps
// without a workspace or a second launch.
//
// Requirements (gemv_supports): m >= 1, n >= 1, k >= 8, k % 8 == 0, x and w 16-byte aligned (bias and y
// need no alignment; a chunk of 8 rows starts 16 * k bytes further into x, so chunks stay aligned). The
// kernel is instantiated for m buckets 1, 2, 4, 8 (m = 3 runs the 4-row kernel).
//
// Loads are pipelined: each lane keeps two sets of U weight steps in flight (the next set is queued
// before the current one is multiplied). PDL (pdl.cuh): with `pdl`, the launch allows programmatic
// dependent launch: the kernel may start while the previous kernel on the stream finishes; it loads its
// first weight steps into registers, then waits for the previous kernels' results (pdl_wait) before it
// touches x, bias or y. Once its weights are read it lets the next kernel launch (pdl_release). Works under
// stream capture, and for chunked launches (each chunk waits for the one before it, which waited for its own
// predecessor).
//
// Fusions (GemvFusion, one per launch, bf16 y): the decode path's residual stream around the GEMVs
// (CudaBackend::add_rms_norm_linear), with no norm kernel between them:
//   - add_to_y: y = bf16(y + bf16(x @ w^T + bias)): the projection that ends an attention or MLP block
//     adds itself into the residual (y = residual) in its epilogue, with the two roundings of linear ->
//     add_rms_norm (the residual is bit-identical to that composition's for the same configuration). Each
//     output's old value is loaded by the thread that stores it, right after pdl_wait.
//   - norm_weight: y = (rms_norm(x) * norm_weight) @ w^T + bias with x the residual: once a step's next
//     weights are queued, every lane multiplies its x chunks by the norm weight (each product rounded to
//     bf16, as the normed activations are) and the row groups take turns (every groups-th step) summing
//     their squares, so between them they cover k once: the same RMS in every CTA, applied to the f32 dot
//     products before the bias. Not bit-identical to rms_norm -> GEMV (that rounds bf16(h * (1 / RMS) *
//     g) per element, this bf16(h * g) and scales the sum), within bf16 noise of it. The tuner times these
//     configurations on their own (gemm_tuner.h normed_input); the backend fuses only where that beats add
//     + norm + the plain GEMV.
//   - swiglu_out (with norm_weight, even n, rows_per_warp 2 or 4): the gate_up projection also writes
//     silu(y[:, j]) * y[:, n / 2 + j] to swiglu_out [m, n / 2] (the silu_mul kernel's expression on the
//     same bf16 outputs: bit-identical to norm GEMV -> silu_mul). Each warp then reads pairs of rows, gate j
//     and up n / 2 + j, instead of R consecutive ones; every row's dot product is summed as without it, so
//     y is unchanged bit for bit.
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

// A fusion of the GEMV with the ops around it (see above); the default is the plain GEMV.
struct GemvFusion {
  bool add_to_y = false;                       // y = bf16(y + bf16(x @ w^T + bias))
  const __nv_bfloat16* norm_weight = nullptr;  // [k]: x is replaced by rms_norm(x) * norm_weight
  float eps = 0;                               // with norm_weight
  __nv_bfloat16* swiglu_out = nullptr;         // [m, n / 2]: silu(gate) * up of y (with norm_weight)
};

// True if the GEMV kernel handles these arguments (see the requirements above; a fusion also needs bf16 y,
// only one of add_to_y and norm_weight per launch, and a 16-byte aligned norm weight; swiglu_out needs
// norm_weight and even n, and the launch a configuration with rows_per_warp 2 or 4).
bool gemv_supports(const GemmArgs& args, const GemvFusion& fusion = {});
// The configurations worth timing for this shape (valid ones only; pdl as given; empty if unsupported).
std::vector<GemvConfig> gemv_candidates(const GemmArgs& args, bool pdl);

// An untimed configuration for shapes nobody tuned: one row per warp, k split over as many warps (up to
// 8) as have a full 256-element step of k each; no PDL.
GemvConfig gemv_default_config(const GemmArgs& args);

// Launches the kernel (ceil(m / 8) times for m > 8); XI_CHECK-fails on unsupported arguments or
// configurations. Nothing is allocated or synchronized: safe under stream capture.
void launch_gemv(const GemmArgs& args, const GemvConfig& config, cudaStream_t stream, const GemvFusion& fusion = {});

}  // namespace xinfer::cuda
