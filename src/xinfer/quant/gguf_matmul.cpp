// Integer GGUF kernels for Q8_0, Q4_0 and Q4_1 (the formats of our real models), as llama.cpp does them
// conceptually: each activation row is quantized once per call to 8-bit blocks of 32 (d = max|x| / 127,
// q = round(x / d), s = d * sum(q)), then for a weight block (wd, wm, wq[32]) and an activation block
// (d, s, q[32]):
//   Q8_0: wd * d * sum(wq * q)
//   Q4_0: wd * d * sum(wq * q) - 8 * wd * s          (wq the unsigned nibbles 0..15)
//   Q4_1: wd * d * sum(wq * q) + wm * s
// The integer sums are exact; the only deviation from the float reference is the activation rounding.
// Work: output rows split over the pool; for each weight row, activation rows in tiles of up to 4, so a
// weight block is decoded once per tile from L1 and the weight bytes stream from memory once per call.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "xinfer/core/dtype.h"
#include "xinfer/quant/cpu_features.h"
#include "xinfer/quant/gguf_matmul.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace xinfer::quant::detail {
namespace {

constexpr int kTile = 4;  // activation rows per pass over a weight row

// Activation rows quantized to 8-bit blocks of 32. qs: [rows, k]  d, s: [rows, k / 32]
struct Q8Rows {
  int64_t blocks = 0;
  std::vector<int8_t> qs;
  std::vector<float> d, s;
};

void quantize_rows_q8(const float* x, int64_t rows, int64_t k, Q8Rows* out) {
  out->blocks = k / 32;
  out->qs.resize(static_cast<size_t>(rows * k));
  out->d.resize(static_cast<size_t>(rows * out->blocks));
  out->s.resize(out->d.size());
  for (int64_t i = 0; i < rows * out->blocks; ++i) {
    const float* xb = x + i * 32;
    int8_t* qb = out->qs.data() + i * 32;
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(xb[j]));
    const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    int sum = 0;
    for (int j = 0; j < 32; ++j) {
      const int q = static_cast<int>(std::nearbyint(xb[j] * id));  // |q| <= 127 by construction
      qb[j] = static_cast<int8_t>(q);
      sum += q;
    }
    out->d[static_cast<size_t>(i)] = d;
    out->s[static_cast<size_t>(i)] = d * static_cast<float>(sum);
  }
}

float half_at(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  return to_float(f16{bits});
}

// Pointers to the R activation rows of a tile.
struct Tile {
  const int8_t* qs[kTile];
  const float* d[kTile];
  const float* s[kTile];
};

// res[r] = dot(weight row `wrow`, activation row r) for r < R, portable integer path.
template <GgufType kType, int R>
void dot_rows_portable(const uint8_t* wrow, const Tile& a, int64_t nb, float* res) {
  float acc[R] = {};
  for (int64_t b = 0; b < nb; ++b) {
    if constexpr (kType == GgufType::kQ8_0) {
      const uint8_t* blk = wrow + b * 34;
      const float wd = half_at(blk);
      const auto* wq = reinterpret_cast<const int8_t*>(blk + 2);
      for (int r = 0; r < R; ++r) {
        const int8_t* q = a.qs[r] + b * 32;
        int sum = 0;
        for (int j = 0; j < 32; ++j) sum += wq[j] * q[j];
        acc[r] += wd * a.d[r][b] * static_cast<float>(sum);
      }
    } else {
      constexpr int kBytes = kType == GgufType::kQ4_1 ? 20 : 18;
      const uint8_t* blk = wrow + b * kBytes;
      const float wd = half_at(blk);
      const float wm = kType == GgufType::kQ4_1 ? half_at(blk + 2) : -8.0f * wd;
      const uint8_t* wq = blk + (kType == GgufType::kQ4_1 ? 4 : 2);
      for (int r = 0; r < R; ++r) {
        const int8_t* q = a.qs[r] + b * 32;
        int sum = 0;
        for (int j = 0; j < 16; ++j) sum += (wq[j] & 15) * q[j] + (wq[j] >> 4) * q[j + 16];
        acc[r] += wd * a.d[r][b] * static_cast<float>(sum) + wm * a.s[r][b];
      }
    }
  }
  for (int r = 0; r < R; ++r) res[r] = acc[r];
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) inline float hsum(__m256 v) {
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  s4 = _mm_add_ss(s4, _mm_movehdup_ps(s4));
  return _mm_cvtss_f32(s4);
}

