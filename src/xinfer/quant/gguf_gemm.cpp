// The GEMM for Q8_0, Q4_0 and Q4_1 weights at many activation rows (prefill), with the same arithmetic as
// gguf_matmul's GEMV (activations quantized to 8-bit blocks of 32, exact integer block sums, one float
// scale per (row, column, block)) but register-tiled: a micro-kernel computes 4 activation rows x 8 weight
// rows (output columns) at once, so every activation load feeds 8 columns and every weight load 4 rows.
//
// Panel (repacked per call, per thread, from the GGUF bytes; nothing persistent): for 8 consecutive
// weight rows (a column group) and a chunk of up to kChunkBlocks blocks, each block becomes
//   w[8][32] bytes: vector j (j = 0..7) holds elements 4j..4j+3 of the block for columns 0..7, 4 bytes each
//                   (Q4: the nibbles as bytes 0..15; Q8_0: the signed quants)
//   d[8]  f32: the columns' block scales
//   m[8]  f32: the min terms' factor (Q4_1: m; Q4_0: -8 d; Q8_0: unused)
// so that one 32-bit broadcast of 4 activation quants and one _mm256_maddubs_epi16 give 8 columns' partial
// sums. Q4 sums stay in int16 for a whole block: 8 steps of at most 2 * 15 * 127 = 3810 each, below 32767.
// Q8_0 signs move to the activations (_mm256_sign_epi8) and the pairs widen to int32 every step.
// A GGUF Q4 block's byte i holds element i (low nibble) and element i + 16 (high nibble), so bytes 4j..4j+3
// are vector j's low nibbles and vector j + 4's high nibbles: packing is a 4-byte transpose of 8 columns.
//
// Work: column groups split over the pool; per group, K in chunks of kChunkBlocks blocks (a panel of at
// most 20 KB, L1-resident while every 4-row tile of activations streams past it). The first chunk
// assigns y, later chunks add to it.
#include <algorithm>
#include <cstring>
#include <vector>

#include "xinfer/core/dtype.h"
#include "xinfer/quant/gguf_matmul.h"
#include "xinfer/quant/prefetch.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace xinfer::quant::detail {
namespace {

constexpr int kCols = 8;             // weight rows (output columns) per micro-kernel
constexpr int kRows = 4;             // activation rows per micro-kernel
constexpr int64_t kChunkBlocks = kGemmChunkBlocks;  // blocks of K per panel: 64 * 320 B = 20 KB
constexpr int kPanelBlockBytes = 8 * 32 + 2 * 8 * 4;  // w[8][32] + d[8] + m[8]

template <GgufType kType>
constexpr int block_bytes() {
  return kType == GgufType::kQ8_0 ? 34 : kType == GgufType::kQ4_1 ? 20 : 18;
}

// Panel of columns [n0, n0 + cols) (cols <= 8; missing columns are zeros), blocks [b0, b0 + nblk).
template <GgufType kType>
void pack_panel_portable(const uint8_t* weight, size_t row_bytes, int64_t n0, int cols, int64_t b0, int64_t nblk,
                         uint8_t* panel) {
  std::memset(panel, 0, static_cast<size_t>(nblk) * kPanelBlockBytes);
  for (int64_t b = 0; b < nblk; ++b) {
    uint8_t* pb = panel + b * kPanelBlockBytes;
    float d[kCols] = {}, m[kCols] = {};
    for (int c = 0; c < cols; ++c) {
      const uint8_t* blk = weight + static_cast<size_t>(n0 + c) * row_bytes + (b0 + b) * block_bytes<kType>();
      d[c] = gguf_f16(blk);
      if constexpr (kType == GgufType::kQ8_0) {
        for (int e = 0; e < 32; ++e) pb[(e / 4) * 32 + 4 * c + e % 4] = blk[2 + e];
      } else {
        m[c] = kType == GgufType::kQ4_1 ? gguf_f16(blk + 2) : -8.0f * d[c];
        const uint8_t* q = blk + (kType == GgufType::kQ4_1 ? 4 : 2);
        for (int e = 0; e < 16; ++e) {
          pb[(e / 4) * 32 + 4 * c + e % 4] = q[e] & 15;             // element e
          pb[(e / 4 + 4) * 32 + 4 * c + e % 4] = q[e] >> 4;         // element e + 16
        }
      }
    }
    std::memcpy(pb + 256, d, sizeof d);
    std::memcpy(pb + 288, m, sizeof m);
  }
}

// Activation rows of a tile at the chunk's first block: quants and (d, s) pairs.
struct ActTile {
  const int8_t* qs[kRows];
  const float* ds[kRows];
};

// out[r][c] = sum over the chunk's blocks of row r of the tile times column c of the panel.
template <GgufType kType, int R>
void tile_portable(const uint8_t* panel, int64_t nblk, const ActTile& a, float out[kRows][kCols]) {
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < kCols; ++c) out[r][c] = 0.0f;
  for (int64_t b = 0; b < nblk; ++b) {
    const uint8_t* pb = panel + b * kPanelBlockBytes;
    float d[kCols], m[kCols];
    std::memcpy(d, pb + 256, sizeof d);
    std::memcpy(m, pb + 288, sizeof m);
    for (int r = 0; r < R; ++r) {
      const int8_t* q = a.qs[r] + b * 32;
      for (int c = 0; c < kCols; ++c) {
        int sum = 0;
        for (int e = 0; e < 32; ++e) {
          const uint8_t wb = pb[(e / 4) * 32 + 4 * c + e % 4];
          const int wv = kType == GgufType::kQ8_0 ? static_cast<int8_t>(wb) : wb;
          sum += wv * q[e];
        }
        out[r][c] += d[c] * a.ds[r][2 * b] * static_cast<float>(sum);
        if constexpr (kType != GgufType::kQ8_0) out[r][c] += m[c] * a.ds[r][2 * b + 1];
      }
    }
  }
}

