// Asynchronous scheduling (scheduler.h): schedule() once more while the previous step is in flight.
// Hand-checked scenarios: placeholders and the rows they read, a stop token at step N that discards the
// sequence's row in N+1, certain finishes (max_new_tokens, max_model_len) never scheduled ahead,
// aborts and preemption with two steps in flight, and the prefix cache hashing only real tokens.
// The randomized version (two steps always in flight) is scheduler_property_test's "*_async" cases.
#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "scheduler_test_util.h"
#include "xinfer/scheduler/scheduler.h"

namespace xinfer::sched {
namespace {

using namespace test_util;

// The sampling row (StepOutput index) of sequence `id` in `s`, or -1.
int sample_row(const ScheduledStep& s, uint64_t id) {
  int row = 0;
  for (const ScheduledSeq& q : s.seqs) {
    if (!q.sample) continue;
    if (q.seq_id == id) return row;
    ++row;
  }
  return -1;
}

struct Harness {
  double now = 0;
  Scheduler sched;
  explicit Harness(const SchedulerConfig& c) : sched(c, [this] { return now; }) {}
  ScheduledStep schedule() {
    ScheduledStep s = sched.schedule();
    sched.check_invariants();
    return s;
  }
  std::vector<FinishedRequest> update(std::vector<int32_t> ids) {
    now += 0.01;
    auto f = sched.update(StepOutput{std::move(ids)});
    sched.check_invariants();
    return f;
  }
};

TEST(AsyncScheduler, PlaceholdersFeedThePreviousStepsRows) {
  Harness h(small_config());
  ASSERT_TRUE(h.sched.add(req(1, 5, 10)).ok());
  ASSERT_TRUE(h.sched.add(req(2, 3, 10, 0, 50)).ok());
  ScheduledStep s0 = h.schedule();
  ASSERT_EQ(s0.num_sampling, 2);
  ScheduledStep s1 = h.schedule();  // s0 in flight
  EXPECT_EQ(h.sched.num_steps_in_flight(), 2);
  ASSERT_EQ(s1.seqs.size(), 2u);
  for (uint64_t id : {1, 2}) {
    SCOPED_TRACE(id);
    const ScheduledSeq* q = find_seq(s1, id);
    ASSERT_NE(q, nullptr);
    EXPECT_TRUE(q->is_decode());
    EXPECT_EQ(q->token_ids[0], kPendingToken);
    EXPECT_EQ(q->pending_row, sample_row(s0, id));
    EXPECT_EQ(q->start_pos, id == 1 ? 5 : 3);
    const Sequence* s = h.sched.find(id);
    EXPECT_TRUE(s->placeholder);
    EXPECT_EQ(s->num_output_tokens(), 0) << "a placeholder is not an output";
    EXPECT_EQ(s->num_in_flight, (id == 1 ? 5 : 3) + 1);
  }
  std::vector<int32_t> out0(2);
  out0[static_cast<size_t>(sample_row(s0, 1))] = 7;
  out0[static_cast<size_t>(sample_row(s0, 2))] = 8;
  EXPECT_TRUE(h.update(out0).empty());
  EXPECT_EQ(h.sched.find(1)->tokens.back(), 7);
  EXPECT_EQ(h.sched.find(2)->tokens.back(), 8);
  EXPECT_FALSE(h.sched.find(1)->placeholder);
  // The in-flight step's span sees the resolved token (it points at the sequence's tokens).
  EXPECT_EQ(find_seq(s1, 1)->token_ids[0], 7);
  ScheduledStep s2 = h.schedule();
  ASSERT_EQ(s2.seqs.size(), 2u);
  EXPECT_EQ(find_seq(s2, 1)->pending_row, sample_row(s1, 1));
  EXPECT_EQ(find_seq(s2, 1)->start_pos, 6);
  std::vector<int32_t> out1(2);
  out1[static_cast<size_t>(sample_row(s1, 1))] = 9;
  out1[static_cast<size_t>(sample_row(s1, 2))] = 10;
  h.update(out1);
  EXPECT_EQ(h.sched.find(1)->tokens, (std::vector<int32_t>{1, 2, 3, 4, 5, 7, 9}))
      << "placeholders come only with a schedule() ahead of the update()";
  h.update({11, 12});
  EXPECT_EQ(h.sched.num_steps_in_flight(), 0);
  EXPECT_EQ(h.sched.find(1)->num_output_tokens(), 3);
  EXPECT_EQ(h.sched.find(1)->num_in_flight, 0);
}

TEST(AsyncScheduler, StopTokenAtStepNDiscardsTheRowInStepNPlus1) {
  Harness h(small_config());
  Request a = req(1, 4, 10);
  a.eos_token_ids = {7};
  ASSERT_TRUE(h.sched.add(a).ok());
  ASSERT_TRUE(h.sched.add(req(2, 4, 10, 0, 40)).ok());
  ScheduledStep s0 = h.schedule();
  ScheduledStep s1 = h.schedule();
  ASSERT_NE(find_seq(s1, 1), nullptr) << "a stop token is not certain: scheduled ahead";
  std::vector<int32_t> out0(2, 9);
  out0[static_cast<size_t>(sample_row(s0, 1))] = 7;
  auto done = h.update(out0);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].id, 1u);
  EXPECT_EQ(done[0].reason, FinishReason::kStop);
  EXPECT_EQ(done[0].output_token_ids, (std::vector<int32_t>{7}));
  EXPECT_EQ(h.sched.find(1), nullptr);
  // Its blocks are back at once (sequence 2 holds 2 blocks: 4 prompt tokens + 1 in flight).
  EXPECT_EQ(h.sched.stats().kv.num_free_blocks, 32 - 2);
  std::vector<int32_t> out1(2, 3);  // sequence 1's row in s1 is discarded
  out1[static_cast<size_t>(sample_row(s1, 2))] = 5;
  EXPECT_TRUE(h.update(out1).empty());
  EXPECT_EQ(h.sched.find(2)->tokens, (std::vector<int32_t>{40, 41, 42, 43, 9, 5}));
  EXPECT_EQ(h.sched.stats().num_finished, 1);
}

