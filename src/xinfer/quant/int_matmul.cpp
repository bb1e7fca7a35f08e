// AVX2 kernels for the int weight formats (the portable path is the row-dequantizing kernel):
//   int4 / int8 per group (no g_idx; group 16 or a multiple of 32; K may end in a partial group), int8 per
//   channel (W8A16): weights decoded to
//     f32 in registers, 32 at a time, and multiplied with f32 activations; per group
//     sum_k x_k W_k = s_g * (sum_k x_k q_k - z_g * sum_k x_k), the activation sums per group computed once;
//     int4 with mins (GGUF Q4_1 / Q4_K repacked): s_g * sum_k x_k q_k + min_g * sum_k x_k; groups of 16 (GGUF
//     Q6_K repacked) take the two halves of each 32-weight chunk apart
//   W8A8 fp8: e4m3 weights decoded through f16 (exact) against the e4m3-rounded activations
//   W8A8 int8: activations quantized to int8 per token (or with the static scale), int32 dot products
//     (maddubs/madd, sign trick), y = s_w[n] * s_x[t] * sum_k qw_k qx_k
// Returns false when the shape or format has no kernel here (the caller falls back).
#include <algorithm>
#include <cmath>
#include <vector>

#include "xinfer/core/check.h"
#include "xinfer/quant/e4m3_simd.h"
#include "xinfer/quant/gguf_matmul.h"
#include "xinfer/quant/prefetch.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace xinfer::quant::detail {

#if defined(__x86_64__)
namespace {

constexpr int kIntTile = 2;  // activation rows per pass over a weight row

__attribute__((target("avx2,fma"))) inline float hsum8(__m256 v) {
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  s4 = _mm_add_ss(s4, _mm_movehdup_ps(s4));
  return _mm_cvtss_f32(s4);
}

enum class WKind { kU4, kU8, kI8, kFp8 };

// 32 weights from `p` (16 bytes for u4, 32 for u8 / i8) as 4 x 8 floats in element order.
template <WKind kKind>
__attribute__((target("avx2,fma,f16c"))) inline void decode32(const uint8_t* p, __m256* q) {
  if constexpr (kKind == WKind::kU4) {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m128i mask = _mm_set1_epi8(15);
    const __m128i lo = _mm_and_si128(raw, mask), hi = _mm_and_si128(_mm_srli_epi16(raw, 4), mask);
    const __m128i e0 = _mm_unpacklo_epi8(lo, hi), e1 = _mm_unpackhi_epi8(lo, hi);  // elements 0..15, 16..31
    q[0] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(e0));
    q[1] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(e0, 8)));
    q[2] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(e1));
    q[3] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(e1, 8)));
  } else if constexpr (kKind == WKind::kFp8) {
    e4m3x16_to_f32_avx2(p, q);  // e4m3_simd.h (NaN patterns are not weights)
    e4m3x16_to_f32_avx2(p + 16, q + 2);
  } else {
    for (int i = 0; i < 4; ++i) {
      const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 8 * i));
      q[i] = _mm256_cvtepi32_ps(kKind == WKind::kU8 ? _mm256_cvtepu8_epi32(b) : _mm256_cvtepi8_epi32(b));
    }
  }
}

