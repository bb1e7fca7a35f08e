// Sequence: the scheduler's state for one request (internal to scheduler/, exposed for tests).
// State machine: kWaiting -> kRunning (prefill chunks, then decode) -> finished (object destroyed);
//                kRunning -> kWaiting on preemption (blocks freed, num_computed = 0, tokens kept; with a swap
//                space the KV of its computed tokens is first copied to swap blocks, and copied back when
//                it is admitted again: swap_blocks / num_swapped).
// Invariants: tokens = prompt + outputs (+ one kPendingToken placeholder when `placeholder`);
// 0 <= num_computed < tokens.size() while alive (the last known token is never in the KV cache: it is the
// next input); num_computed + num_in_flight <= tokens.size(); the table holds exactly
// ceil((num_computed + num_in_flight) / block_size) blocks while running and is empty while waiting (then
// num_computed == num_in_flight == 0). swap_blocks holds ceil(num_swapped / block_size) blocks while waiting
// swapped out and is empty otherwise (num_swapped == 0).
// Asynchronous scheduling (scheduler.h): num_in_flight counts tokens of steps scheduled but not yet
// update()d; `placeholder` marks a sequence sampled in the oldest in-flight step whose next step was
// scheduled before that token was known: tokens.back() is kPendingToken until update() replaces it.
#pragma once

#include <cstdint>
#include <tuple>
#include <vector>

#include "xinfer/kv_cache/kv_cache_manager.h"
#include "xinfer/scheduler/request.h"

namespace xinfer::sched {

enum class SeqStatus { kWaiting, kRunning };

struct Sequence {
  Request request;               // prompt moved out into tokens
  std::vector<int32_t> tokens;   // prompt + generated
  int num_prompt_tokens = 0;
  int64_t num_computed = 0;      // tokens whose K/V are in the cache
  SeqStatus status = SeqStatus::kWaiting;
  kv::BlockTable table;
  uint64_t arrival_seq = 0;      // order of add(): breaks arrival_time ties
  int bypass_count = 0;          // times a later request of the same priority was admitted first
  int64_t admission_order = -1;  // rank of its first admission among all requests (for tests, debugging)
  double enqueue_time = 0;       // last time it entered the waiting queue (add or preemption)
  bool finishing = false;        // set by update() while it removes finished sequences
  int64_t num_in_flight = 0;     // tokens scheduled in steps not yet update()d (their KV is being written)
  bool placeholder = false;      // tokens.back() is kPendingToken (see above)
  int pending_row = -1;          // with placeholder: its row in the oldest in-flight step's StepOutput
  // request.prompt_logits: the chunk that reaches the end of the prompt has been scheduled with all_logits
  // (every prompt position got its row; a recomputation after preemption needs none and may hit the cache).
  bool prompt_logits_done = false;
  // Swap-to-host preemption (waiting only): the KV of tokens [0, num_swapped) sits in these swap blocks.
  std::vector<int32_t> swap_blocks;
  int64_t num_swapped = 0;
  RequestMetrics metrics;

  // Known output tokens (the placeholder is not one).
  int num_output_tokens() const {
    return static_cast<int>(tokens.size()) - num_prompt_tokens - (placeholder ? 1 : 0);
  }
  // Tokens whose KV is in the cache or being written by an in-flight step.
  int64_t num_scheduled() const { return num_computed + num_in_flight; }
  // Tokens still to be fed (0: every token, the placeholder included, is scheduled).
  int64_t num_remaining() const { return static_cast<int64_t>(tokens.size()) - num_scheduled(); }
  // Its next prefill chunk needs a logits row per token (prompt log-probabilities still owed).
  bool wants_prompt_rows() const { return request.prompt_logits && !prompt_logits_done; }
};

// "a is more important than b": lower priority value, then earlier arrival, then earlier add().
// The preemption victim is the least important running sequence (lowest priority, then most recent).
inline bool more_important(const Sequence* a, const Sequence* b) {
  return std::tie(a->request.priority, a->request.arrival_time, a->arrival_seq) <
         std::tie(b->request.priority, b->request.arrival_time, b->arrival_seq);
}

struct MoreImportant {
  bool operator()(const Sequence* a, const Sequence* b) const { return more_important(a, b); }
};

}  // namespace xinfer::sched
