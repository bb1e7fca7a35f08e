// Sampler tests. Expected values come from code written from the definitions (here and in
// tests/common/sampling_reference.h: softmax in double, full sorts, hand-computed penalties), never from the
// Sampler's own earlier output.
#include "xinfer/engine/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

#include "common/sampling_reference.h"
#include "xinfer/core/thread_pool.h"

namespace xinfer::engine {
namespace {

std::vector<float> random_logits(int vocab, uint32_t seed, float stddev = 2.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(static_cast<size_t>(vocab));
  for (float& x : v) x = dist(gen);
  return v;
}

// The filtered distribution, straight from the definitions (tests/common/sampling_reference.h).
std::vector<double> expected_distribution(const std::vector<float>& logits, const SamplingParams& p) {
  return test_ref::expected_distribution(logits, {p.temperature, p.top_k, p.top_p, p.min_p}).prob;
}

// Draws `draws` tokens for one seeded sequence at output positions 0..draws-1 (the RNG counter).
std::vector<int64_t> draw_counts(Sampler& sampler, const std::vector<float>& logits, const SamplingParams& p,
                                 int64_t draws, int64_t seed) {
  static std::vector<int32_t> zeros;
  if (static_cast<int64_t>(zeros.size()) < draws) zeros.assign(static_cast<size_t>(draws), 0);
  const SequenceRng rng = SequenceRng::from_seed(seed);
  std::vector<int64_t> counts(logits.size(), 0);
  std::vector<SampleInput> batch;
  for (int64_t start = 0; start < draws; start += 4096) {
    batch.clear();
    for (int64_t i = start; i < std::min(draws, start + 4096); ++i) {
      batch.push_back({logits.data(), &p, &rng, {}, std::span<const int32_t>(zeros.data(), static_cast<size_t>(i))});
    }
    for (const SampleOutput& o : sampler.sample(batch)) counts[static_cast<size_t>(o.token)]++;
  }
  return counts;
}

using test_ref::chi_squared;
using test_ref::ChiSquared;

const std::vector<float> kSmallLogits = {2.0f, 1.5f, 1.4f, 1.0f, 0.5f, 0.3f, 0.0f, -0.5f, -1.0f, -2.0f, -3.0f, 0.9f};

SamplingParams make(float temperature, int top_k = 0, float top_p = 1.0f, float min_p = 0.0f) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  return p;
}

TEST(SamplerStatistics, EmpiricalFrequenciesMatchFilteredDistribution) {
  ThreadPool pool(2);
  Sampler sampler(static_cast<int>(kSmallLogits.size()), &pool);
  const int64_t kDraws = 200000;
  const std::vector<SamplingParams> cases = {
      make(1.0f), make(0.7f, 5), make(1.3f, 0, 0.8f), make(1.0f, 0, 1.0f, 0.15f),
      make(0.9f, 8, 0.9f, 0.05f), make(2.0f, -1, 0.5f), make(0.5f, 1), make(1.0f, 3, 1.0f, 0.9f)};
  for (size_t c = 0; c < cases.size(); ++c) {
    const SamplingParams& p = cases[c];
    ASSERT_TRUE(validate(p, sampler.vocab_size()).ok());
    const auto counts = draw_counts(sampler, kSmallLogits, p, kDraws, 1234 + static_cast<int64_t>(c));
    const auto expected = expected_distribution(kSmallLogits, p);
    const ChiSquared chi = chi_squared(counts, expected, kDraws);
    EXPECT_EQ(chi.impossible_draws, 0) << "case " << c;
    EXPECT_TRUE(chi.plausible()) << "case " << c << ": chi2 " << chi.stat << " df " << chi.df;
    // The test has power: the unfiltered distribution at T = 1 must be rejected for every filtered case.
    const auto unfiltered = expected_distribution(kSmallLogits, make(1.0f));
    if (c > 0) {
      EXPECT_FALSE(chi_squared(counts, unfiltered, kDraws).plausible()) << "case " << c;
    }
  }
}

TEST(SamplerStatistics, LargeVocabTopPMatchesFilteredDistribution) {
  // 6000 tokens (the histogram path), nucleus of several hundred tokens.
  const auto logits = random_logits(6000, 7, 1.5f);
  Sampler sampler(6000);
  const SamplingParams p = make(1.0f, 0, 0.6f);
  const int64_t kDraws = 40000;
  const auto counts = draw_counts(sampler, logits, p, kDraws, 99);
  const auto expected = expected_distribution(logits, p);
  const int64_t nucleus = std::count_if(expected.begin(), expected.end(), [](double x) { return x > 0; });
  EXPECT_GT(nucleus, 100);
  EXPECT_LT(nucleus, 3000);
  const ChiSquared chi = chi_squared(counts, expected, kDraws);
  EXPECT_EQ(chi.impossible_draws, 0);
  EXPECT_TRUE(chi.plausible()) << "chi2 " << chi.stat << " df " << chi.df;
}

TEST(SamplerFiltering, TopPCutInsideAGroupOfEqualLogitsKeepsLowerIds) {
  // Tokens on three logit levels; the top-p cut falls inside the top group (0.5) or the middle one (0.8).
  // 900 tokens take the small-vocabulary path, 3000 the histogram one.
  for (int vocab : {900, 3000}) {
    std::vector<float> logits(static_cast<size_t>(vocab));
    for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(i % 3);
    Sampler sampler(vocab);
    for (float top_p : {0.5f, 0.8f}) {
      const SamplingParams p = make(1.0f, 0, top_p);
      const int64_t draws = vocab < 1000 ? 30000 : 20000;
      const auto counts = draw_counts(sampler, logits, p, draws, 17);
      const auto expected = expected_distribution(logits, p);
      // The group holding the cut (ids 2, 5, ... at 0.5; 1, 4, ... at 0.8) keeps its lower ids only.
      const size_t lowest = top_p == 0.5f ? 2 : 1;
      EXPECT_GT(expected[lowest], 0.0);
      EXPECT_EQ(expected[lowest + static_cast<size_t>(vocab) - 3], 0.0);
      const ChiSquared chi = chi_squared(counts, expected, draws);
      EXPECT_EQ(chi.impossible_draws, 0) << vocab << " " << top_p;
      EXPECT_TRUE(chi.plausible()) << vocab << " " << top_p << ": chi2 " << chi.stat << " df " << chi.df;
    }
  }
}

TEST(SamplerFiltering, TokensOutsideTopKNeverDrawnOnLargeVocab) {
  const auto logits = random_logits(50000, 3);
  Sampler sampler(50000);
  for (const SamplingParams& p : {make(1.5f, 40), make(1.0f, 0, 0.3f), make(1.0f, 0, 1.0f, 0.2f)}) {
    const auto counts = draw_counts(sampler, logits, p, 1000, 5);
    const auto expected = expected_distribution(logits, p);
    const ChiSquared chi = chi_squared(counts, expected, 1000);
    EXPECT_EQ(chi.impossible_draws, 0) << "top_k " << p.top_k << " top_p " << p.top_p << " min_p " << p.min_p;
  }
}

SampleOutput sample_one(Sampler& s, const std::vector<float>& logits, const SamplingParams& p,
                        std::span<const int32_t> prompt = {}, std::span<const int32_t> output = {},
                        const SequenceRng* rng = nullptr) {
  const SampleInput in{logits.data(), &p, rng, prompt, output};
  return s.sample(std::span<const SampleInput>(&in, 1))[0];
}

TEST(SamplerGreedy, ArgmaxWithTiesToLowestId) {
  Sampler s(6);
  const SamplingParams p = make(0.0f);
  EXPECT_EQ(sample_one(s, {1, 3, 3, 2, -1, 3}, p).token, 1);
  EXPECT_EQ(sample_one(s, {-5, -4, -9, -4, -6, -7}, p).token, 1);
  EXPECT_EQ(sample_one(s, {0, 0, 0, 0, 0, 7}, p).token, 5);
  // Greedy ignores top_k/top_p/min_p and needs no RNG.
  EXPECT_EQ(sample_one(s, {0, 0, 9, 0, 0, 0}, make(0.0f, 1, 0.1f, 0.5f)).token, 2);
  const auto big = random_logits(152064, 11);
  Sampler sb(152064);
  EXPECT_EQ(sample_one(sb, big, p).token, std::max_element(big.begin(), big.end()) - big.begin());
}

// Penalties, checked at hand-computed decision boundaries: the competitor logit sits just above or just below
// the penalized value, so an off-by-a-little penalty flips the greedy result.
TEST(SamplerPenalties, RepetitionDividesPositiveMultipliesNegativeOncePerToken) {
  Sampler s(6);
  SamplingParams p = make(0.0f);
  p.repetition_penalty = 2.0f;
  const std::vector<int32_t> prompt = {1};
  const std::vector<int32_t> output = {2, 1, 1};
  // token 1: 3.0 -> 1.5 (once, though it occurs 3 times); token 2: -1.0 -> -2.0.
  EXPECT_EQ(sample_one(s, {1.49f, 3.0f, -1.0f, -9, -9, -9}, p, prompt, output).token, 1);
  EXPECT_EQ(sample_one(s, {1.51f, 3.0f, -1.0f, -9, -9, -9}, p, prompt, output).token, 0);
  EXPECT_EQ(sample_one(s, {-2.01f, -9.0f, -1.0f, -9, -9, -9}, p, prompt, output).token, 2);
  EXPECT_EQ(sample_one(s, {-1.99f, -9.0f, -1.0f, -9, -9, -9}, p, prompt, output).token, 0);
  // Unseen tokens are untouched.
  EXPECT_EQ(sample_one(s, {-9, -9, -9, 2.0f, 1.99f, -9}, p, prompt, output).token, 3);
}

TEST(SamplerPenalties, PresenceAndFrequencyOnOutputTokensOnly) {
  Sampler s(6);
  SamplingParams p = make(0.0f);
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  const std::vector<int32_t> prompt = {5};
  const std::vector<int32_t> output = {3, 4, 3, 3};
  // token 3: 2.0 - 0.5 - 3 * 0.25 = 0.75; token 4: 2.0 - 0.5 - 0.25 = 1.25; token 5 (prompt only): unchanged.
  EXPECT_EQ(sample_one(s, {-9, -9, -9, 2.0f, 2.0f, 1.26f}, p, prompt, output).token, 5);
  EXPECT_EQ(sample_one(s, {-9, -9, -9, 2.0f, 2.0f, 1.24f}, p, prompt, output).token, 4);
  EXPECT_EQ(sample_one(s, {-9, -9, -9, 2.0f, -9.0f, 0.76f}, p, prompt, output).token, 5);
  EXPECT_EQ(sample_one(s, {-9, -9, -9, 2.0f, -9.0f, 0.74f}, p, prompt, output).token, 3);
  // Negative values reward repetition: token 3 becomes 0 + 1 + 3 * 0.5 = 2.5.
  p.presence_penalty = -1.0f;
  p.frequency_penalty = -0.5f;
  EXPECT_EQ(sample_one(s, {2.49f, -9, -9, 0.0f, -9, -9}, p, prompt, output).token, 3);
  EXPECT_EQ(sample_one(s, {2.51f, -9, -9, 0.0f, -9, -9}, p, prompt, output).token, 0);
  // Bookkeeping is reset between calls: no output tokens -> no penalty.
  EXPECT_EQ(sample_one(s, {1.99f, -9, -9, 2.0f, -9, -9}, p, prompt, {}).token, 3);
}

TEST(SamplerPenalties, OrderBiasThenRepetitionThenFrequency) {
  Sampler s(4);
  SamplingParams p = make(0.0f);
  p.repetition_penalty = 2.0f;
  p.frequency_penalty = 1.0f;
  p.logit_bias = {{1, 2.0f}};
  const std::vector<int32_t> output = {1};
  // token 1: (1.0 + 2.0) / 2 - 1.0 = 0.5. (Bias last would give 1.5; frequency first 1.0.)
  EXPECT_EQ(sample_one(s, {0.49f, 1.0f, -9, -9}, p, {}, output).token, 1);
  EXPECT_EQ(sample_one(s, {0.51f, 1.0f, -9, -9}, p, {}, output).token, 0);
}

TEST(SamplerLogitBias, MinusHundredBansPlusHundredForces) {
  auto logits = random_logits(20, 4, 1.0f);
  logits[7] = 3.0f;    // the favourite
  logits[11] = -4.0f;  // the least likely
  Sampler s(20);
  SamplingParams ban = make(1.0f);
  ban.logit_bias = {{7, -100.0f}};
  EXPECT_EQ(draw_counts(s, logits, ban, 20000, 1)[7], 0);
  EXPECT_GT(draw_counts(s, logits, make(1.0f), 20000, 1)[7], 2000);  // without the bias it is common
  SamplingParams force = make(1.0f, 0, 0.5f);
  force.logit_bias = {{11, 100.0f}};
  EXPECT_EQ(draw_counts(s, logits, force, 20000, 2)[11], 20000);
  force.temperature = 0.0f;
  EXPECT_EQ(sample_one(s, logits, force).token, 11);
}

TEST(SamplerStopTokens, MinTokensMasksEosAndStopIds) {
  Sampler s(5, nullptr, {4});
  SamplingParams p = make(0.0f);
  p.min_tokens = 2;
  p.stop_token_ids = {3};
  const std::vector<float> logits = {0, 1, 0, 9, 10};
  const std::vector<int32_t> out = {0, 0};
  EXPECT_EQ(sample_one(s, logits, p, {}, std::span(out).first(0)).token, 1);
  EXPECT_EQ(sample_one(s, logits, p, {}, std::span(out).first(1)).token, 1);
  EXPECT_EQ(sample_one(s, logits, p, {}, out).token, 4);
  p.ignore_eos = true;  // as vLLM: EOS is then neither masked nor a stop, but stop ids still are masked
  EXPECT_EQ(sample_one(s, logits, p, {}, std::span(out).first(0)).token, 4);
  p.ignore_eos = false;
  p.temperature = 1.0f;  // random sampling: 3 and 4 never drawn at positions 0 and 1, common at 2
  int64_t masked = 0, after = 0;
  for (int64_t seed = 0; seed < 500; ++seed) {
    const auto c = draw_counts(s, logits, p, 3, seed);
    const auto c2 = draw_counts(s, logits, p, 2, seed);
    masked += c2[3] + c2[4];
    after += c[3] + c[4] - c2[3] - c2[4];
  }
  EXPECT_EQ(masked, 0);
  EXPECT_GT(after, 450);
}

TEST(SamplerLogprobs, EqualRawLogSoftmaxInDouble) {
  const int V = 50000;
  const auto logits = random_logits(V, 21, 3.0f);
  double mx = -INFINITY;
  for (float x : logits) mx = std::max(mx, static_cast<double>(x));
  double sum = 0;
  for (float x : logits) sum += std::exp(static_cast<double>(x) - mx);
  const double lse = mx + std::log(sum);
  std::vector<int32_t> order(V);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });

  Sampler s(V);
  SamplingParams p = make(0.8f, 0, 0.9f);
  p.logprobs = 5;
  p.repetition_penalty = 1.3f;  // penalties and bias do not change the (raw) logprobs
  p.logit_bias = {{order[0], -50.0f}};
  const std::vector<int32_t> prompt = {order[1], 17};
  const SequenceRng rng = SequenceRng::from_seed(5);
  for (int step = 0; step < 5; ++step) {
    const std::vector<int32_t> output(static_cast<size_t>(step), 3);
    const SampleOutput o = sample_one(s, logits, p, prompt, output, &rng);
    EXPECT_NEAR(o.logprob, logits[static_cast<size_t>(o.token)] - lse, 1e-5);
    ASSERT_EQ(o.top_logprobs.size(), 5u);
    for (size_t i = 0; i < 5; ++i) {
      EXPECT_EQ(o.top_logprobs[i].first, order[i]);
      EXPECT_NEAR(o.top_logprobs[i].second, logits[static_cast<size_t>(order[i])] - lse, 1e-5);
    }
  }
  p.logprobs = 0;
  const SampleOutput o = sample_one(s, logits, p, prompt, {}, &rng);
  EXPECT_TRUE(o.top_logprobs.empty());
  EXPECT_NEAR(o.logprob, logits[static_cast<size_t>(o.token)] - lse, 1e-5);
  p.logprobs.reset();
  EXPECT_EQ(sample_one(s, logits, p, prompt, {}, &rng).logprob, 0.0f);
}

