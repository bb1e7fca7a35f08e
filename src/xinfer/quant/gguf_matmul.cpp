// Integer GGUF kernels for Q8_0, Q4_0 and Q4_1 (the formats of our real models), as llama.cpp does them
// conceptually: each activation row is quantized once per call to 8-bit blocks of 32 (d = max|x| / 127,
// q = round(x / d), s = d * sum(q)), then for a weight block (wd, wm, wq[32]) and an activation block
// (d, s, q[32]):
//   Q8_0: wd * d * sum(wq * q)
//   Q4_0: wd * d * sum(wq * q) - 8 * wd * s          (wq the unsigned nibbles 0..15)
//   Q4_1: wd * d * sum(wq * q) + wm * s
// The integer sums are exact; the only deviation from the float reference is the activation rounding.
// Work: groups of 8 weight rows (output columns, one AVX2 lane each) split over the pool; per group,
// activation rows in tiles of up to 4 and K in chunks of kGemmChunkBlocks. The float operations per output
// are gguf_gemm's, in its order, so below and above kGemmMinRows a row's result is the same bit for bit
// (chunked prefill == one-shot prefill). One AVX2 row (a single sequence decoding) takes a faster
// per-weight-row kernel with its own float order instead.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "xinfer/core/dtype.h"
#include "xinfer/quant/cpu_features.h"
#include "xinfer/quant/gguf_matmul.h"
#include "xinfer/quant/prefetch.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace xinfer::quant::detail {
namespace {

constexpr int kTile = 4;  // activation rows per pass over a group of weight rows
constexpr int kCols = 8;  // weight rows (output columns) per pass, one per AVX2 lane

// Pointers to the R activation rows of a tile.
struct Tile {
  const int8_t* qs[kTile];
  const float* ds[kTile];
};

// out[r][c] for the tile's R activation rows and the (up to 8) weight rows wcol0 + c * row_bytes, c < cols,
// over blocks [b0, b0 + nblk), from zero: exact integer block sums, then per block
//   out += wd * d * sum;  out += wm * s
// in block order: the operations (and so the float results) of gguf_gemm's tile_portable.
template <GgufType kType, int R>
void cols_portable(const uint8_t* wcol0, size_t row_bytes, int cols, const Tile& a, int64_t b0, int64_t nblk,
                   float out[kTile][kCols]) {
  constexpr int kBytes = kType == GgufType::kQ8_0 ? 34 : kType == GgufType::kQ4_1 ? 20 : 18;
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < kCols; ++c) out[r][c] = 0.0f;
  for (int64_t b = b0; b < b0 + nblk; ++b) {
    for (int c = 0; c < cols; ++c) {
      const uint8_t* blk = wcol0 + static_cast<size_t>(c) * row_bytes + b * kBytes;
      const float wd = gguf_f16(blk);
      for (int r = 0; r < R; ++r) {
        const int8_t* q = a.qs[r] + b * 32;
        int sum = 0;
        if constexpr (kType == GgufType::kQ8_0) {
          const auto* wq = reinterpret_cast<const int8_t*>(blk + 2);
          for (int j = 0; j < 32; ++j) sum += wq[j] * q[j];
        } else {
          const uint8_t* wq = blk + (kType == GgufType::kQ4_1 ? 4 : 2);
          for (int j = 0; j < 16; ++j) sum += (wq[j] & 15) * q[j] + (wq[j] >> 4) * q[j + 16];
        }
        out[r][c] += wd * a.ds[r][2 * b] * static_cast<float>(sum);
        if constexpr (kType != GgufType::kQ8_0) {
          const float wm = kType == GgufType::kQ4_1 ? gguf_f16(blk + 2) : -8.0f * wd;
          out[r][c] += wm * a.ds[r][2 * b + 1];
        }
      }
    }
  }
}

#if defined(__x86_64__)
// One weight block decoded for the integer dot: wq (unsigned nibbles, or |w| for Q8_0 with `sign` the
// weights); dm = (wd, wm, -, -) with wm the min term's factor (Q4_1: m; Q4_0: -8 wd; Q8_0: unused).
struct WBlock {
  __m256i wq, sign;
  __m128 dm;
};