#if defined(__x86_64__)
// 8x4 transpose of 32-bit words: in[c] holds the 4 words of column c (c < 4) in its low lane and those of
// column c + 4 in its high lane; out[j] = word j of columns 0..7.
__attribute__((target("avx2"))) inline void transpose_words(const __m256i in[4], __m256i out[4]) {
  const __m256i t0 = _mm256_unpacklo_epi32(in[0], in[1]), t1 = _mm256_unpackhi_epi32(in[0], in[1]);
  const __m256i t2 = _mm256_unpacklo_epi32(in[2], in[3]), t3 = _mm256_unpackhi_epi32(in[2], in[3]);
  out[0] = _mm256_unpacklo_epi64(t0, t2);
  out[1] = _mm256_unpackhi_epi64(t0, t2);
  out[2] = _mm256_unpacklo_epi64(t1, t3);
  out[3] = _mm256_unpackhi_epi64(t1, t3);
}

template <GgufType kType>
__attribute__((target("avx2,fma,f16c"))) void pack_panel_avx2(const uint8_t* weight, size_t row_bytes,
                                                               int64_t n0, int cols, int64_t b0, int64_t nblk,
                                                               uint8_t* panel) {
  if (cols < kCols) return pack_panel_portable<kType>(weight, row_bytes, n0, cols, b0, nblk, panel);
  constexpr int kBytes = block_bytes<kType>();
  const uint8_t* rows[kCols];
  for (int c = 0; c < kCols; ++c) rows[c] = weight + static_cast<size_t>(n0 + c) * row_bytes + b0 * kBytes;
  const __m256i low4 = _mm256_set1_epi8(15);
  for (int64_t b = 0; b < nblk; ++b) {
    uint8_t* pb = panel + b * kPanelBlockBytes;
    // The 8 columns' (d, m) f16 pairs gathered in registers (8 two-byte stores read back as one vector would
    // stall on store forwarding).
    uint64_t dm[4];  // Q4_1: (d, m) of columns 2i, 2i+1; others: d of columns 4i..4i+3 in dm[0..1]
    if constexpr (kType == GgufType::kQ4_1) {
      for (int i = 0; i < 4; ++i) {
        uint32_t lo, hi;
        std::memcpy(&lo, rows[2 * i] + b * kBytes, 4);
        std::memcpy(&hi, rows[2 * i + 1] + b * kBytes, 4);
        dm[i] = lo | static_cast<uint64_t>(hi) << 32;
      }
    } else {
      for (int i = 0; i < 2; ++i) {
        uint64_t v = 0;
        for (int c = 0; c < 4; ++c) {
          uint16_t h;
          std::memcpy(&h, rows[4 * i + c] + b * kBytes, 2);
          v |= static_cast<uint64_t>(h) << (16 * c);
        }
        dm[i] = v;
      }
    }
    __m256 d;
    if constexpr (kType == GgufType::kQ4_1) {
      // (d0 m0 d1 m1 ...) as f32: even lanes d, odd lanes m, deinterleaved by a permute.
      const __m256 lo = _mm256_cvtph_ps(_mm_set_epi64x(static_cast<int64_t>(dm[1]), static_cast<int64_t>(dm[0])));
      const __m256 hi = _mm256_cvtph_ps(_mm_set_epi64x(static_cast<int64_t>(dm[3]), static_cast<int64_t>(dm[2])));
      const __m256i even = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
      const __m256 lo_p = _mm256_permutevar8x32_ps(lo, even), hi_p = _mm256_permutevar8x32_ps(hi, even);
      d = _mm256_permute2f128_ps(lo_p, hi_p, 0x20);
      _mm256_storeu_ps(reinterpret_cast<float*>(pb + 288), _mm256_permute2f128_ps(lo_p, hi_p, 0x31));
    } else {
      d = _mm256_cvtph_ps(_mm_set_epi64x(static_cast<int64_t>(dm[1]), static_cast<int64_t>(dm[0])));
    }
    _mm256_storeu_ps(reinterpret_cast<float*>(pb + 256), d);
    if constexpr (kType == GgufType::kQ4_0) {
      _mm256_storeu_ps(reinterpret_cast<float*>(pb + 288), _mm256_mul_ps(d, _mm256_set1_ps(-8.0f)));
    }
    auto* out = reinterpret_cast<__m256i*>(pb);
    if constexpr (kType == GgufType::kQ8_0) {
      for (int half = 0; half < 2; ++half) {  // words 0..3, then 4..7 of each column
        __m256i in[4], t[4];
        for (int c = 0; c < 4; ++c) {
          const auto* lo = reinterpret_cast<const __m128i*>(rows[c] + b * kBytes + 2 + 16 * half);
          const auto* hi = reinterpret_cast<const __m128i*>(rows[c + 4] + b * kBytes + 2 + 16 * half);
          in[c] = _mm256_set_m128i(_mm_loadu_si128(hi), _mm_loadu_si128(lo));
        }
        transpose_words(in, t);
        for (int j = 0; j < 4; ++j) _mm256_storeu_si256(out + 4 * half + j, t[j]);
      }
    } else {
      constexpr int kQuant = kType == GgufType::kQ4_1 ? 4 : 2;
      __m256i lo[4], hi[4], t[4];
      for (int c = 0; c < 4; ++c) {
        const __m256i raw = _mm256_set_m128i(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[c + 4] + b * kBytes + kQuant)),
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[c] + b * kBytes + kQuant)));
        lo[c] = _mm256_and_si256(raw, low4);
        hi[c] = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
      }
      transpose_words(lo, t);
      for (int j = 0; j < 4; ++j) _mm256_storeu_si256(out + j, t[j]);
      transpose_words(hi, t);
      for (int j = 0; j < 4; ++j) _mm256_storeu_si256(out + 4 + j, t[j]);
    }
  }
}

