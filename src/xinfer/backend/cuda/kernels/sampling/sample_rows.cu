#include "xinfer/backend/cuda/kernels/sampling/sample_rows.h"

#include <climits>
#include <cstdint>

#include "xinfer/backend/cuda/cuda_check.h"

namespace xinfer::cuda {
namespace {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kBins = 2048;  // 11-bit radix digits
constexpr int kCap = kSampleCandidates;
constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ull;
constexpr float kFixedScale = 17592186044416.0f;  // 2^44: weights in (0, 1] -> fixed point
static_assert(kThreads <= kCap && (kCap & (kCap - 1)) == 0);

struct Shared {
  uint64_t keys[kCap];     // sort keys: (u32 key << 32) | ~id, sorted descending = key desc, id asc
  uint32_t meas_lo[kBins];  // radix histogram: mass (top-p) per bin, low 32 bits (bin_mass)
  uint32_t meas_hi[kBins];  // and high 32 bits
  uint32_t count[kBins];   // radix histogram: elements per bin
  uint64_t red_u64[kWarps];
  float red_f[kWarps];
  int red_i[kWarps];
  int red_c[kWarps];
  uint32_t n_keys;
  int q;
  uint64_t q_excl;
  int tile_id;
};

__device__ __forceinline__ float neg_inf() { return -__int_as_float(0x7f800000); }

// Order-preserving u32 key of a logit (bigger key = bigger value); -0 counts as +0; NaN -> 0 (never a
// candidate). -inf is 0x007fffff, so every non-NaN logit has a key >= 1.
__device__ __forceinline__ uint32_t logit_key(float l) {
  if (l != l) return 0;
  const uint32_t u = l == 0.0f ? 0u : __float_as_uint(l);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float key_logit(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

// The host Sampler's exp_nonpositive (engine/sampler.cpp), operation for operation with round-to-nearest
// and no contraction, so weights equal the host's: e^x for x <= 0, exactly 0 below -87.
__device__ __forceinline__ float exp_nonpositive(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693145751953125f;
  constexpr float kLn2Lo = 1.42860682030941723212e-6f;
  constexpr float kRound = 12582912.0f;
  if (x < -87.0f) return 0.0f;
  const float t = __fadd_rn(__fmul_rn(x, kLog2e), kRound);
  const float n = __fsub_rn(t, kRound);
  const uint32_t ni = __float_as_uint(t) - __float_as_uint(kRound);
  const float r = __fsub_rn(__fsub_rn(x, __fmul_rn(n, kLn2Hi)), __fmul_rn(n, kLn2Lo));
  float p = 1.0f / 720;
  p = __fadd_rn(__fmul_rn(p, r), 1.0f / 120);
  p = __fadd_rn(__fmul_rn(p, r), 1.0f / 24);
  p = __fadd_rn(__fmul_rn(p, r), 1.0f / 6);
  p = __fadd_rn(__fmul_rn(p, r), 0.5f);
  p = __fadd_rn(__fmul_rn(p, r), 1.0f);
  p = __fadd_rn(__fmul_rn(p, r), 1.0f);
  return __uint_as_float(__float_as_uint(p) + (ni << 23));
}

__device__ __forceinline__ uint64_t fixed_mass(uint32_t weight_bits) {
  return __float2ull_rn(__fmul_rn(__uint_as_float(weight_bits), kFixedScale));
}

__device__ __forceinline__ uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Race value of token `id` with weight w > 0: w / E, E ~ Exp(1) from 23 random bits (v in (0, 1), exact).
__device__ __forceinline__ float race(uint64_t random_bits, int id, float w) {
  const uint64_t b = mix64(random_bits + static_cast<uint64_t>(id + 1) * kGamma);
  const float v = static_cast<float>(static_cast<uint32_t>(b >> 41) * 2u + 1u) * 0x1p-24f;
  return __fdiv_rn(w, -log1pf(-v));
}

// (v desc, i asc); NaN never wins.
__device__ __forceinline__ void take(float v, int i, float& bv, int& bi) {
  if (v > bv || (v == bv && i < bi)) {
    bv = v;
    bi = i;
  }
}

// Calls f(i, x[i]) for every i in [0, V), 16-byte loads for the aligned body.
template <class F>
__device__ __forceinline__ void for_each(const float* x, int V, F&& f) {
  const int mis = static_cast<int>((reinterpret_cast<uintptr_t>(x) >> 2) & 3);
  const int head = min(V, (4 - mis) & 3);
  if (static_cast<int>(threadIdx.x) < head) f(static_cast<int>(threadIdx.x), x[threadIdx.x]);
  const int n4 = (V - head) >> 2;
  const float4* x4 = reinterpret_cast<const float4*>(x + head);
#pragma unroll 2
  for (int j = threadIdx.x; j < n4; j += kThreads) {
    const float4 v = __ldg(x4 + j);
    const int i = head + 4 * j;
    f(i, v.x);
    f(i + 1, v.y);
    f(i + 2, v.z);
    f(i + 3, v.w);
  }
  for (int i = head + 4 * n4 + threadIdx.x; i < V; i += kThreads) f(i, x[i]);
}

// ---- block-wide primitives (every thread calls them, with uniform arguments) ----

__device__ void block_best(float& bv, int& bi, Shared& sm) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, bv, off);
    const int oi = __shfl_xor_sync(0xffffffffu, bi, off);
    take(ov, oi, bv, bi);
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    sm.red_f[warp] = bv;
    sm.red_i[warp] = bi;
  }
  __syncthreads();
  for (int w = 0; w < kWarps; ++w) take(sm.red_f[w], sm.red_i[w], bv, bi);
  __syncthreads();
}

__device__ uint64_t block_sum(uint64_t v, Shared& sm) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  if (threadIdx.x % 32 == 0) sm.red_u64[threadIdx.x / 32] = v;
  __syncthreads();
  uint64_t s = 0;
  for (int w = 0; w < kWarps; ++w) s += sm.red_u64[w];
  __syncthreads();
  return s;
}