TEST(AsyncScheduler, CertainFinishIsNotScheduledAhead) {
  SchedulerConfig c = small_config();
  c.max_model_len = 8;
  Harness h(c);
  ASSERT_TRUE(h.sched.add(req(1, 4, 1)).ok());         // max_new_tokens 1: done after its first sample
  ASSERT_TRUE(h.sched.add(req(2, 4, 2, 0, 20)).ok());  // done after two samples
  ASSERT_TRUE(h.sched.add(req(3, 5, 3, 0, 40)).ok());  // max_model_len 8 reached after 3 outputs
  ScheduledStep s0 = h.schedule();
  ASSERT_EQ(s0.num_sampling, 3);
  ScheduledStep s1 = h.schedule();
  EXPECT_EQ(find_seq(s1, 1), nullptr);
  ASSERT_NE(find_seq(s1, 2), nullptr);
  ASSERT_NE(find_seq(s1, 3), nullptr);
  EXPECT_FALSE(h.sched.find(1)->placeholder);
  auto d0 = h.update({7, 7, 7});
  ASSERT_EQ(d0.size(), 1u);
  EXPECT_EQ(d0[0].id, 1u);
  EXPECT_EQ(d0[0].reason, FinishReason::kLength);
  ScheduledStep s2 = h.schedule();
  EXPECT_EQ(find_seq(s2, 2), nullptr) << "its second sample is in flight and its last";
  ASSERT_NE(find_seq(s2, 3), nullptr);
  auto d1 = h.update({8, 8});
  ASSERT_EQ(d1.size(), 1u);
  EXPECT_EQ(d1[0].id, 2u);
  EXPECT_EQ(d1[0].output_token_ids, (std::vector<int32_t>{7, 8}));
  ScheduledStep s3 = h.schedule();
  EXPECT_TRUE(s3.empty()) << "sequence 3 reaches max_model_len with the token in flight";
  EXPECT_EQ(h.sched.num_steps_in_flight(), 1);
  auto d2 = h.update({9});
  ASSERT_EQ(d2.size(), 1u);
  EXPECT_EQ(d2[0].id, 3u);
  EXPECT_EQ(d2[0].reason, FinishReason::kLength);
  EXPECT_EQ(d2[0].output_token_ids, (std::vector<int32_t>{7, 8, 9}));
  EXPECT_EQ(h.sched.stats().kv.num_free_blocks, 32);
}

TEST(AsyncScheduler, AbortWithTwoStepsInFlight) {
  Harness h(small_config());
  ASSERT_TRUE(h.sched.add(req(1, 4, 10)).ok());
  ASSERT_TRUE(h.sched.add(req(2, 4, 10, 0, 40)).ok());
  h.schedule();
  h.update({7, 7});
  ScheduledStep s1 = h.schedule();
  ScheduledStep s2 = h.schedule();
  ASSERT_NE(find_seq(s2, 1), nullptr);
  auto f = h.sched.abort(1);  // in both in-flight steps, with a placeholder
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->reason, FinishReason::kAbort);
  EXPECT_EQ(f->output_token_ids, (std::vector<int32_t>{7})) << "the placeholder is no output";
  h.sched.check_invariants();
  EXPECT_TRUE(h.update({8, 8}).empty());
  EXPECT_TRUE(h.update({9, 9}).empty());
  EXPECT_EQ(h.sched.find(2)->tokens, (std::vector<int32_t>{40, 41, 42, 43, 7, 8, 9}));
  EXPECT_EQ(h.sched.stats().kv.num_free_blocks, 32 - 2);
  (void)s1;
}

