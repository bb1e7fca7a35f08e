// Scheduler: continuous batching over a paged KV cache. One schedule() + one forward + one update() is
// one engine step; the engine loop is
//
//   for (;;) {
//     drain client queue: add(request) / abort(id)      // never between schedule() and update()
//     ScheduledStep step = scheduler.schedule();       // decodes + prefill chunks, block tables
//     if (step.empty()) { wait for work; continue; }   // (an empty step needs no update())
//     StepOutput out = run_forward_and_sample(step);   // one token per seq with sample == true
//     for (FinishedRequest& f : scheduler.update(out)) report(f);
//   }
//
// Asynchronous scheduling (docs/scheduler.md): at most two steps may be in flight. schedule() may be called
// once more before the previous step's update(); updates then come in schedule order:
//
//   step N = schedule(); launch N                    // N in flight
//   loop:
//     add() / abort() (allowed while steps are in flight: abort forgets the sequence's in-flight rows)
//     step N+1 = schedule(); launch N+1                // N+1's placeholder rows read N's ids on the device
//     update(N's tokens)                               // resolves placeholders, finishes, frees blocks
//     N = N+1
//
// schedule(N+1) first extends every sequence sampled in N by a placeholder token (kPendingToken), so N+1
// schedules its decode with the right position and blocks (ScheduledSeq::pending_row names N's output row
// that holds the real token) -- except a sequence whose finish after N is certain (its max_new_tokens or
// max_model_len is reached): it gets no placeholder and is not scheduled in N+1. update(N) writes the real
// token over the placeholder and applies the finish rules; a sequence finished there by a stop/eos token
// (or aborted) leaves N+1's row behind as a discarded row: update(N+1) ignores it. A sequence preempted by
// schedule(N+1) while in N keeps N's token (its KV from N is dropped) and is not re-admitted while its
// placeholder is unresolved. The prefix cache hashes only committed tokens (never a placeholder: the
// placeholder is never below num_computed).
//
// Policy (docs/scheduler.md): running sequences first, in priority order (decodes are never starved of
// token budget by prefill chunks); waiting requests are admitted every decode_interval steps (adaptive)
// or at once when nothing is decoding; when KV blocks run out the least important running sequence is
// preempted (lowest priority, then most recent) and later recomputed from prompt + outputs - or, with a swap
// space (SchedulerConfig::num_swap_blocks), its computed KV is copied to host memory
// (ScheduledStep::swap_out) and back when it is admitted again (swap_in), so that only the tokens in flight
// at the preemption recompute. Each token in StepOutput is a new output token of its sequence (recomputation
// never re-samples). Not thread-safe: only the engine loop thread calls it. Spans in a ScheduledStep stay
// valid until the next add()/abort()/schedule()/update(). Logits rows: a step asks the model for at most
// max_num_seqs logits rows (ScheduledStep::num_logit_rows: one per sampling sequence, one per token of an
// all_logits chunk). Requests with prompt_logits feed their prompt in chunks cut to the rows left, skip the
// prefix cache until their prompt has been fed once, and a plain chunk that would sample when no row is left
// stops one token short. Invariants, checked by check_invariants(): every block's ref count equals its uses
// in live block tables; every swap block is free or held by exactly one waiting sequence (swap_blocks, sized
// to its num_swapped); a sequence is in exactly one of waiting / running; running.size() <= max_num_seqs; at
// most two steps in flight; each sequence's num_in_flight equals its tokens in the in-flight steps; a
// placeholder only as the last token of a sequence sampled in the oldest in-flight step.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "xinfer/core/status.h"
#include "xinfer/kv_cache/kv_cache_manager.h"
#include "xinfer/kv_cache/swap_space.h"
#include "xinfer/scheduler/request.h"
#include "xinfer/scheduler/scheduled_step.h"
#include "xinfer/scheduler/scheduler_config.h"
#include "xinfer/scheduler/sequence.h"
#include "xinfer/scheduler/waiting_queue.h"

namespace xinfer::sched {

// Seconds on a monotonic clock. Tests inject a fake one.
using Clock = std::function<double()>;
double steady_clock_seconds();

struct SchedulerStats {
  int num_running = 0;
  int num_waiting = 0;
  kv::KVCacheStats kv;
  int64_t num_steps = 0;
  int64_t num_preemptions = 0;  // cumulative
  // Cumulative: tokens whose KV the preemptions dropped (computed or in flight), which the victims compute
  // again when re-admitted (less what the prefix cache still holds then). Swapped-out KV is not dropped.
  int64_t num_preempted_tokens = 0;
  int64_t num_swap_outs = 0;  // cumulative: preemptions that copied the victim's KV to the swap space
  int64_t num_swapped_out_tokens = 0;  // cumulative: tokens of KV those copied
  int64_t num_swap_ins = 0;            // cumulative: admissions that copied KV back
  int num_swap_blocks = 0;             // the swap space, in blocks
  int num_free_swap_blocks = 0;
  int64_t num_finished = 0;     // cumulative, aborts included
  int64_t num_aborted = 0;
  int decode_interval = 0;
};

class Scheduler {
 public:
  // XI_CHECKs config.validate(): call it first to report bad user input.
  explicit Scheduler(const SchedulerConfig& config, Clock clock = steady_clock_seconds);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  const SchedulerConfig& config() const { return config_; }