// Sum of v over the threads before this one.
__device__ uint64_t block_exclusive_scan(uint64_t v, Shared& sm) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  uint64_t incl = v;
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const uint64_t o = __shfl_up_sync(0xffffffffu, incl, off);
    if (lane >= off) incl += o;
  }
  if (lane == 31) sm.red_u64[warp] = incl;
  __syncthreads();
  uint64_t before = 0;
  for (int w = 0; w < warp; ++w) before += sm.red_u64[w];
  __syncthreads();
  return before + incl - v;
}

// Items q = 0..n-1 in priority order with measures meas(q): the first q with base + sum_{q' <= q} >= target
// (n if none); *excl = base + sum_{q' < q}.
template <class M>
__device__ int find_crossing(int n, M meas, uint64_t base, uint64_t target, uint64_t* excl, Shared& sm) {
  const int per = (n + kThreads - 1) / kThreads;
  const int begin = min(n, static_cast<int>(threadIdx.x) * per), end = min(n, begin + per);
  uint64_t local = 0;
  for (int q = begin; q < end; ++q) local += meas(q);
  uint64_t acc = base + block_exclusive_scan(local, sm);
  if (threadIdx.x == 0) sm.q = n;
  __syncthreads();
  int found = n;
  uint64_t found_excl = 0;
  for (int q = begin; q < end; ++q) {
    const uint64_t m = meas(q);
    if (acc + m >= target) {
      found = q;
      found_excl = acc;
      break;
    }
    acc += m;
  }
  if (found < n) atomicMin(&sm.q, found);
  __syncthreads();
  const int q = sm.q;
  if (q < n && found == q) sm.q_excl = found_excl;  // one thread's range holds q
  __syncthreads();
  *excl = q < n ? sm.q_excl : 0;
  __syncthreads();
  return q;
}

// Sorts keys[0, count) descending (count <= kCap, uniform); keys[count, next pow2) are overwritten with 0.
__device__ void sort_desc(uint64_t* keys, int count) {
  int n = 1;
  while (n < count) n <<= 1;
  for (int i = count + threadIdx.x; i < n; i += kThreads) keys[i] = 0;
  __syncthreads();
  for (int k = 2; k <= n; k <<= 1) {
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int i = threadIdx.x; i < n; i += kThreads) {
        const int ixj = i ^ j;
        if (ixj > i) {
          const uint64_t a = keys[i], b = keys[ixj];
          if ((i & k) == 0 ? a < b : a > b) {
            keys[i] = b;
            keys[ixj] = a;
          }
        }
      }
      __syncthreads();
    }
  }
}

