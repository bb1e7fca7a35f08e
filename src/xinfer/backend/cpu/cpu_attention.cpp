// Paged causal attention on the CPU: one task per (token, KV head), which computes the token's query heads of
// that KV head's group. Reads K/V for every position of the token's sequence up to and including its own
// position through the block table, a cache block at a time (its rows of this KV head are contiguous), so the
// same code serves prefill chunks (which also see cached prefix blocks) and decodes.
//
// Precision (the CPU backend is the oracle): scores q.k in f32; the softmax weights exp(score - max) in
// double, summed in double, and rounded to f32 (0 below FLT_MIN) for the weighted sum of V, which is f32
// within each run of kVPartialRows positions (0-15, 16-31, .. of the sequence, whatever the cache's block
// size) and double across runs. The AVX2+FMA path (when quant::simd_enabled(), i.e. the CPU has it and
// XINFER_QUANT_PORTABLE is not set, and head_dim % 8 == 0) computes the same quantities with 8-lane f32 dot
// products (another summation order) and FMAs for the V sum. (Until session 33 the V sum was double per row,
// for no accuracy a reference in f32 could see.) Every (token, head) runs on one thread, in an order that
// depends only on its positions: chunked prefill gives one-shot prefill's bits, a batch gives each
// sequence's.
//
// Speed (session 34, the same bits as before on SmolLM2's logits): a block's keys are scored four at a time
// (dot_rows: q loaded once for the four, the four reductions side by side), the V sum keeps its f32 partial
// sums in registers over a run's rows (axpy_rows), the softmax weights' exp runs four doubles at a time
// (simd_math.h, within 1 ulp of std::exp), a block serves the whole GQA group (read, or for fp8 dequantized,
// once), fp8 codes are dequantized sixteen at a time, and the tasks are handed to the threads early and late
// tokens interleaved (a causal prefill's later tokens cost more). SmolLM2 Q4_1, a 2048-token prompt on 2
// cores: see docs/PERF.md "Session 34".
//
// Tried in session 33 and not kept: the weights in f32 (an 8-lane polynomial exp took prompts of 2048 tokens
// from 0.98x to 1.05-1.09x llama.cpp's prefill speed; expf too), whose last-ulp differences move which cached
// values of the FP8 KV test (test_eval_ppl.py) round across an e4m3 midpoint, past its 1% KL bound; and the
// exps in a pass of their own before the V sum (10% slower at those prompts than inside it, where they
// overlap the FMAs).
//
// FP8 (e4m3) caches: each block's K / V rows are first dequantized to f32, element = to_float(e4m3) * scale
// (one f32 multiply; the code's exact value from its bits on the AVX2 path, sixteen at a time, from a
// 256-entry table per KV head otherwise), then used exactly as f32 rows: the result equals attention over the
// dequantized cache in f32.
#include <algorithm>
#include <array>
#include <cfloat>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "xinfer/backend/cpu/cpu_backend.h"
#include "xinfer/backend/cpu/simd_math.h"
#include "xinfer/quant/e4m3_simd.h"
#include "xinfer/quant/prefetch.h"
#include "xinfer/quant/quantized_linear.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace xinfer::cpu {
namespace {

float dot_portable(const float* q, const float* k, int n) {
  float dot = 0;
  for (int d = 0; d < n; ++d) dot += q[d] * k[d];
  return dot;
}

// Positions per f32 partial sum of V (see the top).
constexpr int64_t kVPartialRows = 16;

// Rows per call of the dot kernels: the rows of a cache block are scored kDotRows at a time.
constexpr int64_t kDotRows = 4;

// out[r] = q . k[r * n ..] for r < kDotRows: dot_portable's value for each row.
void dot_rows_portable(const float* q, const float* k, int n, float* out) {
  for (int64_t r = 0; r < kDotRows; ++r) out[r] = dot_portable(q, k + r * n, n);
}

// part[d] += p[r] * v[r * n + d] for r = 0, 1, .. rows - 1 in turn: each element's sum in the order of the
// rows, as one call per row would give.
void axpy_rows_portable(const float* p, const float* v, int64_t rows, int n, float* part) {
  for (int64_t r = 0; r < rows; ++r)
    for (int d = 0; d < n; ++d) part[d] += p[r] * v[r * n + d];
}

// The softmax weights of `len` scores: p = exp(score - max) in double (the f32 difference widened), added to
// *denom in order, and w = p rounded to f32, 0 below FLT_MIN (weights below f32's normal range add nothing an
// f32 sum keeps, and subnormal operands can take microcode assists).
void softmax_weights_portable(const float* scores, int64_t len, float max_score, double* denom, float* w) {
  for (int64_t r = 0; r < len; ++r) {
    const double p = std::exp(static_cast<double>(scores[r] - max_score));
    *denom += p;
    w[r] = p < FLT_MIN ? 0.0f : static_cast<float>(p);
  }
}

// dst[e] = the e4m3 code src[e] dequantized: lut[code] = to_float(code) * the head's scale (in f32).
void dequant_e4m3_portable(const uint8_t* src, int64_t count, const float* lut, float /*scale*/, float* dst) {
  for (int64_t e = 0; e < count; ++e) dst[e] = lut[src[e]];
}

#if defined(__x86_64__)
// x = s0 + s1, then its two halves added: lanes x0 + x4, x1 + x5, x2 + x6, x3 + x7.
__attribute__((target("avx2,fma"))) inline __m128 halves_avx2(__m256 s0, __m256 s1) {
  const __m256 x = _mm256_add_ps(s0, s1);
  return _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));  // lanes x0 + x4, .., x3 + x7
}

