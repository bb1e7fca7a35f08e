// The batch-1 W8A8-FP8 decode GEMV that streams its weights (y[1, n] = x[1, k] @ W[n, k]^T, e4m3 x and W):
// one CTA of 16 warps per SM, each owning a contiguous band of rows, which it copies through a ring of
// shared-memory stages of ~32 KB, each filled by one bulk copy (cp.async.bulk; an mbarrier counts its bytes in).
//
// Why (docs/PERF.md sessions 15, 19, 21): at batch 1 a decode layer is a chain of GEMVs and light kernels
// (norm, RoPE, attention, SwiGLU), and each GEMV lost 2-4 us at its start: its CTAs could not become resident
// while the kernel before it held the SMs, so no weight bytes moved across the boundary. Here a CTA takes
// ~100 KB of shared memory and half an SM's registers, so under programmatic dependent launch (PDL,
// pdl.cuh) it is resident beside the previous GEMV's CTA, and it queues its ring of weights (~96 KB per
// SM, ~12 MB over 132 SMs) before it waits for the kernels before it: the next linear's weights stream while
// the previous one drains and the light kernels between them run. It releases its own dependents only after
// that wait, so at most two GEMVs hold an SM at once.
//
// Work of one CTA: rows [n * c / G, n * (c + 1) / G) (G = CTAs), in stages of whole rows (a contiguous span of
// the row-major weight). A thread owns fixed 16-byte column units of every row it reads (unit c: columns 16c
// .. 16c + 15), so its x pairs live in registers for the whole kernel: at k <= 8192 the 512 threads form
// 512 / (k / 16) row lanes of k / 16 threads each, one unit per row; past that one lane of 512 threads, units
// t, t + 512, .. . Per unit: 16 weights converted exactly to f16 pairs (8 cvt), 8 HFMA2 against the x pairs
// (e4m3 x 2^-8, exact: quant_dot_gemv.h's FP8 chunk arithmetic, in two f16 sums of 8 columns), then f32; per
// stage each row's f32 partials are reduced across its lane's warps (shuffles, then shared memory in warp order,
// one barrier per stage, which also frees the slot): y = sum * 256 * x_scale * w_scale (+ bias), as the dot
// GEMV. Deterministic (fixed orders).
//
// x: e4m3 codes with their scale (the norm or the SwiGLU quantized them), or bf16, quantized by every CTA
// with quantize_activations.h's arithmetic (activation_quant.cuh: the same codes and scale to the bit).
//
// Requirements (fp8_stream_gemv_supports): m == 1, k % 16 == 0, k <= 32768, and k % 512 == 0 where k <= 8192
// (each row lane whole warps); x, w 16-byte aligned. No allocation, no synchronization: graph-capturable.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace xinfer::cuda {

struct Fp8StreamGemvArgs {
  const __nv_bfloat16* x = nullptr;    // [1, k] bf16, quantized in every CTA; or nullptr, then xq / xs
  const float* input_scale = nullptr;  // x's static per-tensor scale [1], or nullptr (dynamic: max |x| / 448)
  const uint8_t* xq = nullptr;         // [1, k] e4m3 codes
  const float* xs = nullptr;           // [1] their scale
  const uint8_t* w = nullptr;          // [n, k] e4m3
  const float* w_scales = nullptr;     // [n] (per_channel) or [1]
  bool per_channel = true;
  const __nv_bfloat16* bias = nullptr;  // [n] or nullptr
  void* y = nullptr;                    // [1, n], bf16 or f32 (y_f32)
  bool y_f32 = false;
  int n = 0, k = 0;
};

bool fp8_stream_gemv_supports(int n, int k, int m);
// XI_CHECK-fails on what fp8_stream_gemv_supports rejects and on misaligned x / w. pdl: launched with
// programmatic stream serialization (pdl.cuh), as the backend's decode chain runs it.
void launch_fp8_stream_gemv(const Fp8StreamGemvArgs& a, cudaStream_t stream, bool pdl);

}  // namespace xinfer::cuda