__device__ __forceinline__ uint64_t sort_key(uint32_t key, int id) {
  return (static_cast<uint64_t>(key) << 32) | static_cast<uint32_t>(~static_cast<uint32_t>(id));
}
__device__ __forceinline__ uint32_t key_of_entry(uint64_t e) { return static_cast<uint32_t>(e >> 32); }
__device__ __forceinline__ int id_of_entry(uint64_t e) { return static_cast<int>(~static_cast<uint32_t>(e)); }

__device__ __forceinline__ uint64_t top_p_target(float top_p, uint64_t total) {
  const double t = ceil(static_cast<double>(top_p) * static_cast<double>(total));
  const uint64_t target = static_cast<uint64_t>(t);
  return target < 1 ? 1 : (target > total ? total : target);
}

// Adds m to bin b's 64-bit mass with 32-bit shared-memory atomics (a 64-bit shared atomic add is a
// compare-and-swap loop on sm_90, slow under contention: many tokens share the low-weight bins). The add that
// wraps the low word around carries into the high word, so the sum stays exact.
__device__ __forceinline__ void add_bin_mass(Shared& sm, uint32_t b, uint64_t m) {
  const uint32_t lo = static_cast<uint32_t>(m), hi = static_cast<uint32_t>(m >> 32);
  const uint32_t old = atomicAdd(&sm.meas_lo[b], lo);
  const uint32_t carry = old + lo < old ? 1u : 0u;
  if (hi + carry != 0) atomicAdd(&sm.meas_hi[b], hi + carry);
}
__device__ __forceinline__ uint64_t bin_mass(const Shared& sm, int b) {
  return (static_cast<uint64_t>(sm.meas_hi[b]) << 32) | sm.meas_lo[b];
}

struct RadixResult {
  bool found = false;
  uint32_t key = 0;  // the boundary element's key
  int id = INT_MAX;  // kMass: the boundary element's id (elements with `key` and a larger id are out)
  int token = -1;    // kMass: the drawn token when the boundary was settled in shared memory
};

