// Internal to quant/: the kernels behind quantized_matmul (quantized_linear.h).
//
//   dequant_rows_matmul  every format: each weight row dequantized to f32 once into a per-thread buffer,
//                        then dotted with every activation row (x: [rows, k] f32, y: [rows, n])
//   gguf_matmul          Q8_0, Q4_0, Q4_1: activations quantized to 8-bit blocks of 32 once per call, integer
//                        block dot products; returns false (nothing written) for other GGUF types
//   int_matmul_avx2      int group / int8 channel / W8A8 int8 (int_matmul.cpp)
#pragma once

#include <cstdint>

#include "xinfer/core/thread_pool.h"
#include "xinfer/quant/quantized_linear.h"

namespace xinfer::quant::detail {

// dst[w.k] = row n of the weights as floats.
void dequantize_row(const QuantizedMatrix& w, int64_t n, float* dst);
void dequant_rows_matmul(const QuantizedMatrix& w, const float* x, int64_t rows, float* y, ThreadPool* pool);
bool gguf_matmul(const GgufFormat& f, const QuantizedMatrix& w, const float* x, int64_t rows, float* y,
                 ThreadPool* pool);
// AVX2 only (call when simd_enabled()): int per-group without g_idx (group a multiple of 32), int8 per
// channel, W8A8 int8 (int32 dot products); K a multiple of 32. Returns false (nothing written) otherwise.
bool int_matmul_avx2(const QuantizedMatrix& w, const float* x, int64_t rows, float* y, ThreadPool* pool);
// AVX2 only: W8A8 fp8 with K a multiple of 32, on activations already rounded to e4m3 and scaled back (xq).
bool fp8_matmul_avx2(const QuantizedMatrix& w, const float* xq, int64_t rows, float* y, ThreadPool* pool);

// Output rows per parallel_for task unit: big enough to amortize the dispatch, small enough to balance.
inline int64_t matmul_grain(int64_t n) {
  return n >= 256 ? 16 : 1;
}

}  // namespace xinfer::quant::detail
