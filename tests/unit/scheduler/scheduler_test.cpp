// Scheduler scenarios with hand-checked expectations: add() errors, chunked prefill, mixed steps,
// decode-interval admission, preemption victim choice, abort in every state, prefix reuse, stop rules,
// reorder window with aging.
#include "xinfer/scheduler/scheduler.h"

#include <gtest/gtest.h>

#include <vector>

#include "scheduler_test_util.h"

namespace xinfer::sched {
namespace {

using namespace test_util;

struct Harness {
  double now = 0;
  Scheduler sched;
  explicit Harness(const SchedulerConfig& c) : sched(c, [this] { return now; }) {}

  // Runs one step, sampling token 7 for every sampling sequence.
  std::vector<FinishedRequest> step(ScheduledStep* out = nullptr, int32_t token = 7) {
    ScheduledStep s = sched.schedule();
    sched.check_invariants();
    StepOutput o;
    o.token_ids.assign(s.num_sampling, token);
    now += 0.01;
    auto f = sched.update(o);
    sched.check_invariants();
    if (out != nullptr) *out = std::move(s);
    return f;
  }
};

TEST(SchedulerConfig, ValidateAndPrint) {
  SchedulerConfig c;
  EXPECT_FALSE(c.validate().ok()) << "num_blocks is required";
  c.num_blocks = 10;
  EXPECT_TRUE(c.validate().ok());
  c.decode_interval = 100;
  EXPECT_FALSE(c.validate().ok());
  EXPECT_NE(small_config().to_string().find("max_num_batched_tokens=16"), std::string::npos);
}

TEST(Scheduler, AddRejectsRequestsThatCanNeverRun) {
  Harness h(small_config());  // 32 usable blocks * 4 = 128 tokens
  EXPECT_EQ(h.sched.add(req(1, 0, 4)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(h.sched.add(req(2, 4, 0)).code(), StatusCode::kInvalidArgument);
  Status too_big = h.sched.add(req(3, 100, 30));  // needs KV for 129 tokens
  EXPECT_EQ(too_big.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(too_big.message().find("KV cache"), std::string::npos) << too_big.message();
  ASSERT_TRUE(h.sched.add(req(4, 100, 29)).ok()) << "exactly the whole cache (128 tokens) must be accepted";
  EXPECT_EQ(h.sched.add(req(4, 3, 3)).code(), StatusCode::kInvalidArgument) << "duplicate id";
  SchedulerConfig c = small_config();
  c.max_model_len = 20;
  Harness h2(c);
  EXPECT_EQ(h2.sched.add(req(5, 16, 5)).code(), StatusCode::kInvalidArgument);
  // The boundary request runs to completion, alone, using every block.
  std::vector<FinishedRequest> done;
  for (int i = 0; i < 200 && done.empty(); ++i) done = h.step();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].output_token_ids.size(), 29u);
  EXPECT_EQ(done[0].reason, FinishReason::kLength);
  EXPECT_EQ(h.sched.stats().kv.num_free_blocks, 32);
}

TEST(Scheduler, LongPromptIsChunkedAndSamplesOnlyAtTheEnd) {
  Harness h(small_config());
  ASSERT_TRUE(h.sched.add(req(1, 40, 2)).ok());
  std::vector<int> starts, sizes;
  std::vector<bool> samples;
  for (int i = 0; i < 3; ++i) {
    ScheduledStep s;
    h.step(&s);
    ASSERT_EQ(s.seqs.size(), 1u);
    starts.push_back(s.seqs[0].start_pos);
    sizes.push_back(s.seqs[0].num_tokens());
    samples.push_back(s.seqs[0].sample);
    EXPECT_EQ(static_cast<int>(s.seqs[0].block_table.size()), (starts.back() + sizes.back() + 3) / 4);
    EXPECT_EQ(s.seqs[0].token_ids[0], starts.back() + 1) << "prompt token at start_pos";
  }
  EXPECT_EQ(starts, (std::vector<int>{0, 16, 32}));
  EXPECT_EQ(sizes, (std::vector<int>{16, 16, 8}));
  EXPECT_EQ(samples, (std::vector<bool>{false, false, true}));
  ScheduledStep s;
  auto done = h.step(&s);
  ASSERT_EQ(s.seqs.size(), 1u);
  EXPECT_TRUE(s.seqs[0].is_decode());
  EXPECT_EQ(s.seqs[0].start_pos, 40);
  EXPECT_EQ(s.seqs[0].token_ids[0], 7) << "the sampled token is fed back";
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].output_token_ids, (std::vector<int32_t>{7, 7}));
  EXPECT_EQ(done[0].metrics.num_prompt_tokens, 40);
  EXPECT_NEAR(done[0].metrics.time_to_first_token_s(), 0.03, 1e-9);
  ASSERT_EQ(done[0].metrics.inter_token_latencies_s.size(), 1u);
  EXPECT_NEAR(done[0].metrics.inter_token_latencies_s[0], 0.01, 1e-9);
}

TEST(Scheduler, StepMixesDecodesAndAPrefillChunkWithinTheBudget) {
  Harness h(small_config());
  ASSERT_TRUE(h.sched.add(req(1, 4, 10)).ok());
  ASSERT_TRUE(h.sched.add(req(2, 4, 10, 0, 50)).ok());
  h.step();  // both prefilled (8 tokens), both sample
  ASSERT_TRUE(h.sched.add(req(3, 30, 2, 0, 100)).ok());
  ScheduledStep s;
  h.step(&s);
  ASSERT_EQ(s.seqs.size(), 3u);
  EXPECT_TRUE(s.seqs[0].is_decode());
  EXPECT_TRUE(s.seqs[1].is_decode());
  EXPECT_EQ(s.seqs[2].seq_id, 3u);
  EXPECT_EQ(s.seqs[2].num_tokens(), 14) << "budget 16 minus two decodes";
  EXPECT_FALSE(s.seqs[2].sample);
  EXPECT_EQ(s.metrics.num_decode_tokens, 2);
  EXPECT_EQ(s.metrics.num_prefill_tokens, 14);
  EXPECT_EQ(s.metrics.num_batched_tokens, 16);
  EXPECT_EQ(s.metrics.num_admitted, 1);
}

TEST(Scheduler, RunningPrefillLeavesBudgetForLaterDecodes) {
  Harness h(small_config());
  ASSERT_TRUE(h.sched.add(req(1, 4, 10, /*priority=*/1)).ok());
  h.step();  // 1 now decodes
  ASSERT_TRUE(h.sched.add(req(2, 60, 2, /*priority=*/0, 100)).ok());  // more important, long prompt
  ScheduledStep s;
  h.step(&s);
  ASSERT_NE(find_seq(s, 1), nullptr) << "the decode must not be starved by the important prefill";
  EXPECT_EQ(find_seq(s, 2)->num_tokens(), 15);
  h.step(&s);
  ASSERT_NE(find_seq(s, 1), nullptr);
  EXPECT_EQ(find_seq(s, 2)->num_tokens(), 15);
}

TEST(Scheduler, WaitingRequestsJoinOnlyEveryDecodeIntervalSteps) {
  SchedulerConfig c = small_config();
  c.decode_interval = 4;
  c.max_decode_interval = 8;
  c.target_queue_time_s = 100;  // no queue pressure in this test
  Harness h(c);
  ASSERT_TRUE(h.sched.add(req(1, 4, 50)).ok());
  ASSERT_TRUE(h.sched.add(req(9, 4, 50, 0, 40)).ok());
  h.step();  // nothing decoding yet: both admitted at once
  EXPECT_EQ(h.sched.num_running(), 2);
  ASSERT_TRUE(h.sched.add(req(2, 4, 5, 0, 100)).ok());
  int joined_at = -1;
  for (int i = 1; i <= 8 && joined_at < 0; ++i) {
    ScheduledStep s;
    h.step(&s);
    if (find_seq(s, 2) != nullptr) joined_at = i;
  }
  EXPECT_EQ(joined_at, 4) << "admission is due on the decode_interval-th step";
}

TEST(Scheduler, QueuePressureForcesAdmissionAndShrinksTheInterval) {
  SchedulerConfig c = small_config();
  c.decode_interval = 8;
  c.max_decode_interval = 8;
  c.target_queue_time_s = 0.015;
  Harness h(c);
  ASSERT_TRUE(h.sched.add(req(1, 4, 50)).ok());
  h.step();
  ASSERT_TRUE(h.sched.add(req(2, 4, 5, 0, 100)).ok());
  ScheduledStep s;
  h.step(&s);
  EXPECT_EQ(find_seq(s, 2), nullptr) << "waited 0 s: not yet";
  h.step(&s);
  EXPECT_EQ(find_seq(s, 2), nullptr) << "waited 0.01 s: not yet";
  h.step(&s);
  EXPECT_NE(find_seq(s, 2), nullptr) << "waited 0.02 s > target: admitted before the interval";
  EXPECT_EQ(h.sched.decode_interval(), 4);
}

TEST(Scheduler, SlowAdmissionStepsGrowTheInterval) {
  SchedulerConfig c = small_config();
  c.decode_interval = 2;
  c.max_decode_interval = 16;
  c.target_queue_time_s = 100;
  c.target_step_time_s = 0.005;  // every step takes 0.01 s here
  c.max_num_seqs = 64;
  c.max_num_batched_tokens = 256;  // every due admission takes the whole queue
  c.num_blocks = 200;
  Harness h(c);
  ASSERT_TRUE(h.sched.add(req(1, 4, 200)).ok());
  ASSERT_TRUE(h.sched.add(req(2, 4, 200)).ok());
  ASSERT_TRUE(h.sched.add(req(3, 4, 200)).ok());
  h.step();
  for (int i = 0; i < 30; ++i) {
    ASSERT_TRUE(h.sched.add(req(100 + i, 4, 200)).ok());
    h.step();
  }
  EXPECT_EQ(h.sched.decode_interval(), 16) << "slow admission steps should space admissions out";
}

TEST(Scheduler, PreemptsLowestPriorityThenMostRecent) {
  SchedulerConfig c = small_config();
  c.num_blocks = 10;  // 9 blocks of 4 = 36 tokens
  c.max_num_batched_tokens = 64;
  Harness h(c);
  // Four sequences of 8 prompt tokens (2 blocks each, 8 blocks) can all start; the first decodes need
  // new blocks, and only one is free.
  ASSERT_TRUE(h.sched.add(req(1, 8, 20, /*priority=*/0, 10)).ok());
  h.now += 1;
  ASSERT_TRUE(h.sched.add(req(2, 8, 20, /*priority=*/1, 20)).ok());
  h.now += 1;
  ASSERT_TRUE(h.sched.add(req(3, 8, 20, /*priority=*/1, 30)).ok());
  h.now += 1;
  ASSERT_TRUE(h.sched.add(req(4, 8, 20, /*priority=*/0, 40)).ok());
  h.step();
  EXPECT_EQ(h.sched.num_running(), 4);
  ScheduledStep s;
  // Decodes at position 8 need a third block each; 1 is free. In importance order 1 (prio 0) takes it,
  // 4 (prio 0) preempts 3 (prio 1, most recent) and takes one of its blocks, 2 takes the other.
  h.step(&s);
  EXPECT_EQ(s.preempted_ids, (std::vector<uint64_t>{3}));
  EXPECT_EQ(s.metrics.num_preempted, 1);
  EXPECT_NE(find_seq(s, 1), nullptr);
  EXPECT_NE(find_seq(s, 2), nullptr);
  EXPECT_NE(find_seq(s, 4), nullptr);
  EXPECT_EQ(h.sched.find(3)->status, SeqStatus::kWaiting);
  EXPECT_EQ(h.sched.find(3)->metrics.num_preemptions, 1);
  EXPECT_EQ(h.sched.stats().num_preempted_tokens, 8) << "3's prompt, computed in the first step";
  // Positions 9..11 fit; position 12 needs a fourth block each and none is free: 2 goes (prio 1).
  for (int i = 0; i < 3; ++i) {
    h.step(&s);
    EXPECT_TRUE(s.preempted_ids.empty());
  }
  h.step(&s);
  EXPECT_EQ(s.preempted_ids, (std::vector<uint64_t>{2}));
  EXPECT_EQ(h.sched.stats().num_preemptions, 2);
  EXPECT_EQ(h.sched.stats().num_preempted_tokens, 8 + 12)
      << "and 2's prompt plus its decodes at positions 8..11";
  // Run to completion: preempted sequences recompute prompt + outputs and finish with all tokens.
  std::vector<FinishedRequest> all;
  for (int i = 0; i < 500 && h.sched.has_unfinished(); ++i) {
    for (auto& f : h.step()) all.push_back(std::move(f));
  }
  ASSERT_EQ(all.size(), 4u);
  for (const auto& f : all) EXPECT_EQ(f.output_token_ids.size(), 20u) << "request " << f.id;
  EXPECT_EQ(h.sched.stats().kv.num_free_blocks, 9);
}

TEST(Scheduler, PreemptedSequenceRecomputesPromptPlusOutputsAndReusesCachedBlocks) {
  SchedulerConfig c = small_config();
  c.num_blocks = 7;  // 24 tokens
  c.max_num_batched_tokens = 64;
  Harness h(c);
  ASSERT_TRUE(h.sched.add(req(1, 8, 12, 0, 10)).ok());
  h.now += 1;
  ASSERT_TRUE(h.sched.add(req(2, 8, 12, 1, 50)).ok());
  h.step();
  ScheduledStep s;
  uint64_t preempted = 0;
  for (int i = 0; i < 20 && preempted == 0; ++i) {
    h.step(&s);
    if (!s.preempted_ids.empty()) preempted = s.preempted_ids[0];
  }
  ASSERT_EQ(preempted, 2u);
  const int outputs = h.sched.find(2)->num_output_tokens();
  ASSERT_GT(outputs, 0);
  // Once 1 finishes, 2 comes back: its first step feeds prompt + outputs (minus cached full blocks)
  // and samples a new token at the end.
  for (int i = 0; i < 50; ++i) {
    h.step(&s);
    const ScheduledSeq* q = find_seq(s, 2);
    if (q != nullptr) {
      EXPECT_EQ(q->start_pos + q->num_tokens(), 8 + outputs);
      EXPECT_TRUE(q->sample);
      EXPECT_GT(q->start_pos, 0) << "its committed full blocks stayed cached";
      break;
    }
  }
}

TEST(Scheduler, SwapSpaceKeepsTheVictimsKvAndRestoresIt) {
  SchedulerConfig c = small_config();
  c.num_blocks = 10;  // 9 blocks of 4 = 36 tokens
  c.num_swap_blocks = 8;
  c.enable_prefix_caching = false;
  c.max_num_batched_tokens = 64;
  Harness h(c);
  ASSERT_TRUE(h.sched.add(req(1, 8, 20, /*priority=*/0, 10)).ok());
  h.now += 1;
  ASSERT_TRUE(h.sched.add(req(2, 8, 20, /*priority=*/1, 50)).ok());
  ScheduledStep s;
  std::vector<int32_t> blocks_of_2;  // its block table in the last step it ran
  for (int i = 0; i < 30 && s.preempted_ids.empty(); ++i) {
    h.step(&s);
    if (const ScheduledSeq* q = find_seq(s, 2))
      blocks_of_2.assign(q->block_table.begin(), q->block_table.end());
  }
  ASSERT_EQ(s.preempted_ids, (std::vector<uint64_t>{2})) << "2 (prio 1) is the victim when 1 needs a block";
  EXPECT_EQ(s.metrics.num_swapped_out, 1);
  const Sequence* v = h.sched.find(2);
  ASSERT_EQ(v->status, SeqStatus::kWaiting);
  // Its 16 computed tokens (prompt + 8 decodes) went to 4 swap blocks, copied from its 4 full blocks.
  EXPECT_EQ(v->num_swapped, 16);
  ASSERT_EQ(v->swap_blocks.size(), 4u);
  ASSERT_EQ(s.swap_out.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(s.swap_out[i], (kv::BlockCopy{blocks_of_2[i], v->swap_blocks[i]}));
  const std::vector<int32_t> swap_blocks = v->swap_blocks;
  SchedulerStats st = h.sched.stats();
  EXPECT_EQ(st.num_swap_outs, 1);
  EXPECT_EQ(st.num_swapped_out_tokens, 16);
  EXPECT_EQ(st.num_preempted_tokens, 0) << "nothing is dropped: no step was in flight";
  EXPECT_EQ(st.num_free_swap_blocks, 4);
  // When 2 comes back, its first step copies the 4 blocks into its new table and feeds only what is after
  // them.
  std::vector<FinishedRequest> all;
  const ScheduledSeq* q = nullptr;
  for (int i = 0; i < 40 && q == nullptr; ++i) {
    for (auto& f : h.step(&s)) all.push_back(std::move(f));
    q = find_seq(s, 2);
  }
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(s.metrics.num_swapped_in, 1);
  EXPECT_EQ(q->start_pos, 16);
  EXPECT_EQ(q->num_tokens(), 1) << "its last sampled token, the only one not in the swapped KV";
  ASSERT_EQ(s.swap_in.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(s.swap_in[i], (kv::BlockCopy{swap_blocks[i], q->block_table[i]}));
  EXPECT_TRUE(s.swap_out.empty());
  for (int i = 0; i < 100 && h.sched.has_unfinished(); ++i)
    for (auto& f : h.step()) all.push_back(std::move(f));
  ASSERT_EQ(all.size(), 2u);
  for (const auto& f : all) EXPECT_EQ(f.output_token_ids.size(), 20u) << "request " << f.id;
  st = h.sched.stats();
  EXPECT_EQ(st.num_swap_ins, 1);
  EXPECT_EQ(st.num_free_swap_blocks, 8);
  EXPECT_EQ(st.kv.num_free_blocks, 9);
}

TEST(Scheduler, AbortOfASwappedOutSequenceFreesItsSwapBlocks) {
  SchedulerConfig c = small_config();
  c.num_blocks = 10;
  c.num_swap_blocks = 3;  // too few for a 16-token victim: it recomputes
  c.enable_prefix_caching = false;
  c.max_num_batched_tokens = 64;
  Harness h(c);
  ASSERT_TRUE(h.sched.add(req(1, 8, 20, 0, 10)).ok());
  h.now += 1;
  ASSERT_TRUE(h.sched.add(req(2, 8, 20, 1, 50)).ok());
  ScheduledStep s;
  for (int i = 0; i < 30 && s.preempted_ids.empty(); ++i) h.step(&s);
  ASSERT_EQ(s.preempted_ids, (std::vector<uint64_t>{2}));
  EXPECT_EQ(s.metrics.num_swapped_out, 0);
  EXPECT_TRUE(s.swap_out.empty());
  EXPECT_EQ(h.sched.stats().num_preempted_tokens, 16) << "recomputed: its KV was dropped";
  EXPECT_EQ(h.sched.find(2)->num_swapped, 0);

  c.num_swap_blocks = 8;
  Harness h2(c);
  ASSERT_TRUE(h2.sched.add(req(1, 8, 20, 0, 10)).ok());
  h2.now += 1;
  ASSERT_TRUE(h2.sched.add(req(2, 8, 20, 1, 50)).ok());
  s = {};
  for (int i = 0; i < 30 && s.preempted_ids.empty(); ++i) h2.step(&s);
  ASSERT_EQ(h2.sched.stats().num_free_swap_blocks, 4);
  ASSERT_TRUE(h2.sched.abort(2).has_value());
  EXPECT_EQ(h2.sched.stats().num_free_swap_blocks, 8);
  h2.sched.check_invariants();
}

TEST(Scheduler, AbortInAnyStateFreesBlocksAtOnce) {
  Harness h(small_config());
  ASSERT_TRUE(h.sched.add(req(1, 12, 10)).ok());
  ASSERT_TRUE(h.sched.add(req(2, 12, 10, 0, 50)).ok());
  // Waiting.
  auto w = h.sched.abort(2);
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->reason, FinishReason::kAbort);
  EXPECT_EQ(h.sched.num_waiting(), 1);
  // Running.
  h.step();
  EXPECT_LT(h.sched.stats().kv.num_free_blocks, 32);
  auto r = h.sched.abort(1);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->output_token_ids, (std::vector<int32_t>{7}));
  EXPECT_EQ(h.sched.stats().kv.num_free_blocks, 32);
  h.sched.check_invariants();
  EXPECT_FALSE(h.sched.abort(1).has_value()) << "unknown id";
  // In flight: between schedule() and update(); its sampled token is dropped.
  ASSERT_TRUE(h.sched.add(req(3, 5, 10)).ok());
  ASSERT_TRUE(h.sched.add(req(4, 5, 10, 0, 60)).ok());
  ScheduledStep s = h.sched.schedule();
  ASSERT_EQ(s.num_sampling, 2);
  auto f = h.sched.abort(3);
  ASSERT_TRUE(f.has_value());
  EXPECT_TRUE(f->output_token_ids.empty());
  h.sched.check_invariants();
  auto done = h.sched.update(StepOutput{{7, 8}});
  EXPECT_TRUE(done.empty());
  EXPECT_EQ(h.sched.find(4)->tokens.back(), 8);
  EXPECT_EQ(h.sched.find(3), nullptr);
  h.sched.check_invariants();
}

TEST(Scheduler, SharedPrefixReusesTheSameBlocks) {
  Harness h(small_config());
  Request a = req(1, 13, 1);
  ASSERT_TRUE(h.sched.add(a).ok());
  ScheduledStep sa = h.sched.schedule();
  std::vector<int32_t> blocks_a(sa.seqs[0].block_table.begin(), sa.seqs[0].block_table.end());
  ASSERT_EQ(h.sched.update(StepOutput{{7}}).size(), 1u);  // finishes: blocks stay cached
  Request b = req(2, 13, 1);
  b.prompt[12] = 99;  // same first 12 tokens = 3 full blocks
  ASSERT_TRUE(h.sched.add(b).ok());
  ScheduledStep sb = h.sched.schedule();
  h.sched.check_invariants();
  ASSERT_EQ(sb.seqs.size(), 1u);
  EXPECT_EQ(sb.seqs[0].start_pos, 12);
  EXPECT_EQ(sb.seqs[0].num_tokens(), 1);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(sb.seqs[0].block_table[i], blocks_a[i]);
  EXPECT_EQ(h.sched.stats().kv.prefix_hit_tokens, 12);
  EXPECT_NEAR(sb.metrics.prefix_hit_rate, 12.0 / 26.0, 1e-12);
}

TEST(Scheduler, StopTokensEosAndMinTokens) {
  Harness h(small_config());
  Request a = req(1, 4, 10);
  a.eos_token_ids = {7};
  Request b = req(2, 4, 10, 0, 20);
  b.eos_token_ids = {7};
  b.ignore_eos = true;
  Request c = req(3, 4, 10, 0, 30);
  c.stop_token_ids = {7};
  c.min_new_tokens = 3;
  ASSERT_TRUE(h.sched.add(a).ok());
  ASSERT_TRUE(h.sched.add(b).ok());
  ASSERT_TRUE(h.sched.add(c).ok());
  std::vector<FinishedRequest> done;
  for (int i = 0; i < 20 && h.sched.has_unfinished(); ++i) {
    for (auto& f : h.step()) done.push_back(std::move(f));
  }
  ASSERT_EQ(done.size(), 3u);
  for (const auto& f : done) {
    if (f.id == 1) {
      EXPECT_EQ(f.reason, FinishReason::kStop);
      EXPECT_EQ(f.output_token_ids.size(), 1u);
    } else if (f.id == 2) {
      EXPECT_EQ(f.reason, FinishReason::kLength);
      EXPECT_EQ(f.output_token_ids.size(), 10u);
    } else {
      EXPECT_EQ(f.reason, FinishReason::kStop);
      EXPECT_EQ(f.output_token_ids.size(), 3u);
    }
  }
}

TEST(Scheduler, ReorderWindowAdmitsShortestFirstWithAging) {
  SchedulerConfig c = small_config();
  c.max_num_seqs = 1;  // one admission per free slot makes the order visible
  c.reorder_window = 4;
  c.max_bypass = 2;
  Harness h(c);
  // Queue (arrival order): 1 long, then 2, 3, 4, 5 short.
  ASSERT_TRUE(h.sched.add(req(1, 12, 1)).ok());
  for (uint64_t id = 2; id <= 5; ++id) ASSERT_TRUE(h.sched.add(req(id, 2, 1, 0, 100 * id)).ok());
  std::vector<uint64_t> order;
  for (int i = 0; i < 20 && h.sched.has_unfinished(); ++i) {
    for (auto& f : h.step()) order.push_back(f.id);
  }
  // 2 and 3 overtake 1 (bypass 1, 2); then 1 has aged and goes before 4 and 5.
  EXPECT_EQ(order, (std::vector<uint64_t>{2, 3, 1, 4, 5}));

  SchedulerConfig fifo = c;
  fifo.reorder_window = 1;
  Harness h2(fifo);
  ASSERT_TRUE(h2.sched.add(req(1, 12, 1)).ok());
  for (uint64_t id = 2; id <= 5; ++id) ASSERT_TRUE(h2.sched.add(req(id, 2, 1, 0, 100 * id)).ok());
  order.clear();
  for (int i = 0; i < 20 && h2.sched.has_unfinished(); ++i) {
    for (auto& f : h2.step()) order.push_back(f.id);
  }
  EXPECT_EQ(order, (std::vector<uint64_t>{1, 2, 3, 4, 5}));
}

TEST(Scheduler, PriorityOrdersAdmission) {
  SchedulerConfig c = small_config();
  c.max_num_seqs = 1;
  Harness h(c);
  ASSERT_TRUE(h.sched.add(req(1, 2, 1, /*priority=*/2)).ok());
  ASSERT_TRUE(h.sched.add(req(2, 8, 1, /*priority=*/0)).ok());
  ASSERT_TRUE(h.sched.add(req(3, 2, 1, /*priority=*/1)).ok());
  std::vector<uint64_t> order;
  for (int i = 0; i < 20 && h.sched.has_unfinished(); ++i) {
    for (auto& f : h.step()) order.push_back(f.id);
  }
  EXPECT_EQ(order, (std::vector<uint64_t>{2, 3, 1}));
}

TEST(SchedulerDeathTest, ThreeStepsInFlightAbort) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Harness h(small_config());
  ASSERT_TRUE(h.sched.add(req(1, 4, 4)).ok());
  (void)h.sched.schedule();
  (void)h.sched.schedule();  // asynchronous scheduling: one step ahead is allowed
  EXPECT_EQ(h.sched.num_steps_in_flight(), 2);
  EXPECT_DEATH((void)h.sched.schedule(), "update\\(\\) the oldest first");
}

}  // namespace
}  // namespace xinfer::sched
