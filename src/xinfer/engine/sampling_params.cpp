#include "xinfer/engine/sampling_params.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>

namespace xinfer::engine {
namespace {

template <typename T>
Status range_error(const char* field, const char* range, T value) {
  std::ostringstream os;
  os << field << " must be " << range << ", got " << value;
  return invalid_argument(os.str());
}

}  // namespace

Status validate(const SamplingParams& p, int vocab_size) {
  if (!std::isfinite(p.temperature) || p.temperature < 0.0f || p.temperature > kMaxTemperature)
    return range_error("temperature", "in [0, 2]", p.temperature);
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) return range_error("top_p", "in (0, 1]", p.top_p);
  if (p.top_k < -1) return range_error("top_k", "-1 or 0 (disabled) or at least 1", p.top_k);
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) return range_error("min_p", "in [0, 1]", p.min_p);
  if (!std::isfinite(p.repetition_penalty) || p.repetition_penalty <= 0.0f)
    return range_error("repetition_penalty", "greater than 0", p.repetition_penalty);
  if (!(std::abs(p.presence_penalty) <= kMaxAbsPresenceFrequency))
    return range_error("presence_penalty", "in [-2, 2]", p.presence_penalty);
  if (!(std::abs(p.frequency_penalty) <= kMaxAbsPresenceFrequency))
    return range_error("frequency_penalty", "in [-2, 2]", p.frequency_penalty);
  for (const auto& [token, bias] : p.logit_bias) {
    if (token < 0 || token >= vocab_size) {
      std::ostringstream os;
      os << "logit_bias token id " << token << " is out of vocabulary [0, " << vocab_size << ")";
      return invalid_argument(os.str());
    }
    if (!(std::abs(bias) <= kMaxAbsLogitBias)) {
      std::ostringstream os;
      os << "logit_bias value for token " << token << " must be in [-100, 100], got " << bias;
      return invalid_argument(os.str());
    }
  }
  if (p.logprobs && (*p.logprobs < 0 || *p.logprobs > kMaxLogprobs))
    return range_error("logprobs", "in [0, 20]", *p.logprobs);
  if (p.max_tokens && *p.max_tokens < 1) return range_error("max_tokens", "at least 1", *p.max_tokens);
  if (p.min_tokens < 0) return range_error("min_tokens", "at least 0", p.min_tokens);
  if (p.max_tokens && p.min_tokens > *p.max_tokens) {
    std::ostringstream os;
    os << "min_tokens (" << p.min_tokens << ") must be at most max_tokens (" << *p.max_tokens << ")";
    return invalid_argument(os.str());
  }
  for (int32_t token : p.stop_token_ids) {
    if (token < 0 || token >= vocab_size) {
      std::ostringstream os;
      os << "stop_token_ids entry " << token << " is out of vocabulary [0, " << vocab_size << ")";
      return invalid_argument(os.str());
    }
  }
  return Status::ok_status();
}

bool is_stop_token(const SamplingParams& params, int32_t token, std::span<const int32_t> eos_token_ids) {
  if (std::find(params.stop_token_ids.begin(), params.stop_token_ids.end(), token) !=
      params.stop_token_ids.end())
    return true;
  return !params.ignore_eos && std::find(eos_token_ids.begin(), eos_token_ids.end(), token) != eos_token_ids.end();
}

}  // namespace xinfer::engine
