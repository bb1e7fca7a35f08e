// DeviceSamplingPlanner: turns host Sampler inputs (SampleInput) into a backend::SamplingBatch for
// Backend::sample_rows, with the host Sampler's definitions (engine/sampler.h) resolved on the host:
//   greedy       = params.is_greedy();
//   top_k        = params.top_k when top_k_active(vocab), else 0;
//   random_bits  = rng->bits(output_tokens.size()): a pure function of (seed, stream, output index), so a
//                  seeded sequence draws the same token whatever the batch and the step layout;
//   adjustments  = one per distinct token of the row, in the Sampler's order: masked (min_tokens not reached:
//                  stop_token_ids, and EOS ids unless ignore_eos), + logit_bias, repetition penalty on
//                  prompt and output tokens, presence / frequency on output-token counts.
// Cost per row: O(logit_bias + stop ids + prompt + output tokens) when the row has adjustments, else O(1);
// the vocabulary-sized scratch is all -1 between rows.
//
// Rows that want logprobs stay on the host (the device op returns ids only): device_samplable() says so.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "xinfer/backend/backend.h"
#include "xinfer/engine/sampler.h"

namespace xinfer::engine {

// Whether Backend::sample_rows can stand in for Sampler::sample on this input (no logprobs to report).
inline bool device_samplable(const SampleInput& in) { return !in.params->logprobs.has_value(); }

class DeviceSamplingPlanner {
 public:
  explicit DeviceSamplingPlanner(int vocab_size);

  void clear() { batch_.clear(); }
  // Appends the row for `in` (device_samplable; params validated) reading logits row `logit_row`.
  void add(const SampleInput& in, int32_t logit_row, std::span<const int32_t> eos_token_ids);
  const backend::SamplingBatch& batch() const { return batch_; }

 private:
  // The row's adjustment for `token`, created on first use.
  backend::LogitAdjustment& entry(int32_t row, int32_t token);

  int vocab_size_;
  backend::SamplingBatch batch_;
  std::vector<int32_t> slot_;  // [vocab] index into batch_.adjustments for the current row, else -1
};

}  // namespace xinfer::engine
