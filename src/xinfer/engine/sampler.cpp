#include "xinfer/engine/sampler.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>

#include "xinfer/core/check.h"

namespace xinfer::engine {
namespace {

constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ull;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// nucleus_prefix sorts ranges this small instead of partitioning them further.
constexpr size_t kSortBelow = 64;
// top_p histogram: the top 11 bits of a non-negative float (8 exponent + 3 mantissa bits) order it coarsely.
constexpr int kBucketShift = 20;
constexpr int kBuckets = 1 << 11;

// SplitMix64's output function (Steele, Lea, Flood 2014): a bijective 64-bit mixer.
uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

struct Candidate {
  float weight;  // exp((logit - max) / T), unnormalized probability; the max token has weight 1
  int32_t id;
};

// Descending weight, ties -> lowest id first: the order top-p walks.
bool more_likely(const Candidate& a, const Candidate& b) {
  return a.weight != b.weight ? a.weight > b.weight : a.id < b.id;
}

// The vocabulary-wide passes use GCC/Clang vector extensions (4 x f32, plain SSE2 on x86-64, NEON on arm):
// without -ffast-math g++ will not vectorize a float max, a select or a reassociated sum on its own.
// Each lane's arithmetic is fixed, so results never depend on the thread count or the batch.
using f32x4 = float __attribute__((vector_size(16)));
using i32x4 = int32_t __attribute__((vector_size(16)));
using f64x2 = double __attribute__((vector_size(16)));

inline f32x4 load4(const float* p) {
  f32x4 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline f32x4 splat(float x) { return f32x4{x, x, x, x}; }

float max_value(const float* x, int n) {
  f32x4 acc = splat(kNegInf);
  int i = 0;
  for (; i + 4 <= n; i += 4) {
    const f32x4 v = load4(x + i);
    acc = v > acc ? v : acc;
  }
  float m = std::max(std::max(acc[0], acc[1]), std::max(acc[2], acc[3]));
  for (; i < n; ++i) m = std::max(m, x[i]);
  return m;
}

// Lowest id holding the value m (the max, from max_value); 0 if none (all NaN).
int32_t first_index_of(const float* x, int n, float m) {
  const f32x4 mv = splat(m);
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    const i32x4 hit = (load4(x + i) == mv) | (load4(x + i + 4) == mv) | (load4(x + i + 8) == mv) |
                      (load4(x + i + 12) == mv);
    if ((hit[0] | hit[1] | hit[2] | hit[3]) != 0) break;
  }
  for (; i < n; ++i)
    if (x[i] == m) return i;
  return 0;
}

// e^x for x <= 0, and exactly 0 below -87 (where float turns denormal): 2^n * e^r with |r| <= ln2 / 2 and a
// degree-6 Taylor polynomial (relative error < 3e-7).
inline f32x4 exp_nonpositive(f32x4 x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693145751953125f;  // few mantissa bits: n * kLn2Hi is exact
  constexpr float kLn2Lo = 1.42860682030941723212e-6f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer held in the low bits
  const f32x4 lo = splat(-87.0f);
  const f32x4 xc = x < lo ? lo : x;
  const f32x4 t = xc * kLog2e + kRound;
  const f32x4 n = t - kRound;
  const i32x4 ni = std::bit_cast<i32x4>(t) - std::bit_cast<int32_t>(kRound);
  const f32x4 r = (xc - n * kLn2Hi) - n * kLn2Lo;
  f32x4 p = splat(1.0f / 720);
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const i32x4 bits = std::bit_cast<i32x4>(p) + (ni << 23);
  const f32x4 e = std::bit_cast<f32x4>(bits);
  return x < lo ? splat(0.0f) : e;
}

float exp_nonpositive(float x) {
  const f32x4 v = exp_nonpositive(splat(x));
  return v[0];
}

// w[i] = exp((l[i] - m) * inv_t) where l[i] >= threshold, else 0.
void compute_weights(const float* l, int n, float m, float inv_t, float threshold, float* w) {
  const f32x4 thr = splat(threshold), zero = splat(0.0f);
  int i = 0;
  for (; i + 4 <= n; i += 4) {
    const f32x4 v = load4(l + i);
    const f32x4 e = exp_nonpositive((v - m) * inv_t);
    const f32x4 out = v >= thr ? e : zero;
    std::memcpy(w + i, &out, sizeof(out));
  }
  for (; i < n; ++i) w[i] = l[i] >= threshold ? exp_nonpositive((l[i] - m) * inv_t) : 0.0f;
}

inline void accumulate(f64x2& a, f64x2& b, f32x4 v) {
  a += f64x2{v[0], v[1]};
  b += f64x2{v[2], v[3]};
}

double sum(const float* x, int n) {
  f64x2 a = {0, 0}, b = {0, 0};
  int i = 0;
  for (; i + 4 <= n; i += 4) accumulate(a, b, load4(x + i));
  double s = (a[0] + a[1]) + (b[0] + b[1]);
  for (; i < n; ++i) s += x[i];
  return s;
}

// sum_i exp(x[i] - m), for m >= max x.
double sum_exp(const float* x, int n, float m) {
  f64x2 a = {0, 0}, b = {0, 0};
  int i = 0;
  for (; i + 4 <= n; i += 4) accumulate(a, b, exp_nonpositive(load4(x + i) - m));
  double s = (a[0] + a[1]) + (b[0] + b[1]);
  for (; i < n; ++i) s += exp_nonpositive(x[i] - m);
  return s;
}

inline uint32_t bucket_of(float w) { return std::bit_cast<uint32_t>(w) >> kBucketShift; }

double mass(std::span<const Candidate> c) {
  double s = 0.0;
  for (const Candidate& x : c) s += x.weight;
  return s;
}

// Rearranges c so that c[0, k) is the top-p nucleus and returns k: the most-likely-first (ties -> lower id)
// prefix up to and including the token at which the mass reaches target (> 0). Quickselect on the weight
// that carries the mass of what is already known to be in: expected O(n), and deterministic.
size_t nucleus_prefix(std::span<Candidate> c, double target) {
  size_t lo = 0, hi = c.size();
  double above = 0.0;  // mass of c[0, lo): all in, all more likely than c[lo, hi); above < target
  while (hi - lo > kSortBelow) {
    const float a = c[lo].weight, b = c[lo + (hi - lo) / 2].weight, d = c[hi - 1].weight;
    const float pivot = std::max(std::min(a, b), std::min(std::max(a, b), d));  // median of three
    auto first = c.begin() + static_cast<std::ptrdiff_t>(lo), last = c.begin() + static_cast<std::ptrdiff_t>(hi);
    auto gt_end = std::partition(first, last, [&](const Candidate& x) { return x.weight > pivot; });
    auto eq_end = std::partition(gt_end, last, [&](const Candidate& x) { return x.weight == pivot; });
    const size_t g = static_cast<size_t>(gt_end - c.begin()), e = static_cast<size_t>(eq_end - c.begin());
    const double mass_gt = mass(c.subspan(lo, g - lo));
    if (above + mass_gt >= target) {  // the cut is among the more likely ones (the pivot is excluded)
      hi = g;
      continue;
    }
    above += mass_gt;
    const double mass_eq = mass(c.subspan(g, e - g));
    if (above + mass_eq >= target) {  // the cut is inside a group of equal weights: lower ids first
      std::sort(gt_end, eq_end, [](const Candidate& x, const Candidate& y) { return x.id < y.id; });
      size_t k = g;
      while (k < e && above < target) above += c[k++].weight;
      return k;
    }
    above += mass_eq;
    lo = e;
  }
  std::sort(c.begin() + static_cast<std::ptrdiff_t>(lo), c.begin() + static_cast<std::ptrdiff_t>(hi), more_likely);
  size_t k = lo;
  while (k < hi && above < target) above += c[k++].weight;
  return std::max<size_t>(k, 1);
}

// The k-th largest value of x[0, n) (1 <= k < n), with a size-k min-heap: O(n) compares plus
// O(k log k log(n/k)) heap work for inputs in random order.
float kth_largest(const float* x, int n, int k, std::vector<float>& heap) {
  heap.assign(x, x + k);
  std::make_heap(heap.begin(), heap.end(), std::greater<float>());
  for (int i = k; i < n; ++i) {
    if (x[i] > heap.front()) {
      std::pop_heap(heap.begin(), heap.end(), std::greater<float>());
      heap.back() = x[i];
      std::push_heap(heap.begin(), heap.end(), std::greater<float>());
    }
  }
  return heap.front();
}

}  // namespace

// ---- SequenceRng ----

SequenceRng SequenceRng::from_seed(int64_t seed, uint64_t stream) {
  return SequenceRng(mix64(static_cast<uint64_t>(seed) ^ mix64(stream + kGamma)));
}

SequenceRng SequenceRng::from_entropy() {
  std::random_device rd;
  const uint64_t hi = rd(), lo = rd();
  return SequenceRng(mix64((hi << 32) ^ lo));
}

SequenceRng SequenceRng::for_request(const SamplingParams& params, uint64_t stream) {
  return params.seed ? from_seed(*params.seed, stream) : from_entropy();
}

uint64_t SequenceRng::bits(uint64_t counter) const { return mix64(key_ + (counter + 1) * kGamma); }

// ---- Sampler ----

// Per-thread scratch, sized once. counts and seen are all-zero between uses (penalties undo their marks),
// so penalty bookkeeping costs O(prompt + output), not O(vocab).
struct Sampler::Workspace {
  std::vector<float> logits;   // [vocab] adjusted logits
  std::vector<float> weights;  // [vocab] unnormalized probabilities of the tokens that pass the filters
  std::vector<int32_t> counts; // [vocab] output-token counts, zero between uses
  std::vector<uint8_t> seen;   // [vocab] prompt+output membership, zero between uses
  std::vector<int32_t> unique; // distinct tokens touched this step
  std::vector<float> heap;
  std::vector<Candidate> candidates;
  std::vector<double> histogram = std::vector<double>(kBuckets);
  std::vector<std::pair<float, int32_t>> top;  // for top logprobs
};

Sampler::Sampler(int vocab_size, ThreadPool* pool, std::vector<int32_t> eos_token_ids)
    : vocab_size_(vocab_size), pool_(pool), eos_token_ids_(std::move(eos_token_ids)) {
  XI_CHECK_GT(vocab_size_, 0);
  for (int32_t t : eos_token_ids_) XI_CHECK(t >= 0 && t < vocab_size_) << "eos token id " << t;
}

Sampler::~Sampler() = default;

std::vector<SampleOutput> Sampler::sample(std::span<const SampleInput> batch) {
  const size_t n = batch.size();
  std::vector<SampleOutput> out(n);
  if (n == 0) return out;
  const size_t num_ws = pool_ ? std::min<size_t>(static_cast<size_t>(pool_->size()), n) : 1;
  if (workspaces_.size() < num_ws) {
    const size_t old = workspaces_.size();
    workspaces_.resize(num_ws);
    for (size_t i = old; i < num_ws; ++i) {
      workspaces_[i].logits.resize(static_cast<size_t>(vocab_size_));
      workspaces_[i].weights.resize(static_cast<size_t>(vocab_size_));
      workspaces_[i].counts.assign(static_cast<size_t>(vocab_size_), 0);
      workspaces_[i].seen.assign(static_cast<size_t>(vocab_size_), 0);
    }
  }
  if (num_ws == 1) {
    for (size_t i = 0; i < n; ++i) out[i] = sample_one(batch[i], workspaces_[0]);
    return out;
  }
  // Dynamic assignment (greedy rows are much cheaper than top-p rows); workspace = the chunk's first index,
  // so no two running chunks share one.
  std::atomic<size_t> next{0};
  pool_->parallel_for(0, static_cast<int64_t>(num_ws), [&](int64_t begin, int64_t) {
    Workspace& ws = workspaces_[static_cast<size_t>(begin)];
    for (size_t i = next++; i < n; i = next++) out[i] = sample_one(batch[i], ws);
  });
  return out;
}

bool adjusts_logits(const SampleInput& in) {
  const SamplingParams& p = *in.params;
  return static_cast<int64_t>(in.output_tokens.size()) < p.min_tokens || !p.logit_bias.empty() || p.has_penalties();
}

SampleOutput Sampler::sample_one(const SampleInput& in, Workspace& ws) const {
  XI_CHECK(in.logits != nullptr && in.params != nullptr);
  const SamplingParams& p = *in.params;
  const int V = vocab_size_;
  const float* logits = in.logits;
  SampleOutput result;

  // ---- Logit adjustments: on a copy, only when the request has any. ----
  if (adjusts_logits(in)) {
    const bool mask_stops = static_cast<int64_t>(in.output_tokens.size()) < p.min_tokens;
    float* l = ws.logits.data();
    std::memcpy(l, logits, sizeof(float) * static_cast<size_t>(V));
    // Ids in params were range-checked by validate(); the checks here keep a skipped validate() from
    // writing out of bounds.
    if (mask_stops) {
      for (int32_t t : p.stop_token_ids) {
        XI_CHECK(t >= 0 && t < V) << "stop token id " << t << " outside vocab " << V;
        l[t] = kNegInf;
      }
      if (!p.ignore_eos)
        for (int32_t t : eos_token_ids_) l[t] = kNegInf;
    }
    for (const auto& [t, bias] : p.logit_bias) {
      XI_CHECK(t >= 0 && t < V) << "logit_bias token id " << t << " outside vocab " << V;
      l[t] += bias;
    }
    if (p.repetition_penalty != 1.0f) {
      const float r = p.repetition_penalty;
      ws.unique.clear();
      for (auto tokens : {in.prompt_tokens, in.output_tokens}) {
        for (int32_t t : tokens) {
          XI_CHECK(t >= 0 && t < V) << "token id " << t << " outside vocab " << V;
          if (!ws.seen[static_cast<size_t>(t)]) {
            ws.seen[static_cast<size_t>(t)] = 1;
            ws.unique.push_back(t);
          }
        }
      }
      for (int32_t t : ws.unique) {
        l[t] = l[t] > 0.0f ? l[t] / r : l[t] * r;
        ws.seen[static_cast<size_t>(t)] = 0;
      }
    }
    if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
      ws.unique.clear();
      for (int32_t t : in.output_tokens) {
        XI_CHECK(t >= 0 && t < V) << "token id " << t << " outside vocab " << V;
        if (ws.counts[static_cast<size_t>(t)]++ == 0) ws.unique.push_back(t);
      }
      for (int32_t t : ws.unique) {
        int32_t& c = ws.counts[static_cast<size_t>(t)];
        l[t] -= p.presence_penalty + p.frequency_penalty * static_cast<float>(c);
        c = 0;
      }
    }
    logits = l;
  }