TEST(AsyncScheduler, PrefixCacheHashesTheRealTokenNeverThePlaceholder) {
  Harness h(small_config());
  ASSERT_TRUE(h.sched.add(req(1, 7, 2)).ok());  // the first sample fills position 7: block 1's last slot
  h.schedule();
  ScheduledStep s1 = h.schedule();
  ASSERT_EQ(find_seq(s1, 1)->start_pos, 7);
  h.update({42});
  EXPECT_EQ(h.sched.stats().kv.num_cached_blocks, 1) << "only block 0 is committed after the prefill";
  auto done = h.update({43});
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(h.sched.stats().kv.num_cached_blocks, 2);
  // Block 1 is findable under its real tokens (5, 6, 7, 42), not under the placeholder.
  std::vector<int32_t> real = tokens(7);
  real.push_back(42);
  real.push_back(99);
  EXPECT_EQ(h.sched.kv_cache().match_prefix(real).blocks.size(), 2u);
  std::vector<int32_t> pending = tokens(7);
  pending.push_back(kPendingToken);
  pending.push_back(99);
  EXPECT_EQ(h.sched.kv_cache().match_prefix(pending).blocks.size(), 1u);
}

// Tokens of a "model" that depend only on (request, output index): batching, pipelining and preemption must
// not change any request's outputs.
int32_t model_token(uint64_t id, size_t output_index) {
  return static_cast<int32_t>(100 + 10 * id + output_index);
}

TEST(AsyncScheduler, PreemptionWithTwoStepsInFlight) {
  SchedulerConfig c = small_config();
  c.num_blocks = 7;  // 6 usable blocks = 24 tokens for three sequences of up to 4 + 10 tokens
  c.max_num_batched_tokens = 32;
  Harness h(c);
  for (uint64_t id = 1; id <= 3; ++id)
    ASSERT_TRUE(h.sched.add(req(id, 4, 10, static_cast<int>(id), 10 * id)).ok());
  std::map<uint64_t, std::vector<int32_t>> outputs;
  std::vector<ScheduledStep> in_flight;  // at most 2
  std::vector<std::vector<int32_t>> in_flight_tokens;
  bool preempted_with_placeholder = false;
  int steps = 0;
  while (h.sched.has_unfinished() || !in_flight.empty()) {
    ASSERT_LT(++steps, 200);
    if (h.sched.has_unfinished() && in_flight.size() < 2) {
      ScheduledStep s = h.schedule();
      for (uint64_t id : s.preempted_ids) {
        const Sequence* v = h.sched.find(id);
        ASSERT_NE(v, nullptr);
        if (v->placeholder) {
          preempted_with_placeholder = true;
          EXPECT_EQ(v->status, SeqStatus::kWaiting);
        }
      }
      if (!s.empty()) {
        // Sample: the model's token for each sampling row (its output index counts known + in-flight
        // samples).
        std::vector<int32_t> ids;
        for (const ScheduledSeq& q : s.seqs) {
          if (!q.sample) continue;
          const Sequence* seq = h.sched.find(q.seq_id);
          const size_t index = static_cast<size_t>(q.start_pos + q.num_tokens() - seq->num_prompt_tokens);
          ids.push_back(model_token(q.seq_id, index));
        }
        in_flight.push_back(std::move(s));
        in_flight_tokens.push_back(std::move(ids));
        if (in_flight.size() < 2) continue;  // keep two in flight when there is work
      }
    }
    if (in_flight.empty()) continue;
    for (const FinishedRequest& f : h.update(in_flight_tokens.front())) outputs[f.id] = f.output_token_ids;
    in_flight.erase(in_flight.begin());
    in_flight_tokens.erase(in_flight_tokens.begin());
  }
  EXPECT_TRUE(preempted_with_placeholder)
      << "the pool was meant to preempt a sequence with a token in flight";
  EXPECT_GT(h.sched.stats().num_preemptions, 0);
  for (uint64_t id = 1; id <= 3; ++id) {
    std::vector<int32_t> expected;
    for (size_t i = 0; i < 10; ++i) expected.push_back(model_token(id, i));
    EXPECT_EQ(outputs[id], expected) << "request " << id;
  }
  EXPECT_EQ(h.sched.stats().kv.num_free_blocks, 6);
}

}  // namespace
}  // namespace xinfer::sched