// An empty asm that "modifies" v: GCC otherwise reassociates the int16 sums into a tree of all 32 products
// of a block, which needs twice the 16 ymm registers and spills the accumulators.
__attribute__((target("avx2"))) inline void keep_order(__m256i& v) {
  __asm__("" : "+x"(v));
}

__attribute__((target("avx2"))) inline __m256i broadcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

template <GgufType kType, int R>
__attribute__((target("avx2,fma,f16c"))) void tile_avx2(const uint8_t* panel, int64_t nblk, const ActTile& a,
                                                         float out[kRows][kCols]) {
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < nblk; ++b) {
    const uint8_t* pb = panel + b * kPanelBlockBytes;
    const auto* wv = reinterpret_cast<const __m256i*>(pb);
    __m256i isum[R];
    if constexpr (kType == GgufType::kQ8_0) {
      for (int r = 0; r < R; ++r) isum[r] = _mm256_setzero_si256();
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) {
        const __m256i ws = _mm256_loadu_si256(wv + j), wa = _mm256_abs_epi8(ws);
        for (int r = 0; r < R; ++r) {
          const __m256i q = _mm256_sign_epi8(broadcast4(a.qs[r] + b * 32 + 4 * j), ws);
          isum[r] = _mm256_add_epi32(isum[r], _mm256_madd_epi16(_mm256_maddubs_epi16(wa, q), ones));
          keep_order(isum[r]);
        }
      }
    } else {
      {
        const __m256i w = _mm256_loadu_si256(wv);
        for (int r = 0; r < R; ++r) isum[r] = _mm256_maddubs_epi16(w, broadcast4(a.qs[r] + b * 32));
      }
#pragma GCC unroll 7
      for (int j = 1; j < 8; ++j) {
        const __m256i w = _mm256_loadu_si256(wv + j);
        for (int r = 0; r < R; ++r) {
          isum[r] = _mm256_add_epi16(isum[r], _mm256_maddubs_epi16(w, broadcast4(a.qs[r] + b * 32 + 4 * j)));
          keep_order(isum[r]);
        }
      }
      for (int r = 0; r < R; ++r) isum[r] = _mm256_madd_epi16(isum[r], ones);
    }
    const __m256 d = _mm256_loadu_ps(reinterpret_cast<const float*>(pb + 256));
    for (int r = 0; r < R; ++r) {
      const __m256 scale = _mm256_mul_ps(d, _mm256_broadcast_ss(a.ds[r] + 2 * b));
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r]), scale, acc[r]);
    }
    if constexpr (kType != GgufType::kQ8_0) {
      const __m256 m = _mm256_loadu_ps(reinterpret_cast<const float*>(pb + 288));
      for (int r = 0; r < R; ++r) acc[r] = _mm256_fmadd_ps(m, _mm256_broadcast_ss(a.ds[r] + 2 * b + 1), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) _mm256_storeu_ps(out[r], acc[r]);
}
#endif