  // ---- Choose the token. ----
  const float m = max_value(logits, V);
  if (p.is_greedy() || m == kNegInf) {
    result.token = first_index_of(logits, V, m);
  } else {
    XI_CHECK(in.rng != nullptr) << "a random-sampling sequence needs a SequenceRng";
    const float T = p.temperature;
    const float inv_t = 1.0f / T;
    // min_p keeps prob >= min_p * max prob, i.e. logit >= max + T * ln(min_p); top_k keeps logit >= the k-th
    // largest (all ties at the boundary kept). Both are thresholds on the logit and commute.
    float threshold = kNegInf;
    if (p.min_p > 0.0f) threshold = m + T * std::log(p.min_p);
    if (p.top_k_active(V)) threshold = std::max(threshold, kth_largest(logits, V, p.top_k, ws.heap));

    float* w = ws.weights.data();
    compute_weights(logits, V, m, inv_t, threshold, w);
    const double u = in.rng->uniform(in.output_tokens.size());

    if (p.top_p < 1.0f) {
      // top_p keeps the smallest most-likely-first (ties -> lower id) prefix whose mass reaches top_p: a token
      // is kept while the mass before it is < top_p * total. Found without sorting: a histogram of the
      // weights' top float bits (monotone in the weight) finds the boundary bucket; only that bucket's
      // tokens are ordered (nucleus_prefix, a quickselect). The cut is then a (weight, id) threshold.
      auto& cand = ws.candidates;
      cand.clear();
      double target = 0.0;
      double above = 0.0;  // mass of the tokens known to be kept that are not in cand
      if (V <= kBuckets || (p.top_k_active(V) && p.top_k <= kBuckets)) {  // few tokens left: all candidates
        target = static_cast<double>(p.top_p) * sum(w, V);
        for (int i = 0; i < V; ++i)
          if (w[i] > 0.0f) cand.push_back({w[i], i});
      } else {
        auto& hist = ws.histogram;
        std::fill(hist.begin(), hist.end(), 0.0);
        for (int i = 0; i < V; ++i) hist[bucket_of(w[i])] += w[i];  // zero weights land in bucket 0, add 0
        double total = 0.0;
        for (double h : hist) total += h;
        target = static_cast<double>(p.top_p) * total;
        int lowest = 1;  // the lowest non-empty bucket (bucket 0 holds only zero weights)
        while (lowest < kBuckets - 1 && hist[static_cast<size_t>(lowest)] == 0.0) ++lowest;
        int b = kBuckets - 1;  // stops at a non-empty bucket, as above < target there
        while (b > lowest && above + hist[static_cast<size_t>(b)] < target) above += hist[static_cast<size_t>(b--)];
        for (int i = 0; i < V; ++i)
          if (w[i] > 0.0f && bucket_of(w[i]) == static_cast<uint32_t>(b)) cand.push_back({w[i], i});
      }
      XI_CHECK(!cand.empty());
      const size_t k = nucleus_prefix(cand, std::max(target - above, 1e-300));
      Candidate cut = cand[0];  // the least likely kept token
      for (size_t i = 1; i < k; ++i)
        if (more_likely(cut, cand[i])) cut = cand[i];
      const double kept_total = above + mass(std::span<const Candidate>(cand.data(), k));
      // Inverse CDF over the kept tokens in id order.
      const double r = u * kept_total;
      double acc = 0.0;
      result.token = cut.id;
      for (int i = 0; i < V; ++i) {
        if (w[i] > cut.weight || (w[i] == cut.weight && i <= cut.id)) {
          acc += w[i];
          if (acc > r) {
            result.token = i;
            break;
          }
        }
      }
    } else {
      // Inverse CDF over the weights in id order; zero weights can never be picked.
      const double r = u * sum(w, V);
      double acc = 0.0;
      int32_t last_positive = 0;
      result.token = -1;
      for (int i = 0; i < V; ++i) {
        if (w[i] > 0.0f) {
          acc += w[i];
          last_positive = i;
          if (acc > r) {
            result.token = i;
            break;
          }
        }
      }
      if (result.token < 0) result.token = last_positive;  // r rounded past the walked total
    }
  }