// The lanes of s0 + s1 summed as ((x0 + x4) + (x2 + x6)) + ((x1 + x5) + (x3 + x7)); dot_rows_avx2's four-row
// reduction forms the same pairs (floating-point addition is commutative, so the operand order within a pair
// does not matter; the pairing does).
__attribute__((target("avx2,fma"))) inline float reduce_avx2(__m256 s0, __m256 s1) {
  __m128 s4 = halves_avx2(s0, s1);
  s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  s4 = _mm_add_ss(s4, _mm_movehdup_ps(s4));
  return _mm_cvtss_f32(s4);
}

// The one-row dot product of the AVX2 path: two 8-lane accumulators (16 elements a step, then 8), reduced by
// reduce_avx2. n % 8 == 0.
__attribute__((target("avx2,fma"))) float dot_avx2(const float* q, const float* k, int n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  int d = 0;
  for (; d + 16 <= n; d += 16) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), _mm256_loadu_ps(k + d), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d + 8), _mm256_loadu_ps(k + d + 8), s1);
  }
  if (d + 8 <= n) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), _mm256_loadu_ps(k + d), s0);
  return reduce_avx2(s0, s1);
}

// kDotRows rows at once, each row's operations exactly dot_avx2's (so the same bits): q is loaded once per
// step for the four rows, and the four reductions run side by side (a 4x4 transpose, then the same pairs).
// n % 8 == 0 (no scalar tail).
__attribute__((target("avx2,fma"))) void dot_rows_avx2(const float* q, const float* k, int n, float* out) {
  static_assert(kDotRows == 4);
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, b0 = a0, b1 = a0, c0 = a0, c1 = a0, d0 = a0, d1 = a0;
  const float *ka = k, *kb = k + n, *kc = k + 2 * n, *kd = k + 3 * n;
  int d = 0;
  for (; d + 16 <= n; d += 16) {
    const __m256 q0 = _mm256_loadu_ps(q + d), q1 = _mm256_loadu_ps(q + d + 8);
    a0 = _mm256_fmadd_ps(q0, _mm256_loadu_ps(ka + d), a0);
    a1 = _mm256_fmadd_ps(q1, _mm256_loadu_ps(ka + d + 8), a1);
    b0 = _mm256_fmadd_ps(q0, _mm256_loadu_ps(kb + d), b0);
    b1 = _mm256_fmadd_ps(q1, _mm256_loadu_ps(kb + d + 8), b1);
    c0 = _mm256_fmadd_ps(q0, _mm256_loadu_ps(kc + d), c0);
    c1 = _mm256_fmadd_ps(q1, _mm256_loadu_ps(kc + d + 8), c1);
    d0 = _mm256_fmadd_ps(q0, _mm256_loadu_ps(kd + d), d0);
    d1 = _mm256_fmadd_ps(q1, _mm256_loadu_ps(kd + d + 8), d1);
  }
  if (d + 8 <= n) {
    const __m256 q0 = _mm256_loadu_ps(q + d);
    a0 = _mm256_fmadd_ps(q0, _mm256_loadu_ps(ka + d), a0);
    b0 = _mm256_fmadd_ps(q0, _mm256_loadu_ps(kb + d), b0);
    c0 = _mm256_fmadd_ps(q0, _mm256_loadu_ps(kc + d), c0);
    d0 = _mm256_fmadd_ps(q0, _mm256_loadu_ps(kd + d), d0);
  }
  __m128 ta = halves_avx2(a0, a1), tb = halves_avx2(b0, b1), tc = halves_avx2(c0, c1),
         td = halves_avx2(d0, d1);
  _MM_TRANSPOSE4_PS(ta, tb, tc, td);  // ta: lane 0 of each row, tb: lane 1, ...
  _mm_storeu_ps(out, _mm_add_ps(_mm_add_ps(ta, tc), _mm_add_ps(tb, td)));
}