// Radix select over the row's elements with key_of(l) >= lo (keys are order-preserving; 0 = excluded), in
// the order (key desc, id asc). kMass = false: the element at which the count reaches `target` (the
// target-th largest: top-k). kMass = true: the element at which the fixed-point mass of the weights whose bits
// are the keys reaches ceil(top_p * total) (the least likely top-p token), and, when the boundary bin fits in
// shared memory, also the draw among the kept tokens (the pass that collects the bin races the tokens above
// it). Not found: fewer than `target` elements (count mode).
template <bool kMass, class KeyFn>
__device__ RadixResult radix_select(const float* x, int V, KeyFn key_of, uint32_t lo, uint64_t target, float top_p,
                                    uint64_t random_bits, Shared& sm) {
  RadixResult res;
  uint32_t prefix = 0;
  int fixed = 0;       // high bits of the boundary key known (prefix)
  uint64_t above = 0;  // measure of the elements above the prefix range
  uint32_t cnt = 0;    // elements in the prefix range
  for (int level = 0; level < 3; ++level) {
    const int width = level < 2 ? 11 : 10, shift = 32 - fixed - width, bins = 1 << width;
    const uint32_t pf = prefix;
    const int fx = fixed;
    auto in_prefix = [pf, fx](uint32_t k) { return fx == 0 || (k >> (32 - fx)) == (pf >> (32 - fx)); };
    for (int b = threadIdx.x; b < bins; b += kThreads) {
      sm.count[b] = 0;
      sm.meas_lo[b] = 0;
      sm.meas_hi[b] = 0;
    }
    __syncthreads();
    for_each(x, V, [&](int, float l) {
      const uint32_t k = key_of(l);
      if (k < lo || !in_prefix(k)) return;
      const uint32_t b = (k >> shift) & static_cast<uint32_t>(bins - 1);
      atomicAdd(&sm.count[b], 1u);
      if constexpr (kMass) add_bin_mass(sm, b, fixed_mass(k));
    });
    __syncthreads();
    if (level == 0) {
      uint64_t local = 0;
      for (int b = threadIdx.x; b < bins; b += kThreads) local += kMass ? bin_mass(sm, b) : sm.count[b];
      const uint64_t total = block_sum(local, sm);
      if constexpr (kMass) {
        if (total == 0) return res;
        target = top_p_target(top_p, total);
      } else {
        if (total < target) return res;
      }
    }
    uint64_t excl = 0;
    const int q = find_crossing(
        bins, [&](int i) -> uint64_t { return kMass ? bin_mass(sm, bins - 1 - i) : sm.count[bins - 1 - i]; },
        above, target, &excl, sm);
    if (q == bins) return res;  // integer sums: cannot happen once total >= target
    const uint32_t b = static_cast<uint32_t>(bins - 1 - q);
    above = excl;
    prefix |= b << shift;
    fixed += width;
    cnt = sm.count[b];
    __syncthreads();  // every thread has read the bin before the next level clears it
    if (cnt <= static_cast<uint32_t>(kCap)) break;
  }
  const uint32_t pf = prefix;
  const int fx = fixed;
  auto in_prefix = [pf, fx](uint32_t k) { return (k >> (32 - fx)) == (pf >> (32 - fx)); };
  const uint32_t range_hi = fixed == 32 ? prefix : (prefix | (0xffffffffu >> fixed));
  res.found = true;
  if (cnt <= static_cast<uint32_t>(kCap)) {
    // The boundary bin fits: collect it (and race the tokens above it), sort, walk.
    if (threadIdx.x == 0) sm.n_keys = 0;
    __syncthreads();
    float bv = -1.0f;
    int bi = INT_MAX;
    for_each(x, V, [&](int i, float l) {
      const uint32_t k = key_of(l);
      if (k < lo) return;
      if (in_prefix(k)) {
        const uint32_t slot = atomicAdd(&sm.n_keys, 1u);
        if (slot < static_cast<uint32_t>(kCap)) sm.keys[slot] = sort_key(k, i);
      } else if (kMass && k > range_hi) {
        take(race(random_bits, i, __uint_as_float(k)), i, bv, bi);
      }
    });
    __syncthreads();
    const int n = static_cast<int>(cnt);
    sort_desc(sm.keys, n);
    uint64_t excl = 0;
    int j = find_crossing(
        n, [&](int i) -> uint64_t { return kMass ? fixed_mass(key_of_entry(sm.keys[i])) : 1; }, above, target, &excl,
        sm);
    if (j == n) j = n - 1;  // cannot happen: the bin holds the crossing
    res.key = key_of_entry(sm.keys[j]);
    res.id = id_of_entry(sm.keys[j]);
    if constexpr (kMass) {
      for (int e = threadIdx.x; e <= j; e += kThreads)
        take(race(random_bits, id_of_entry(sm.keys[e]), __uint_as_float(key_of_entry(sm.keys[e]))),
             id_of_entry(sm.keys[e]), bv, bi);
      block_best(bv, bi, sm);
      res.token = bi;
    }
    __syncthreads();
    return res;
  }
  // Exact key, more ties than shared memory holds: the first n* of them (id order) are in.
  res.key = prefix;
  if constexpr (kMass) {
    const uint64_t unit = fixed_mass(prefix);
    uint64_t nstar = cnt;
    if (unit > 0) nstar = (target - above + unit - 1) / unit;
    if (nstar > cnt) nstar = cnt;
    if (nstar < cnt) {
      // The nstar-th (1-based) tie in id order: tiles of kThreads ids, counted block-wide.
      const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
      uint64_t seen = 0;
      for (int base = 0; base < V; base += kThreads) {
        const int i = base + static_cast<int>(threadIdx.x);
        bool pred = false;
        if (i < V) {
          const uint32_t k = key_of(x[i]);
          pred = k >= lo && k == prefix;
        }
        const int c = __syncthreads_count(pred);
        if (seen + static_cast<uint64_t>(c) >= nstar) {
          const unsigned ballot = __ballot_sync(0xffffffffu, pred);
          if (lane == 0) sm.red_c[warp] = __popc(ballot);
          __syncthreads();
          uint64_t rank = seen + __popc(ballot & ((1u << lane) - 1u));
          for (int w = 0; w < warp; ++w) rank += static_cast<uint64_t>(sm.red_c[w]);
          if (pred && rank + 1 == nstar) sm.tile_id = i;
          __syncthreads();
          res.id = sm.tile_id;
          __syncthreads();
          break;
        }
        seen += static_cast<uint64_t>(c);
      }
    }
  }
  return res;
}

