// Sampler: turns one step's logits into one token per sequence, on the host, following vLLM v1's order:
//
//   raw logits --(logprobs are taken here: log_softmax of the raw model output, as vLLM's default)-->
//   min_tokens mask (EOS/stop ids -> -inf) -> + logit_bias -> repetition, frequency, presence penalties
//   -> greedy: argmax (ties -> lowest id)
//   -> else: / temperature -> min_p -> top_k -> top_p (on what min_p and top_k left) -> inverse-CDF draw
//
// Cost per sampling sequence: O(vocab) passes (copy, max, one exp per surviving token) plus
// O(prompt + output) for penalties; top-k uses a size-k heap and top-p a quickselect that carries the mass
// (expected O(candidates)), never a sort of the vocabulary. Sequences run in parallel on the ThreadPool.
//
// Reproducibility: the uniform for a sequence's n-th output token is a pure function of (SequenceRng key,
// n = output_tokens.size()), and each sequence is processed by one thread with a fixed summation order, so a
// seeded sequence gives the same tokens whatever the batch composition, thread count, or preemption.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "xinfer/core/thread_pool.h"
#include "xinfer/engine/sampling_params.h"

namespace xinfer::engine {

// Counter-based generator (SplitMix64 output function over key + counter * golden gamma): no state but the
// key, so the draw for output position n can be recomputed at any time. One per sequence.
class SequenceRng {
 public:
  // stream separates the n sequences of one request that share a seed (use the sequence's index).
  static SequenceRng from_seed(int64_t seed, uint64_t stream = 0);
  static SequenceRng from_entropy();  // std::random_device
  // from_seed(*params.seed, stream) when the request has a seed, else from_entropy().
  static SequenceRng for_request(const SamplingParams& params, uint64_t stream = 0);

  uint64_t bits(uint64_t counter) const;
  // Uniform in [0, 1) with 53 random bits.
  double uniform(uint64_t counter) const { return static_cast<double>(bits(counter) >> 11) * 0x1.0p-53; }
  uint64_t key() const { return key_; }

 private:
  explicit SequenceRng(uint64_t key) : key_(key) {}
  uint64_t key_;
};

struct SampleInput {
  const float* logits = nullptr;                // [vocab_size], raw model output for this sequence
  const SamplingParams* params = nullptr;
  const SequenceRng* rng = nullptr;             // may be null for greedy params
  std::span<const int32_t> prompt_tokens;       // for repetition_penalty
  std::span<const int32_t> output_tokens;       // all generated so far: penalties, min_tokens, RNG counter
};

struct SampleOutput {
  int32_t token = -1;
  // Filled only when params.logprobs is set (else 0 and empty): log_softmax of the raw logits for `token`,
  // and the params.logprobs most likely tokens, most likely first (ties -> lowest id).
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top_logprobs;
};

// Whether the Sampler changes `in`'s raw logits before choosing (min_tokens stop masking, logit_bias,
// penalties).
bool adjusts_logits(const SampleInput& in);
// Whether the Sampler's choice for `in` is the argmax of the raw logits (ties -> lowest id) with no logprobs
// to report: then a backend's argmax_rows gives the same token (the engine's device greedy path).
inline bool is_plain_argmax(const SampleInput& in) {
  return in.params->is_greedy() && !in.params->logprobs.has_value() && !adjusts_logits(in);
}

// Log-probabilities at one position from its raw logits [vocab] (what the Sampler reports, and prompt
// log-probabilities): log_softmax of `token` (f32 logits, log-sum-exp in double, result rounded to f32), its
// rank (1 + the number of tokens with a strictly larger logit, as vLLM), and the num_top most likely tokens,
// most likely first (ties -> lowest id). O(vocab); scratch (optional) avoids an allocation.
struct PositionLogprobs {
  float logprob = 0.0f;
  int32_t rank = 0;
  std::vector<std::pair<int32_t, float>> top;
};
PositionLogprobs position_logprobs(std::span<const float> logits, int32_t token, int num_top,
                                   std::vector<std::pair<float, int32_t>>* scratch = nullptr);

class Sampler {
 public:
  // eos_token_ids: masked while a sequence has fewer than min_tokens outputs (unless ignore_eos).
  explicit Sampler(int vocab_size, ThreadPool* pool = nullptr, std::vector<int32_t> eos_token_ids = {});
  ~Sampler();
  Sampler(const Sampler&) = delete;
  Sampler& operator=(const Sampler&) = delete;

  int vocab_size() const { return vocab_size_; }
  const std::vector<int32_t>& eos_token_ids() const { return eos_token_ids_; }

  // One output per input, in order. Params must have passed validate(). Not reentrant: one caller at a time
  // (the engine loop); the work inside is spread over the pool.
  std::vector<SampleOutput> sample(std::span<const SampleInput> batch);

 private:
  struct Workspace;
  SampleOutput sample_one(const SampleInput& in, Workspace& ws) const;

  int vocab_size_;
  ThreadPool* pool_;
  std::vector<int32_t> eos_token_ids_;
  std::vector<Workspace> workspaces_;  // one per pool thread, created on first use
};

}  // namespace xinfer::engine
