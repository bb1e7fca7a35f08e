#include "xinfer/scheduler/scheduler.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "xinfer/core/check.h"

namespace xinfer::sched {

double steady_clock_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
  }
  return "unknown";
}

namespace {

kv::KVCacheConfig kv_config(const SchedulerConfig& c) {
  kv::KVCacheConfig k;
  k.num_blocks = c.num_blocks;
  k.block_size = c.block_size;
  k.enable_prefix_caching = c.enable_prefix_caching;
  return k;
}

bool contains(const std::vector<int32_t>& v, int32_t t) { return std::find(v.begin(), v.end(), t) != v.end(); }

}  // namespace

Scheduler::Scheduler(const SchedulerConfig& config, Clock clock)
    : config_(config),
      clock_(std::move(clock)),
      kv_(kv_config(config)),
      swap_(config.num_swap_blocks),
      decode_interval_(config.decode_interval) {
  XI_CHECK_OK(config.validate());
  running_.reserve(config.max_num_seqs);
  pending_.reserve(kMaxStepsInFlight);
}

Scheduler::~Scheduler() = default;

Status Scheduler::add(Request request) {
  if (request.prompt.empty()) return invalid_argument("request " + std::to_string(request.id) + ": empty prompt");
  if (request.max_new_tokens < 1) {
    return invalid_argument("request " + std::to_string(request.id) + ": max_new_tokens must be >= 1, got " +
                            std::to_string(request.max_new_tokens));
  }
  if (seqs_.count(request.id) != 0) return invalid_argument("duplicate request id " + std::to_string(request.id));
  const int64_t total = static_cast<int64_t>(request.prompt.size()) + request.max_new_tokens;
  if (config_.max_model_len > 0 && total > config_.max_model_len) {
    return invalid_argument("request " + std::to_string(request.id) + ": prompt (" +
                            std::to_string(request.prompt.size()) + " tokens) + max_new_tokens (" +
                            std::to_string(request.max_new_tokens) + ") = " + std::to_string(total) +
                            " exceeds max_model_len " + std::to_string(config_.max_model_len));
  }
  // The last sampled token is never fed back, so a sequence needs KV for total - 1 tokens.
  if (total - 1 > kv_.capacity_tokens()) {
    return invalid_argument("request " + std::to_string(request.id) + ": prompt (" +
                            std::to_string(request.prompt.size()) + " tokens) + max_new_tokens (" +
                            std::to_string(request.max_new_tokens) + ") needs KV cache for " +
                            std::to_string(total - 1) + " tokens, more than the whole cache holds (" +
                            std::to_string(kv_.capacity_tokens()) + " tokens = " +
                            std::to_string(kv_.pool().num_usable_blocks()) + " blocks of " +
                            std::to_string(config_.block_size) + ")");
  }
  const double now = clock_();
  auto seq = std::make_unique<Sequence>();
  Sequence* s = seq.get();
  s->tokens = std::move(request.prompt);
  s->request = std::move(request);
  s->request.prompt.clear();
  if (s->request.arrival_time < 0) s->request.arrival_time = now;
  s->num_prompt_tokens = static_cast<int>(s->tokens.size());
  s->tokens.reserve(s->tokens.size() + s->request.max_new_tokens);
  s->arrival_seq = next_arrival_seq_++;
  s->enqueue_time = now;
  s->metrics.arrival_time = s->request.arrival_time;
  s->metrics.num_prompt_tokens = s->num_prompt_tokens;
  seqs_.emplace(s->request.id, std::move(seq));
  waiting_.push(s);
  return Status::ok_status();
}

std::optional<FinishedRequest> Scheduler::abort(uint64_t id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return std::nullopt;
  Sequence* s = it->second.get();
  if (s->status == SeqStatus::kRunning) {
    remove_running(s);
  } else {
    waiting_.erase(s);
  }
  ++num_aborted_;
  return finish(s, FinishReason::kAbort, clock_());
}

void Scheduler::remove_running(Sequence* s) {
  auto it = std::find(running_.begin(), running_.end(), s);
  XI_CHECK(it != running_.end()) << "sequence " << s->request.id << " not running";
  running_.erase(it);
}

