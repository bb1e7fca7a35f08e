#include "xinfer/engine/sampling_params.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>

namespace xinfer::engine {
namespace {

constexpr int kVocab = 1000;

TEST(SamplingParamsValidate, DefaultsAndBoundariesAreValid) {
  EXPECT_TRUE(validate(SamplingParams{}, kVocab).ok());
  SamplingParams p;
  p.temperature = 0.0f;
  p.top_p = 1.0f;
  p.top_k = -1;
  p.min_p = 1.0f;
  p.presence_penalty = -2.0f;
  p.frequency_penalty = 2.0f;
  p.repetition_penalty = 0.01f;
  p.logit_bias = {{0, -100.0f}, {kVocab - 1, 100.0f}};
  p.logprobs = 20;
  p.max_tokens = 1;
  p.min_tokens = 1;
  p.stop_token_ids = {0, kVocab - 1};
  EXPECT_TRUE(validate(p, kVocab).ok()) << validate(p, kVocab).to_string();
  p.temperature = 2.0f;
  p.top_k = kVocab * 10;  // larger than the vocabulary: off, not an error
  p.logprobs = 0;
  EXPECT_TRUE(validate(p, kVocab).ok());
}

struct BadCase {
  std::string name;
  std::function<void(SamplingParams&)> edit;
  std::string message;
};

TEST(SamplingParamsValidate, RejectsOutOfRangeWithClearMessages) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<BadCase> cases = {
      {"negative temperature", [](auto& p) { p.temperature = -0.5f; }, "temperature must be in [0, 2], got -0.5"},
      {"high temperature", [](auto& p) { p.temperature = 2.5f; }, "temperature must be in [0, 2], got 2.5"},
      {"nan temperature", [&](auto& p) { p.temperature = nan; }, "temperature must be in [0, 2]"},
      {"top_p 0", [](auto& p) { p.top_p = 0.0f; }, "top_p must be in (0, 1], got 0"},
      {"top_p 1.5", [](auto& p) { p.top_p = 1.5f; }, "top_p must be in (0, 1], got 1.5"},
      {"top_p nan", [&](auto& p) { p.top_p = nan; }, "top_p must be in (0, 1]"},
      {"top_k -2", [](auto& p) { p.top_k = -2; }, "top_k must be -1 or 0 (disabled) or at least 1, got -2"},
      {"min_p -0.1", [](auto& p) { p.min_p = -0.1f; }, "min_p must be in [0, 1], got -0.1"},
      {"min_p 1.1", [](auto& p) { p.min_p = 1.1f; }, "min_p must be in [0, 1], got 1.1"},
      {"repetition 0", [](auto& p) { p.repetition_penalty = 0.0f; }, "repetition_penalty must be greater than 0, got 0"},
      {"repetition inf", [](auto& p) { p.repetition_penalty = INFINITY; }, "repetition_penalty must be greater than 0"},
      {"presence 2.5", [](auto& p) { p.presence_penalty = 2.5f; }, "presence_penalty must be in [-2, 2], got 2.5"},
      {"frequency -3", [](auto& p) { p.frequency_penalty = -3.0f; }, "frequency_penalty must be in [-2, 2], got -3"},
      {"frequency nan", [&](auto& p) { p.frequency_penalty = nan; }, "frequency_penalty must be in [-2, 2]"},
      {"bias id high", [](auto& p) { p.logit_bias = {{kVocab, 1.0f}}; },
       "logit_bias token id 1000 is out of vocabulary [0, 1000)"},
      {"bias id negative", [](auto& p) { p.logit_bias = {{-1, 1.0f}}; },
       "logit_bias token id -1 is out of vocabulary [0, 1000)"},
      {"bias value", [](auto& p) { p.logit_bias = {{5, 101.0f}}; },
       "logit_bias value for token 5 must be in [-100, 100], got 101"},
      {"logprobs 21", [](auto& p) { p.logprobs = 21; }, "logprobs must be in [0, 20], got 21"},
      {"logprobs -1", [](auto& p) { p.logprobs = -1; }, "logprobs must be in [0, 20], got -1"},
      {"max_tokens 0", [](auto& p) { p.max_tokens = 0; }, "max_tokens must be at least 1, got 0"},
      {"min_tokens -1", [](auto& p) { p.min_tokens = -1; }, "min_tokens must be at least 0, got -1"},
      {"min > max", [](auto& p) { p.max_tokens = 4; p.min_tokens = 5; },
       "min_tokens (5) must be at most max_tokens (4)"},
      {"stop id", [](auto& p) { p.stop_token_ids = {3, 1000}; },
       "stop_token_ids entry 1000 is out of vocabulary [0, 1000)"},
  };
  for (const auto& c : cases) {
    SamplingParams p;
    c.edit(p);
    const Status s = validate(p, kVocab);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.name;
    EXPECT_THAT(s.message(), ::testing::HasSubstr(c.message)) << c.name;
  }
}

TEST(SamplingParams, IsStopToken) {
  SamplingParams p;
  p.stop_token_ids = {7};
  const std::vector<int32_t> eos = {2, 3};
  EXPECT_TRUE(is_stop_token(p, 7, eos));
  EXPECT_TRUE(is_stop_token(p, 3, eos));
  EXPECT_FALSE(is_stop_token(p, 4, eos));
  p.ignore_eos = true;
  EXPECT_FALSE(is_stop_token(p, 3, eos));
  EXPECT_TRUE(is_stop_token(p, 7, eos));
}

TEST(SamplingParams, GreedyBelowEpsilon) {
  SamplingParams p;
  p.temperature = 0.0f;
  EXPECT_TRUE(p.is_greedy());
  p.temperature = 1e-6f;
  EXPECT_TRUE(p.is_greedy());
  p.temperature = 0.01f;
  EXPECT_FALSE(p.is_greedy());
}

}  // namespace
}  // namespace xinfer::engine
