// Internal to quant/: the kernels behind quantized_matmul (quantized_linear.h).
//
//   dequant_rows_matmul  every format: each weight row dequantized to f32 once into a per-thread buffer,
//                        then dotted with every activation row (x: [rows, k] f32, y: [rows, n])
//   gguf_matmul          Q8_0, Q4_0, Q4_1: activations quantized to 8-bit blocks of 32 once per call, integer
//                        block dot products; returns false (nothing written) for other GGUF types
//   gguf_gemm            the same formats and arithmetic, register-tiled 4 rows x 8 columns for rows >=
//                        kGemmMinRows (gguf_gemm.cpp)
//   int_matmul_avx2      int group / int8 channel / W8A8 int8 (int_matmul.cpp)
#pragma once

#include <cstdint>
#include <vector>

#include "xinfer/core/thread_pool.h"
#include "xinfer/quant/quantized_linear.h"

namespace xinfer::quant::detail {

// dst[w.k] = row n of the weights as floats.
void dequantize_row(const QuantizedMatrix& w, int64_t n, float* dst);
void dequant_rows_matmul(const QuantizedMatrix& w, const float* x, int64_t rows, float* y, ThreadPool* pool);
// Activation rows quantized to 8-bit blocks of 32 (d = max|x| / 127, q = round(x / d), |q| <= 127,
// s = d * sum(q)). qs: [rows, k]  ds: [rows, k / 32, 2] = (d, s) pairs, side by side so that one 8-byte load
// gives both factors of a block.
struct Q8Rows {
  int64_t blocks = 0;
  std::vector<int8_t> qs;
  std::vector<float> ds;
};
void quantize_rows_q8(const float* x, int64_t rows, int64_t k, Q8Rows* out);  // x: [rows, k], k % 32 == 0

bool gguf_matmul(const GgufFormat& f, const QuantizedMatrix& w, const float* x, int64_t rows, float* y,
                 ThreadPool* pool);
// Rows from which quantized_matmul takes gguf_gemm (measured with bench/quant_kernel_bench: below it the
// per-call panel packing costs more than the tiling saves).
constexpr int64_t kGemmMinRows = 8;
// Blocks of K per pass in both kernels: y = the first chunk's sums, y += the later chunks' (the GEMM's panel
// is L1-resident at 64 blocks). Shared so the GEMV and the GEMM order their float additions alike.
constexpr int64_t kGemmChunkBlocks = 64;
bool gguf_gemm(const GgufFormat& f, const QuantizedMatrix& w, const float* x, int64_t rows, float* y,
               ThreadPool* pool);
// AVX2 only (call when simd_enabled()): int per-group without g_idx (group 16 or a multiple of 32), int8 per
// channel, W8A8 int8 (int32 dot products); K a multiple of 32. Returns false (nothing written) otherwise.
bool int_matmul_avx2(const QuantizedMatrix& w, const float* x, int64_t rows, float* y, ThreadPool* pool);
// AVX2 only: W8A8 fp8 with K a multiple of 32, on activations already rounded to e4m3 and scaled back (xq).
bool fp8_matmul_avx2(const QuantizedMatrix& w, const float* xq, int64_t rows, float* y, ThreadPool* pool);

// Output rows per parallel_for task unit: big enough to amortize the dispatch, small enough to balance.
inline int64_t matmul_grain(int64_t n) {
  return n >= 256 ? 16 : 1;
}

}  // namespace xinfer::quant::detail
