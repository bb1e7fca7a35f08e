// engine/perplexity.h's pure parts: the windows of transformers' perplexity guide, worked out by hand, and
// the log-softmax / KL / argmax helpers against closed forms. The model-running part is checked end to end
// by tests/python/test_eval_ppl.py against a numpy reference.
#include "xinfer/engine/perplexity.h"

#include <cmath>
#include <vector>

#include <gtest/gtest.h>

namespace xinfer::engine {
namespace {

std::vector<std::vector<int64_t>> as_triples(const std::vector<ScoreWindow>& w) {
  std::vector<std::vector<int64_t>> out;
  for (const auto& x : w) out.push_back({x.begin, x.end, x.first_target});
  return out;
}

TEST(ScoreWindows, OverlappingWindowsScoreEveryTokenButTheFirstOnce) {
  // n 10, ctx 4, stride 2: [0,4) scores 1..3, [2,6) 4..5, [4,8) 6..7, [6,10) 8..9; stops at the end.
  auto w = plan_score_windows(10, 4, 2);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(as_triples(*w), (std::vector<std::vector<int64_t>>{{0, 4, 1}, {2, 6, 4}, {4, 8, 6}, {6, 10, 8}}));
}

TEST(ScoreWindows, NonOverlappingWindowsSkipEachWindowsFirstToken) {
  // stride == ctx: [0,4) scores 1..3, [4,8) 5..7, [8,10) 9: 10 - 3 windows = 7 tokens.
  auto w = plan_score_windows(10, 4, 4);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(as_triples(*w), (std::vector<std::vector<int64_t>>{{0, 4, 1}, {4, 8, 5}, {8, 10, 9}}));
}

TEST(ScoreWindows, ShortTextIsOneWindow) {
  auto w = plan_score_windows(3, 1024, 512);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(as_triples(*w), (std::vector<std::vector<int64_t>>{{0, 3, 1}}));
}

TEST(ScoreWindows, LastWindowMayScoreNothing) {
  // n 5, ctx 4, stride 4: [4,5) has one token, which it cannot score (the guide counts the window).
  auto w = plan_score_windows(5, 4, 4);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(as_triples(*w), (std::vector<std::vector<int64_t>>{{0, 4, 1}, {4, 5, 5}}));
}

TEST(ScoreWindows, BadArgumentsAreErrors) {
  EXPECT_FALSE(plan_score_windows(1, 4, 2).ok());
  EXPECT_FALSE(plan_score_windows(0, 4, 2).ok());
  EXPECT_FALSE(plan_score_windows(10, 1, 1).ok());
  EXPECT_FALSE(plan_score_windows(10, 4, 0).ok());
  EXPECT_FALSE(plan_score_windows(10, 4, -1).ok());
  EXPECT_FALSE(plan_score_windows(10, 4, 5).ok());
}

TEST(TokenScores, LogSoftmaxKlAndArgmaxMatchClosedForms) {
  const std::vector<float> uniform(8, 3.0f);
  EXPECT_NEAR(token_logprob(uniform, 5), -std::log(8.0), 1e-12);
  // Large logits do not overflow: log_softmax([1000, 1000 + ln 3]) = [-ln 4, ln 3 - ln 4].
  const std::vector<float> big{1000.0f, 1000.0f + static_cast<float>(std::log(3.0))};
  EXPECT_NEAR(token_logprob(big, 0), -std::log(4.0), 1e-4);
  // KL(Bernoulli(1/2) || Bernoulli(1/4)) = 1/2 ln(2) + 1/2 ln(2/3).
  const std::vector<float> half{0.0f, 0.0f};
  const std::vector<float> quarter{0.0f, static_cast<float>(std::log(3.0))};  // p = [1/4, 3/4]
  EXPECT_NEAR(kl_divergence(half, quarter), 0.5 * std::log(2.0) + 0.5 * std::log(2.0 / 3.0), 1e-7);
  EXPECT_EQ(kl_divergence(quarter, quarter), 0.0);
  EXPECT_GT(kl_divergence(quarter, half), 0.0);
  EXPECT_EQ(argmax_first(std::vector<float>{1.0f, 4.0f, 4.0f, 2.0f}), 1);  // ties -> lowest id
}

}  // namespace
}  // namespace xinfer::engine
