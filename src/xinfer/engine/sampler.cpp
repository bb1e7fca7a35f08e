#include "xinfer/engine/sampler.h"

#include <algorithm>
#include <atomic>
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
// Below this many candidates, top-p sorts them all; above, it first narrows them with a probability threshold.
constexpr size_t kSortAllCandidates = 2048;

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

int32_t argmax(const float* x, int n) {
  int32_t best = 0;
  float best_v = x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] > best_v) {
      best_v = x[i];
      best = i;
    }
  }
  return best;
}

float max_value(const float* x, int n) {
  float m = kNegInf;
  for (int i = 0; i < n; ++i) m = std::max(m, x[i]);
  return m;
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

// Per-thread scratch, sized once. counts_ and seen_ are all-zero between uses (penalties undo their marks),
// so penalty bookkeeping costs O(prompt + output), not O(vocab).
struct Sampler::Workspace {
  std::vector<float> logits;   // [vocab] adjusted logits
  std::vector<int32_t> counts; // [vocab] output-token counts, zero between uses
  std::vector<uint8_t> seen;   // [vocab] prompt+output membership, zero between uses
  std::vector<int32_t> unique; // distinct tokens touched this step
  std::vector<float> heap;
  std::vector<Candidate> candidates;
  std::vector<Candidate> nucleus;
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

SampleOutput Sampler::sample_one(const SampleInput& in, Workspace& ws) const {
  XI_CHECK(in.logits != nullptr && in.params != nullptr);
  const SamplingParams& p = *in.params;
  const int V = vocab_size_;
  const float* logits = in.logits;
  SampleOutput result;

  // ---- Logit adjustments: on a copy, only when the request has any. ----
  const bool mask_stops = static_cast<int64_t>(in.output_tokens.size()) < p.min_tokens;
  if (mask_stops || !p.logit_bias.empty() || p.has_penalties()) {
    float* l = ws.logits.data();
    std::memcpy(l, logits, sizeof(float) * static_cast<size_t>(V));
    if (mask_stops) {
      for (int32_t t : p.stop_token_ids) l[t] = kNegInf;
      if (!p.ignore_eos)
        for (int32_t t : eos_token_ids_) l[t] = kNegInf;
    }
    for (const auto& [t, bias] : p.logit_bias) l[t] += bias;
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
    result.token = argmax(logits, V);
  } else {
    XI_CHECK(in.rng != nullptr) << "a random-sampling sequence needs a SequenceRng";
    const float T = p.temperature;
    const float inv_t = 1.0f / T;
    // min_p keeps prob >= min_p * max prob, i.e. logit >= max + T * ln(min_p); top_k keeps logit >= the k-th
    // largest (all ties at the boundary kept). Both are thresholds on the logit and commute.
    float threshold = kNegInf;
    if (p.min_p > 0.0f) threshold = m + T * std::log(p.min_p);
    if (p.top_k_active(V)) threshold = std::max(threshold, kth_largest(logits, V, p.top_k, ws.heap));

    auto& cand = ws.candidates;
    cand.clear();
    double total = 0.0;
    for (int i = 0; i < V; ++i) {
      if (logits[i] >= threshold && logits[i] != kNegInf) {
        const float w = std::exp((logits[i] - m) * inv_t);
        cand.push_back({w, i});
        total += w;
      }
    }
    XI_CHECK(!cand.empty());

    // top_p: the smallest most-likely-first prefix whose mass reaches top_p (keep a token while the mass
    // before it is < top_p * total). Only tokens above a threshold that already holds that mass are sorted.
    std::span<const Candidate> kept(cand);
    if (p.top_p < 1.0f) {
      const double target = static_cast<double>(p.top_p) * total;
      auto& nuc = ws.nucleus;
      if (cand.size() <= kSortAllCandidates) {
        nuc.assign(cand.begin(), cand.end());
      } else {
        // The max token has weight 1; lower the bar by 64x until the tokens above it hold the target mass.
        for (float bar = 1.0f / 64;; bar /= 64) {
          nuc.clear();
          double mass = 0.0;
          for (const Candidate& c : cand) {
            if (c.weight >= bar) {
              nuc.push_back(c);
              mass += c.weight;
            }
          }
          if (mass >= target || bar < 1e-30f) break;
        }
      }
      std::sort(nuc.begin(), nuc.end(), more_likely);
      double before = 0.0;
      size_t keep = 0;
      while (keep < nuc.size() && before < target) before += nuc[keep++].weight;
      kept = std::span<const Candidate>(nuc.data(), std::max<size_t>(keep, 1));
    }

    // Inverse CDF: one uniform per output position, walking the kept tokens in their fixed order.
    double kept_total = 0.0;
    for (const Candidate& c : kept) kept_total += c.weight;
    const double r = in.rng->uniform(in.output_tokens.size()) * kept_total;
    double acc = 0.0;
    result.token = kept.back().id;
    for (const Candidate& c : kept) {
      acc += c.weight;
      if (acc > r && c.weight > 0.0f) {
        result.token = c.id;
        break;
      }
    }
  }

  // ---- Logprobs of the raw model output. ----
  if (p.logprobs) {
    const float* raw = in.logits;
    const float raw_max = max_value(raw, V);
    double sum = 0.0;
    for (int i = 0; i < V; ++i) sum += std::exp(static_cast<double>(raw[i]) - raw_max);
    const double lse = raw_max + std::log(sum);
    result.logprob = static_cast<float>(raw[result.token] - lse);
    const int n = std::min(*p.logprobs, V);
    if (n > 0) {
      // Keep the n best (value desc, id asc) in a heap whose front is the worst kept.
      auto better = [](const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
        return a.first != b.first ? a.first > b.first : a.second < b.second;
      };
      auto& top = ws.top;
      top.clear();
      for (int i = 0; i < V; ++i) {
        if (static_cast<int>(top.size()) < n) {
          top.emplace_back(raw[i], i);
          std::push_heap(top.begin(), top.end(), better);
        } else if (raw[i] > top.front().first) {  // equal values lose to the lower id already kept
          std::pop_heap(top.begin(), top.end(), better);
          top.back() = {raw[i], i};
          std::push_heap(top.begin(), top.end(), better);
        }
      }
      std::sort(top.begin(), top.end(), better);
      result.top_logprobs.reserve(top.size());
      for (const auto& [v, id] : top) result.top_logprobs.emplace_back(id, static_cast<float>(v - lse));
    }
  }
  return result;
}

}  // namespace xinfer::engine
