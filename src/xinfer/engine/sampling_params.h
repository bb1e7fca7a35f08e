// SamplingParams: how one request turns logits into tokens, with the meaning and ranges of the OpenAI /
// vLLM request fields (see docs/sampling.md for the full pipeline and the choices made).
//
// Invariants once validate() has passed:
//   temperature in [0, kMaxTemperature]; < kGreedyTemperature means greedy (argmax, ties -> lowest id);
//   top_k is -1 or 0 (off) or >= 1 (values past the vocab mean off); top_p in (0, 1]; min_p in [0, 1];
//   repetition_penalty > 0 (1 = off); presence/frequency_penalty in [-2, 2];
//   logit_bias ids in [0, vocab) with values in [-100, 100]; logprobs, when set, in [0, kMaxLogprobs];
//   max_tokens, when set, >= 1; 0 <= min_tokens <= max_tokens; stop_token_ids in [0, vocab).
// The struct is a plain value: the server fills it, the engine copies it into the request, the Sampler reads
// it through a const pointer each step.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <vector>

#include "xinfer/core/status.h"

namespace xinfer::engine {

inline constexpr float kGreedyTemperature = 1e-5f;  // below this, sampling is argmax (as vLLM)
inline constexpr float kMaxTemperature = 2.0f;      // OpenAI's documented range is [0, 2]
inline constexpr int kMaxLogprobs = 20;             // OpenAI's top_logprobs limit, vLLM's default
inline constexpr float kMaxAbsLogitBias = 100.0f;
inline constexpr float kMaxAbsPresenceFrequency = 2.0f;

struct SamplingParams {
  float temperature = 1.0f;
  int32_t top_k = 0;    // -1 or 0: off
  float top_p = 1.0f;   // 1: off
  float min_p = 0.0f;   // 0: off; keeps tokens with prob >= min_p * max prob
  // On prompt and output tokens: a positive logit is divided by it, a negative one multiplied.
  float repetition_penalty = 1.0f;
  // On output tokens: logit -= presence_penalty * (count > 0) + frequency_penalty * count.
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  std::map<int32_t, float> logit_bias;  // token id -> bias added to its raw logit, before penalties
  // Same seed + same inputs -> same tokens, whatever else is in the batch. nullopt: random per sequence.
  std::optional<int64_t> seed;
  // nullopt: no logprobs. n: the sampled token's logprob plus the n most likely tokens' logprobs.
  std::optional<int32_t> logprobs;
  bool ignore_eos = false;               // EOS does not stop the sequence (it may still be sampled)
  std::optional<int32_t> max_tokens;     // nullopt: until the context length
  int32_t min_tokens = 0;                // EOS and stop_token_ids are masked until this many are out
  std::vector<int32_t> stop_token_ids;   // stop (and are returned) like EOS, even with ignore_eos

  bool is_greedy() const { return temperature < kGreedyTemperature; }
  bool top_k_active(int vocab_size) const { return top_k > 0 && top_k < vocab_size; }
  bool has_penalties() const {
    return repetition_penalty != 1.0f || presence_penalty != 0.0f || frequency_penalty != 0.0f;
  }
};

// INVALID_ARGUMENT naming the field, the allowed range and the value received, e.g.
// "top_p must be in (0, 1], got 1.5". vocab_size bounds the token ids in logit_bias and stop_token_ids.
Status validate(const SamplingParams& params, int vocab_size);

// Whether sampling `token` ends the sequence: a stop_token_id, or an EOS id unless ignore_eos. (max_tokens
// and stop strings are the engine's and the output filter's business.)
bool is_stop_token(const SamplingParams& params, int32_t token, std::span<const int32_t> eos_token_ids);

}  // namespace xinfer::engine
