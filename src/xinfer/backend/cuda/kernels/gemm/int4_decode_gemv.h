// The int4 decode GEMV for 1..16 rows of x: y[m, n] = x[m, k] @ W[n, k]^T (+ bias), W int4 per group in
// the CPU layout of quant_linear.h (no repack), bf16 x, f32 accumulation, y bf16 or f32. Tensor cores do the
// multiply-adds so that the instruction stream per weight stays short: the H200 streams ~34 int4 weights per
// SM-clock at its copy bandwidth against 128 issue slots, and the mma GEMV (quant_gemv.cu) and the CUDA-core
// GEMV (quant_dot_gemv.cu) issue ~3.7 and ~4.0 instructions per weight (Nsight Compute, gate_up 28672 x 4096,
// session 23), so both stall at 45-65% of the bandwidth with only 25% occupancy (their registers). This one
// issues ~2.3 (8.6 M instructions for that shape, 36% of the issue slots) and reads gate_up at 77% of the
// copy bandwidth (docs/PERF.md session 23).
//
// Kernel (int4_decode_gemv.cu): a CTA of 4 or 8 warps owns 16 weight rows; warp w takes the 128-column steps
// w, w + warps, ... (the CTA's warps read 64-byte pieces side by side of every row), 4 steps' weights in
// flight per batch (and the next batch too with Int4GemvSchedule::prefetch), the first batch requested before
// pdl_wait(). Lane (g = lane / 4, t = lane % 4) loads 16 bytes of rows g and g + 8 at column 32 t of the step
// and the step's group scale, the 8 words' nibbles masked under the f16 exponent 0x6400 (1024 + q and 1024 +
// 16 q exactly: four LOP3 and one shift per 8 weights) and the magic and zero point taken off by one f16x2
// subtract / FMA per pair (exact), then mma.sync m16n8k16 (f16, f32 sums) against x. x is converted once per
// CTA: after pdl_wait() the CTA stores x in shared memory as f16 (exact in f16's normal range; saturating
// past 65504), re-paired to match the nibble masks ((x0, x4), (x1, x5), ...) and laid out so a warp's four
// column offsets hit distinct banks (2 k bytes). Every B column is x (all 8 token columns alike), so every
// lane's C fragment holds its two rows' sums. Each step's f32 sums are scaled by the group's scale (the
// oracle's arithmetic up to summation order). At the end the warps' partial sums meet in shared memory; bias;
// store.
//
// Groups of 32 and 64 (GPTQ g32 / g64, GGUF's Q4 blocks repacked): an mma's 16 columns come from the 4 lanes
// t, whose 32-column pieces lie in different groups, so a step's sums cannot take one scale. There the scale
// goes into the weights instead, as the mma GEMV folds them: bf16 (q - z) exactly (magic 0x4300), times the
// bf16 scale (one rounding, as a bf16 checkpoint has), x stays bf16 in shared memory, and the mma's f32 sums
// run over all steps: the mma GEMV's products, so m = 1 and m >= 2 differ by summation order only.
//
// Rows 2..16 (decode steps of a few sequences; the mma GEMV reads the weight once per 8 rows): the B
// operand's 8 columns are x's tokens (one tile of 8 for m <= 8, two for m <= 16, each mma issued per tile on
// the same weight fragments), so the weight is read once for all rows. x stays bf16 and is read from global
// memory by the lane that needs it (token g, its 32 columns of the step; the CTAs of an SM share it through
// L1, where staging it per CTA would read up to 2 x 14336 x 16 bytes from L2 for each 16 rows of weights),
// and the nibbles become bf16 q - z exactly (magic 0x4300, as the folded path; three more shifts per word
// than the f16 form); per group the f32 sums are scaled as at m = 1. The weight bytes per row of x fall by m,
// so these rows are bound by the weight stream as m = 1 is.
//
// Mins (GGUF Q4_1 repacked, QuantWeight::mins, groups of 32 / 64 only): weights f16 scale * q + min, one f16
// FMA on the block's f16 scale and min (exact in f16: one rounding to 11 bits, where the bf16 forms keep 8),
// f16 x, the sums over all steps in the mma's f32.
//
// Requirements (int4_decode_gemv_supports): int4, k % 32 == 0, a power-of-two group of 32 or more, or one
// group over all of k, no g_idx, x 16-byte aligned, k <= 65536 (x's 2 k bytes of shared memory). Numerics of
// the unfolded path (groups of 128 and more) it does not share with the other GEMVs: zero points are exact up
// to 64 (-(64 + z) is built as f16 bits 0xD400 + 16 z; int4 checkpoints hold 0..15, GPTQ v1's 16 included),
// and x goes through f16 (|x| past 65504 saturates, below 6.1e-5 it keeps f16's subnormal steps), so an
// outlier activation can part m = 1 from m >= 2 (bf16 x).
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "xinfer/backend/cuda/kernels/gemm/quant_linear.h"

namespace xinfer::cuda {

bool int4_decode_gemv_supports(const QuantWeight& w);

inline constexpr int kInt4DecodeGemvMaxRows = 16;  // rows of x one launch takes

// The compiled schedules: 4 or 8 warps per CTA; prefetch (m = 1 only): a warp requests its next batch of
// steps before it computes the current one (twice the weight registers), else after; direct_x: at m = 1 too,
// x read by each lane from global memory as the rows 2..16 read it (no staging in shared memory before the
// first mma; more instructions per step), always so past m = 1.
struct Int4GemvSchedule {
  int warps = 8;
  bool prefetch = false;
  bool direct_x = false;
};
std::string to_string(const Int4GemvSchedule& s);
Int4GemvSchedule int4_decode_gemv_default_schedule(const QuantWeight& w, int m);

// 1 <= a.m <= kInt4DecodeGemvMaxRows, x [m, k] contiguous. pdl: programmatic dependent launch (pdl.cuh).
void launch_int4_decode_gemv(const QuantLinearArgs& a, cudaStream_t stream, bool pdl,
                             const Int4GemvSchedule& s);

}  // namespace xinfer::cuda