FinishedRequest Scheduler::finish(Sequence* s, FinishReason reason, double now) {
  // Rows of in-flight steps become discarded rows (their KV writes land in blocks freed here; a later
  // owner of such a block writes it after them, in step order).
  for (PendingStep& p : pending_)
    for (InFlight& f : p.rows)
      if (f.seq == s) f.seq = nullptr;
  kv_.free(s->table);
  drop_swapped(s);
  FinishedRequest f;
  f.id = s->request.id;
  f.reason = reason;
  f.output_token_ids.assign(s->tokens.begin() + s->num_prompt_tokens,
                            s->tokens.end() - (s->placeholder ? 1 : 0));
  f.metrics = std::move(s->metrics);
  f.metrics.finished_time = now;
  f.metrics.num_output_tokens = static_cast<int>(f.output_token_ids.size());
  ++num_finished_;
  seqs_.erase(f.id);  // destroys s
  return f;
}

bool Scheduler::swap_out(Sequence* s) {
  const int64_t tokens = s->num_computed;  // written by steps already update()d: launched before the copy
  if (tokens == 0 || s->wants_prompt_rows()) return false;
  const int n = static_cast<int>((tokens + config_.block_size - 1) / config_.block_size);
  XI_CHECK(s->swap_blocks.empty()) << "sequence " << s->request.id;
  if (!swap_.allocate(n, s->swap_blocks)) return false;
  const std::span<const int32_t> blocks = s->table.blocks();
  for (int i = 0; i < n; ++i)
    swap_out_.push_back({blocks[static_cast<size_t>(i)], s->swap_blocks[static_cast<size_t>(i)]});
  s->num_swapped = tokens;
  ++num_swap_outs_;
  num_swapped_out_tokens_ += tokens;
  return true;
}

void Scheduler::drop_swapped(Sequence* s) {
  if (s->swap_blocks.empty()) return;
  // Copies still queued here write blocks that go back now: drop them, or a later swap-out to the same block
  // could race with them in one batch. (Copies already handed to a step run before any later step's.)
  swap_out_.erase(std::remove_if(swap_out_.begin(), swap_out_.end(),
                                 [&](const kv::BlockCopy& c) { return contains(s->swap_blocks, c.to); }),
                  swap_out_.end());
  release_swap_blocks(s);
}

void Scheduler::release_swap_blocks(Sequence* s) {
  swap_.release(s->swap_blocks);
  s->swap_blocks.clear();
  s->num_swapped = 0;
}

void Scheduler::preempt(Sequence* s, ScheduledStep& step) {
  XI_CHECK(!running_.empty() && running_.back() == s);
  running_.pop_back();
  // The copy is queued before the blocks go back: it runs before any later forward can overwrite them.
  const bool swapped = swap_out(s);
  if (swapped) ++step.metrics.num_swapped_out;
  kv_.free(s->table);
  // Rows of the in-flight step keep their token (update() appends it) but their KV is gone.
  for (PendingStep& p : pending_)
    for (InFlight& f : p.rows)
      if (f.seq == s) f.kv_dropped = true;
  num_preempted_tokens_ += swapped ? s->num_in_flight : s->num_scheduled();
  s->num_in_flight = 0;
  s->num_computed = 0;
  s->status = SeqStatus::kWaiting;
  s->enqueue_time = clock_();
  ++s->metrics.num_preemptions;
  ++num_preemptions_;
  waiting_.push(s);
  step.preempted_ids.push_back(s->request.id);
}

void Scheduler::emit(Sequence* s, int n, ScheduledStep& step) {
  ScheduledSeq q;
  q.seq_id = s->request.id;
  q.token_ids = std::span<const int32_t>(s->tokens).subspan(s->num_scheduled(), n);
  q.start_pos = static_cast<int>(s->num_scheduled());
  q.sample = s->num_scheduled() + n == static_cast<int64_t>(s->tokens.size());
  q.block_table = s->table.blocks();
  if (s->wants_prompt_rows()) {
    q.all_logits = true;
    if (q.start_pos + n >= s->num_prompt_tokens) s->prompt_logits_done = true;
  }
  if (s->placeholder && q.sample) {
    XI_CHECK_EQ(n, 1) << "sequence " << s->request.id << ": a placeholder is fed alone";
    q.pending_row = s->pending_row;
  }
  step.seqs.push_back(q);
  in_flight_.push_back({s, n, q.sample});
  s->num_in_flight += n;
}

