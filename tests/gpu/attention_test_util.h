// Steps for the attention tests (attention_test.cpp, rope_attention_test.cpp): sequences as (cached context,
// new tokens), block tables taken from a shuffled pool of block ids (block 0 stays the null block), and the
// padding rows and fixed table width of a CUDA-graph decode bucket.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "xinfer/backend/backend.h"

namespace xinfer::gpu_test {

struct Seq {
  int cached;  // context already in the cache
  int q_len;   // new tokens this step (1: decode)
};

// One decode per kv length (the newest token is the one decoded).
inline std::vector<Seq> decodes(const std::vector<int>& kv_lens) {
  std::vector<Seq> s;
  for (int n : kv_lens) s.push_back({n - 1, 1});
  return s;
}

inline int blocks_needed(const std::vector<Seq>& seqs, int block_size) {
  int n = 0;
  for (const Seq& s : seqs) n += (s.cached + s.q_len + block_size - 1) / block_size;
  return n;
}

inline std::vector<int32_t> shuffled_blocks(int total_blocks, std::mt19937& rng) {  // 1 .. total - 1 (0: null)
  std::vector<int32_t> ids(static_cast<size_t>(total_blocks - 1));
  std::iota(ids.begin(), ids.end(), 1);
  std::shuffle(ids.begin(), ids.end(), rng);
  return ids;
}

// A step over `seqs` whose block tables take blocks from `pool` in order (scattered, non-monotonic ids).
// width > 0 pads every table to that many entries and sizes attention launches for width * block_size
// tokens, as ModelRunner::padded_decode_plan does for a CUDA-graph bucket; `padding` rows after the
// sequences are that bucket's padding: token 0 at position 0, slot -1 (no KV write), seq_len 1, an all-zero
// block-table row.
inline backend::StepPlan make_plan(const std::vector<Seq>& seqs, int block_size, const std::vector<int32_t>& pool,
                                   int width, int padding = 0) {
  backend::StepPlan plan;
  int max_blocks = std::max(width, 1);
  for (const Seq& s : seqs) max_blocks = std::max(max_blocks, (s.cached + s.q_len + block_size - 1) / block_size);
  if (width > 0) {
    EXPECT_EQ(max_blocks, width) << "a sequence does not fit the bucket";
  }
  plan.max_blocks_per_seq = max_blocks;
  plan.padded_context_len = width * block_size;
  plan.query_start_loc.push_back(0);
  size_t next = 0;
  for (const Seq& s : seqs) {
    const int len = s.cached + s.q_len;
    std::vector<int32_t> table(static_cast<size_t>(max_blocks), 0);
    for (int b = 0; b < (len + block_size - 1) / block_size; ++b) table[static_cast<size_t>(b)] = pool.at(next++);
    for (int i = 0; i < s.q_len; ++i) {
      const int pos = s.cached + i;
      plan.token_ids.push_back(0);
      plan.positions.push_back(pos);
      plan.slot_mapping.push_back(table[static_cast<size_t>(pos / block_size)] * block_size + pos % block_size);
    }
    plan.block_tables.insert(plan.block_tables.end(), table.begin(), table.end());
    plan.seq_lens.push_back(len);
    plan.query_start_loc.push_back(static_cast<int32_t>(plan.token_ids.size()));
    plan.max_seq_len = std::max(plan.max_seq_len, len);
  }
  for (int i = 0; i < padding; ++i) {
    plan.token_ids.push_back(0);
    plan.positions.push_back(0);
    plan.slot_mapping.push_back(-1);
    plan.seq_lens.push_back(1);
    plan.block_tables.resize(plan.block_tables.size() + static_cast<size_t>(max_blocks), 0);
    plan.query_start_loc.push_back(static_cast<int32_t>(plan.token_ids.size()));
    plan.max_seq_len = std::max(plan.max_seq_len, 1);
  }
  if (width > 0) plan.max_seq_len = width * block_size;  // part of a graph's step signature: fixed per bucket
  return plan;
}

}  // namespace xinfer::gpu_test