// axpy_rows for 8 * C elements: the partial sums stay in registers across the rows.
template <int C>
__attribute__((target("avx2,fma"))) inline void axpy_rows_slice_avx2(const float* p, const float* v,
                                                                     int64_t rows, int n, float* part) {
  __m256 acc[C];
  for (int c = 0; c < C; ++c) acc[c] = _mm256_loadu_ps(part + 8 * c);
  for (int64_t r = 0; r < rows; ++r) {
    const __m256 pv = _mm256_set1_ps(p[r]);
    const float* vr = v + r * n;
    for (int c = 0; c < C; ++c) acc[c] = _mm256_fmadd_ps(pv, _mm256_loadu_ps(vr + 8 * c), acc[c]);
  }
  for (int c = 0; c < C; ++c) _mm256_storeu_ps(part + 8 * c, acc[c]);
}

// softmax_weights_portable with exp four at a time (simd_math.h: within 1 ulp of std::exp); every score goes
// through the same exp, the last partial group too, so a weight's bits do not depend on where a piece ends.
__attribute__((target("avx2,fma"))) void softmax_weights_avx2(const float* scores, int64_t len,
                                                              float max_score, double* denom, float* w) {
  const __m128 max4 = _mm_set1_ps(max_score);
  const __m256d min_normal = _mm256_set1_pd(FLT_MIN);
  for (int64_t r = 0; r < len; r += 4) {
    const int64_t m = std::min<int64_t>(4, len - r);
    const __m128 sc = m == 4
                          ? _mm_loadu_ps(scores + r)
                          : _mm_maskload_ps(scores + r, _mm_cmpgt_epi32(_mm_set1_epi32(static_cast<int>(m)),
                                                                        _mm_setr_epi32(0, 1, 2, 3)));
    const __m256d p = exp_nonpositive_pd_avx2(_mm256_cvtps_pd(_mm_sub_ps(sc, max4)));
    double pd[4];
    _mm256_storeu_pd(pd, p);
    // 0 below FLT_MIN before the conversion: an f32 subnormal result would take a microcode assist.
    float wf[4];
    _mm_storeu_ps(wf, _mm256_cvtpd_ps(_mm256_andnot_pd(_mm256_cmp_pd(p, min_normal, _CMP_LT_OQ), p)));
    for (int64_t l = 0; l < m; ++l) {
      *denom += pd[l];
      w[r + l] = wf[l];
    }
  }
}

// dequant_e4m3_portable's values (the exact code times the scale, one f32 rounding), sixteen at a time
// (quant/e4m3_simd.h).
__attribute__((target("avx2,fma,f16c"))) void dequant_e4m3_avx2(const uint8_t* src, int64_t count,
                                                                const float* lut, float scale, float* dst) {
  const __m256 s = _mm256_set1_ps(scale);
  int64_t e = 0;
  for (; e + 16 <= count; e += 16) {
    __m256 v[2];
    quant::e4m3x16_to_f32_nan_avx2(src + e, v);
    _mm256_storeu_ps(dst + e, _mm256_mul_ps(v[0], s));
    _mm256_storeu_ps(dst + e + 8, _mm256_mul_ps(v[1], s));
  }
  for (; e < count; ++e) dst[e] = lut[src[e]];
}