int64_t Scheduler::cap_to_rows(const Sequence* s, int64_t n, int64_t remaining, int rows_left,
                               int rows_reserved) const {
  const int64_t free_rows = static_cast<int64_t>(rows_left) - rows_reserved;
  if (s->wants_prompt_rows()) return std::min(n, free_rows);  // one row per token
  // Other chunks take a row only when they sample: without one, stop one token short of the end.
  return n == remaining && free_rows < 1 ? remaining - 1 : n;
}

int Scheduler::chunk_rows(const Sequence* s, int n, bool samples) const {
  return s->wants_prompt_rows() ? n : (samples ? 1 : 0);
}

void Scheduler::extend_provisionally(PendingStep& step) {
  int row = 0;
  for (const InFlight& f : step.rows) {
    if (!f.sample) continue;
    const int r = row++;
    Sequence* s = f.seq;
    if (s == nullptr || f.kv_dropped) continue;
    XI_CHECK(!s->placeholder) << "sequence " << s->request.id << " already has a placeholder";
    XI_CHECK_EQ(s->num_remaining(), 0) << "sequence " << s->request.id;
    // Certain finish after this token: nothing to schedule (update() finishes it with kLength).
    const int outputs_after = s->num_output_tokens() + 1;
    if (outputs_after >= s->request.max_new_tokens ||
        (config_.max_model_len > 0 && static_cast<int64_t>(s->tokens.size()) + 1 >= config_.max_model_len))
      continue;
    XI_CHECK_LT(s->tokens.size(), s->tokens.capacity()) << "token vector would move under an in-flight span";
    s->tokens.push_back(kPendingToken);
    s->placeholder = true;
    s->pending_row = r;
  }
}

bool Scheduler::admission_due(int num_decodes, double now) {
  if (num_decodes == 0) {  // nothing is decoding: a prefill delays nobody
    steps_since_admission_ = 0;
    return true;
  }
  const double head_wait = now - waiting_.front()->enqueue_time;
  const int interval = config_.effective_decode_interval(decode_interval_, num_decodes);
  if (head_wait <= config_.target_queue_time_s && steps_since_admission_ < interval) return false;
  adapt_interval(head_wait, num_decodes);
  steps_since_admission_ = 0;
  return true;
}

// Halve when requests queue up (the head waited too long, or more requests wait than decode), double when
// admission steps are slow for the decoding sequences they interrupt, else drift back to the initial value.
void Scheduler::adapt_interval(double head_wait_s, int num_decodes) {
  if (head_wait_s > config_.target_queue_time_s || static_cast<int>(waiting_.size()) > num_decodes) {
    decode_interval_ = std::max(config_.min_decode_interval, decode_interval_ / 2);
  } else if (admission_step_time_ewma_ > config_.target_step_time_s) {
    decode_interval_ = std::min(config_.max_decode_interval, decode_interval_ * 2);
  } else if (decode_interval_ < config_.decode_interval) {
    ++decode_interval_;
  } else if (decode_interval_ > config_.decode_interval) {
    --decode_interval_;
  }
}

