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
// Loads are pipelined: each lane keeps two sets of U weight steps in flight (the next set is queued
// before the current one is multiplied). PDL (pdl.cuh): with `pdl`, the launch allows programmatic
// dependent launch: the kernel may start while the previous kernel on the stream finishes; it loads its
// first weight steps into registers, then waits for the previous kernels' results (pdl_wait) before it
// touches x, bias or y. Once its weights are read it lets the next kernel launch (pdl_release). Works under
// stream capture, and for chunked launches (each chunk waits for the one before it, which waited for its own
// predecessor).
//
// Fused variant (launch_fused_gemv, decode path, m <= 8, bf16 y): the same main loop and reduction with
//   - an RMSNorm input prologue: residual[m, k] += delta; x = bf16(rms_norm(residual) * norm_weight).
//     Every CTA reads residual and delta (L2), rounds their sum to bf16, sums its squares in exactly the
//     order of the add_rms_norm kernel (rms_norm.cu: thread t takes 16-byte chunks t, t + 256, ...; the same
//     block reduction), so x is bit-identical to add_rms_norm's output, and keeps x in shared memory
//     (m * k * 2 bytes). CTA 0 also writes x to normed_out. Since every CTA reads the old residual, the
//     updated one is written by the CTA that takes the last ticket of a counter (all others have read it
//     by then), which also sets the counter back to 0 for the next launch.
//   - optionally a SwiGLU epilogue (act != nullptr): y = [gate | up] with n = 2 * I; each CTA computes
//     rows i.. of gate and the same rows of up (rows I + i..), rounds them to bf16 as y stores them, and
//     writes act[m, I] = bf16(silu(gate) * up) with silu_mul's expression (elementwise/silu.cuh).
//   The CTAs are persistent (at most one wave; each loops over its row blocks), so the prologue runs once
//   per CTA; their first weight steps are loaded before pdl_wait and arrive during the prologue. For a
//   configuration, every output row gets the same f32 arithmetic as launch_gemv's: y is bit-identical to
//   add_rms_norm -> launch_gemv (-> silu_mul) with that configuration.
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

// The fused GEMV (see above): args.x is ignored (the prologue makes x), args.y is bf16. Buffers do not
// overlap, except that nothing here may alias residual.
struct FusedGemvArgs {
  GemmArgs gemm;                        // y[m, n] = x[m, k] @ w[n, k]^T (+ bias); m <= 8, !y_f32
  __nv_bfloat16* residual = nullptr;    // [m, k], += delta (in place)
  const __nv_bfloat16* delta = nullptr; // [m, k] or nullptr (plain rms_norm; residual is only read)
  const __nv_bfloat16* norm_weight = nullptr;  // [k]
  float eps = 0;
  __nv_bfloat16* normed_out = nullptr;  // [m, k]: x
  unsigned* counter = nullptr;          // one u32 of device memory, 0 between launches (needed with delta)
  __nv_bfloat16* act = nullptr;         // [m, n / 2] SwiGLU of y, or nullptr
  int num_sms = 0;                      // of the device (sizes the persistent grid)
};

// The largest shared-memory staging of x (m * k * 2 bytes) the fused kernel takes.
constexpr int kFusedGemvMaxSmemBytes = 96 * 1024;

// True if launch_fused_gemv takes these arguments with this configuration: 1 <= m <= 8, k % 8 == 0,
// m * k * 2 <= kFusedGemvMaxSmemBytes, bf16 y, 16-byte aligned w, residual, delta, norm_weight and
// normed_out, a counter when there is a delta; with act: n even and an even number of rows per CTA
// (8 / k_split * rows_per_warp) so that gate and up rows pair up.
bool fused_gemv_supports(const FusedGemvArgs& args, const GemvConfig& config);

// Launches the fused kernel once (XI_CHECK-fails where fused_gemv_supports is false). Nothing is allocated
// or synchronized: safe under stream capture.
void launch_fused_gemv(const FusedGemvArgs& args, const GemvConfig& config, cudaStream_t stream);

}  // namespace xinfer::cuda