using PackFn = void (*)(const uint8_t*, size_t, int64_t, int, int64_t, int64_t, uint8_t*);
using TileFn = void (*)(const uint8_t*, int64_t, const ActTile&, float[kRows][kCols]);

struct Kernels {
  PackFn pack;
  TileFn tile[kRows + 1];
};

template <GgufType kType>
Kernels kernels_for(bool simd) {
#if defined(__x86_64__)
  if (simd) {
    return {pack_panel_avx2<kType>,
            {nullptr, tile_avx2<kType, 1>, tile_avx2<kType, 2>, tile_avx2<kType, 3>, tile_avx2<kType, 4>}};
  }
#endif
  return {pack_panel_portable<kType>,
          {nullptr, tile_portable<kType, 1>, tile_portable<kType, 2>, tile_portable<kType, 3>,
           tile_portable<kType, 4>}};
}

}  // namespace

bool gguf_gemm(const GgufFormat& f, const QuantizedMatrix& w, const float* x, int64_t rows, float* y,
               ThreadPool* pool) {
  const bool simd = simd_enabled();
  Kernels kern;
  switch (f.type) {
    case GgufType::kQ8_0:
      kern = kernels_for<GgufType::kQ8_0>(simd);
      break;
    case GgufType::kQ4_0:
      kern = kernels_for<GgufType::kQ4_0>(simd);
      break;
    case GgufType::kQ4_1:
      kern = kernels_for<GgufType::kQ4_1>(simd);
      break;
    default:
      return false;
  }
  const int64_t k = w.k, n_out = w.n, nb = k / 32;
  const size_t row_bytes = gguf_row_bytes(f.type, k).value();
  thread_local Q8Rows caller_rows;  // see gguf_matmul: the workers use the caller's instance
  Q8Rows& a = caller_rows;
  quantize_rows_q8(x, rows, k, &a);
  const auto* weight = static_cast<const uint8_t*>(w.weight);
  const int64_t groups = (n_out + kCols - 1) / kCols;
  auto run = [&](int64_t g_begin, int64_t g_end) {
    thread_local std::vector<uint8_t> panel_storage;
    panel_storage.resize(static_cast<size_t>(kChunkBlocks) * kPanelBlockBytes);
    uint8_t* panel = panel_storage.data();
    float out[kRows][kCols];
    // Each (group, K chunk)'s weights one item ahead, while the item before it is packed and multiplied.
    const GroupChunkPrefetch prefetch(weight, static_cast<int64_t>(row_bytes), n_out, kCols, g_begin, g_end,
                                      nb, kChunkBlocks);
    prefetch.start();
    for (int64_t g = g_begin; g < g_end; ++g) {
      const int64_t n0 = g * kCols;
      const int cols = static_cast<int>(std::min<int64_t>(kCols, n_out - n0));
      for (int64_t b0 = 0; b0 < nb; b0 += kChunkBlocks) {
        const int64_t nblk = std::min(kChunkBlocks, nb - b0);
        prefetch.after(g, b0);
        kern.pack(weight, row_bytes, n0, cols, b0, nblk, panel);
        for (int64_t t0 = 0; t0 < rows; t0 += kRows) {
          const int r_count = static_cast<int>(std::min<int64_t>(kRows, rows - t0));
          ActTile tile;
          for (int r = 0; r < r_count; ++r) {
            tile.qs[r] = a.qs.data() + (t0 + r) * k + b0 * 32;
            tile.ds[r] = a.ds.data() + ((t0 + r) * nb + b0) * 2;
          }
          kern.tile[r_count](panel, nblk, tile, out);
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
    pool->parallel_for(0, groups, run, 1);
  } else {
    run(0, groups);
  }
  return true;
}

}  // namespace xinfer::quant::detail
