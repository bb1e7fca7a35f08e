// The generic CPU linear: per output row, dequantize the weight row once (f32, L1-resident) and dot it with
// every activation row. Used by the dense, int8-channel, int-group and W8A8 formats and by the GGUF types
// without an integer kernel.
#include <vector>

#include "xinfer/quant/cpu_features.h"
#include "xinfer/quant/gguf_matmul.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace xinfer::quant::detail {
namespace {

float dot_portable(const float* a, const float* b, int64_t k) {
  float acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= k; i += 8) {
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  }
  float s = 0.0f;
  for (; i < k; ++i) s += a[i] * b[i];
  return s + ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) float dot_avx2(const float* a, const float* b, int64_t k) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= k; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  for (; i + 8 <= k; i += 8) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
  acc0 = _mm256_add_ps(acc0, acc1);
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(acc0), _mm256_extractf128_ps(acc0, 1));
  s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  s4 = _mm_add_ss(s4, _mm_movehdup_ps(s4));
  float s = _mm_cvtss_f32(s4);
  for (; i < k; ++i) s += a[i] * b[i];
  return s;
}
#endif

}  // namespace

void dequant_rows_matmul(const QuantizedMatrix& w, const float* x, int64_t rows, float* y, ThreadPool* pool) {
  const int64_t k = w.k, n_out = w.n;
  float (*dot)(const float*, const float*, int64_t) = dot_portable;
#if defined(__x86_64__)
  if (simd_enabled()) dot = dot_avx2;
#endif
  auto run = [&](int64_t begin, int64_t end) {
    std::vector<float> row(static_cast<size_t>(k));
    for (int64_t n = begin; n < end; ++n) {
      dequantize_row(w, n, row.data());
      for (int64_t t = 0; t < rows; ++t) y[t * n_out + n] = dot(x + t * k, row.data(), k);
    }
  };
  if (pool != nullptr && pool->size() > 1) {
    pool->parallel_for(0, n_out, run, matmul_grain(n_out));
  } else {
    run(0, n_out);
  }
}

}  // namespace xinfer::quant::detail
