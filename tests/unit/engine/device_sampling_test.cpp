// DeviceSamplingPlanner: the SamplingBatch it builds, applied by a reference written here from the
// LogitAdjustment contract (backend.h), must give the host Sampler's adjusted logits: checked through the
// Sampler's greedy choice on many random rows whose adjusted tokens compete for the top.
#include "xinfer/engine/device_sampling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <set>
#include <vector>

namespace xinfer::engine {
namespace {

// Applies the adjustments of batch row `row` to `logits` as backend.h defines them.
void apply(const backend::SamplingBatch& batch, int32_t row, std::vector<float>& logits) {
  const backend::SamplingRow& r = batch.rows[static_cast<size_t>(row)];
  for (const backend::LogitAdjustment& a : batch.adjustments) {
    if (a.row != row) continue;
    float& l = logits[static_cast<size_t>(a.token)];
    if (a.masked) {
      l = -std::numeric_limits<float>::infinity();
      continue;
    }
    if (a.has_bias) l += a.bias;
    if (a.repeated) l = l > 0 ? l / r.repetition_penalty : l * r.repetition_penalty;
    if (a.count > 0) l -= r.presence_penalty + r.frequency_penalty * static_cast<float>(a.count);
  }
}

int32_t argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

TEST(DeviceSamplingPlanner, AdjustmentsReproduceTheHostSamplersLogits) {
  constexpr int kVocab = 12;
  const std::vector<int32_t> eos = {11};
  Sampler sampler(kVocab, nullptr, eos);
  DeviceSamplingPlanner planner(kVocab);
  std::mt19937 gen(5);
  std::uniform_real_distribution<float> logit(-1.0f, 1.0f);
  std::uniform_int_distribution<int> tok(0, kVocab - 1), len(0, 6), coin(0, 1);
  int changed = 0;
  const int kTrials = 3000;
  for (int trial = 0; trial < kTrials; ++trial) {
    SamplingParams p;
    p.temperature = 0.0f;
    if (coin(gen)) p.repetition_penalty = 1.0f + static_cast<float>(len(gen)) * 0.3f;
    if (coin(gen)) p.repetition_penalty = 0.6f;
    if (coin(gen)) p.presence_penalty = static_cast<float>(len(gen) - 3) * 0.4f;
    if (coin(gen)) p.frequency_penalty = static_cast<float>(len(gen) - 3) * 0.3f;
    if (coin(gen))
      for (int i = len(gen); i > 0; --i) p.logit_bias[tok(gen)] = static_cast<float>(len(gen) - 3) * 0.5f;
    if (coin(gen)) {
      p.min_tokens = len(gen);
      p.stop_token_ids = {tok(gen)};
      p.ignore_eos = coin(gen) == 1;
    }
    p.max_tokens = 100;
    ASSERT_TRUE(validate(p, kVocab).ok());
    std::vector<int32_t> prompt(static_cast<size_t>(len(gen))), output(static_cast<size_t>(len(gen)));
    for (auto& t : prompt) t = tok(gen);
    for (auto& t : output) t = tok(gen);
    std::vector<float> logits(kVocab);
    for (float& l : logits) l = logit(gen);

    // Two rows in one batch (the second one is the trial's), so per-row grouping is exercised.
    SamplingParams other;
    other.temperature = 0.0f;
    other.logit_bias = {{3, 1.0f}};
    const std::vector<int32_t> none;
    planner.clear();
    planner.add(SampleInput{nullptr, &other, nullptr, none, none}, 7, eos);
    const SampleInput in{logits.data(), &p, nullptr, prompt, output};
    planner.add(in, 2, eos);
    const backend::SamplingBatch& b = planner.batch();
    ASSERT_EQ(b.rows.size(), 2u);
    EXPECT_EQ(b.rows[1].logit_row, 2);
    EXPECT_TRUE(b.rows[1].greedy);
    std::set<int32_t> tokens;
    for (const auto& a : b.adjustments) {
      if (a.row != 1) continue;
      EXPECT_TRUE(tokens.insert(a.token).second) << "two adjustments for token " << a.token;
    }
    std::vector<float> adjusted = logits;
    apply(b, 1, adjusted);
    const int32_t host = sampler.sample(std::span(&in, 1))[0].token;
    EXPECT_EQ(argmax(adjusted), host) << "trial " << trial;
    changed += argmax(adjusted) != argmax(logits) ? 1 : 0;
  }
  EXPECT_GT(changed, kTrials / 5) << "the adjustments rarely matter: the test has little power";
}

TEST(DeviceSamplingPlanner, RowParameters) {
  constexpr int kVocab = 100;
  DeviceSamplingPlanner planner(kVocab);
  const SequenceRng rng = SequenceRng::from_seed(42, 3);
  const std::vector<int32_t> out = {5, 6, 7};
  const std::vector<int32_t> none;
  SamplingParams p;
  p.temperature = 0.7f;
  p.top_k = 100;  // >= vocab: off
  p.top_p = 0.9f;
  p.min_p = 0.05f;
  planner.add(SampleInput{nullptr, &p, &rng, none, out}, 4, {});
  p.top_k = 40;
  planner.add(SampleInput{nullptr, &p, &rng, none, std::span(out).first(1)}, 5, {});
  p.top_k = -1;
  planner.add(SampleInput{nullptr, &p, &rng, none, out}, 6, {});
  const backend::SamplingBatch& b = planner.batch();
  ASSERT_EQ(b.rows.size(), 3u);
  EXPECT_TRUE(b.adjustments.empty());
  EXPECT_FALSE(b.rows[0].greedy);
  EXPECT_EQ(b.rows[0].top_k, 0);
  EXPECT_EQ(b.rows[1].top_k, 40);
  EXPECT_EQ(b.rows[2].top_k, 0);
  EXPECT_EQ(b.rows[0].temperature, 0.7f);
  EXPECT_EQ(b.rows[0].inv_temperature, 1.0f / 0.7f);
  EXPECT_EQ(b.rows[0].top_p, 0.9f);
  EXPECT_EQ(b.rows[0].min_p, 0.05f);
  // The draw is keyed by the sequence's generator at the output index: the same for the same position.
  EXPECT_EQ(b.rows[0].random_bits, rng.bits(3));
  EXPECT_EQ(b.rows[1].random_bits, rng.bits(1));
  EXPECT_EQ(b.rows[2].random_bits, b.rows[0].random_bits);
  EXPECT_NE(b.rows[0].random_bits, SequenceRng::from_seed(43, 3).bits(3));
  planner.clear();
  EXPECT_TRUE(planner.batch().rows.empty());
}

TEST(DeviceSamplingPlanner, LogprobRowsStayOnTheHost) {
  SamplingParams p;
  const std::vector<int32_t> none;
  EXPECT_TRUE(device_samplable(SampleInput{nullptr, &p, nullptr, none, none}));
  p.logprobs = 0;
  EXPECT_FALSE(device_samplable(SampleInput{nullptr, &p, nullptr, none, none}));
}

}  // namespace
}  // namespace xinfer::engine
