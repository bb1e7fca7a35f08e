#include "xinfer/engine/device_sampling.h"

#include "xinfer/core/check.h"

namespace xinfer::engine {

DeviceSamplingPlanner::DeviceSamplingPlanner(int vocab_size)
    : vocab_size_(vocab_size), slot_(static_cast<size_t>(vocab_size), -1) {
  XI_CHECK_GT(vocab_size, 0);
}

backend::LogitAdjustment& DeviceSamplingPlanner::entry(int32_t row, int32_t token) {
  XI_CHECK(token >= 0 && token < vocab_size_) << "token id " << token << " outside vocab " << vocab_size_;
  int32_t& s = slot_[static_cast<size_t>(token)];
  if (s < 0) {
    s = static_cast<int32_t>(batch_.adjustments.size());
    backend::LogitAdjustment a;
    a.row = row;
    a.token = token;
    batch_.adjustments.push_back(a);
  }
  return batch_.adjustments[static_cast<size_t>(s)];
}

void DeviceSamplingPlanner::add(const SampleInput& in, int32_t logit_row, std::span<const int32_t> eos_token_ids) {
  XI_CHECK(in.params != nullptr);
  XI_CHECK(device_samplable(in)) << "rows with logprobs are sampled on the host";
  const SamplingParams& p = *in.params;
  const auto row = static_cast<int32_t>(batch_.rows.size());
  backend::SamplingRow r;
  r.logit_row = logit_row;
  r.greedy = p.is_greedy();
  if (!r.greedy) {
    XI_CHECK(in.rng != nullptr) << "a random-sampling sequence needs a SequenceRng";
    r.temperature = p.temperature;
    r.inv_temperature = 1.0f / p.temperature;
    r.top_k = p.top_k_active(vocab_size_) ? p.top_k : 0;
    r.top_p = p.top_p;
    r.min_p = p.min_p;
    r.random_bits = in.rng->bits(in.output_tokens.size());
  }
  r.repetition_penalty = p.repetition_penalty;
  r.presence_penalty = p.presence_penalty;
  r.frequency_penalty = p.frequency_penalty;
  batch_.rows.push_back(r);

  if (!adjusts_logits(in)) return;
  const size_t first = batch_.adjustments.size();
  if (static_cast<int64_t>(in.output_tokens.size()) < p.min_tokens) {
    for (int32_t t : p.stop_token_ids) entry(row, t).masked = true;
    if (!p.ignore_eos)
      for (int32_t t : eos_token_ids) entry(row, t).masked = true;
  }
  for (const auto& [t, bias] : p.logit_bias) {
    backend::LogitAdjustment& a = entry(row, t);
    a.has_bias = true;
    a.bias = bias;
  }
  if (p.repetition_penalty != 1.0f) {
    for (auto tokens : {in.prompt_tokens, in.output_tokens})
      for (int32_t t : tokens) entry(row, t).repeated = true;
  }
  if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f)
    for (int32_t t : in.output_tokens) ++entry(row, t).count;
  for (size_t i = first; i < batch_.adjustments.size(); ++i)
    slot_[static_cast<size_t>(batch_.adjustments[i].token)] = -1;
}

}  // namespace xinfer::engine
