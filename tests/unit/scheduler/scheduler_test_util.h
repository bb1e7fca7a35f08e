// Helpers shared by the hand-checked scheduler tests (scheduler_test.cpp, async_scheduler_test.cpp): prompts
// of consecutive ids, requests, a small KV cache configuration, and finding a sequence's row in a step.
#pragma once

#include <cstdint>
#include <numeric>
#include <vector>

#include "xinfer/scheduler/scheduler.h"

namespace xinfer::sched::test_util {

// n consecutive token ids from `start`.
inline std::vector<int32_t> tokens(int n, int start = 1) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

inline Request req(uint64_t id, int prompt_len, int max_new, int priority = 0, int start = 1) {
  Request r;
  r.id = id;
  r.prompt = tokens(prompt_len, start);
  r.max_new_tokens = max_new;
  r.priority = priority;
  return r;
}

// 33 blocks of 4 tokens, 8 sequences, 16 tokens per step, admission every step, no watermark.
inline SchedulerConfig small_config() {
  SchedulerConfig c;
  c.block_size = 4;
  c.num_blocks = 33;
  c.max_num_seqs = 8;
  c.max_num_batched_tokens = 16;
  c.decode_interval = 1;
  c.min_decode_interval = 1;
  c.kv_watermark = 0;
  return c;
}

// The row of sequence `id` in `s`, or nullptr.
inline const ScheduledSeq* find_seq(const ScheduledStep& s, uint64_t id) {
  for (const ScheduledSeq& q : s.seqs)
    if (q.seq_id == id) return &q;
  return nullptr;
}

}  // namespace xinfer::sched::test_util