  // ---- Logprobs of the raw model output. ----
  if (p.logprobs) {
    PositionLogprobs lp = position_logprobs(std::span<const float>(in.logits, static_cast<size_t>(V)), result.token,
                                            *p.logprobs, &ws.top);
    result.logprob = lp.logprob;
    result.top_logprobs = std::move(lp.top);
  }
  return result;
}

PositionLogprobs position_logprobs(std::span<const float> logits, int32_t token, int num_top,
                                   std::vector<std::pair<float, int32_t>>* scratch) {
  const float* raw = logits.data();
  const int V = static_cast<int>(logits.size());
  XI_CHECK(token >= 0 && token < V) << "token " << token << " vocab " << V;
  PositionLogprobs out;
  const float raw_max = max_value(raw, V);
  const double lse = raw_max + std::log(sum_exp(raw, V, raw_max));
  out.logprob = static_cast<float>(raw[token] - lse);
  const float mine = raw[token];
  int32_t greater = 0;
  for (int i = 0; i < V; ++i) greater += raw[i] > mine ? 1 : 0;
  out.rank = greater + 1;
  const int n = std::min(num_top, V);
  if (n > 0) {
    // Keep the n best (value desc, id asc) in a heap whose front is the worst kept.
    auto better = [](const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
      return a.first != b.first ? a.first > b.first : a.second < b.second;
    };
    std::vector<std::pair<float, int32_t>> local;
    auto& top = scratch ? *scratch : local;
    top.clear();
    for (int i = 0; i < n; ++i) top.emplace_back(raw[i], i);
    std::make_heap(top.begin(), top.end(), better);
    float worst = top.front().first;
    for (int i = n; i < V; ++i) {
      if (raw[i] > worst) {  // equal values lose to the lower id already kept
        std::pop_heap(top.begin(), top.end(), better);
        top.back() = {raw[i], i};
        std::push_heap(top.begin(), top.end(), better);
        worst = top.front().first;
      }
    }
    std::sort(top.begin(), top.end(), better);
    out.top.reserve(top.size());
    for (const auto& [v, id] : top) out.top.emplace_back(id, static_cast<float>(v - lse));
  }
  return out;
}

}  // namespace xinfer::engine
