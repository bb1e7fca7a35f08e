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
// How: a CTA owns 128, 64 or 32 weight rows (wq_gemm_tile_rows: the widest whose grid still gives every SM a
// CTA: at m <= 64 the 4096-row linears of an 8B model would otherwise run 32 CTAs) x 64 rows of x and walks k
// in steps of 64. A 3-stage cp.async ring brings the step's raw weight bytes and x tile into shared memory;
// the CTA dequantizes the weight tile into a bf16 tile (each weight s * (q - z) rounded to bf16 once:
// launch_dequantize_weight's values, so the results are the dequantize + GEMM path's up to summation order),
// then 8 warps (32 weight rows each, the CTA's 64 rows of x split among the warps that share them) run
// mma.sync m16n8k16 on ldmatrix fragments of both tiles. Rows past n and m are zero-filled and not stored.
//
// Requirements (wq_gemm_supports): bits 4 or 8, no g_idx, k % 64 == 0, group % 32 == 0 (int8 per channel: one
// group of k; int8 also groups of a multiple of 16, GGUF Q6_K's 16: a thread's run of 32 columns may take two
// scales),
// int4 zero points or mins (W = scale * q + min: GGUF Q4_1 / Q4_K repacked), not both, x 16-byte aligned (the
// caller checks the pointer). No allocation, no synchronization: graph-capturable.
#pragma once

#include <cuda_runtime.h>

#include "xinfer/backend/cuda/kernels/gemm/quant_linear.h"

namespace xinfer::cuda {

bool wq_gemm_supports(const QuantWeight& w);
// The weight rows per CTA launch_wq_gemm takes for m rows of x and n weight rows on a device of `sms` SMs.
int wq_gemm_tile_rows(int m, int n, int sms);
// XI_CHECK-fails on an unsupported weight or m < 1. tile_rows: 128, 64 or 32 weight rows per CTA, or 0: by
// wq_gemm_tile_rows (tests pin each).
void launch_wq_gemm(const QuantLinearArgs& a, cudaStream_t stream, int tile_rows = 0);

}  // namespace xinfer::cuda