int Scheduler::admit(int budget, int& rows_left, ScheduledStep& step) {
  const int watermark_blocks =
      static_cast<int>(config_.kv_watermark * static_cast<double>(kv_.pool().num_usable_blocks()));
  const int window = std::max(1, config_.reorder_window);
  const double now = clock_();
  int admitted = 0;
  while (!waiting_.empty() && static_cast<int>(running_.size()) < config_.max_num_seqs && budget > 0) {
    Sequence* s = waiting_.pick(window, config_.max_bypass);
    // Preempted while its sampled token is still in flight: it can recompute only once the token is known
    // (after that step's update(); not before the next schedule(), since a preempting step admits nobody).
    if (s->placeholder) break;
    const int reserve = running_.empty() ? 0 : watermark_blocks;
    // Prompt logits still owed: cached positions would have none, so the whole prompt is computed.
    kv::PrefixMatch m = s->wants_prompt_rows() ? kv::PrefixMatch{} : kv_.match_prefix(s->tokens);
    // Swapped out: the prefix cache's blocks first (no copy for them), the swap blocks for the rest, unless
    // the cache holds all of it. Its KV already counts as computed: only the tokens after it take budget.
    if (s->num_swapped > 0 && m.num_tokens(config_.block_size) >= s->num_swapped) drop_swapped(s);
    const int64_t hit = std::max<int64_t>(m.num_tokens(config_.block_size), s->num_swapped);
    const int64_t remaining = static_cast<int64_t>(s->tokens.size()) - hit;
    int64_t n = std::min<int64_t>(remaining, budget);
    n = std::min<int64_t>(n, kv_.max_total_tokens(s->table, &m, reserve) - hit);
    n = cap_to_rows(s, n, remaining, rows_left, 0);
    // The chosen request does not fit: stop here rather than let others overtake it (bounded waiting).
    if (n < 1) break;
    XI_CHECK(kv_.allocate(s->table, hit + n, &m, reserve));
    if (s->num_swapped > 0) {
      const std::span<const int32_t> blocks = s->table.blocks();
      for (size_t i = m.blocks.size(); i < s->swap_blocks.size(); ++i)
        step.swap_in.push_back({s->swap_blocks[i], blocks[i]});
      // Released now: a later swap-out into these blocks runs in a later step, after this step's swap-in. (Not
      // drop_swapped(): s's own swap-outs still queued, if any, must run before this swap-in.)
      release_swap_blocks(s);
      ++num_swap_ins_;
      ++step.metrics.num_swapped_in;
    }
    waiting_.admitted(s, window);
    s->status = SeqStatus::kRunning;
    s->num_computed = hit;
    XI_CHECK_EQ(s->num_in_flight, 0);
    s->bypass_count = 0;
    if (s->metrics.first_scheduled_time < 0) {
      s->metrics.first_scheduled_time = now;
      s->admission_order = next_admission_order_++;
      s->metrics.num_cached_prompt_tokens = static_cast<int>(std::min<int64_t>(hit, s->num_prompt_tokens));
    }
    running_.insert(std::upper_bound(running_.begin(), running_.end(), s, MoreImportant()), s);
    rows_left -= chunk_rows(s, static_cast<int>(n), n == remaining);
    emit(s, static_cast<int>(n), step);
    budget -= static_cast<int>(n);
    ++admitted;
  }
  return admitted;
}