template <GgufType kType>
__attribute__((target("avx2,fma,f16c"))) inline WBlock load_block(const uint8_t* wrow, int64_t b) {
  WBlock w;
  constexpr int kBytes = kType == GgufType::kQ8_0 ? 34 : kType == GgufType::kQ4_1 ? 20 : 18;
  const uint8_t* blk = wrow + b * kBytes;
  int32_t head;
  std::memcpy(&head, blk, 4);
  w.dm = _mm_cvtph_ps(_mm_cvtsi32_si128(head));  // Q4_1: (d, m); others: (d, junk from the quants)
  if constexpr (kType == GgufType::kQ8_0) {
    w.sign = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
    w.wq = _mm256_sign_epi8(w.sign, w.sign);  // |w| as unsigned for maddubs; the sign moves to x
  } else {
    if constexpr (kType == GgufType::kQ4_0) {
      w.dm = _mm_mul_ps(_mm_shuffle_ps(w.dm, w.dm, 0), _mm_setr_ps(1.0f, -8.0f, 0.0f, 0.0f));
    }
    const __m128i raw =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + (kType == GgufType::kQ4_1 ? 4 : 2)));
    // elements 0..15 (low nibbles) in the low lane, 16..31 (high nibbles) in the high lane
    w.wq = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), _mm256_set1_epi8(15));
    w.sign = w.wq;
  }
  return w;
}

__attribute__((target("avx2,fma"))) inline float hsum(__m256 v) {
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  s4 = _mm_add_ss(s4, _mm_movehdup_ps(s4));
  return _mm_cvtss_f32(s4);
}

// The 8 int32 partial sums of sum(wq * q) as floats.
template <GgufType kType>
__attribute__((target("avx2,fma,f16c"))) inline __m256 block_products(const WBlock& w, const int8_t* q8) {
  __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q8));
  if constexpr (kType == GgufType::kQ8_0) q = _mm256_sign_epi8(q, w.sign);
  // pairs: |sum| <= 2 * 15 * 127 for nibbles, 2 * 128 * 127 < 32768 for Q8_0: no int16 saturation
  const __m256i p16 = _mm256_maddubs_epi16(w.wq, q);
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
}

// (wd * d, wm * s, 0, 0) for the activation block at ds (a (d, s) pair).
__attribute__((target("avx2,fma,f16c"))) inline __m128 block_scales(const WBlock& w, const float* ds) {
  return _mm_mul_ps(w.dm, _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(ds))));
}

// The single-row kernel (decode of one sequence), kept for its speed: two blocks per step, summed before they
// reach the accumulators, so each accumulator's add chain is one
// dependency per two blocks (the fma latency bounds a single-row GEMV otherwise). Lane 1 of min_acc sums
// the min terms (wm * s); its lane 0 is unused.
template <GgufType kType, int R>
__attribute__((target("avx2,fma,f16c"))) void dot_rows_avx2(const uint8_t* wrow, const Tile& a, int64_t nb,
                                                            float* res, const uint8_t* prefetch_end) {
  constexpr bool kMin = kType != GgufType::kQ8_0;
  constexpr int kBytes = kType == GgufType::kQ8_0 ? 34 : kType == GgufType::kQ4_1 ? 20 : 18;
  __m256 acc[R];
  __m128 min_acc[R];
  for (int r = 0; r < R; ++r) {
    acc[r] = _mm256_setzero_ps();
    min_acc[r] = _mm_setzero_ps();
  }
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    // The stream kPrefetchAheadBytes ahead (prefetch.h), a line per 64 bytes read: one prefetch per two
    // blocks of Q4 (40 bytes), two of Q8_0 (68).
    const uint8_t* at = wrow + b * kBytes;
    prefetch_ahead(at, kPrefetchAheadBytes, prefetch_end);
    if constexpr (2 * kBytes > kCacheLineBytes)
      prefetch_ahead(at, kPrefetchAheadBytes + kBytes, prefetch_end);
    const WBlock w0 = load_block<kType>(wrow, b), w1 = load_block<kType>(wrow, b + 1);
    for (int r = 0; r < R; ++r) {
      const __m256 p0 = block_products<kType>(w0, a.qs[r] + b * 32);
      const __m256 p1 = block_products<kType>(w1, a.qs[r] + b * 32 + 32);
      const __m128 s0 = block_scales(w0, a.ds[r] + 2 * b), s1 = block_scales(w1, a.ds[r] + 2 * b + 2);
      const __m256 sum =
          _mm256_fmadd_ps(p1, _mm256_broadcastss_ps(s1), _mm256_mul_ps(p0, _mm256_broadcastss_ps(s0)));
      acc[r] = _mm256_add_ps(acc[r], sum);
      if constexpr (kMin) min_acc[r] = _mm_add_ps(min_acc[r], _mm_add_ps(s0, s1));
    }
  }
  for (; b < nb; ++b) {
    const WBlock w0 = load_block<kType>(wrow, b);
    for (int r = 0; r < R; ++r) {
      const __m256 p0 = block_products<kType>(w0, a.qs[r] + b * 32);
      const __m128 s0 = block_scales(w0, a.ds[r] + 2 * b);
      acc[r] = _mm256_fmadd_ps(p0, _mm256_broadcastss_ps(s0), acc[r]);
      if constexpr (kMin) min_acc[r] = _mm_add_ps(min_acc[r], s0);
    }
  }
  for (int r = 0; r < R; ++r) {
    res[r] = hsum(acc[r]);
    if constexpr (kMin) res[r] += _mm_cvtss_f32(_mm_shuffle_ps(min_acc[r], min_acc[r], 1));
  }
}
// Lane c = the sum of v[c]'s 8 lanes (integers: exact in any order).
__attribute__((target("avx2"))) inline __m256i sum_lanes8(const __m256i v[kCols]) {
  const __m256i h01 = _mm256_hadd_epi32(v[0], v[1]), h23 = _mm256_hadd_epi32(v[2], v[3]);
  const __m256i h45 = _mm256_hadd_epi32(v[4], v[5]), h67 = _mm256_hadd_epi32(v[6], v[7]);
  const __m256i h0123 = _mm256_hadd_epi32(h01, h23), h4567 = _mm256_hadd_epi32(h45, h67);
  return _mm256_add_epi32(_mm256_permute2x128_si256(h0123, h4567, 0x20),
                          _mm256_permute2x128_si256(h0123, h4567, 0x31));
}