// res[r] = sum_g s[g] * (sum_{k in g} x_r[k] q[k] - z_g * xsum_r[g]) for one weight row, or with mins
// sum_g (s[g] * sum_{k in g} x_r[k] q[k] + mn[g] * xsum_r[g]).
// wrow: packed row  s: [groups]  z: [groups] or nullptr (then `sym`)  mn: [groups] or nullptr  x[r]: [k]
// xsum[r]: [groups]. kG16: groups of 16 (no mins; k a multiple of 32): chunk c's elements 0..15 (q[0], q[1])
// are group c / 16, 16..31 (q[2], q[3]) the next one.
template <WKind kKind, int R, bool kG16 = false>
__attribute__((target("avx2,fma,f16c"))) void int_rows(const uint8_t* wrow, const float* s, const uint8_t* z,
                                                       int sym, const float* mn, int64_t k, int64_t group,
                                                       const float* const* x, const float* const* xsum,
                                                       float* res) {
  constexpr int kBytes32 = kKind == WKind::kU4 ? 16 : 32;
  __m256 acc[R];
  float corr[R] = {};
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  // What group g takes off: s z per unit of xsum, or gives: its min.
  auto offset = [&](int64_t g) {
    return mn ? -mn[g] : s[g] * (z ? static_cast<float>(z[g]) : static_cast<float>(sym));
  };
  if constexpr (kG16) {
    for (int64_t c = 0; c < k; c += 32) {
      __m256 q[4];
      decode32<kKind>(wrow + c / 32 * kBytes32, q);
      const int64_t g = c / 16;
      const __m256 s0 = _mm256_set1_ps(s[g]), s1 = _mm256_set1_ps(s[g + 1]);
      const float off0 = offset(g), off1 = offset(g + 1);
      for (int r = 0; r < R; ++r) {
        const float* xr = x[r] + c;
        const __m256 a0 =
            _mm256_fmadd_ps(q[1], _mm256_loadu_ps(xr + 8), _mm256_mul_ps(q[0], _mm256_loadu_ps(xr)));
        const __m256 a1 =
            _mm256_fmadd_ps(q[3], _mm256_loadu_ps(xr + 24), _mm256_mul_ps(q[2], _mm256_loadu_ps(xr + 16)));
        acc[r] = _mm256_fmadd_ps(a1, s1, _mm256_fmadd_ps(a0, s0, acc[r]));
        corr[r] += off0 * xsum[r][g] + off1 * xsum[r][g + 1];
      }
    }
  } else {
    const int64_t groups = (k + group - 1) / group;  // the last group may be partial (a multiple of 32)
    for (int64_t g = 0; g < groups; ++g) {
      __m256 ga[R][2];
      for (int r = 0; r < R; ++r) ga[r][0] = ga[r][1] = _mm256_setzero_ps();
      for (int64_t c = g * group; c < std::min(k, (g + 1) * group); c += 32) {
        __m256 q[4];
        decode32<kKind>(wrow + c / 32 * kBytes32, q);
        for (int r = 0; r < R; ++r) {
          const float* xr = x[r] + c;
          ga[r][0] = _mm256_fmadd_ps(q[0], _mm256_loadu_ps(xr), ga[r][0]);
          ga[r][1] = _mm256_fmadd_ps(q[1], _mm256_loadu_ps(xr + 8), ga[r][1]);
          ga[r][0] = _mm256_fmadd_ps(q[2], _mm256_loadu_ps(xr + 16), ga[r][0]);
          ga[r][1] = _mm256_fmadd_ps(q[3], _mm256_loadu_ps(xr + 24), ga[r][1]);
        }
      }
      const float off = offset(g);
      for (int r = 0; r < R; ++r) {
        acc[r] = _mm256_fmadd_ps(_mm256_add_ps(ga[r][0], ga[r][1]), _mm256_set1_ps(s[g]), acc[r]);
        corr[r] += off * xsum[r][g];
      }
    }
  }
  for (int r = 0; r < R; ++r) res[r] = hsum8(acc[r]) - corr[r];
}

template <WKind kKind>
// scale_stride: scales per weight row (groups; 1 per channel; 0: one per tensor). mins: [n, groups] or
// nullptr.
void run_int(const QuantizedMatrix& w, int64_t group, int64_t scale_stride, const uint8_t* zeros, int sym,
             const float* mins, const float* x, int64_t rows, float* y, ThreadPool* pool) {
  const int64_t k = w.k, n_out = w.n, groups = (k + group - 1) / group;
  const size_t row_bytes = static_cast<size_t>(kKind == WKind::kU4 ? k / 2 : k);
  std::vector<float> xsum(static_cast<size_t>(rows * groups), 0.0f);
  if (sym != 0 || zeros != nullptr || mins != nullptr) {
    for (int64_t t = 0; t < rows; ++t) {
      for (int64_t i = 0; i < k; ++i) xsum[static_cast<size_t>(t * groups + i / group)] += x[t * k + i];
    }
  }
  const auto* weight = static_cast<const uint8_t*>(w.weight);
  auto run = [&](int64_t begin, int64_t end) {
    float res[kIntTile];
    const uint8_t* task_end = weight + static_cast<size_t>(end) * row_bytes;
    prefetch_stream_start(weight + static_cast<size_t>(begin) * row_bytes, task_end);
    for (int64_t n = begin; n < end; ++n) {
      const uint8_t* wrow = weight + static_cast<size_t>(n) * row_bytes;
      prefetch_row_ahead(wrow, static_cast<int64_t>(row_bytes), task_end);  // prefetch.h
      const float* s = w.scales + n * scale_stride;
      const uint8_t* z = zeros ? zeros + n * groups : nullptr;
      const float* mn = mins ? mins + n * groups : nullptr;
      for (int64_t t0 = 0; t0 < rows; t0 += kIntTile) {
        const float* xs[kIntTile] = {x + t0 * k, x + std::min(t0 + 1, rows - 1) * k};
        const float* xsums[kIntTile] = {xsum.data() + t0 * groups,
                                        xsum.data() + std::min(t0 + 1, rows - 1) * groups};
        if (rows - t0 >= 2) {
          (group == 16 ? int_rows<kKind, 2, true> : int_rows<kKind, 2>)(wrow, s, z, sym, mn, k, group, xs, xsums, res);
          y[t0 * n_out + n] = res[0];
          y[(t0 + 1) * n_out + n] = res[1];
        } else {
          (group == 16 ? int_rows<kKind, 1, true> : int_rows<kKind, 1>)(wrow, s, z, sym, mn, k, group, xs, xsums, res);
          y[t0 * n_out + n] = res[0];
        }
      }
    }
  };
  if (pool != nullptr && pool->size() > 1) {
    pool->parallel_for(0, n_out, run, matmul_grain(n_out));
  } else {
    run(0, n_out);
  }
}