// A toy "model": the next logits are a deterministic function of the sequence so far.
std::vector<float> toy_logits(int vocab, const std::vector<int32_t>& seq) {
  uint32_t h = 2166136261u;
  for (int32_t t : seq) h = (h ^ static_cast<uint32_t>(t)) * 16777619u;
  return random_logits(vocab, h, 1.5f);
}

TEST(SamplerReproducibility, SeededSequenceIndependentOfBatchAndThreads) {
  const int V = 32000;
  SamplingParams seeded = make(0.9f, 0, 0.95f);
  seeded.seed = 42;
  seeded.repetition_penalty = 1.1f;
  const int kSteps = 30;
  const std::vector<int32_t> prompt = {1, 2, 3};

  auto run = [&](int batch_size, int position, ThreadPool* pool) {
    Sampler s(V, pool);
    std::vector<SamplingParams> params(static_cast<size_t>(batch_size));
    std::vector<SequenceRng> rngs;
    for (int b = 0; b < batch_size; ++b) {
      params[static_cast<size_t>(b)] = b == position ? seeded : make(b % 2 ? 0.0f : 1.2f, 20);
      params[static_cast<size_t>(b)].seed = b == position ? seeded.seed : std::optional<int64_t>(1000 + b);
      rngs.push_back(SequenceRng::for_request(params[static_cast<size_t>(b)]));
    }
    std::vector<std::vector<int32_t>> outputs(static_cast<size_t>(batch_size));
    for (int step = 0; step < kSteps; ++step) {
      std::vector<std::vector<float>> logits;
      std::vector<SampleInput> batch;
      for (int b = 0; b < batch_size; ++b) {
        std::vector<int32_t> seq = prompt;
        seq.insert(seq.end(), outputs[static_cast<size_t>(b)].begin(), outputs[static_cast<size_t>(b)].end());
        logits.push_back(toy_logits(V, seq));
      }
      for (int b = 0; b < batch_size; ++b) {
        batch.push_back({logits[static_cast<size_t>(b)].data(), &params[static_cast<size_t>(b)],
                         &rngs[static_cast<size_t>(b)], prompt, outputs[static_cast<size_t>(b)]});
      }
      const auto out = s.sample(batch);
      for (int b = 0; b < batch_size; ++b) outputs[static_cast<size_t>(b)].push_back(out[static_cast<size_t>(b)].token);
    }
    return outputs[static_cast<size_t>(position)];
  };

  ThreadPool pool(4);
  const auto alone = run(1, 0, nullptr);
  EXPECT_EQ(run(1, 0, nullptr), alone);
  EXPECT_EQ(run(5, 3, &pool), alone);
  EXPECT_EQ(run(9, 0, &pool), alone);
  // Sampling is really random: the tokens are not all the argmax, and another seed diverges.
  SamplingParams other = seeded;
  other.seed = 43;
  std::swap(seeded, other);
  const auto different = run(1, 0, nullptr);
  EXPECT_NE(different, alone);
}

TEST(SequenceRng, StreamsAndSeedsDifferAndUniformIsInRange) {
  const auto a = SequenceRng::from_seed(7, 0), b = SequenceRng::from_seed(7, 1), c = SequenceRng::from_seed(8, 0);
  EXPECT_EQ(a.key(), SequenceRng::from_seed(7, 0).key());
  EXPECT_NE(a.key(), b.key());
  EXPECT_NE(a.key(), c.key());
  double mean = 0;
  const int n = 100000;
  for (int i = 0; i < n; ++i) {
    const double u = a.uniform(static_cast<uint64_t>(i));
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    mean += u;
  }
  EXPECT_NEAR(mean / n, 0.5, 0.005);
  EXPECT_NE(SequenceRng::from_entropy().key(), SequenceRng::from_entropy().key());
}

}  // namespace
}  // namespace xinfer::engine