ScheduledStep Scheduler::schedule() {
  XI_CHECK_LT(static_cast<int>(pending_.size()), kMaxStepsInFlight)
      << "schedule() with " << pending_.size() << " steps in flight: update() the oldest first";
  const double now = clock_();
  if (!pending_.empty()) extend_provisionally(pending_.back());
  ScheduledStep step;
  step.seqs.reserve(running_.size() + 4);
  in_flight_.clear();
  int budget = config_.max_num_batched_tokens;
  // Logits rows the model computes in one forward (its buffer holds max_num_seqs rows: the Engine loads it
  // so). A decode or a sampling chunk takes one; an all_logits chunk one per token (chunk_rows_cap).
  int rows_left = config_.max_num_seqs;

  // 1. Running sequences in priority order. Decodes later in the order keep one budget token each, so a
  //    long prefill chunk of an important sequence cannot stall everyone's decode. A sequence with nothing
  //    left to feed (sampled in the in-flight step, certain to finish there) is skipped.
  int decodes_left = 0;
  for (const Sequence* s : running_) decodes_left += s->num_remaining() == 1 ? 1 : 0;
  // Prefill tokens (running chunks + admissions) this step may carry: shrinks as more sequences decode.
  int prefill_left = config_.prefill_budget(decodes_left);
  int num_decodes = 0;
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Sequence* s = running_[i];
    const int64_t remaining = s->num_remaining();
    XI_CHECK_GE(remaining, 0) << "sequence " << s->request.id;
    if (remaining == 0) continue;
    const bool decode = remaining == 1;
    if (decode) --decodes_left;
    int64_t n = decode ? 1 : std::min<int64_t>({remaining, budget - decodes_left, prefill_left});
    if (!decode) n = cap_to_rows(s, n, remaining, rows_left, decodes_left);
    if (n < 1) continue;
    // Out of blocks: preempt the least important running sequence (never one already in this step,
    // since those come before s in the order) until s fits at least one token; it may be s itself.
    bool self_preempted = false;
    for (;;) {
      const int64_t fit = kv_.max_total_tokens(s->table, nullptr, 0) - s->num_scheduled();
      if (fit >= 1) {
        n = std::min(n, fit);
        break;
      }
      Sequence* victim = running_.back();
      if (victim != s && victim->num_remaining() == 1) --decodes_left;
      preempt(victim, step);
      if (victim == s) {
        self_preempted = true;
        break;
      }
    }
    if (self_preempted) break;
    XI_CHECK(kv_.allocate(s->table, s->num_scheduled() + n));
    rows_left -= chunk_rows(s, static_cast<int>(n), n == remaining);
    emit(s, static_cast<int>(n), step);
    budget -= static_cast<int>(n);
    if (!decode) prefill_left -= static_cast<int>(n);
    num_decodes += decode ? 1 : 0;
  }

  // 2. Waiting requests, when admission is due. Not in a step that preempted: the blocks just freed
  //    belong to the running sequences that needed them.
  int num_admitted = 0;
  ++steps_since_admission_;
  const int admit_budget = std::min(budget, prefill_left);
  if (step.preempted_ids.empty() && !waiting_.empty() && admit_budget > 0 &&
      static_cast<int>(running_.size()) < config_.max_num_seqs && admission_due(num_decodes, now)) {
    num_admitted = admit(admit_budget, rows_left, step);
  }

  // Decode-shaped sequences first (kernels batch them), each group in the order scheduled.
  bool ordered = true;
  bool seen_prefill = false;
  for (const ScheduledSeq& q : step.seqs) {
    if (!q.is_decode()) seen_prefill = true;
    else if (seen_prefill) ordered = false;
  }
  if (!ordered) {
    std::vector<ScheduledSeq> seqs;
    std::vector<InFlight> flights;
    seqs.reserve(step.seqs.size());
    flights.reserve(step.seqs.size());
    for (int pass = 0; pass < 2; ++pass) {
      for (size_t i = 0; i < step.seqs.size(); ++i) {
        if (step.seqs[i].is_decode() == (pass == 0)) {
          seqs.push_back(step.seqs[i]);
          flights.push_back(in_flight_[i]);
        }
      }
    }
    step.seqs.swap(seqs);
    in_flight_.swap(flights);
  }

  StepMetrics& m = step.metrics;
  m.step = step_index_;
  m.num_seqs = static_cast<int>(step.seqs.size());
  for (const ScheduledSeq& q : step.seqs) {
    if (q.sample) ++step.num_sampling;
    step.num_logit_rows += q.all_logits ? q.num_tokens() : (q.sample ? 1 : 0);
    if (q.is_decode()) {
      ++m.num_decode_seqs;
      m.num_decode_tokens += 1;
    } else {
      ++m.num_prefill_seqs;
      m.num_prefill_tokens += q.num_tokens();
    }
  }
  m.num_batched_tokens = m.num_decode_tokens + m.num_prefill_tokens;
  m.num_admitted = num_admitted;
  m.num_preempted = static_cast<int>(step.preempted_ids.size());
  m.num_running = static_cast<int>(running_.size());
  m.num_waiting = static_cast<int>(waiting_.size());
  const kv::KVCacheStats ks = kv_.stats();
  m.num_free_blocks = ks.num_free_blocks;
  m.kv_usage = ks.usage;
  m.prefix_query_tokens = ks.prefix_query_tokens;
  m.prefix_hit_tokens = ks.prefix_hit_tokens;
  m.prefix_hit_rate = ks.prefix_hit_rate();
  m.decode_interval = decode_interval_;
  m.schedule_time_s = clock_() - now;
  last_metrics_ = m;
  ++step_index_;
  if (!step.seqs.empty()) {
    step.swap_out = std::move(swap_out_);
    swap_out_.clear();
    pending_.push_back(PendingStep{std::move(in_flight_), now, num_admitted > 0, m});
  }
  in_flight_.clear();
  return step;
}

