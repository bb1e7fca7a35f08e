// ScheduledStep: what one forward pass computes (from Scheduler::schedule()), StepOutput: what it sampled
// (to Scheduler::update()), and StepMetrics: per-step figures for /metrics.
//
// For each ScheduledSeq the model runner feeds token_ids at positions start_pos .. start_pos + n - 1 and
// writes their K/V to slots block_table[p / block_size] * block_size + p % block_size; attention for
// those tokens reads positions [0, start_pos + n) of the same sequence through block_table.
// The spans point into scheduler-owned memory: valid until the next schedule()/update()/abort()/add().
// One exception, which asynchronous scheduling relies on: a step in flight keeps the spans of its live
// sequences across the update() of the step before it (token vectors are reserved to prompt +
// max_new_tokens at add() and never reallocate - checked -, placeholders resolve in place, and update()
// never moves block ids); rows of sequences that finished or were aborted meanwhile dangle and are skipped.
//
// Asynchronous scheduling (scheduler.h): a step may be scheduled while the previous one is still being
// computed. A sequence sampled in that previous step then feeds a token nobody has seen yet: its decode row
// carries token_ids = {kPendingToken} and pending_row = the row of the previous step's StepOutput whose
// token it must feed (the model runner takes it from the device-side result of that step).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "xinfer/kv_cache/swap_space.h"

namespace xinfer::sched {

// Placeholder for a sampled token that the host does not know yet (never a valid vocabulary id).
inline constexpr int32_t kPendingToken = -1;

struct ScheduledSeq {
  uint64_t seq_id = 0;
  std::span<const int32_t> token_ids;    // [n]: a prefill chunk, or the one last token when decoding
  int start_pos = 0;                     // tokens already in the KV cache (including prefix-cache hits)
  bool sample = false;                   // the chunk ends at the last known token: sample one token
  std::span<const int32_t> block_table;  // [ceil((start_pos + n) / block_size)] block ids
  // >= 0: a decode row whose token_ids are {kPendingToken}: feed the token sampled for row pending_row
  // (StepOutput order) of the step scheduled just before this one, which is still in flight.
  int pending_row = -1;
  // Logits rows for every token of the chunk, in order (prompt log-probabilities; Request::prompt_logits),
  // not only for the last one when it samples. Such a chunk takes num_tokens() of the step's logits rows.
  bool all_logits = false;
  int num_tokens() const { return static_cast<int>(token_ids.size()); }
  // One token that produces a sample: the decode-shaped case (attention kernels may batch these).
  bool is_decode() const { return sample && token_ids.size() == 1; }
};

struct StepMetrics {
  uint64_t step = 0;             // 0-based step index
  int num_seqs = 0;              // sequences in this step
  int num_decode_seqs = 0;       // of which is_decode()
  int num_prefill_seqs = 0;      // of which prefill chunks
  int num_batched_tokens = 0;    // = num_decode_tokens + num_prefill_tokens <= max_num_batched_tokens
  int num_decode_tokens = 0;
  int num_prefill_tokens = 0;
  int num_admitted = 0;          // waiting -> running in this step
  int num_preempted = 0;         // running -> waiting in this step
  int num_swapped_out = 0;       // of which with their KV copied to the swap space (not recomputed)
  int num_swapped_in = 0;        // admitted with KV copied back from the swap space
  int num_running = 0;           // after scheduling
  int num_waiting = 0;           // after scheduling
  int num_free_blocks = 0;       // after scheduling (cached blocks count as free)
  double kv_usage = 0;           // active blocks / usable blocks, after scheduling
  int64_t prefix_query_tokens = 0;  // cumulative
  int64_t prefix_hit_tokens = 0;    // cumulative
  double prefix_hit_rate = 0;       // cumulative hit tokens / query tokens
  int decode_interval = 0;       // current adaptive interval
  double schedule_time_s = 0;    // host time inside schedule()
  double step_time_s = 0;        // schedule() to update() (filled by update())
  int num_finished = 0;          // finished by update() (filled by update())
};

struct ScheduledStep {
  // Decode-shaped sequences first, then prefill chunks; each in priority order.
  std::vector<ScheduledSeq> seqs;
  int num_sampling = 0;                 // seqs with sample == true (StepOutput carries one token each)
  int num_logit_rows = 0;               // logits rows: num_tokens() per all_logits seq, 1 per other sampling seq
  std::vector<uint64_t> preempted_ids;  // running -> waiting in this step (they will recompute later)
  // Swap-to-host preemption (docs/scheduler.md): KV block copies that must run before this step's forward,
  // swap_out (device block -> swap block: victims of this step, or of empty steps before it) first, then
  // swap_in (swap block -> device block: swapped-out sequences admitted in this step). The model runner
  // runs them even when none of the step's rows is left to compute.
  std::vector<kv::BlockCopy> swap_out, swap_in;
  StepMetrics metrics;
  bool empty() const { return seqs.empty(); }
};

struct StepOutput {
  // One sampled token per ScheduledSeq with sample == true, in the order of ScheduledStep::seqs.
  std::vector<int32_t> token_ids;
};

}  // namespace xinfer::sched
