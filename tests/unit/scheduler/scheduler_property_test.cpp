// Randomized simulation of the scheduler with SimModel (no model): thousands of requests with shared
// prefixes, priorities, stop tokens, random aborts (queued, running and in flight) and KV pools small
// enough to force preemption. After every step: pool invariants (no leak, no double free: ref counts
// equal block-table uses), batch limits, preemption order; at the end: every request produced exactly
// the tokens it produces alone (SimModel reads its KV back, so a wrong prefix hit or a stolen block
// changes tokens), aborted requests stop at a prefix of those, and no request was overtaken by more than
// max_bypass later requests of its priority.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "sim_model.h"
#include "xinfer/scheduler/scheduler.h"

namespace xinfer::sched {
namespace {

using testing::Expected;
using testing::sim_next_token;
using testing::SimModel;

struct SimParams {
  std::string name;
  int num_requests = 2000;
  SchedulerConfig config;
  int vocab = 64;
  int max_prefix = 48;     // shared prefix length range [0, max_prefix]
  int max_suffix = 40;     // own tokens [1, max_suffix]
  int max_new = 24;        // max_new_tokens range [1, max_new]
  int arrivals_per_step = 3;
  double abort_prob = 0.02;
  int num_priorities = 3;
  uint32_t seed = 1;
  bool expect_preemption = true;
  // Asynchronous scheduling: schedule() step N+1 (and "compute" it, feeding N's tokens to its placeholder
  // rows) before update() of step N, so two steps are in flight whenever there is work.
  bool pipelined = false;
  // With a swap space too small for every victim: some preemptions must fall back to recomputation.
  bool expect_recompute = false;
};

struct Tracked {
  Request request;               // a copy as submitted
  std::vector<int32_t> tokens;   // truth: prompt + outputs so far
  Expected expected;
  uint64_t add_index = 0;
  int64_t first_admit_rank = -1;
  bool done = false;
};

Expected run_alone(const Request& r, int vocab) {
  Expected e;
  std::vector<int32_t> ctx = r.prompt;
  while (static_cast<int>(e.outputs.size()) < r.max_new_tokens) {
    int32_t t = sim_next_token(ctx, vocab);
    ctx.push_back(t);
    e.outputs.push_back(t);
    bool stop_ok = static_cast<int>(e.outputs.size()) >= r.min_new_tokens;
    bool is_stop = std::count(r.stop_token_ids.begin(), r.stop_token_ids.end(), t) > 0 ||
                   (!r.ignore_eos && std::count(r.eos_token_ids.begin(), r.eos_token_ids.end(), t) > 0);
    if (stop_ok && is_stop) {
      e.stopped = true;
      break;
    }
  }
  return e;
}

class SchedulerSimulation : public ::testing::TestWithParam<SimParams> {};

TEST_P(SchedulerSimulation, InvariantsAndExactOutputs) {
  const SimParams& p = GetParam();
  const SchedulerConfig& cfg = p.config;
  ASSERT_TRUE(cfg.validate().ok()) << cfg.validate().to_string();
  double now = 0;
  Scheduler sched(cfg, [&now] { return now; });
  SimModel model(cfg.num_blocks, cfg.block_size, p.vocab, cfg.num_swap_blocks);
  std::mt19937 rng(p.seed);
  auto uni = [&rng](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  auto chance = [&rng](double q) { return std::uniform_real_distribution<double>(0, 1)(rng) < q; };

  std::vector<std::vector<int32_t>> prefixes(6);
  for (auto& pre : prefixes) {
    int n = uni(0, p.max_prefix);
    for (int i = 0; i < n; ++i) pre.push_back(uni(1, p.vocab - 1));
  }
  const int64_t capacity = static_cast<int64_t>(cfg.num_blocks - 1) * cfg.block_size;

  std::unordered_map<uint64_t, Tracked> reqs;
  std::vector<uint64_t> live;
  uint64_t next_id = 1000, next_add = 0;
  int64_t admitted_count = 0, steps = 0, aborted = 0, finished = 0, preempt_events = 0;
  int64_t total_generated = 0;

  auto truth = [&reqs](uint64_t id) -> const std::vector<int32_t>& { return reqs.at(id).tokens; };
  auto erase_live = [&live](uint64_t id) { live.erase(std::find(live.begin(), live.end(), id)); };
  auto check_finished = [&](const FinishedRequest& f) {
    Tracked& t = reqs.at(f.id);
    ASSERT_FALSE(t.done) << "request " << f.id << " finished twice";
    t.done = true;
    const auto& exp = t.expected.outputs;
    ASSERT_LE(f.output_token_ids.size(), exp.size()) << "request " << f.id;
    EXPECT_TRUE(std::equal(f.output_token_ids.begin(), f.output_token_ids.end(), exp.begin()))
        << "request " << f.id << " tokens differ from its solo run";
    if (f.reason != FinishReason::kAbort) {
      EXPECT_EQ(f.output_token_ids.size(), exp.size()) << "request " << f.id;
      EXPECT_EQ(f.reason == FinishReason::kStop, t.expected.stopped) << "request " << f.id;
      EXPECT_EQ(f.metrics.num_output_tokens, static_cast<int>(exp.size()));
      EXPECT_GE(f.metrics.first_token_time, f.metrics.first_scheduled_time);
      EXPECT_EQ(f.metrics.inter_token_latencies_s.size(), exp.size() - 1);
      ++finished;
    } else {
      ++aborted;
    }
    total_generated += static_cast<int64_t>(f.output_token_ids.size());
    erase_live(f.id);
  };

  std::optional<StepOutput> in_flight;  // pipelined: the output of the step scheduled last, not yet updated
  auto update_in_flight = [&] {
    if (!in_flight) return;
    for (const FinishedRequest& f : sched.update(*in_flight)) check_finished(f);
    in_flight.reset();
    sched.check_invariants();
  };
  while (next_add < static_cast<uint64_t>(p.num_requests) || sched.has_unfinished() || in_flight) {
    ASSERT_LT(steps, 200000) << "no progress";
    // Arrivals.
    int arrivals = next_add < static_cast<uint64_t>(p.num_requests) ? uni(0, p.arrivals_per_step) : 0;
    for (int a = 0; a < arrivals && next_add < static_cast<uint64_t>(p.num_requests); ++a) {
      Request r;
      r.id = next_id++;
      r.prompt = prefixes[uni(0, static_cast<int>(prefixes.size()) - 1)];
      int suffix = uni(1, p.max_suffix);
      for (int i = 0; i < suffix; ++i) r.prompt.push_back(uni(1, p.vocab - 1));
      r.max_new_tokens = uni(1, p.max_new);
      r.max_new_tokens = static_cast<int>(std::min<int64_t>(r.max_new_tokens, capacity + 1 - r.prompt.size()));
      if (r.max_new_tokens < 1) continue;
      r.priority = uni(0, p.num_priorities - 1);
      if (chance(0.3)) r.stop_token_ids.push_back(uni(1, p.vocab - 1));
      r.eos_token_ids = {0};
      r.ignore_eos = chance(0.2);
      r.min_new_tokens = chance(0.2) ? uni(0, 3) : 0;
      Tracked t;
      t.request = r;
      t.tokens = r.prompt;
      t.expected = run_alone(r, p.vocab);
      t.add_index = next_add++;
      ASSERT_TRUE(sched.add(r).ok());
      reqs.emplace(r.id, std::move(t));
      live.push_back(r.id);
    }
    // Aborts between steps (queued or running).
    if (!live.empty() && chance(p.abort_prob)) {
      uint64_t id = live[uni(0, static_cast<int>(live.size()) - 1)];
      auto f = sched.abort(id);
      ASSERT_TRUE(f.has_value());
      EXPECT_EQ(f->reason, FinishReason::kAbort);
      check_finished(*f);
      EXPECT_EQ(sched.find(id), nullptr);
      sched.check_invariants();  // its blocks are already back in the pool
    }

    // Snapshot of the running set for the preemption-order check.
    std::vector<const Sequence*> running_before;
    for (uint64_t id : live) {
      const Sequence* s = sched.find(id);
      if (s != nullptr && s->status == SeqStatus::kRunning) running_before.push_back(s);
    }

    ScheduledStep step = sched.schedule();
    ++steps;
    sched.check_invariants();
    EXPECT_LE(step.metrics.num_batched_tokens, cfg.max_num_batched_tokens);
    EXPECT_LE(static_cast<int>(step.seqs.size()), cfg.max_num_seqs);
    EXPECT_LE(sched.num_running(), cfg.max_num_seqs);
    // Preemption order: every running sequence that survived is more important than every one preempted.
    if (!step.preempted_ids.empty()) {
      ++preempt_events;
      for (uint64_t pid : step.preempted_ids) {
        const Sequence* victim = sched.find(pid);
        ASSERT_NE(victim, nullptr);
        EXPECT_EQ(victim->status, SeqStatus::kWaiting);
        for (const Sequence* s : running_before) {
          if (s == victim || s->status != SeqStatus::kRunning) continue;
          EXPECT_TRUE(more_important(s, victim))
              << "preempted " << pid << " (prio " << victim->request.priority << ") while keeping "
              << s->request.id << " (prio " << s->request.priority << ")";
        }
      }
    }
    // First admissions, in admission order, for the overtaking bound.
    for (const ScheduledSeq& q : step.seqs) {
      Tracked& t = reqs.at(q.seq_id);
      if (t.first_admit_rank < 0) {
        t.first_admit_rank = sched.find(q.seq_id)->admission_order;
        EXPECT_GE(t.first_admit_rank, 0);
        ++admitted_count;
      }
    }
    if (step.empty()) {
      update_in_flight();
      now += 0.001;
      continue;
    }
    if (!p.pipelined) {
      for (const ScheduledSeq& q : step.seqs)
        EXPECT_EQ(q.pending_row, -1) << "placeholder without a step in flight";
    }
    StepOutput out = model.forward(step, sched.kv_cache().pool(), truth, in_flight ? &*in_flight : nullptr);
    ASSERT_FALSE(::testing::Test::HasFailure()) << "at step " << steps;
    // Truth advances with the sampled tokens (aborted-in-flight ones are dropped below).
    size_t k = 0;
    for (const ScheduledSeq& q : step.seqs) {
      if (q.sample) reqs.at(q.seq_id).tokens.push_back(out.token_ids[k++]);
    }
    // Sometimes abort a sequence of this step while it is in flight.
    if (!step.seqs.empty() && chance(p.abort_prob)) {
      uint64_t id = step.seqs[uni(0, static_cast<int>(step.seqs.size()) - 1)].seq_id;
      Tracked& t = reqs.at(id);
      auto f = sched.abort(id);
      ASSERT_TRUE(f.has_value());
      // The in-flight token was never appended.
      if (step.seqs.size() > 0 && t.tokens.size() > t.request.prompt.size() + f->output_token_ids.size()) {
        t.tokens.pop_back();
      }
      check_finished(*f);
    }
    now += 0.002 + 0.00001 * step.metrics.num_batched_tokens;
    if (p.pipelined) {
      update_in_flight();  // the previous step; this one stays in flight
      in_flight = std::move(out);
    } else {
      for (const FinishedRequest& f : sched.update(out)) check_finished(f);
      sched.check_invariants();
    }
    ASSERT_FALSE(::testing::Test::HasFailure()) << "at step " << steps;
  }

  // Everything finished, nothing leaked.
  for (auto& [id, t] : reqs) EXPECT_TRUE(t.done) << "request " << id << " never finished";
  const SchedulerStats st = sched.stats();
  EXPECT_EQ(st.kv.num_free_blocks, cfg.num_blocks - 1) << "leaked blocks";
  EXPECT_EQ(st.num_running + st.num_waiting, 0);
  EXPECT_EQ(finished + aborted, static_cast<int64_t>(reqs.size()));
  if (p.abort_prob > 0) {
    EXPECT_GT(aborted, 0);
  }
  if (p.expect_preemption) {
    EXPECT_GT(st.num_preemptions, 0) << "pool was meant to force preemption";
  }
  EXPECT_EQ(st.num_free_swap_blocks, cfg.num_swap_blocks) << "leaked swap blocks";
  if (p.expect_preemption && cfg.num_swap_blocks > 0) {
    EXPECT_GT(st.num_swap_outs, 0) << "preemptions never swapped";
    EXPECT_GT(st.num_swap_ins, 0) << "swapped-out sequences never came back from the swap space";
    EXPECT_LE(st.num_swap_ins, st.num_swap_outs);
    if (p.expect_recompute) {
      EXPECT_LT(st.num_swap_outs, st.num_preemptions) << "the small swap space never ran out";
    }
  }
  if (cfg.enable_prefix_caching) {
    EXPECT_GT(st.kv.prefix_hit_tokens, 0) << "shared prefixes never hit";
  } else {
    EXPECT_EQ(st.kv.prefix_hit_tokens, 0);
  }

  // Bounded overtaking: later requests of the same priority admitted first, at most max_bypass of them.
  int64_t max_overtakes = 0, total_overtakes = 0;
  std::vector<const Tracked*> order;
  for (auto& [id, t] : reqs) {
    if (t.first_admit_rank >= 0) order.push_back(&t);
  }
  for (const Tracked* a : order) {
    int64_t overtakes = 0;
    for (const Tracked* b : order) {
      if (b->request.priority == a->request.priority && b->add_index > a->add_index &&
          b->first_admit_rank < a->first_admit_rank) {
        ++overtakes;
      }
    }
    max_overtakes = std::max(max_overtakes, overtakes);
    total_overtakes += overtakes;
  }
  EXPECT_LE(max_overtakes, cfg.max_bypass) << "a request was starved by the reorder window";
  if (cfg.reorder_window > 1) {
    EXPECT_GT(total_overtakes, 0) << "reordering never happened";
  } else {
    EXPECT_EQ(total_overtakes, 0);
  }
  std::printf(
      "[%s] %lld requests, %lld steps, %lld finished, %lld aborted, %lld generated tokens, "
      "%lld preemptions (%lld swapped out, %lld swapped in), prefix hit rate %.3f, max overtakes %lld, "
      "final decode interval %d\n",
      p.name.c_str(), static_cast<long long>(reqs.size()), static_cast<long long>(steps),
      static_cast<long long>(finished), static_cast<long long>(aborted),
      static_cast<long long>(total_generated), static_cast<long long>(st.num_preemptions),
      static_cast<long long>(st.num_swap_outs), static_cast<long long>(st.num_swap_ins),
      st.kv.prefix_hit_rate(), static_cast<long long>(max_overtakes), st.decode_interval);
}

SchedulerConfig base_config() {
  SchedulerConfig c;
  c.block_size = 4;
  c.num_blocks = 41;  // 160 tokens: a handful of sequences at once
  c.max_num_seqs = 16;
  c.max_num_batched_tokens = 48;
  c.decode_interval = 3;
  c.target_queue_time_s = 0.05;
  c.target_step_time_s = 0.004;
  c.reorder_window = 6;
  c.max_bypass = 4;
  return c;
}

std::vector<SimParams> sim_params() {
  std::vector<SimParams> v;
  {
    SimParams p;
    p.name = "tiny_pool_prefix";
    p.config = base_config();
    v.push_back(p);
  }
  {
    SimParams p;
    p.name = "tiny_pool_no_prefix_fifo";
    p.config = base_config();
    p.config.enable_prefix_caching = false;
    p.config.reorder_window = 1;
    p.seed = 2;
    v.push_back(p);
  }
  {
    SimParams p;
    p.name = "block_size_1";
    p.config = base_config();
    p.config.block_size = 1;
    p.config.num_blocks = 121;
    p.num_requests = 1000;
    p.max_prefix = 20;
    p.seed = 3;
    v.push_back(p);
  }
  {
    SimParams p;
    p.name = "many_seqs_small_budget";
    p.config = base_config();
    p.config.block_size = 16;
    p.config.num_blocks = 25;
    p.config.max_num_seqs = 64;
    p.config.max_num_batched_tokens = 24;  // long prompts are chunked; decodes can exceed it
    p.config.kv_watermark = 0.05;
    p.num_requests = 3000;
    p.arrivals_per_step = 4;
    p.max_prefix = 64;
    p.seed = 4;
    v.push_back(p);
  }
  {
    SimParams p;
    p.name = "one_priority_aborts";
    p.config = base_config();
    p.num_priorities = 1;
    p.abort_prob = 0.1;
    p.seed = 5;
    v.push_back(p);
  }
  // Swap-to-host preemption: a swap space as large as the cache (every victim swaps), and one of 6 blocks
  // (most victims recompute); prefix hits cover part of a swapped sequence's KV in the first.
  const size_t num_plain = v.size();
  for (size_t i : {size_t{0}, size_t{1}, size_t{3}, size_t{4}}) {
    SimParams p = v[i];
    p.name += "_swap";
    p.config.num_swap_blocks = p.config.num_blocks;
    p.seed += 200;
    v.push_back(p);
    p.name += "_small";
    p.config.num_swap_blocks = 6;
    p.expect_recompute = true;
    p.seed += 10;
    v.push_back(p);
  }
  // The same workloads with two steps in flight (fewer requests: the synchronous cases cover the policy).
  for (size_t i : {size_t{0}, size_t{2}, size_t{3}, size_t{4}, num_plain, num_plain + 1, num_plain + 4}) {
    SimParams p = v[i];
    p.name += "_async";
    p.pipelined = true;
    p.num_requests = std::min(p.num_requests, 1000);
    p.seed += 100;
    v.push_back(p);
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(Sim, SchedulerSimulation, ::testing::ValuesIn(sim_params()),
                         [](const ::testing::TestParamInfo<SimParams>& param_info) { return param_info.param.name; });

}  // namespace
}  // namespace xinfer::sched
