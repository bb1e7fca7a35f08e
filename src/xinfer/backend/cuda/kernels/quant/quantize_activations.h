// Activation quantization for the W8A8 linears: each row of x (bf16) to e4m3 or int8 with its f32 scale,
//   fp8  dynamic per token:  s_t = max_i |x[t, i]| / 448, q[t, i] = e4m3_satfinite(x[t, i] * (1 / s_t))
//   int8 dynamic per token:  s_t = max_i |x[t, i]| / 127, q[t, i] = clamp(rne(x[t, i] * (1 / s_t)), -127,
//   127) static per tensor:       s_t = *input_scale for every row (the checkpoint's), the same rounding
//                            (int8: values past 127 s clamp);
// a row with s_t == 0 gets q = 0 (and s_t = 0). Exactly the CPU oracle's arithmetic
// (quant/quantized_linear.cpp fake_quantize_activations, quant/int_matmul.cpp run_w8a8_int8: the same f32
// division, reciprocal, product and round-to-nearest-even), so the quantized activations are bit-identical
// to the CPU's (no fast-math: 1 / s is the IEEE division).
// One CTA of 256 threads per row (16-byte vectors and the row in registers where k % 8 == 0 and k <= 16384);
// no allocation, graph-capturable.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace xinfer::cuda {

// x: [m, k] bf16   q: [m, k] e4m3   scales: [m] f32   input_scale: [1] f32 device pointer or nullptr (dynamic)
void launch_quantize_fp8_rows(const __nv_bfloat16* x, int m, int k, const float* input_scale, uint8_t* q,
                              float* scales, cudaStream_t stream);
// x: [m, k] bf16   q: [m, k] i8 (SmoothQuant's symmetric codes, -127..127)   scales: [m] f32
// input_scale: [1] f32 device pointer or nullptr (dynamic)
void launch_quantize_int8_rows(const __nv_bfloat16* x, int m, int k, const float* input_scale, int8_t* q,
                               float* scales, cudaStream_t stream);
// out[i] = *value for i < n (a per-tensor weight scale as the per-channel vector cuBLASLt's outer-vector
// scaling takes). value: [1] f32 device pointer   out: [n] f32
void launch_broadcast_scale(const float* value, int n, float* out, cudaStream_t stream);

}  // namespace xinfer::cuda
