// Request (what the engine submits), FinishReason, and the per-request metrics the scheduler records.
// Times are seconds on the scheduler's clock (Scheduler's Clock; steady clock by default).
#pragma once

#include <cstdint>
#include <vector>

namespace xinfer::sched {

struct Request {
  uint64_t id = 0;                      // unique among live requests
  std::vector<int32_t> prompt;          // token ids, non-empty
  int max_new_tokens = 16;              // >= 1; finish reason kLength when reached
  int min_new_tokens = 0;               // stop/eos tokens are ignored before this many outputs
  int priority = 0;                     // lower value = more important (as vLLM)
  std::vector<int32_t> stop_token_ids;  // user stop tokens (always honoured after min_new_tokens)
  std::vector<int32_t> eos_token_ids;   // the model's EOS ids (the engine fills them)
  bool ignore_eos = false;              // true: eos_token_ids do not stop generation
  // Logits for every prompt position (prompt log-probabilities): the prefix cache is bypassed until the
  // prompt has been fed once (a cached position has no logits), and each prefill chunk carries one logits
  // row per token (ScheduledSeq::all_logits), bounded by the step's logits rows (scheduler.h).
  bool prompt_logits = false;
  // Requests sharing a nonzero group (one client request's prompts x n choices) count as one entry of the
  // waiting queue's reorder window (waiting_queue.h): admission alternates between clients instead of
  // taking one client's whole batch first. 0: a group of its own.
  uint64_t group = 0;
  double arrival_time = -1;             // < 0: the scheduler's clock at add()
};

enum class FinishReason { kStop, kLength, kAbort };
const char* finish_reason_name(FinishReason r);  // "stop", "length", "abort" (OpenAI's words)

struct RequestMetrics {
  double arrival_time = 0;
  double first_scheduled_time = -1;  // first admission into the running batch
  double first_token_time = -1;
  double last_token_time = -1;
  double finished_time = -1;
  std::vector<double> inter_token_latencies_s;  // one per output token after the first
  int num_prompt_tokens = 0;
  int num_output_tokens = 0;
  int num_cached_prompt_tokens = 0;  // prefix-cache hit at first admission
  int num_preemptions = 0;

  double queue_time_s() const { return first_scheduled_time < 0 ? -1 : first_scheduled_time - arrival_time; }
  double time_to_first_token_s() const { return first_token_time < 0 ? -1 : first_token_time - arrival_time; }
  double e2e_latency_s() const { return finished_time < 0 ? -1 : finished_time - arrival_time; }
};

struct FinishedRequest {
  uint64_t id = 0;
  FinishReason reason = FinishReason::kStop;
  std::vector<int32_t> output_token_ids;  // every generated token, including a final stop/eos token
  RequestMetrics metrics;
};

}  // namespace xinfer::sched