__global__ void __launch_bounds__(256) adjust_logits_kernel(SampleRowsArgs a) {
  const int e = blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= a.num_adjust) return;
  const LogitAdjustArgs adj = a.adjust[e];
  const SampleRowArgs& p = a.rows[adj.row];
  float* slot = a.logits + static_cast<int64_t>(p.logit_row) * a.vocab + adj.token;
  float l = *slot;
  a.saved[e] = l;
  if (adj.flags & kAdjustMasked) {
    l = neg_inf();
  } else {
    if (adj.flags & kAdjustBias) l = __fadd_rn(l, adj.bias);
    if (adj.flags & kAdjustRepeated)
      l = l > 0.0f ? __fdiv_rn(l, p.repetition_penalty) : __fmul_rn(l, p.repetition_penalty);
    if (adj.count > 0)
      l = __fsub_rn(l, __fadd_rn(p.presence_penalty, __fmul_rn(p.frequency_penalty, static_cast<float>(adj.count))));
  }
  *slot = l;
}

__global__ void __launch_bounds__(256) restore_logits_kernel(SampleRowsArgs a) {
  const int e = blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= a.num_adjust) return;
  const LogitAdjustArgs adj = a.adjust[e];
  a.logits[static_cast<int64_t>(a.rows[adj.row].logit_row) * a.vocab + adj.token] = a.saved[e];
}

