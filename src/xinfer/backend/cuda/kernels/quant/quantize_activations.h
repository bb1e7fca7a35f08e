// Activation quantization for the W8A8 linears: each row of x (bf16) to e4m3 with its f32 scale,
//   dynamic per token:  s_t = max_i |x[t, i]| / 448, q[t, i] = e4m3_satfinite(x[t, i] * (1 / s_t))
//   static per tensor:  s_t = *input_scale for every row (the checkpoint's), the same rounding;
// a row with s_t == 0 gets q = 0 (and s_t = 0). Exactly the CPU oracle's arithmetic
// (quant/quantized_linear.cpp fake_quantize_activations: the same f32 reciprocal, product and
// round-to-nearest-even), so the quantized activations are bit-identical to the CPU's.
// One CTA of 256 threads per row; no allocation, graph-capturable.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace xinfer::cuda {

// x: [m, k] bf16   q: [m, k] e4m3   scales: [m] f32   input_scale: [1] f32 device pointer or nullptr (dynamic)
void launch_quantize_fp8_rows(const __nv_bfloat16* x, int m, int k, const float* input_scale, uint8_t* q,
                              float* scales, cudaStream_t stream);
// out[i] = *value for i < n (a per-tensor weight scale as the per-channel vector cuBLASLt's outer-vector
// scaling takes). value: [1] f32 device pointer   out: [n] f32
void launch_broadcast_scale(const float* value, int n, float* out, cudaStream_t stream);

}  // namespace xinfer::cuda