// cols_portable's contract, AVX2: one lane per weight row (column of y), and per block
//   acc = fma(float(sum), wd * d, acc);  acc = fma(wm, s, acc)
// the operations of gguf_gemm's tile_avx2, so a row's result is the same whichever kernel computes it.
template <GgufType kType, int R>
__attribute__((target("avx2,fma,f16c"))) void cols_avx2(const uint8_t* wcol0, size_t row_bytes, int cols,
                                                        const Tile& a, int64_t b0, int64_t nblk,
                                                        float out[kTile][kCols]) {
  constexpr int kBytes = kType == GgufType::kQ8_0 ? 34 : kType == GgufType::kQ4_1 ? 20 : 18;
  const uint8_t* wcol[kCols];
  for (int c = 0; c < kCols; ++c) wcol[c] = wcol0 + static_cast<size_t>(std::min(c, cols - 1)) * row_bytes;
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t b = b0; b < b0 + nblk; ++b) {
    // The 8 columns' f16 heads ((d, m) for Q4_1, d and two quant bytes otherwise) as 32-bit words, d the low
    // halves (packed to 8 f16 by a byte shuffle), m the high ones.
    int32_t head[kCols];
    for (int c = 0; c < kCols; ++c) std::memcpy(&head[c], wcol[c] + b * kBytes, 4);
    const __m256i heads = _mm256_setr_epi32(head[0], head[1], head[2], head[3], head[4], head[5], head[6], head[7]);
    const __m256i lo_hi = _mm256_shuffle_epi8(
        heads, _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15, 0, 1, 4, 5, 8, 9, 12, 13, 2, 3,
                                6, 7, 10, 11, 14, 15));
    // 64-bit words: (d0..3, m0..3, d4..7, m4..7) -> (d0..7) and (m0..7)
    const __m256 d = _mm256_cvtph_ps(_mm256_castsi256_si128(_mm256_permute4x64_epi64(lo_hi, 0x08)));
    __m256 m = _mm256_setzero_ps();
    if constexpr (kType == GgufType::kQ4_1) {
      m = _mm256_cvtph_ps(_mm256_castsi256_si128(_mm256_permute4x64_epi64(lo_hi, 0x0d)));
    } else if constexpr (kType == GgufType::kQ4_0) {
      m = _mm256_mul_ps(d, _mm256_set1_ps(-8.0f));
    }
    __m256i wq[kCols];
    for (int c = 0; c < kCols; ++c) {
      const uint8_t* blk = wcol[c] + b * kBytes;
      if constexpr (kType == GgufType::kQ8_0) {
        wq[c] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
      } else {
        const __m128i raw =
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + (kType == GgufType::kQ4_1 ? 4 : 2)));
        wq[c] = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), _mm256_set1_epi8(15));
      }
    }
    const __m256i ones = _mm256_set1_epi16(1);
    for (int r = 0; r < R; ++r) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.qs[r] + b * 32));
      __m256i v[kCols];
      for (int c = 0; c < kCols; ++c) {
        if constexpr (kType == GgufType::kQ8_0) {
          v[c] = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(wq[c], wq[c]), _mm256_sign_epi8(q, wq[c])),
                                   ones);
        } else {
          v[c] = _mm256_madd_epi16(_mm256_maddubs_epi16(wq[c], q), ones);
        }
      }
      const __m256 scale = _mm256_mul_ps(d, _mm256_broadcast_ss(a.ds[r] + 2 * b));
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum_lanes8(v)), scale, acc[r]);
      if constexpr (kType != GgufType::kQ8_0) {
        acc[r] = _mm256_fmadd_ps(m, _mm256_broadcast_ss(a.ds[r] + 2 * b + 1), acc[r]);
      }
    }
  }
  for (int r = 0; r < R; ++r) _mm256_storeu_ps(out[r], acc[r]);
}
#endif

