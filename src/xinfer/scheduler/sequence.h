// Sequence: the scheduler's state for one request (internal to scheduler/, exposed for tests).
// State machine: kWaiting -> kRunning (prefill chunks, then decode) -> finished (object destroyed);
//                kRunning -> kWaiting on preemption (blocks freed, num_computed = 0, tokens kept).
// Invariants: tokens = prompt + outputs; 0 <= num_computed < tokens.size() while alive (the last known
// token is never in the KV cache: it is the next input); table covers >= num_computed tokens while
// running and is empty while waiting.
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
  RequestMetrics metrics;

  int num_output_tokens() const { return static_cast<int>(tokens.size()) - num_prompt_tokens; }
  int64_t num_remaining() const { return static_cast<int64_t>(tokens.size()) - num_computed; }
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
