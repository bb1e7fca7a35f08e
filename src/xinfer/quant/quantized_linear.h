// CPU kernels for linears in every WeightFormat, and the float reference they are tested against.
//
//   quantized_matmul:  y[t, n] = sum_k x[t, k] * W[n, k] for t < rows (no bias)
//   x: [rows, K] f32   y: [rows, N] f32   W: [N, K] in w.format (layouts in weight_format.h)
//
// How activations are treated, per format (this is the kernels' only deviation from the float reference):
//   dense, int8-channel, int-group:  x used in f32 (weights dequantized in registers)
//   w8a8-int8:  x[t] quantized to int8 with scale max|x_t|/127 (dynamic) or *input_scale (static, clamped)
//   w8a8-fp8:   x[t] quantized to e4m3 with scale max|x_t|/448 (dynamic) or *input_scale (static)
//   gguf:       x[t] quantized to 8-bit blocks of 32 (scale max|x|/127 per block, plus the block's sum
//               for the min terms of Q4_1/Q5_1), then integer dot products per block, as llama.cpp does.
//               Q8_0/Q4_0/Q4_1 have dedicated kernels (a GEMV, and from 8 rows a register-tiled GEMM);
//               other GGUF types dequantize a row at a time.
// Each kernel has a portable path and an AVX2+FMA path (compiled with target attributes and chosen at run
// time, so the binary runs on any x86-64). XINFER_QUANT_PORTABLE=1 in the environment, or
// set_force_portable(true), forces the portable paths. Work is split over output rows on `pool` if given;
// all rows of x are processed together for each weight block, so the weight bytes are read once per call.
#pragma once

#include <cstdint>

#include "xinfer/core/thread_pool.h"
#include "xinfer/quant/weight_format.h"

namespace xinfer::quant {

struct QuantizedMatrix {  // a linear's weights in one format; pointers into host memory (not owned)
  WeightFormat format;
  int64_t n = 0, k = 0;
  const void* weight = nullptr;        // layout of the format (weight_format.h)
  const float* scales = nullptr;       // or nullptr
  const uint8_t* zeros = nullptr;      // or nullptr
  const float* mins = nullptr;         // IntGroupFormat::min_offset: [n, G], else nullptr
  const int32_t* g_idx = nullptr;      // or nullptr
  const float* input_scale = nullptr;  // static activation scale or nullptr
  // i32 [k] or nullptr: the weight's columns were stored in this order (GPTQ act order sorted at load so that
  // groups are contiguous, model/checkpoint_linear.h sort_act_order): stored column j multiplies input column
  // input_perm[j]. quantized_matmul gathers x's columns so; dequantize_matrix returns W in the input's order.
  const int32_t* input_perm = nullptr;
};

// x: [rows, w.k]  y: [rows, w.n]. Runs on `pool` (may be nullptr: the calling thread only).
void quantized_matmul(const QuantizedMatrix& w, const float* x, int64_t rows, float* y, ThreadPool* pool);
// Float reference: dst[n, k] = the dequantized weights (the oracle the tests compare kernels with).
// dst: [w.n, w.k]
void dequantize_matrix(const QuantizedMatrix& w, float* dst);
bool cpu_supports(const WeightFormat& f);  // true for every format above

// Testing and benchmarking: force the portable (non-SIMD) kernels; the initial value comes from the
// environment variable XINFER_QUANT_PORTABLE (set and not "0": forced).
void set_force_portable(bool portable);
bool simd_enabled();  // true when the AVX2+FMA paths run (CPU has them and portable is not forced)
// Benchmarking: GGUF Q8_0/Q4_0/Q4_1 calls with at least this many rows take the register-tiled GEMM
// (gguf_gemm.cpp), fewer the GEMV kernel; the default (8) was measured with bench/quant_kernel_bench.
void set_gguf_gemm_min_rows(int64_t rows);

}  // namespace xinfer::quant
