// The tiled tensor-core GEMM for weight-only int4 / int8 linears at batch sizes past the GEMV's (m > 16):
// y[m, n] = x[m, k] @ W[n, k]^T (+ bias[n]), W in quant_linear.h's layout (QuantWeight), bf16 x, f32
// accumulation, y bf16 or f32.
//
// Why: past kQuantGemvMaxRows rows, linear() dequantized the whole weight into a bf16 workspace and ran the
// bf16 GEMM on it: 0.5 (int4) byte read + 2 written + 2 read again per weight, more than a bf16 model's 2
// bytes, so a W4A16 model decoding 64 sequences ran slower than the same model in bf16. This kernel reads
// each quantized weight once per 64 rows of x (and the weight tile of the other 64-row tiles of x from L2:
// consecutive CTAs share it).
//
// How (Marlin's shape of the problem, not its code): a CTA of 8 warps (two per SM: 128 registers a thread,
// ~68 KB of shared memory) owns kWqGemmTileN (128) weight rows (16 per warp) x kWqGemmTileM (64) rows of x
// over a range of k. It holds x's columns in shared memory 512 at a time (loaded once by cp.async), so x is
// read from L2 once per 128 weight rows rather than once per step of every small tile (the earlier kernel's
// limit: all CTAs re-reading the same few x lines); the weights go straight from global memory into
// registers, each lane loading 16 bytes of each of its 2 rows a step ahead of its use (no shared memory, no
// barrier within a chunk of x), and become the A fragments of mma.sync m16n8k16 (bf16, f32 sums) in
// registers, x's B fragments read with 128-bit shared loads in the k order the lane's weights came in (an
// mma's k order is free as long as A and B agree). Numerics (wq_gemm_scaled_sums):
//   - a step (128 int4 / 64 int8 columns) within one group and no mins (int4 groups of 128, int8 per channel
//   or
//     groups of 64): the weights enter the mma as exact integers q - z (int4: PRMT + mask under the bf16
//     exponent of 128, one bf16 subtract) and each step's f32 sums are scaled per row in f32: the oracle's
//     arithmetic up to summation order, as the decode GEMVs at m <= 16;
//   - otherwise (groups of 32 / 64, mins, int8 groups of 16 / 48): each weight s * (q - z) + min rounded to
//   bf16
//     once, launch_dequantize_weight's value, so the dequantize + GEMM path's results up to summation order.
//
// Weights with scaled sums (int4 groups of a multiple of 128: the GPTQ / AWQ / compressed-tensors formats;
// int8 per channel or groups of 64) can run a second kernel on warpgroup MMAs (WqGemmKernel::kWgmma;
// wq_gemm.cu): the same tile and numerics, the weights through a cp.async ring in shared memory instead of
// registers, x in wgmma's swizzled layout, a wgmma m64nNk16 per k16 slice with the A fragments (exact q - z)
// from registers. kAuto takes it for int4 only (wq_gemm_kernel_for: measured faster for int4, slower for
// int8; docs/PERF.md session 40).
//
// Split k: where the (m, n) tiles alone would fill less than half the CTA slots (two per SM; the 4096-row
// linears of an 8B model: 32 tiles at 64 rows of x), wq_gemm_split_cols cuts k into ranges (grid z) of 1024
// or 2048 columns, the longer where they fill 90% of the slots (shorter ranges cost more than the CTAs they
// add); each range stores its f32 sums in its own slice of the tile
// (WqGemmWorkspace), and the last CTA to arrive (a counter per tile) adds the slices in range order
// (deterministic: the same bits whatever the arrival order), adds the bias, writes y and zeroes the counter
// again. Without a workspace it runs one range per tile.
//
// Requirements (wq_gemm_supports): bits 4 or 8, no g_idx, k % 64 == 0, group % 32 == 0 (int8 also groups of a
// multiple of 16, GGUF Q6_K's 16), int4 zero points or mins (W = scale * q + min: GGUF Q4_1 / Q4_K
// repacked), not both, x 16-byte aligned. No allocation, no synchronization: graph-capturable.
#pragma once

#include <cuda_runtime.h>

#include "xinfer/backend/cuda/kernels/gemm/quant_linear.h"

namespace xinfer::cuda {

inline constexpr int kWqGemmTileM = 64;             // rows of x per CTA
inline constexpr int kWqGemmTileN = 128;            // weight rows per CTA
inline constexpr int kWqGemmMaxSplitSlices = 1024;  // (tile, k range) pairs a split-k launch may have

// The f32 sums and arrival counters of split-k launches: kWqGemmMaxSplitSlices slices of kWqGemmTileM x
// kWqGemmTileN floats (32 MB) and as many counters, the counters zero when allocated (the kernel leaves them
// so). One launch at a time may use it (a stream's order).
struct WqGemmWorkspace {
  float* partial = nullptr;
  unsigned* counters = nullptr;
  static constexpr size_t partial_bytes() {
    return static_cast<size_t>(kWqGemmMaxSplitSlices) * kWqGemmTileM * kWqGemmTileN * sizeof(float);
  }
  static constexpr size_t counter_bytes() { return kWqGemmMaxSplitSlices * sizeof(unsigned); }
};

// Which kernel runs the tiles: the mma.sync one (every supported weight) or the warpgroup-MMA one (scaled
// sums: wq_gemm_wgmma_supports). kAuto: wgmma for int4 weights it applies to; the environment's
// XINFER_WQ_WGMMA=0 keeps mma.sync everywhere, =1 takes wgmma for int8 too.
enum class WqGemmKernel { kAuto, kMma, kWgmma };

bool wq_gemm_supports(const QuantWeight& w);
bool wq_gemm_wgmma_supports(const QuantWeight& w);
// Whether the GEMM keeps the weights as exact integers q - z and scales each group's f32 sums (see above).
bool wq_gemm_scaled_sums(const QuantWeight& w);
// The kernel kAuto runs for w.
WqGemmKernel wq_gemm_kernel_for(const QuantWeight& w);
// The columns of each k range launch_wq_gemm runs for m rows of x on a device of `sms` SMs (k: one range)
// with `kernel` (kMma or kWgmma: their CTAs per SM differ).
int wq_gemm_split_cols(int m, int n, int k, int sms, WqGemmKernel kernel = WqGemmKernel::kMma);
// XI_CHECK-fails on an unsupported weight (or kWgmma where it does not apply) or m < 1. split_cols: 0 picks
// wq_gemm_split_cols (one range without a workspace), else a multiple of 128 columns (tests pin it); more
// than one range needs `ws`.
void launch_wq_gemm(const QuantLinearArgs& a, const WqGemmWorkspace& ws, cudaStream_t stream,
                    int split_cols = 0, WqGemmKernel kernel = WqGemmKernel::kAuto);

}  // namespace xinfer::cuda
