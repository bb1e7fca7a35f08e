// The ITL-tail levers (issue 19 item 4) over simulated iterations: the prefill tokens a step may carry
// shrink as more sequences decode (SchedulerConfig::prefill_budget), and admissions come more often when
// each may carry less (effective_decode_interval). Expected values are worked out by hand from the rule in
// scheduler_config.h: budget(D) = clamp(max_num_batched_tokens - prefill_tokens_per_decode * D,
// min_prefill_budget, max_num_batched_tokens) for D > 0.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "scheduler_test_util.h"
#include "xinfer/scheduler/scheduler.h"

namespace xinfer::sched {
namespace {

using namespace test_util;

SchedulerConfig serving_config() {
  SchedulerConfig c;  // defaults: 8 prefill tokens per decode, decode_interval 4
  c.min_prefill_budget = 256;  // the hand-worked values below use this floor (the default is 512: see below)
  c.block_size = 16;
  c.num_blocks = 20000;
  c.max_num_seqs = 512;
  c.max_num_batched_tokens = 2048;
  c.kv_watermark = 0;
  c.target_queue_time_s = 100;  // no queue-pressure admissions: the interval rules alone
  return c;
}

TEST(PrefillBudget, ShrinksWithDecodingSequencesDownToTheFloor) {
  SchedulerConfig c = serving_config();
  EXPECT_EQ(c.prefill_budget(0), 2048) << "nothing decodes: a prefill stalls nobody";
  EXPECT_EQ(c.prefill_budget(1), 2040);
  EXPECT_EQ(c.prefill_budget(16), 1920);
  EXPECT_EQ(c.prefill_budget(64), 1536);
  EXPECT_EQ(c.prefill_budget(223), 264);
  EXPECT_EQ(c.prefill_budget(224), 256);
  EXPECT_EQ(c.prefill_budget(256), 256);
  EXPECT_EQ(c.prefill_budget(512), 256);
  c.prefill_tokens_per_decode = 0;
  EXPECT_EQ(c.prefill_budget(256), 2048) << "0 per decode switches the lever off";
  c.prefill_tokens_per_decode = 8;
  c.max_num_batched_tokens = 128;  // floor above the step budget: the step budget wins
  EXPECT_EQ(c.prefill_budget(100), 128);
  EXPECT_NE(c.to_string().find("prefill_tokens_per_decode=8 min_prefill_budget=256"), std::string::npos)
      << c.to_string();
  c.min_prefill_budget = 0;
  EXPECT_FALSE(c.validate().ok());
  c.min_prefill_budget = 1;
  c.prefill_tokens_per_decode = -1;
  EXPECT_FALSE(c.validate().ok());
}

TEST(PrefillBudget, SmallerInterruptsComeMoreOften) {
  const SchedulerConfig c = serving_config();
  EXPECT_EQ(c.effective_decode_interval(4, 0), 4);
  EXPECT_EQ(c.effective_decode_interval(4, 16), 4);   // ceil(4 * 1920 / 2048) = ceil(3.75)
  EXPECT_EQ(c.effective_decode_interval(4, 64), 3);   // 4 * 1536 / 2048 = 3
  EXPECT_EQ(c.effective_decode_interval(4, 256), 1);  // ceil(0.5): every step
  EXPECT_EQ(c.effective_decode_interval(32, 256), 4);
}

struct Sim {
  double now = 0;
  Scheduler sched;
  explicit Sim(const SchedulerConfig& c) : sched(c, [this] { return now; }) {}
  ScheduledStep step() {
    ScheduledStep s = sched.schedule();
    StepOutput o;
    o.token_ids.assign(s.num_sampling, 7);
    now += 0.01;
    finished += static_cast<int>(sched.update(o).size());
    return s;
  }
  int finished = 0;
};

struct LoadResult {
  int max_prefill_in_busy_step = 0;  // most prefill tokens in a step with >= 224 decodes
  int busy_steps = 0;
  int busy_steps_with_admission = 0;
  int busy_steps_with_prefill = 0;
  int long_prompts_finished = 0;
  bool budget_held = true;  // every step: prefill tokens <= budget(its decodes), by hand
  bool every_decode_scheduled = true;
};

// 256 sequences decode (16-token prompts, 600 outputs); then 24 long prompts (1000 tokens, 2 outputs) and a
// stream of short ones (64 tokens, 2 outputs, one per step) arrive. Runs 400 steps.
LoadResult run_load(const SchedulerConfig& c) {
  Sim sim(c);
  uint64_t id = 1;
  for (int i = 0; i < 256; ++i) EXPECT_TRUE(sim.sched.add(req(id++, 16, 600)).ok());
  while (sim.sched.num_waiting() > 0) sim.step();
  sim.step();  // the last admitted ones decode now
  for (int i = 0; i < 24; ++i) EXPECT_TRUE(sim.sched.add(req(id++, 1000, 2, 0, 5000 + 1000 * i)).ok());
  LoadResult r;
  const int finished_before = sim.finished;
  for (int t = 0; t < 400; ++t) {
    EXPECT_TRUE(sim.sched.add(req(id++, 64, 2, 0, 100000 + 64 * t)).ok());
    int decoding = 0;  // sequences that are past their prompt before this step
    for (uint64_t q = 1; q <= 256; ++q) {
      const Sequence* s = sim.sched.find(q);
      if (s != nullptr && s->status == SeqStatus::kRunning && s->num_remaining() == 1) ++decoding;
    }
    const ScheduledStep s = sim.step();
    const int d = s.metrics.num_decode_seqs;
    const int p = s.metrics.num_prefill_tokens;
    if (d < decoding) r.every_decode_scheduled = false;
    const int by_hand = d == 0 ? 2048
                               : std::clamp(2048 - static_cast<int>(c.prefill_tokens_per_decode * d),
                                            std::min(c.min_prefill_budget, 2048), 2048);
    if (p > by_hand) r.budget_held = false;
    if (d >= 224) {
      ++r.busy_steps;
      r.max_prefill_in_busy_step = std::max(r.max_prefill_in_busy_step, p);
      if (s.metrics.num_admitted > 0) ++r.busy_steps_with_admission;
      if (p > 0) ++r.busy_steps_with_prefill;
    }
  }
  r.long_prompts_finished = sim.finished - finished_before;
  sim.sched.check_invariants();
  return r;
}

TEST(PrefillBudget, BoundsPrefillTokensPerDecodeStepUnderLoad) {
  const LoadResult r = run_load(serving_config());
  EXPECT_TRUE(r.budget_held);
  EXPECT_TRUE(r.every_decode_scheduled) << "prefill must never take a decoding sequence's slot";
  ASSERT_GT(r.busy_steps, 300);
  EXPECT_EQ(r.max_prefill_in_busy_step, 256) << "the floor is used, never exceeded, with >= 224 decoding";
  // The interval scales to 1 at this load: (almost) every step carries a small interrupt, none a big one.
  EXPECT_GT(r.busy_steps_with_prefill, r.busy_steps * 9 / 10);
  // 24 * 1000 + 400 * 64 = 49600 prompt tokens at 256 per step: all admitted in ~194 steps, so every long
  // prompt and most short ones finish within the 400 steps.
  EXPECT_GE(r.long_prompts_finished, 24 + 300);
}

TEST(PrefillBudget, DefaultFloorBoundsBusyStepsAt512) {
  SchedulerConfig c = serving_config();
  c.min_prefill_budget = SchedulerConfig{}.min_prefill_budget;
  EXPECT_EQ(c.min_prefill_budget, 512);
  EXPECT_EQ(c.prefill_budget(192), 512);
  EXPECT_EQ(c.prefill_budget(191), 520);
  const LoadResult r = run_load(c);
  EXPECT_TRUE(r.budget_held);
  EXPECT_TRUE(r.every_decode_scheduled);
  EXPECT_EQ(r.max_prefill_in_busy_step, 512);
  EXPECT_GE(r.long_prompts_finished, 24 + 300);
}

TEST(PrefillBudget, WithoutTheLeverDecodeStepsCarryLongChunks) {
  SchedulerConfig c = serving_config();
  c.prefill_tokens_per_decode = 0;
  const LoadResult r = run_load(c);
  EXPECT_TRUE(r.every_decode_scheduled);
  // Today's rule: a chunk takes what the decodes leave of 2048 (>= 1500 with ~256-540 decoding).
  EXPECT_GT(r.max_prefill_in_busy_step, 1000);
}

}  // namespace
}  // namespace xinfer::sched