std::vector<FinishedRequest> Scheduler::update(const StepOutput& output) {
  std::vector<FinishedRequest> finished;
  if (pending_.empty()) {
    XI_CHECK(output.token_ids.empty()) << "update() with tokens but no step in flight";
    return finished;
  }
  PendingStep step = std::move(pending_.front());
  pending_.erase(pending_.begin());
  const double now = clock_();
  size_t k = 0;
  size_t num_sampling = 0;
  for (const InFlight& f : step.rows) num_sampling += f.sample ? 1 : 0;
  XI_CHECK_EQ(output.token_ids.size(), num_sampling) << "StepOutput needs one token per sampling sequence";

  std::vector<std::pair<Sequence*, FinishReason>> done;
  for (const InFlight& f : step.rows) {
    const int32_t token = f.sample ? output.token_ids[k++] : 0;
    Sequence* s = f.seq;
    if (s == nullptr) continue;  // aborted during the step, or finished by the previous step's update()
    if (!f.kv_dropped) {
      s->num_in_flight -= f.num_tokens;
      s->num_computed += f.num_tokens;
      XI_CHECK_GE(s->num_in_flight, 0) << "sequence " << s->request.id;
      // Full blocks below num_computed get hashed: never the placeholder, which sits at or above it.
      XI_CHECK(!s->placeholder || s->num_computed < static_cast<int64_t>(s->tokens.size()))
          << "sequence " << s->request.id << " would commit its placeholder";
      kv_.commit(s->table, s->tokens, s->num_computed);
    }
    if (!f.sample) continue;
    XI_CHECK_GE(token, 0) << "sampled token of sequence " << s->request.id;
    if (s->placeholder) {
      XI_CHECK_EQ(s->tokens.back(), kPendingToken);
      s->tokens.back() = token;
      s->placeholder = false;
      s->pending_row = -1;
    } else {
      XI_CHECK_LT(s->tokens.size(), s->tokens.capacity())
          << "token vector would move under an in-flight span";
      s->tokens.push_back(token);
    }
    RequestMetrics& rm = s->metrics;
    if (rm.first_token_time < 0) {
      rm.first_token_time = now;
    } else {
      rm.inter_token_latencies_s.push_back(now - rm.last_token_time);
    }
    rm.last_token_time = now;
    const Request& r = s->request;
    const int outputs = s->num_output_tokens();
    rm.num_output_tokens = outputs;
    const bool may_stop = outputs >= r.min_new_tokens;
    if (may_stop && (contains(r.stop_token_ids, token) || (!r.ignore_eos && contains(r.eos_token_ids, token)))) {
      done.emplace_back(s, FinishReason::kStop);
    } else if (outputs >= r.max_new_tokens ||
               (config_.max_model_len > 0 && static_cast<int64_t>(s->tokens.size()) >= config_.max_model_len)) {
      done.emplace_back(s, FinishReason::kLength);
    }
  }
  if (!done.empty()) {
    for (auto& [s, reason] : done) s->finishing = true;
    running_.erase(std::remove_if(running_.begin(), running_.end(), [](const Sequence* s) { return s->finishing; }),
                   running_.end());
    finished.reserve(done.size());
    for (auto& [s, reason] : done) {
      if (s->status == SeqStatus::kWaiting) waiting_.erase(s);  // preempted while this step was in flight
      finished.push_back(finish(s, reason, now));
    }
  }

  // The rows' storage goes back to schedule() (no allocation per step).
  step.rows.clear();
  if (step.rows.capacity() > in_flight_.capacity()) in_flight_.swap(step.rows);
  const double dt = now - step.schedule_start;
  last_metrics_ = step.metrics;
  last_metrics_.step_time_s = dt;
  last_metrics_.num_finished = static_cast<int>(finished.size());
  if (step.admitted) {
    admission_step_time_ewma_ = admission_step_time_ewma_ == 0 ? dt : 0.8 * admission_step_time_ewma_ + 0.2 * dt;
  }
  return finished;
}

const Sequence* Scheduler::find(uint64_t id) const {
  auto it = seqs_.find(id);
  return it == seqs_.end() ? nullptr : it->second.get();
}

SchedulerStats Scheduler::stats() const {
  SchedulerStats s;
  s.num_running = num_running();
  s.num_waiting = num_waiting();
  s.kv = kv_.stats();
  s.num_steps = static_cast<int64_t>(step_index_);
  s.num_preemptions = num_preemptions_;
  s.num_preempted_tokens = num_preempted_tokens_;
  s.num_swap_outs = num_swap_outs_;
  s.num_swapped_out_tokens = num_swapped_out_tokens_;
  s.num_swap_ins = num_swap_ins_;
  s.num_swap_blocks = swap_.num_blocks();
  s.num_free_swap_blocks = swap_.num_free();
  s.num_finished = num_finished_;
  s.num_aborted = num_aborted_;
  s.decode_interval = decode_interval_;
  return s;
}