using ColsFn = void (*)(const uint8_t*, size_t, int, const Tile&, int64_t, int64_t, float[kTile][kCols]);

template <GgufType kType>
ColsFn pick(int r, bool simd) {
#if defined(__x86_64__)
  if (simd) {
    switch (r) {
      case 1:
        return cols_avx2<kType, 1>;
      case 2:
        return cols_avx2<kType, 2>;
      case 3:
        return cols_avx2<kType, 3>;
      default:
        return cols_avx2<kType, 4>;
    }
  }
#endif
  switch (r) {
    case 1:
      return cols_portable<kType, 1>;
    case 2:
      return cols_portable<kType, 2>;
    case 3:
      return cols_portable<kType, 3>;
    default:
      return cols_portable<kType, 4>;
  }
}

}  // namespace

namespace {

void quantize_block_portable(const float* xb, int8_t* qb, float* ds) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(xb[j]));
  const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
  int sum = 0;
  for (int j = 0; j < 32; ++j) {
    const int q = static_cast<int>(std::nearbyint(xb[j] * id));  // |q| <= 127 by construction
    qb[j] = static_cast<int8_t>(q);
    sum += q;
  }
  ds[0] = d;
  ds[1] = d * static_cast<float>(sum);
}

#if defined(__x86_64__)
// Bit-identical to the portable block: the same float products, and _mm256_cvtps_epi32 rounds to nearest
// even under the default MXCSR as std::nearbyint does under the default rounding mode.
__attribute__((target("avx2,fma"))) void quantize_block_avx2(const float* xb, int8_t* qb, float* ds) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 v[4];
  __m256 m = _mm256_setzero_ps();
  for (int i = 0; i < 4; ++i) {
    v[i] = _mm256_loadu_ps(xb + 8 * i);
    m = _mm256_max_ps(m, _mm256_and_ps(v[i], abs_mask));
  }
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
  const float amax = _mm_cvtss_f32(m4);
  const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
  const __m256 idv = _mm256_set1_ps(id);
  __m256i q[4];
  for (int i = 0; i < 4; ++i) q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], idv));
  __m256i s = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
  __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
  s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
  s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
  // packs work per 128-bit lane: (0..3, 8..11, 4..7, 12..15) per 16, then bytes in lane order; permute back.
  const __m256i p16a = _mm256_packs_epi32(q[0], q[1]), p16b = _mm256_packs_epi32(q[2], q[3]);
  const __m256i p8 = _mm256_packs_epi16(p16a, p16b);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(qb),
                      _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
  ds[0] = d;
  ds[1] = d * static_cast<float>(_mm_cvtsi128_si32(s4));
}
#endif

}  // namespace

void quantize_rows_q8(const float* x, int64_t rows, int64_t k, Q8Rows* out) {
  out->blocks = k / 32;
  out->qs.resize(static_cast<size_t>(rows * k));
  out->ds.resize(static_cast<size_t>(rows * out->blocks * 2));
  auto* block = quantize_block_portable;
#if defined(__x86_64__)
  if (simd_enabled()) block = quantize_block_avx2;
#endif
  for (int64_t i = 0; i < rows * out->blocks; ++i) {
    block(x + i * 32, out->qs.data() + i * 32, out->ds.data() + 2 * i);
  }
}