// sum_k a[k] * b[k] for int8 vectors (k a multiple of 32; |values| <= 127).
__attribute__((target("avx2,fma"))) inline int32_t dot_i8(const int8_t* a, const int8_t* b, int64_t k) {
  __m256i acc = _mm256_setzero_si256();
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t i = 0; i < k; i += 32) {
    const __m256i va = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + i));
    const __m256i vb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + i));
    const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(va, va), _mm256_sign_epi8(vb, va));
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p16, ones));
  }
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

void run_w8a8_int8(const QuantizedMatrix& w, const W8A8Int8Format& f, const float* x, int64_t rows, float* y,
                   ThreadPool* pool) {
  const int64_t k = w.k, n_out = w.n;
  std::vector<int8_t> xq(static_cast<size_t>(rows * k));
  std::vector<float> xs(static_cast<size_t>(rows));
  for (int64_t t = 0; t < rows; ++t) {  // same rounding as the portable path (quantized_linear.cpp)
    const float* xr = x + t * k;
    float s;
    if (f.act == ActScaleMode::kStaticPerTensor) {
      XI_CHECK(w.input_scale != nullptr) << "static activation scale missing";
      s = *w.input_scale;
    } else {
      float amax = 0.0f;
      for (int64_t i = 0; i < k; ++i) amax = std::max(amax, std::fabs(xr[i]));
      s = amax / 127.0f;
    }
    const float inv = s != 0.0f ? 1.0f / s : 0.0f;
    xs[static_cast<size_t>(t)] = s;
    for (int64_t i = 0; i < k; ++i) {
      xq[static_cast<size_t>(t * k + i)] =
          static_cast<int8_t>(std::clamp(std::nearbyint(xr[i] * inv), -127.0f, 127.0f));
    }
  }
  const auto* weight = static_cast<const int8_t*>(w.weight);
  auto run = [&](int64_t begin, int64_t end) {
    const auto* bytes = reinterpret_cast<const uint8_t*>(weight);
    const size_t row_bytes = static_cast<size_t>(k);
    const uint8_t* task_end = bytes + static_cast<size_t>(end) * row_bytes;
    prefetch_stream_start(bytes + static_cast<size_t>(begin) * row_bytes, task_end);
    for (int64_t n = begin; n < end; ++n) {
      prefetch_row_ahead(bytes + static_cast<size_t>(n) * row_bytes, k, task_end);  // prefetch.h
      for (int64_t t = 0; t < rows; ++t) {
        const int32_t dot = dot_i8(weight + n * k, xq.data() + t * k, k);
        y[t * n_out + n] = w.scales[n] * xs[static_cast<size_t>(t)] * static_cast<float>(dot);
      }
    }
  };
  if (pool != nullptr && pool->size() > 1) {
    pool->parallel_for(0, n_out, run, matmul_grain(n_out));
  } else {
    run(0, n_out);
  }
}

}  // namespace

bool int_matmul_avx2(const QuantizedMatrix& w, const float* x, int64_t rows, float* y, ThreadPool* pool) {
  if (w.k % 32 != 0) return false;
  if (const auto* g = std::get_if<IntGroupFormat>(&w.format)) {
    const bool g16 = g->group_size == 16;  // GGUF Q6_K repacked (no mins)
    if (w.g_idx != nullptr || (g->group_size % 32 != 0 && !g16) ||
        (g->min_offset && (g->bits != 4 || w.mins == nullptr || g16)))
      return false;
    const uint8_t* zeros = g->zero_point ? w.zeros : nullptr;
    const int64_t groups = (w.k + g->group_size - 1) / g->group_size;
    if (g->bits == 4) {  // values 0..15 around zero 8, or unshifted with mins
      const float* mins = g->min_offset ? w.mins : nullptr;
      run_int<WKind::kU4>(w, g->group_size, groups, zeros, mins ? 0 : 8, mins, x, rows, y, pool);
    } else if (g->bits == 8) {
      run_int<WKind::kU8>(w, g->group_size, groups, zeros, 128, nullptr, x, rows, y, pool);
    } else {
      return false;
    }
    return true;
  }
  if (std::holds_alternative<Int8ChannelFormat>(w.format)) {
    run_int<WKind::kI8>(w, w.k, 1, nullptr, 0, nullptr, x, rows, y, pool);
    return true;
  }
  if (const auto* f = std::get_if<W8A8Int8Format>(&w.format)) {
    run_w8a8_int8(w, *f, x, rows, y, pool);
    return true;
  }
  return false;
}

bool fp8_matmul_avx2(const QuantizedMatrix& w, const float* xq, int64_t rows, float* y, ThreadPool* pool) {
  const auto* f = std::get_if<W8A8Fp8Format>(&w.format);
  if (f == nullptr || w.k % 32 != 0) return false;
  run_int<WKind::kFp8>(w, w.k, f->per_channel ? 1 : 0, nullptr, 0, nullptr, xq, rows, y, pool);
  return true;
}
#else
bool fp8_matmul_avx2(const QuantizedMatrix&, const float*, int64_t, float*, ThreadPool*) {
  return false;
}
bool int_matmul_avx2(const QuantizedMatrix&, const float*, int64_t, float*, ThreadPool*) {
  return false;
}
#endif

}  // namespace xinfer::quant::detail