template <GgufType kType, int R>
__attribute__((target("avx2,fma,f16c"))) void dot_rows_avx2(const uint8_t* wrow, const Tile& a, int64_t nb,
                                                            float* res) {
  __m256 acc[R];
  float min_acc[R];
  for (int r = 0; r < R; ++r) {
    acc[r] = _mm256_setzero_ps();
    min_acc[r] = 0.0f;
  }
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i low_mask = _mm256_set1_epi8(15);
  for (int64_t b = 0; b < nb; ++b) {
    if constexpr (kType == GgufType::kQ8_0) {
      const uint8_t* blk = wrow + b * 34;
      uint16_t wd_bits;
      std::memcpy(&wd_bits, blk, 2);
      const float wd = _cvtsh_ss(wd_bits);
      const __m256i wq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
      const __m256i wabs = _mm256_sign_epi8(wq, wq);  // |wq| as unsigned for maddubs; sign moved to x
      for (int r = 0; r < R; ++r) {
        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.qs[r] + b * 32));
        const __m256i p16 = _mm256_maddubs_epi16(wabs, _mm256_sign_epi8(q, wq));  // |terms| <= 2 * 127 * 127
        const __m256 p = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones));
        acc[r] = _mm256_fmadd_ps(p, _mm256_set1_ps(wd * a.d[r][b]), acc[r]);
      }
    } else {
      constexpr int kBytes = kType == GgufType::kQ4_1 ? 20 : 18;
      const uint8_t* blk = wrow + b * kBytes;
      uint16_t bits[2];
      std::memcpy(bits, blk, kType == GgufType::kQ4_1 ? 4 : 2);
      const float wd = _cvtsh_ss(bits[0]);
      const float wm = kType == GgufType::kQ4_1 ? _cvtsh_ss(bits[1]) : -8.0f * wd;
      const __m128i raw =
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + (kType == GgufType::kQ4_1 ? 4 : 2)));
      // elements 0..15 (low nibbles) in the low lane, 16..31 (high nibbles) in the high lane
      const __m256i wq = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), low_mask);
      for (int r = 0; r < R; ++r) {
        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.qs[r] + b * 32));
        const __m256 p = _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_maddubs_epi16(wq, q), ones));
        acc[r] = _mm256_fmadd_ps(p, _mm256_set1_ps(wd * a.d[r][b]), acc[r]);
        min_acc[r] += wm * a.s[r][b];
      }
    }
  }
  for (int r = 0; r < R; ++r) res[r] = hsum(acc[r]) + min_acc[r];
}
#endif

using DotFn = void (*)(const uint8_t*, const Tile&, int64_t, float*);

template <GgufType kType>
DotFn pick(int r, bool simd) {
#if defined(__x86_64__)
  if (simd) {
    switch (r) {
      case 1:
        return dot_rows_avx2<kType, 1>;
      case 2:
        return dot_rows_avx2<kType, 2>;
      case 3:
        return dot_rows_avx2<kType, 3>;
      default:
        return dot_rows_avx2<kType, 4>;
    }
  }
#endif
  switch (r) {
    case 1:
      return dot_rows_portable<kType, 1>;
    case 2:
      return dot_rows_portable<kType, 2>;
    case 3:
      return dot_rows_portable<kType, 3>;
    default:
      return dot_rows_portable<kType, 4>;
  }
}

}  // namespace

bool gguf_matmul(const GgufFormat& f, const QuantizedMatrix& w, const float* x, int64_t rows, float* y,
                 ThreadPool* pool) {
  DotFn fns[kTile + 1] = {};
  const bool simd = simd_enabled();
  for (int r = 1; r <= kTile; ++r) {
    switch (f.type) {
      case GgufType::kQ8_0:
        fns[r] = pick<GgufType::kQ8_0>(r, simd);
        break;
      case GgufType::kQ4_0:
        fns[r] = pick<GgufType::kQ4_0>(r, simd);
        break;
      case GgufType::kQ4_1:
        fns[r] = pick<GgufType::kQ4_1>(r, simd);
        break;
      default:
        return false;
    }
  }
  const int64_t k = w.k, n_out = w.n, nb = k / 32;
  const size_t row_bytes = gguf_row_bytes(f.type, k).value();
  Q8Rows a;
  quantize_rows_q8(x, rows, k, &a);
  const auto* weight = static_cast<const uint8_t*>(w.weight);
  auto run = [&](int64_t begin, int64_t end) {
    float res[kTile];
    for (int64_t n = begin; n < end; ++n) {
      const uint8_t* wrow = weight + static_cast<size_t>(n) * row_bytes;
      for (int64_t t0 = 0; t0 < rows; t0 += kTile) {
        const int r_count = static_cast<int>(std::min<int64_t>(kTile, rows - t0));
        Tile tile;
        for (int r = 0; r < r_count; ++r) {
          tile.qs[r] = a.qs.data() + (t0 + r) * k;
          tile.d[r] = a.d.data() + (t0 + r) * nb;
          tile.s[r] = a.s.data() + (t0 + r) * nb;
        }
        fns[r_count](wrow, tile, nb, res);
        for (int r = 0; r < r_count; ++r) y[(t0 + r) * n_out + n] = res[r];
      }
    }
  };
  if (pool != nullptr && pool->size() > 1) {
    pool->parallel_for(0, n_out, run, matmul_grain(n_out));
  } else {
    run(0, n_out);
  }
  return true;
}

}  // namespace xinfer::quant::detail