__global__ void __launch_bounds__(kThreads, 2) sample_rows_kernel(SampleRowsArgs a) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Shared& sm = *reinterpret_cast<Shared*>(smem_raw);
  const SampleRowArgs p = a.rows[blockIdx.x];
  const int V = a.vocab;
  const float* x = a.logits + static_cast<int64_t>(p.logit_row) * V;
  const int tid = threadIdx.x;

  // ---- P1: max (lowest id on ties) and each thread's largest key ----
  float m = neg_inf();
  int argmax = INT_MAX;
  uint32_t thread_max_key = 0;
  for_each(x, V, [&](int i, float l) {
    take(l, i, m, argmax);
    thread_max_key = max(thread_max_key, logit_key(l));
  });
  block_best(m, argmax, sm);
  if (argmax == INT_MAX) argmax = 0;  // no non-NaN logit
  if (p.greedy || !isfinite(m)) {     // the host Sampler is greedy at max == -inf too
    if (tid == 0) a.out[blockIdx.x] = argmax;
    return;
  }
  const float inv_t = p.inv_temperature;
  auto weight = [m, inv_t](float l) { return exp_nonpositive(__fmul_rn(__fsub_rn(l, m), inv_t)); };
  // min_p keeps logit >= max + T * ln(min_p) (the host's float expression).
  const uint32_t min_p_key = p.has_min_p ? logit_key(__fadd_rn(m, __fmul_rn(p.temperature, p.log_min_p))) : 0u;
  const bool top_k = p.top_k > 0;

  // ---- Candidates in shared memory: every logit at or above a lower bound of the final threshold. ----
  // The k-th largest of the threads' maxima (k distinct elements) is <= the row's k-th largest logit.
  uint32_t lo = 1;
  if (top_k && p.top_k <= kThreads && V > kCap) {
    sm.keys[tid] = sort_key(thread_max_key, tid);
    sort_desc(sm.keys, kThreads);
    lo = max(lo, key_of_entry(sm.keys[p.top_k - 1]));
    __syncthreads();
  }
  lo = max(lo, min_p_key);
  if (V <= kCap || (top_k && p.top_k <= kThreads) || p.has_min_p) {
    if (tid == 0) sm.n_keys = 0;
    __syncthreads();
    for_each(x, V, [&](int i, float l) {
      const uint32_t k = logit_key(l);
      if (k < lo) return;
      const uint32_t slot = atomicAdd(&sm.n_keys, 1u);
      if (slot < static_cast<uint32_t>(kCap)) sm.keys[slot] = sort_key(k, i);
    });
    __syncthreads();
    const int n = static_cast<int>(sm.n_keys);
    __syncthreads();
    if (n <= kCap) {
      sort_desc(sm.keys, n);
      // Every logit >= lo is here, so the k-th largest is keys[k - 1] when n >= k; when n < k it is below lo,
      // which is then min_p's threshold (the threads' bound always leaves >= k), or the row has NaNs.
      uint32_t thr_key = max(1u, min_p_key);
      if (top_k && n >= p.top_k) thr_key = max(thr_key, key_of_entry(sm.keys[p.top_k - 1]));
      uint64_t local = 0;
      for (int e = tid; e < n; e += kThreads) local += key_of_entry(sm.keys[e]) >= thr_key ? 1 : 0;
      const int s = static_cast<int>(block_sum(local, sm));  // survivors: a prefix
      // Re-key the survivors by weight (ties -> lower id) for top-p.
      for (int e = tid; e < s; e += kThreads) {
        const uint64_t entry = sm.keys[e];
        const float w = weight(key_logit(key_of_entry(entry)));
        sm.keys[e] = sort_key(__float_as_uint(w), id_of_entry(entry));
      }
      sort_desc(sm.keys, s);
      local = 0;
      for (int e = tid; e < s; e += kThreads) local += key_of_entry(sm.keys[e]) != 0 ? 1 : 0;
      const int positive = static_cast<int>(block_sum(local, sm));
      int kept = positive;
      if (p.top_p < 1.0f && positive > 0) {
        local = 0;
        for (int e = tid; e < positive; e += kThreads) local += fixed_mass(key_of_entry(sm.keys[e]));
        const uint64_t total = block_sum(local, sm);
        uint64_t excl = 0;
        const int j = find_crossing(
            positive, [&](int i) -> uint64_t { return fixed_mass(key_of_entry(sm.keys[i])); }, 0,
            top_p_target(p.top_p, total), &excl, sm);
        kept = j < positive ? j + 1 : positive;
      }
      float bv = -1.0f;
      int bi = INT_MAX;
      for (int e = tid; e < kept; e += kThreads) {
        const uint64_t entry = sm.keys[e];
        take(race(p.random_bits, id_of_entry(entry), __uint_as_float(key_of_entry(entry))), id_of_entry(entry), bv, bi);
      }
      block_best(bv, bi, sm);
      if (tid == 0) a.out[blockIdx.x] = bi == INT_MAX ? argmax : bi;
      return;
    }
  }

  // ---- Full-row passes. ----
  uint32_t thr_key = max(1u, min_p_key);
  if (top_k) {
    // lo is the threads' bound (>= k elements above it) or min_p's threshold (fewer than k: no effect).
    const RadixResult r = radix_select<false>(x, V, [](float l) { return logit_key(l); }, lo,
                                              static_cast<uint64_t>(p.top_k), 1.0f, 0, sm);
    if (r.found) thr_key = max(thr_key, r.key);
  }
  auto weight_key = [thr_key, weight](float l) -> uint32_t {
    return logit_key(l) >= thr_key ? __float_as_uint(weight(l)) : 0u;
  };
  uint32_t cut_key = 0;
  int cut_id = INT_MAX;
  if (p.top_p < 1.0f) {
    const RadixResult r = radix_select<true>(x, V, weight_key, 1, 0, p.top_p, p.random_bits, sm);
    if (r.token >= 0) {
      if (tid == 0) a.out[blockIdx.x] = r.token;
      return;
    }
    if (r.found) {
      cut_key = r.key;
      cut_id = r.id;
    }
  }
  // ---- The draw over the row: kept = weight > 0 and (weight, -id) >= the top-p cut. ----
  float bv = -1.0f;
  int bi = INT_MAX;
  for_each(x, V, [&](int i, float l) {
    const uint32_t k = weight_key(l);
    if (k == 0 || k < cut_key || (k == cut_key && i > cut_id)) return;
    take(race(p.random_bits, i, __uint_as_float(k)), i, bv, bi);
  });
  block_best(bv, bi, sm);
  if (tid == 0) a.out[blockIdx.x] = bi == INT_MAX ? argmax : bi;
}

}  // namespace

void launch_sample_rows(const SampleRowsArgs& a, cudaStream_t stream) {
  if (a.num_rows == 0) return;
  // Per launch (cheap): the attribute belongs to the current device.
  XI_CUDA_CHECK(cudaFuncSetAttribute(sample_rows_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(sizeof(Shared))));
  constexpr int kAdjustThreads = 256;
  const int adjust_blocks = (a.num_adjust + kAdjustThreads - 1) / kAdjustThreads;
  if (a.num_adjust > 0) {
    adjust_logits_kernel<<<adjust_blocks, kAdjustThreads, 0, stream>>>(a);
    XI_CUDA_CHECK_LAUNCH();
  }
  sample_rows_kernel<<<a.num_rows, kThreads, sizeof(Shared), stream>>>(a);
  XI_CUDA_CHECK_LAUNCH();
  if (a.num_adjust > 0) {
    restore_logits_kernel<<<adjust_blocks, kAdjustThreads, 0, stream>>>(a);
    XI_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace xinfer::cuda
