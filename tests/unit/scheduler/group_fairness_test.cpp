// Request::group: one client's batch (a group) takes one place in the waiting queue's reorder window, so a
// later request of another client is admitted next instead of after the whole batch; group 0 keeps the
// per-request window (the other scheduler tests).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "scheduler_test_util.h"
#include "xinfer/scheduler/scheduler.h"

namespace xinfer::sched {
namespace {

using namespace test_util;

std::vector<uint64_t> admission_order(bool grouped, int b_len = 14) {
  SchedulerConfig c = small_config();  // 16 tokens per step, window 8
  c.num_blocks = 129;
  double now = 0;
  Scheduler sched(c, [&] { return now; });
  // Client A: 12 prompts of 16 tokens at t = 0 (each fills a step's budget); client B: 1 prompt of 14 tokens
  // at t = 0.001 (shorter, but behind A's 12 in arrival order).
  for (uint64_t i = 1; i <= 12; ++i) {
    Request r = req(i, 16, 1, 0, static_cast<int>(i) * 100);  // distinct prompts: no prefix hits
    r.arrival_time = 0;
    r.group = grouped ? 100 : 0;
    EXPECT_TRUE(sched.add(r).ok());
  }
  Request b = req(50, b_len, 1, 0, 5000);
  b.arrival_time = 0.001;
  b.group = grouped ? 200 : 0;
  EXPECT_TRUE(sched.add(b).ok());
  std::vector<uint64_t> order;
  for (int step = 0; step < 40 && sched.has_unfinished(); ++step) {
    ScheduledStep s = sched.schedule();
    for (const ScheduledSeq& q : s.seqs)
      if (q.start_pos == 0) order.push_back(q.seq_id);
    StepOutput o;
    o.token_ids.assign(s.num_sampling, 7);
    now += 0.01;
    sched.update(o);
    sched.check_invariants();
  }
  EXPECT_EQ(order.size(), 13u);
  return order;
}

TEST(GroupFairness, AnotherClientIsAdmittedBeforeTheRestOfABatch) {
  const std::vector<uint64_t> grouped = admission_order(true);
  ASSERT_GE(grouped.size(), 2u);
  // A's batch is one candidate (its head, 16 tokens) next to B's 14-token request: B goes first.
  EXPECT_EQ(grouped[0], 50u);
  EXPECT_EQ(grouped[1], 1u);
  // Without groups B, 13th in arrival order, enters the window (the first 8 entries) only once 5 of A's
  // prompts are in.
  const std::vector<uint64_t> plain = admission_order(false);
  const auto pos = std::find(plain.begin(), plain.end(), 50u) - plain.begin();
  EXPECT_EQ(pos, 5);
}

TEST(GroupFairness, ALongerRequestOfAnotherClientWaitsAtMostMaxBypass) {
  // B's 20 tokens lose shortest-first to every 16-token head of A; aging lets it in after max_bypass (8)
  // of A's admissions, instead of after all 12.
  const std::vector<uint64_t> order = admission_order(true, 20);
  const auto pos = std::find(order.begin(), order.end(), 50u) - order.begin();
  EXPECT_EQ(pos, 8);
}

}  // namespace
}  // namespace xinfer::sched

namespace xinfer::sched {
namespace {

// Steps from B's arrival (after step 1) to B's first sampled token, serving defaults (2048 tokens per step,
// 256 sequences / logits rows, window 8), with A = 48 prompts of 400 tokens (prompt_logits: lm-eval echo
// requests) sent at once before B, a 3-token request.
int steps_to_first_token(bool grouped, bool prompt_logits) {
  SchedulerConfig c;
  c.block_size = 16;
  c.num_blocks = 2000;
  double now = 0;
  Scheduler sched(c, [&] { return now; });
  for (uint64_t i = 1; i <= 48; ++i) {
    Request r = test_util::req(i, 400, 1, 0, static_cast<int>(i) * 1000);
    r.arrival_time = 0;
    r.group = grouped ? 7 : 0;
    r.prompt_logits = prompt_logits;
    EXPECT_TRUE(sched.add(r).ok());
  }
  for (int step = 0; step < 400; ++step) {
    if (step == 1) {
      Request b = test_util::req(99, 3, 2, 0, 90000);
      b.group = grouped ? 8 : 0;
      EXPECT_TRUE(sched.add(b).ok());
    }
    ScheduledStep s = sched.schedule();
    bool b_sampled = false;
    for (const ScheduledSeq& q : s.seqs) b_sampled = b_sampled || (q.seq_id == 99 && q.sample);
    StepOutput o;
    o.token_ids.assign(s.num_sampling, 7);
    now += 0.01;
    sched.update(o);
    if (b_sampled) return step;
  }
  return -1;
}

TEST(GroupFairness, StepsBeforeAnotherClientsFirstTokenBehindABigBatch) {
  const int plain = steps_to_first_token(false, false), grouped = steps_to_first_token(true, false);
  const int plain_echo = steps_to_first_token(false, true), grouped_echo = steps_to_first_token(true, true);
  std::printf("B's first token, steps after its arrival: 48 x 400-token prompts ahead: %d without groups, %d with; "
              "as prompt-logprobs requests: %d without, %d with\n", plain, grouped, plain_echo, grouped_echo);
  EXPECT_LE(grouped, 2);
  EXPECT_LE(grouped_echo, 3);
  EXPECT_GT(plain, grouped);
  EXPECT_GT(plain_echo, grouped_echo);
}

}  // namespace
}  // namespace xinfer::sched
