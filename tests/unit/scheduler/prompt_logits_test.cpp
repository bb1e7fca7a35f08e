// Requests with prompt_logits (prompt log-probabilities): every prompt position is computed once with a
// logits row (all_logits chunks, no prefix-cache hit), a step never asks for more than max_num_seqs logits
// rows, and a plain chunk that would sample with no row left stops one token short.
#include <gtest/gtest.h>

#include <vector>

#include "scheduler_test_util.h"
#include "xinfer/scheduler/scheduler.h"

namespace xinfer::sched {
namespace {

using namespace test_util;

struct Harness {
  double now = 0;
  Scheduler sched;
  explicit Harness(const SchedulerConfig& c) : sched(c, [this] { return now; }) {}
  std::vector<FinishedRequest> step(ScheduledStep* out) {
    ScheduledStep s = sched.schedule();
    sched.check_invariants();
    int rows = 0;
    for (const ScheduledSeq& q : s.seqs) rows += q.all_logits ? q.num_tokens() : (q.sample ? 1 : 0);
    EXPECT_EQ(rows, s.num_logit_rows);
    EXPECT_LE(s.num_logit_rows, sched.config().max_num_seqs) << "step " << s.metrics.step;
    StepOutput o;
    o.token_ids.assign(s.num_sampling, 7);
    now += 0.01;
    auto f = sched.update(o);
    sched.check_invariants();
    *out = std::move(s);
    return f;
  }
};

Request logits_req(uint64_t id, int prompt_len, int max_new) {
  Request r = req(id, prompt_len, max_new);
  r.prompt_logits = true;
  return r;
}

TEST(PromptLogits, ChunksCarryARowPerTokenWithinTheRowBudget) {
  SchedulerConfig c = small_config();  // 8 logits rows (max_num_seqs), 16 tokens per step
  Harness h(c);
  ASSERT_TRUE(h.sched.add(logits_req(1, 20, 3)).ok());
  std::vector<int> starts, lens;
  ScheduledStep s;
  for (int i = 0; i < 3; ++i) {
    h.step(&s);
    const ScheduledSeq* q = find_seq(s, 1);
    ASSERT_NE(q, nullptr);
    EXPECT_TRUE(q->all_logits);
    starts.push_back(q->start_pos);
    lens.push_back(q->num_tokens());
  }
  EXPECT_EQ(starts, (std::vector<int>{0, 8, 16}));
  EXPECT_EQ(lens, (std::vector<int>{8, 8, 4}));  // 8 rows each, the last chunk samples
  EXPECT_TRUE(s.seqs[0].sample);
  h.step(&s);  // decode: one row, no longer all_logits
  ASSERT_EQ(s.seqs.size(), 1u);
  EXPECT_FALSE(s.seqs[0].all_logits);
  EXPECT_TRUE(s.seqs[0].is_decode());
}

TEST(PromptLogits, DecodesKeepTheirRowsAndPlainChunksStopShort) {
  SchedulerConfig c = small_config();
  c.reorder_window = 1;  // FIFO admission: request 2 before the shorter request 3
  Harness h(c);
  ASSERT_TRUE(h.sched.add(req(1, 4, 10)).ok());
  ScheduledStep s;
  h.step(&s);  // request 1 prefilled: decoding from now on
  ASSERT_TRUE(h.sched.add(logits_req(2, 12, 2)).ok());
  ASSERT_TRUE(h.sched.add(req(3, 3, 2)).ok());
  h.step(&s);
  const ScheduledSeq* a = find_seq(s, 1);
  const ScheduledSeq* b = find_seq(s, 2);
  const ScheduledSeq* d = find_seq(s, 3);
  ASSERT_TRUE(a && b && d);
  EXPECT_TRUE(a->is_decode());
  EXPECT_TRUE(b->all_logits);
  EXPECT_EQ(b->num_tokens(), 7) << "8 rows minus the decode's";
  // No row left for request 3's sampling row: its chunk stops one token short and samples next step.
  EXPECT_EQ(d->num_tokens(), 2);
  EXPECT_FALSE(d->sample);
  EXPECT_EQ(s.num_logit_rows, 8);
  h.step(&s);
  d = find_seq(s, 3);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->start_pos, 2);
  EXPECT_TRUE(d->sample);
  b = find_seq(s, 2);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->start_pos, 7);
  EXPECT_EQ(b->num_tokens(), 5);
  EXPECT_TRUE(b->all_logits && b->sample);
}

TEST(PromptLogits, BypassesThePrefixCacheUntilThePromptIsFed) {
  Harness h(small_config());
  ASSERT_TRUE(h.sched.add(req(1, 12, 1)).ok());
  ScheduledStep s;
  ASSERT_EQ(h.step(&s).size(), 1u);  // prompt computed, its 3 full blocks cached, finished
  ASSERT_TRUE(h.sched.add(logits_req(2, 12, 1)).ok());
  h.step(&s);
  const ScheduledSeq* q = find_seq(s, 2);
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->start_pos, 0) << "a cached position would have no logits";
  EXPECT_EQ(q->num_tokens(), 8);
  EXPECT_EQ(h.sched.find(2)->metrics.num_cached_prompt_tokens, 0);
  // A plain request with the same prompt still hits the cache.
  ASSERT_TRUE(h.sched.add(req(3, 12, 1)).ok());
  h.step(&s);
  q = find_seq(s, 3);
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->start_pos, 8);
  EXPECT_FALSE(q->all_logits);
}

}  // namespace
}  // namespace xinfer::sched