bool gguf_matmul(const GgufFormat& f, const QuantizedMatrix& w, const float* x, int64_t rows, float* y,
                 ThreadPool* pool) {
  ColsFn fns[kTile + 1] = {};
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
  // Reused across calls (no allocation per linear once grown). The workers must see the caller's instance:
  // a lambda naming a thread_local directly would read each worker's own, so it captures this reference.
  thread_local Q8Rows caller_rows;
  Q8Rows& a = caller_rows;
  quantize_rows_q8(x, rows, k, &a);
  const auto* weight = static_cast<const uint8_t*>(w.weight);
#if defined(__x86_64__)
  if (rows == 1 && simd) {
    // One row (a single sequence decoding): the per-weight-row kernel, ~25% faster here than the column-group
    // kernel below, at the price of its own float summation order (same integer block sums).
    using RowFn = void (*)(const uint8_t*, const Tile&, int64_t, float*, const uint8_t*);
    const RowFn one = f.type == GgufType::kQ8_0   ? dot_rows_avx2<GgufType::kQ8_0, 1>
                      : f.type == GgufType::kQ4_0 ? dot_rows_avx2<GgufType::kQ4_0, 1>
                                                  : dot_rows_avx2<GgufType::kQ4_1, 1>;
    auto run1 = [&](int64_t begin, int64_t end) {
      Tile tile;
      tile.qs[0] = a.qs.data();
      tile.ds[0] = a.ds.data();
      // The task's rows are one contiguous stream of weights.
      const uint8_t* first = weight + static_cast<size_t>(begin) * row_bytes;
      const uint8_t* last = weight + static_cast<size_t>(end) * row_bytes;
      prefetch_stream_start(first, last);
      for (int64_t n = begin; n < end; ++n)
        one(weight + static_cast<size_t>(n) * row_bytes, tile, nb, y + n, last);
    };
    if (pool != nullptr && pool->size() > 1) {
      pool->parallel_for(0, n_out, run1, matmul_grain(n_out));
    } else {
      run1(0, n_out);
    }
    return true;
  }
#endif
  // Tasks are groups of kCols weight rows; K in chunks of kGemmChunkBlocks with y = chunk 0, y += the later
  // ones, as gguf_gemm does.
  const int64_t groups = (n_out + kCols - 1) / kCols;
  auto run = [&](int64_t g_begin, int64_t g_end) {
    float out[kTile][kCols];
    // Each (group, K chunk)'s weights one item ahead, while the item before it is multiplied.
    const GroupChunkPrefetch prefetch(weight, static_cast<int64_t>(row_bytes), n_out, kCols, g_begin, g_end,
                                      nb, kGemmChunkBlocks);
    prefetch.start();
    for (int64_t g = g_begin; g < g_end; ++g) {
      const int64_t n0 = g * kCols;
      const int cols = static_cast<int>(std::min<int64_t>(kCols, n_out - n0));
      const uint8_t* wcol0 = weight + static_cast<size_t>(n0) * row_bytes;
      for (int64_t b0 = 0; b0 < nb; b0 += kGemmChunkBlocks) {
        const int64_t nblk = std::min(kGemmChunkBlocks, nb - b0);
        prefetch.after(g, b0);
        for (int64_t t0 = 0; t0 < rows; t0 += kTile) {
          const int r_count = static_cast<int>(std::min<int64_t>(kTile, rows - t0));
          Tile tile;
          for (int r = 0; r < r_count; ++r) {
            tile.qs[r] = a.qs.data() + (t0 + r) * k;
            tile.ds[r] = a.ds.data() + (t0 + r) * nb * 2;
          }
          fns[r_count](wcol0, row_bytes, cols, tile, b0, nblk, out);
          for (int r = 0; r < r_count; ++r) {
            float* yr = y + (t0 + r) * n_out + n0;
            if (b0 == 0) {
              for (int c = 0; c < cols; ++c) yr[c] = out[r][c];
            } else {
              for (int c = 0; c < cols; ++c) yr[c] += out[r][c];
            }
          }
        }
      }
    }
  };
  if (pool != nullptr && pool->size() > 1) {
    pool->parallel_for(0, groups, run, std::max<int64_t>(1, matmul_grain(n_out) / kCols));
  } else {
    run(0, groups);
  }
  return true;
}

}  // namespace xinfer::quant::detail
