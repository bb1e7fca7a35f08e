// SchedulerConfig: every tunable of the KV cache and the continuous-batching policy, with defaults.
// The engine fills num_blocks (kv::num_blocks_for_budget) and prints to_string() at start-up.
// docs/scheduler.md explains the policy these knobs steer.
#pragma once

#include <string>

#include "xinfer/core/status.h"

namespace xinfer::sched {

struct SchedulerConfig {
  // --- KV cache ---
  int block_size = 16;                // tokens per KV block
  int num_blocks = 0;                 // KV blocks including the null block 0 (required, >= 2)
  bool enable_prefix_caching = true;  // reuse full blocks with equal (parent hash, tokens)
  // Swap space in blocks (derived by the engine from --swap-space): a preempted sequence's computed KV is
  // copied to host memory and back when it is admitted again, instead of being recomputed, while this many
  // blocks last (docs/scheduler.md). 0: preempted sequences recompute.
  int num_swap_blocks = 0;

  // --- batch limits ---
  int max_num_seqs = 256;             // sequences running at once (sequence slots)
  int max_num_batched_tokens = 2048;  // tokens fed to one forward (decodes + prefill chunks)
  int max_model_len = 0;              // longest sequence (prompt + output); 0: only KV capacity limits it

  // --- prefill budget while decoding (ITL tail) ---
  // A step with D > 0 decoding sequences feeds at most prefill_budget(D) prefill tokens (running chunks and
  // admissions together): max_num_batched_tokens - prefill_tokens_per_decode * D, floored at
  // min_prefill_budget (never above max_num_batched_tokens). The more sequences a long step would stall, the
  // shorter the interrupt. Admission intervals shrink with the budget (effective_decode_interval), so the
  // prefill tokens admitted per step stay those of full-budget admissions. 0 tokens per decode: off.
  double prefill_tokens_per_decode = 8;  // budget tokens removed per decoding sequence
  // Floor: prefill keeps moving even with max_num_seqs decoding. 512 (4 prompts of 128 per step at D >= 192) keeps
  // the admission rate well above a saturated closed loop's arrival rate (~2 prompts of 128 per step at 256
  // streams), so the queue does not bunch: measured on one H200 at c = 256, 128/128, steady state, TTFT p99/p50
  // 5.4x -> 1.05x, ITL 1.80x -> 2.01x, +2.8% tok/s against 256 (docs/scheduler.md, PERF.md session 10).
  int min_prefill_budget = 512;

  // --- admission: decode interrupts ---
  int decode_interval = 4;        // initial: admit waiting requests every this many steps while decoding
  int min_decode_interval = 1;    // adaptive interval lower bound (1: admit every step)
  int max_decode_interval = 32;   // adaptive interval upper bound
  double target_queue_time_s = 0.5;     // head-of-queue wait above this forces admission, halves interval
  double target_step_time_s = 0.1;      // admission steps slower than this (EWMA) double the interval
  double kv_watermark = 0.01;     // fraction of usable blocks kept free when admitting (not when empty)

  // --- waiting queue ordering ---
  int reorder_window = 8;   // head-of-queue requests (same priority) reordered shortest-first; <= 1: FIFO
  int max_bypass = 8;       // aging: a request passed over this many times is admitted next (no starvation)

  // Prefill tokens allowed in a step that decodes `num_decodes` sequences (the rule above).
  int prefill_budget(int num_decodes) const;
  // Steps between admissions while decoding: `interval` scaled by prefill_budget(D) / max_num_batched_tokens
  // (rounded up, >= 1): interrupts k times smaller may come k times as often.
  int effective_decode_interval(int interval, int num_decodes) const;

  // Ok or an invalid_argument naming the first bad field.
  Status validate() const;
  // "block_size=16 num_blocks=... ..." on one line, every field.
  std::string to_string() const;
};

}  // namespace xinfer::sched