  // Queues a request. invalid_argument: empty prompt, max_new_tokens < 1, duplicate live id, or prompt +
  // max_new_tokens longer than max_model_len or than the whole KV cache (it could never finish).
  Status add(Request request);
  // Finishes request `id` in any state (waiting, running, in the step being computed) and frees its
  // blocks at once. Returns its record (reason kAbort, outputs so far), or nullopt for an unknown id.
  std::optional<FinishedRequest> abort(uint64_t id);

  // Plans one forward pass. At most kMaxStepsInFlight non-empty steps may await their update() (see above):
  // with one in flight, this is the asynchronous "next step" (placeholders for that step's samples).
  ScheduledStep schedule();
  // Applies the results of the oldest in-flight step: advances computed tokens, registers full blocks in the
  // prefix cache, appends sampled tokens (or resolves their placeholders), finishes sequences (stop/eos
  // token, max_new_tokens, max_model_len). Returns the sequences finished by this update.
  std::vector<FinishedRequest> update(const StepOutput& output);
  static constexpr int kMaxStepsInFlight = 2;
  // Non-empty steps scheduled and not yet update()d (0..kMaxStepsInFlight).
  int num_steps_in_flight() const { return static_cast<int>(pending_.size()); }

  bool has_unfinished() const { return !seqs_.empty(); }
  int num_running() const { return static_cast<int>(running_.size()); }
  int num_waiting() const { return static_cast<int>(waiting_.size()); }
  int decode_interval() const { return decode_interval_; }
  SchedulerStats stats() const;
  // The last step's metrics, completed by update() (step_time_s, num_finished).
  const StepMetrics& last_step_metrics() const { return last_metrics_; }
  // nullptr when `id` is not live. For tests and debugging.
  const Sequence* find(uint64_t id) const;
  const kv::KVCacheManager& kv_cache() const { return kv_; }

  // XI_CHECKs every invariant above (O(blocks + sequences)); for tests.
  void check_invariants() const;

 private:
  struct InFlight {
    Sequence* seq;  // nullptr once aborted (or finished by an earlier step's update()) during the step
    int num_tokens;
    bool sample;
    bool kv_dropped = false;  // seq was preempted after this step was scheduled: only its token counts
  };
  // A scheduled, not yet updated step.
  struct PendingStep {
    std::vector<InFlight> rows;  // in ScheduledStep::seqs order
    double schedule_start = 0;
    bool admitted = false;  // admitted waiting requests (admission step-time EWMA)
    StepMetrics metrics;
  };

  void preempt(Sequence* s, ScheduledStep& step);
  // Copies the KV of s's computed tokens to swap blocks (queued in swap_out_); false when the swap space is
  // off or too full, or s owes prompt log-probabilities (those positions must be computed).
  bool swap_out(Sequence* s);
  // Gives back s's swap blocks, and forgets their copies not yet handed to a step (s finished or aborted).
  void drop_swapped(Sequence* s);
  // Gives back s's swap blocks (s swapped in, or dropped).
  void release_swap_blocks(Sequence* s);
  void emit(Sequence* s, int n, ScheduledStep& step);
  int admit(int budget, int& rows_left, ScheduledStep& step);
  // Logits rows: a prefill chunk of n of s's `remaining` tokens cut to what rows_left rows allow, of which
  // rows_reserved are kept for decodes later in the order; and the rows a chunk of n tokens takes (emit()
  // may clear wants_prompt_rows: call it before).
  int64_t cap_to_rows(const Sequence* s, int64_t n, int64_t remaining, int rows_left, int rows_reserved) const;
  int chunk_rows(const Sequence* s, int n, bool samples) const;
  bool admission_due(int num_decodes, double now);
  void adapt_interval(double head_wait_s, int num_decodes);
  FinishedRequest finish(Sequence* s, FinishReason reason, double now);
  void remove_running(Sequence* s);
  // schedule() with a step in flight: placeholders for that step's samples whose finish is not certain.
  void extend_provisionally(PendingStep& step);

  SchedulerConfig config_;
  Clock clock_;
  kv::KVCacheManager kv_;
  kv::SwapSpace swap_;
  std::vector<kv::BlockCopy>
      swap_out_;  // swap-outs not handed to a step yet (the next non-empty one runs them)
  std::unordered_map<uint64_t, std::unique_ptr<Sequence>> seqs_;
  std::vector<Sequence*> running_;  // sorted by more_important()
  WaitingQueue waiting_;
  std::vector<InFlight> in_flight_;   // rows of the step being scheduled (capacity recycled by update())
  std::vector<PendingStep> pending_;  // in-flight steps, oldest first (<= kMaxStepsInFlight; no allocation)
  uint64_t next_arrival_seq_ = 0;
  int64_t next_admission_order_ = 0;
  uint64_t step_index_ = 0;

  // Admission control (docs/scheduler.md, "decode interrupts").
  int decode_interval_;
  int steps_since_admission_ = 0;
  double admission_step_time_ewma_ = 0;  // seconds, over steps that admitted prefills

  int64_t num_preemptions_ = 0;
  int64_t num_preempted_tokens_ = 0;
  int64_t num_swap_outs_ = 0;
  int64_t num_swapped_out_tokens_ = 0;
  int64_t num_swap_ins_ = 0;
  int64_t num_finished_ = 0;
  int64_t num_aborted_ = 0;
  StepMetrics last_metrics_;
};

}  // namespace xinfer::sched
