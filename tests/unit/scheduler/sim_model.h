// SimModel: a stand-in for the model runner in scheduler tests. Its "KV cache" stores (token, position)
// per slot, written through the step's block tables exactly as the real runner writes K/V; its
// "attention" reads the whole context back through the block table and checks it against the true tokens;
// its sampled token is a hash of the context, so, like a greedy model, it depends only on the sequence's
// tokens and never on batching, chunking, preemption or prefix-cache hits. With a swap space it runs each
// step's block copies (ScheduledStep::swap_out, then swap_in) before the step's writes, as the model runner
// does, so KV restored from the wrong swap block (or into a block someone else uses) reads back wrong.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "xinfer/kv_cache/block_pool.h"
#include "xinfer/scheduler/scheduled_step.h"

namespace xinfer::sched::testing {

inline int32_t sim_next_token(std::span<const int32_t> context, int vocab) {
  uint64_t h = 1469598103934665603ULL;
  for (int32_t t : context) h = (h ^ static_cast<uint64_t>(t)) * 1099511628211ULL;
  h ^= h >> 29;
  return static_cast<int32_t>(h % static_cast<uint64_t>(vocab));
}

// The tokens a request generates when run alone: sampling stops like the scheduler's update().
struct Expected {
  std::vector<int32_t> outputs;
  bool stopped = false;  // by a stop/eos token (else length)
};

class SimModel {
 public:
  // truth(id): the sequence's true tokens so far (prompt + outputs).
  using Truth = std::function<const std::vector<int32_t>&(uint64_t)>;
  SimModel(int num_blocks, int block_size, int vocab, int num_swap_blocks = 0)
      : block_size_(block_size),
        vocab_(vocab),
        kv_(static_cast<size_t>(num_blocks) * block_size, {-1, -1}),
        swap_(static_cast<size_t>(num_swap_blocks) * block_size, {-1, -1}) {}

  // previous: the output of the step scheduled before `step` when that step is still in flight
  // (asynchronous scheduling): rows with pending_row >= 0 feed its token, as the device would.
  StepOutput forward(const ScheduledStep& step, const kv::BlockPool& pool, const Truth& truth,
                     const StepOutput* previous = nullptr) {
    StepOutput out;
    copy_blocks(step.swap_out, kv_, swap_);
    for (const kv::BlockCopy& c : step.swap_in)
      EXPECT_EQ(pool.ref_count(c.to), 1) << "swap-in into block " << c.to << ", which is not one sequence's";
    copy_blocks(step.swap_in, swap_, kv_);
    for (const ScheduledSeq& q : step.seqs) {
      const std::vector<int32_t>& t = truth(q.seq_id);
      const int end = q.start_pos + q.num_tokens();
      EXPECT_LE(end, static_cast<int>(t.size())) << "seq " << q.seq_id;
      EXPECT_EQ(q.sample, end == static_cast<int>(t.size())) << "seq " << q.seq_id;
      EXPECT_GE(static_cast<int>(q.block_table.size()) * block_size_, end) << "seq " << q.seq_id;
      for (int i = 0; i < q.num_tokens(); ++i) {
        const int pos = q.start_pos + i;
        int32_t token = q.token_ids[i];
        if (q.pending_row >= 0) {
          EXPECT_EQ(token, kPendingToken) << "seq " << q.seq_id << " pos " << pos;
          if (previous == nullptr || q.pending_row >= static_cast<int>(previous->token_ids.size())) {
            ADD_FAILURE() << "seq " << q.seq_id << ": pending row " << q.pending_row
                          << " has no previous output";
            return out;
          }
          token = previous->token_ids[static_cast<size_t>(q.pending_row)];
        }
        EXPECT_EQ(token, t[pos]) << "seq " << q.seq_id << " pos " << pos;
        const int32_t block = q.block_table[pos / block_size_];
        EXPECT_EQ(pool.ref_count(block), 1) << "seq " << q.seq_id << " writes into shared block " << block;
        kv_[static_cast<size_t>(block) * block_size_ + pos % block_size_] = {token, pos};
      }
      if (::testing::Test::HasFailure()) return out;
      // Attention over the whole context: every position must hold this sequence's token.
      context_.clear();
      for (int pos = 0; pos < end; ++pos) {
        const Slot& s = kv_[static_cast<size_t>(q.block_table[pos / block_size_]) * block_size_ + pos % block_size_];
        if (s.token != t[pos] || s.pos != pos) {
          ADD_FAILURE() << "seq " << q.seq_id << " reads (" << s.token << "@" << s.pos << ") at position " << pos
                        << ", expected " << t[pos];
          return out;
        }
        context_.push_back(s.token);
      }
      if (q.sample) out.token_ids.push_back(sim_next_token(context_, vocab_));
    }
    return out;
  }

 private:
  struct Slot {
    int32_t token;
    int32_t pos;
  };
  void copy_blocks(const std::vector<kv::BlockCopy>& copies, const std::vector<Slot>& from,
                   std::vector<Slot>& to) {
    const size_t bs = static_cast<size_t>(block_size_);
    for (const kv::BlockCopy& c : copies) {
      ASSERT_LE((static_cast<size_t>(c.from) + 1) * bs, from.size()) << "copy from block " << c.from;
      ASSERT_LE((static_cast<size_t>(c.to) + 1) * bs, to.size()) << "copy to block " << c.to;
      std::copy_n(from.begin() + static_cast<std::ptrdiff_t>(c.from * bs), bs,
                  to.begin() + static_cast<std::ptrdiff_t>(c.to * bs));
    }
  }
  int block_size_;
  int vocab_;
  std::vector<Slot> kv_;
  std::vector<Slot> swap_;
  std::vector<int32_t> context_;
};

}  // namespace xinfer::sched::testing