void Scheduler::check_invariants() const {
  std::vector<const kv::BlockTable*> tables;
  tables.reserve(seqs_.size());
  for (const auto& [id, s] : seqs_) tables.push_back(&s->table);
  kv_.check_invariants(tables);
  std::vector<const std::vector<int32_t>*> swapped;
  for (const auto& [id, s] : seqs_) swapped.push_back(&s->swap_blocks);
  swap_.check_invariants(swapped);
  XI_CHECK_EQ(running_.size() + waiting_.size(), seqs_.size()) << "a sequence is in neither or both queues";
  XI_CHECK_LE(static_cast<int>(running_.size()), config_.max_num_seqs);
  XI_CHECK_LE(static_cast<int>(pending_.size()), kMaxStepsInFlight);
  // Tokens each sequence has in flight, and which sequences the oldest in-flight step samples (row index).
  std::unordered_map<const Sequence*, int64_t> in_flight;
  std::unordered_map<const Sequence*, int> sampled_rows;
  for (size_t p = 0; p < pending_.size(); ++p) {
    int row = 0;
    for (const InFlight& f : pending_[p].rows) {
      const int r = f.sample ? row++ : -1;
      if (f.seq == nullptr) continue;
      XI_CHECK(seqs_.count(f.seq->request.id) == 1 && find(f.seq->request.id) == f.seq)
          << "an in-flight row points at a dead sequence";
      if (!f.kv_dropped) in_flight[f.seq] += f.num_tokens;
      if (p == 0 && f.sample) sampled_rows[f.seq] = r;
    }
  }
  const int64_t bs = config_.block_size;
  for (const auto& [id, owned] : seqs_) {
    const Sequence* s = owned.get();
    const auto it = in_flight.find(s);
    XI_CHECK_EQ(s->num_in_flight, it == in_flight.end() ? 0 : it->second) << "sequence " << id;
    XI_CHECK_LT(s->num_computed, static_cast<int64_t>(s->tokens.size())) << "sequence " << id;
    XI_CHECK_LE(s->num_scheduled(), static_cast<int64_t>(s->tokens.size())) << "sequence " << id;
    const auto placeholders = std::count(s->tokens.begin(), s->tokens.end(), kPendingToken);
    XI_CHECK_EQ(placeholders, s->placeholder ? 1 : 0) << "sequence " << id;
    if (s->placeholder) {
      XI_CHECK_EQ(s->tokens.back(), kPendingToken) << "sequence " << id;
      const auto r = sampled_rows.find(s);
      XI_CHECK(r != sampled_rows.end()) << "sequence " << id << " has a placeholder but no sample in flight";
      XI_CHECK_EQ(r->second, s->pending_row) << "sequence " << id;
    }
  }
  for (size_t i = 0; i < running_.size(); ++i) {
    const Sequence* s = running_[i];
    XI_CHECK(s->status == SeqStatus::kRunning) << "sequence " << s->request.id;
    XI_CHECK_EQ(find(s->request.id), s);
    if (i > 0) XI_CHECK(more_important(running_[i - 1], s)) << "running list out of order at " << i;
    XI_CHECK_EQ(static_cast<int64_t>(s->table.num_blocks()), (s->num_scheduled() + bs - 1) / bs)
        << "sequence " << s->request.id << " holds blocks it does not use";
    XI_CHECK(s->swap_blocks.empty() && s->num_swapped == 0)
        << "running sequence " << s->request.id << " holds swap blocks";
  }
  for (const Sequence* s : waiting_) {
    XI_CHECK(s->status == SeqStatus::kWaiting) << "sequence " << s->request.id;
    XI_CHECK_EQ(find(s->request.id), s);
    XI_CHECK(s->table.empty()) << "waiting sequence " << s->request.id << " holds blocks";
    XI_CHECK_EQ(s->num_computed, 0);
    XI_CHECK_EQ(s->num_in_flight, 0);
    XI_CHECK_EQ(static_cast<int64_t>(s->swap_blocks.size()), (s->num_swapped + bs - 1) / bs)
        << "sequence " << s->request.id;
    XI_CHECK_LT(s->num_swapped, static_cast<int64_t>(s->tokens.size())) << "sequence " << s->request.id;
  }
  for (const kv::BlockCopy& c : swap_out_) {
    bool owned = false;
    for (const Sequence* s : waiting_) owned = owned || contains(s->swap_blocks, c.to);
    XI_CHECK(owned) << "a queued swap-out writes swap block " << c.to << ", which no waiting sequence holds";
  }
}

}  // namespace xinfer::sched