// axpy_rows_slice_avx2<1..8>, by slice width in 8-lane vectors - 1.
using AxpySliceFn = void (*)(const float*, const float*, int64_t, int, float*);
template <size_t... I>
constexpr std::array<AxpySliceFn, sizeof...(I)> axpy_slices(std::index_sequence<I...>) {
  return {&axpy_rows_slice_avx2<static_cast<int>(I) + 1>...};
}
constexpr auto kAxpySlices = axpy_slices(std::make_index_sequence<8>{});

// axpy_rows_portable's sums with one FMA each (the AVX2 path's rounding: p * v + part rounded once), in
// slices of up to 64 elements. n % 8 == 0.
__attribute__((target("avx2,fma"))) void axpy_rows_avx2(const float* p, const float* v, int64_t rows, int n,
                                                        float* part) {
  for (int d = 0; d < n; d += 64)
    kAxpySlices[static_cast<size_t>(std::min(64, n - d) / 8 - 1)](p, v + d, rows, n, part + d);
}
#endif

}  // namespace

void CpuBackend::paged_attention(const backend::StepMeta& step, const TensorView& qkv, int num_heads,
                                 int num_kv_heads, int head_dim, float scale, const backend::LayerKvCache& cache,
                                 const TensorView& out) {
  XI_CHECK_EQ(num_heads % num_kv_heads, 0);
  const int group = num_heads / num_kv_heads;
  const int64_t row = static_cast<int64_t>(num_heads + 2 * num_kv_heads) * head_dim;
  const int64_t block_size = cache.k.shape[2];
  XI_CHECK_EQ(cache.k.shape[1], num_kv_heads);
  XI_CHECK_EQ(cache.k.shape[3], head_dim);
  const bool fp8 = cache.fp8();
  XI_CHECK(fp8 || cache.k.dtype == DType::kF32) << "cpu: KV cache in " << dtype_name(cache.k.dtype);
  // fp8: the dequantized value of each code, for K and for V of each KV head: [num_kv_heads, 256].
  std::vector<float> k_lut, v_lut, k_scale, v_scale;
  if (fp8) {
    // Every code's value, computed once per process (this runs for every layer of every step).
    static const std::array<float, 256> kCodeValue = [] {
      std::array<float, 256> v{};
      for (int c = 0; c < 256; ++c) v[static_cast<size_t>(c)] = to_float(fp8_e4m3{static_cast<uint8_t>(c)});
      return v;
    }();
    k_lut.resize(static_cast<size_t>(num_kv_heads) * 256);
    v_lut.resize(k_lut.size());
    for (int h = 0; h < num_kv_heads; ++h) {
      k_scale.push_back(cache.host_k_scale(h));
      v_scale.push_back(cache.host_v_scale(h));
      for (size_t c = 0; c < 256; ++c) {
        k_lut[static_cast<size_t>(h) * 256 + c] = kCodeValue[c] * k_scale.back();
        v_lut[static_cast<size_t>(h) * 256 + c] = kCodeValue[c] * v_scale.back();
      }
    }
  }
  auto* dequant = dequant_e4m3_portable;
#if defined(__x86_64__)
  if (quant::simd_enabled()) dequant = dequant_e4m3_avx2;
#endif
  // The rows [0, rows) of KV head kvh in cache block `block` of cache `which` as f32 (head_dim apart): the
  // cache's own memory (f32), or dequantized into `buf`.
  const int64_t head_block = block_size * head_dim;  // elements of one KV head in one block
  auto block_rows = [&](const TensorView& which, const std::vector<float>& lut,
                        const std::vector<float>& scales, int32_t block, int kvh, int64_t rows,
                        float* buf) -> const float* {
    const int64_t off = (static_cast<int64_t>(block) * num_kv_heads + kvh) * head_block;
    if (!fp8) return which.as<float>() + off;
    dequant(static_cast<const uint8_t*>(which.data) + off, rows * head_dim,
            lut.data() + static_cast<size_t>(kvh) * 256, scales[static_cast<size_t>(kvh)], buf);
    return buf;
  };
  // The first rows (at most kPrefetchAheadBytes: within a block the hardware follows the stream) of this KV
  // head in the next block, while the block before it is used (quant/prefetch.h), for decodes only: a decode
  // reads its sequence's cache once per step, so a long context streams from memory as the weights do
  // (SmolLM2 at context 2048: ITL 18.6 -> 16.0 ms); a prefill chunk re-reads it for each of its tokens from
  // the caches, where the prefetches only cost issue slots (TTFT of 2048 tokens 9.45 -> 10.15 s).
  const int64_t row_bytes = head_dim * static_cast<int64_t>(fp8 ? 1 : sizeof(float));
  auto prefetch_block = [&](const TensorView& which, int32_t block, int kvh, int64_t rows) {
    const uint8_t* p = static_cast<const uint8_t*>(which.data) +
                       (static_cast<int64_t>(block) * num_kv_heads + kvh) * block_size * row_bytes;
    const int64_t bytes = std::min(rows * row_bytes, quant::kPrefetchAheadBytes);
    quant::prefetch_lines_ahead(p, 0, bytes, p + bytes);
  };

  // Which sequence each token belongs to.
  std::vector<int32_t> seq_of(static_cast<size_t>(step.num_tokens));
  for (int s = 0; s < step.num_seqs; ++s)
    for (int t = step.query_start_loc[s]; t < step.query_start_loc[s + 1]; ++t) seq_of[static_cast<size_t>(t)] = s;

  auto* dot = dot_portable;
  auto* dot_rows = dot_rows_portable;
  auto* axpy_rows = axpy_rows_portable;
  auto* softmax_weights = softmax_weights_portable;
#if defined(__x86_64__)
  if (quant::simd_enabled() && head_dim % 8 == 0) {
    dot = dot_avx2;
    dot_rows = dot_rows_avx2;
    axpy_rows = axpy_rows_avx2;
    softmax_weights = softmax_weights_avx2;
  }
#endif
  // One task per (token, KV head): the query heads of its group read the same cache rows, so each block is
  // read (and for fp8, dequantized) once for all of them, while every head's arithmetic is its own. Also for
  // a decode of one sequence, where the tasks are few (SmolLM2 has 3 KV heads for 2 threads): one task per
  // query head balanced the threads but lost more than that, ITL at context 2048 f32 KV 13.1-13.7 ms against
  // 14.0-14.1 grouped, FP8 KV 19.4 against 14.7-15.4.
  const int64_t tasks = static_cast<int64_t>(step.num_tokens) * num_kv_heads;
  const size_t hd = static_cast<size_t>(head_dim);
  pool_->parallel_for(
      0, tasks,
      [&](int64_t b, int64_t e) {
        std::vector<float> scores;                                 // [group][n]
        std::vector<double> acc(static_cast<size_t>(group) * hd);  // [group][head_dim]
        std::vector<float> part(static_cast<size_t>(group) * hd);
        std::vector<float> max_score(static_cast<size_t>(group));
        std::vector<double> denom(static_cast<size_t>(group));
        float weights[kVPartialRows];
        std::vector<float> block_buf(fp8 ? static_cast<size_t>(head_block) : 0);
        for (int64_t i = b; i < e; ++i) {
          // A causal prefill's later tokens cost more (their task reads every position before them), and the
          // pool gives each thread one contiguous range of indices: index i runs token 0, T-1, 1, T-2, ... (a
          // token's KV heads together), so every range holds early and late tokens alike.
          const int64_t ti = i / num_kv_heads;
          const int64_t t = ti % 2 == 0 ? ti / 2 : step.num_tokens - 1 - ti / 2;
          const int kvh = static_cast<int>(i % num_kv_heads);
          const int h0 = kvh * group;  // the task's first query head
          const int s = seq_of[static_cast<size_t>(t)];
          const int32_t pos = step.positions[t];
          XI_CHECK_LT(pos, step.seq_lens[s]) << "token position past its sequence's length";
          const int32_t* table = step.block_tables + static_cast<int64_t>(s) * step.max_blocks_per_seq;
          // The task's query heads h0 + g are adjacent in the row.
          const float* q0 = qkv.as<float>() + t * row + static_cast<int64_t>(h0) * head_dim;

          const int64_t n = pos + 1;
          const int64_t num_blocks = (n + block_size - 1) / block_size;
          const bool decode = step.query_start_loc[s + 1] - step.query_start_loc[s] == 1;
          // Block blk's first `rows` rows of this KV head in `which` as f32, the next block's first rows
          // prefetched for decodes.
          auto rows_of = [&](const TensorView& which, const std::vector<float>& lut,
                             const std::vector<float>& scales, int64_t blk, int64_t rows) {
            if (decode && blk + 1 < num_blocks)
              prefetch_block(which, table[blk + 1], kvh, std::min(block_size, n - (blk + 1) * block_size));
            return block_rows(which, lut, scales, table[blk], kvh, rows, block_buf.data());
          };
          scores.resize(static_cast<size_t>(group * n));
          std::fill(max_score.begin(), max_score.end(), -INFINITY);
          for (int64_t blk = 0; blk < num_blocks; ++blk) {
            const int64_t j0 = blk * block_size, rows = std::min(block_size, n - j0);
            const float* k = rows_of(cache.k, k_lut, k_scale, blk, rows);
            for (int g = 0; g < group; ++g) {
              const float* q = q0 + static_cast<int64_t>(g) * head_dim;
              float* sc = scores.data() + g * n + j0;
              int64_t r = 0;
              for (; r + kDotRows <= rows; r += kDotRows) dot_rows(q, k + r * head_dim, head_dim, sc + r);
              for (; r < rows; ++r) sc[r] = dot(q, k + r * head_dim, head_dim);
              float block_max = -INFINITY;  // a local, kept in a register
              for (r = 0; r < rows; ++r) {
                sc[r] *= scale;
                block_max = std::max(block_max, sc[r]);
              }
              max_score[static_cast<size_t>(g)] = std::max(max_score[static_cast<size_t>(g)], block_max);
            }
          }
          std::fill(denom.begin(), denom.end(), 0.0);
          std::fill(acc.begin(), acc.end(), 0.0);
          std::fill(part.begin(), part.end(), 0.0f);
          for (int64_t blk = 0; blk < num_blocks; ++blk) {
            const int64_t j0 = blk * block_size, rows = std::min(block_size, n - j0);
            const float* v = rows_of(cache.v, v_lut, v_scale, blk, rows);
            for (int g = 0; g < group; ++g) {
              const size_t gi = static_cast<size_t>(g);
              float* part_g = part.data() + gi * hd;
              double* acc_g = acc.data() + gi * hd;
              // The block's rows in pieces that end where a run of kVPartialRows positions ends (or the block
              // does).
              for (int64_t r0 = 0; r0 < rows;) {
                const int64_t j0r = j0 + r0;
                const int64_t len = std::min(rows - r0, kVPartialRows - j0r % kVPartialRows);
                softmax_weights(scores.data() + g * n + j0r, len, max_score[gi], &denom[gi], weights);
                axpy_rows(weights, v + r0 * head_dim, len, head_dim, part_g);
                r0 += len;
                if ((j0r + len) % kVPartialRows == 0 || j0r + len == n) {  // a run done: into the double sum
                  for (size_t d = 0; d < hd; ++d) {
                    acc_g[d] += part_g[d];
                    part_g[d] = 0.0f;
                  }
                }
              }
            }
          }
          float* o = out.as<float>() + (t * num_heads + h0) * static_cast<int64_t>(head_dim);
          for (size_t x = 0; x < static_cast<size_t>(group) * hd; ++x)
            o[x] = static_cast<float>(acc[x] / denom[x / hd]);
        }
      },
      grain_for(4 * static_cast<int64_t>(step.max_seq_len) * head_dim * group));
}

}  // namespace xinfer::cpu
