// The CUDA backend's host-side attention plan (kernels/attention/attention_plan.h), no GPU needed: the split-KV
// partition size and the decode kernel's warps per CTA for a step (the shapes of a 132-SM H200 with
// Llama-3.1-8B heads), the plan of mixed steps (decodes, prefill tiles, token -> sequence) and the prefill
// kernel choice for bf16 and FP8 caches.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "xinfer/backend/cuda/kernels/attention/attention_plan.h"

namespace xinfer {
namespace {

struct Seq {
  int cached;  // context already in the cache
  int q_len;   // new tokens this step (1: decode)
};

// Split-KV partition sizes on a 132-SM H200 with Llama-3.1-8B heads (8 KV heads, group 4): the smallest
// 128 * 2^k whose grid fits one wave of 264 CTAs, except one partition instead of two of 128 tokens.
TEST(AttentionPlan, DecodePartitionSize) {
  using cuda::decode_partition_size;
  EXPECT_EQ(decode_partition_size(1, 100, 8, 4, 132), 128);     // one partition
  EXPECT_EQ(decode_partition_size(1, 256, 8, 4, 132), 256);     // not 2 x 128
  EXPECT_EQ(decode_partition_size(1, 257, 8, 4, 132), 128);     // 3 x 128
  EXPECT_EQ(decode_partition_size(1, 2048, 8, 4, 132), 128);    // 16 x 128 = 128 CTAs
  EXPECT_EQ(decode_partition_size(16, 2048, 8, 4, 132), 1024);  // 2 x 1024: 256 CTAs, kept
  EXPECT_EQ(decode_partition_size(64, 2048, 8, 4, 132), 2048);  // no wave fits: whole context
  // Warps per CTA: the many-CTA geometry only past one wave of 8-warp CTAs (264 on 132 SMs), where the whole
  // context is one partition.
  EXPECT_EQ(cuda::decode_warps(33, 4096, 8, 4, 132, 0), 8);  // 264 CTAs: one wave
  EXPECT_EQ(cuda::decode_warps(34, 4096, 8, 4, 132, 0), 4);  // 272: by context, long
  EXPECT_EQ(cuda::decode_warps(480, 192, 8, 4, 132, 0), 2);  // short, 3840 CTAs
  EXPECT_EQ(cuda::decode_warps(480, 512, 8, 4, 132, 0), 2);
  EXPECT_EQ(cuda::decode_warps(480, 513, 8, 4, 132, 0), 4);
  EXPECT_EQ(cuda::decode_warps(131, 192, 8, 4, 132, 0), 4);  // 1048 CTAs: less than a wave of 2-warp CTAs
  EXPECT_EQ(cuda::decode_warps(132, 192, 8, 4, 132, 0), 2);  // 1056
  EXPECT_EQ(cuda::decode_warps(480, 192, 8, 4, 132, 8), 8);  // forced
  EXPECT_EQ(cuda::decode_warps(480, 4096, 8, 4, 132, 2), 2);
  EXPECT_EQ(cuda::decode_warps(17, 100, 1, 16, 132, 0), 8);  // 2 head tiles: 34 CTAs
  for (int n : {34, 100, 480})
    for (int len : {1, 200, 5000}) EXPECT_GE(decode_partition_size(n, len, 8, 4, 132), len) << n << " x " << len;
  for (int len : {1, 17, 256, 1000, 4097})
    for (int n : {1, 3, 16, 40}) {
      const int size = decode_partition_size(n, len, 8, 4, 132);
      const int parts = (len + size - 1) / size;
      if (parts > 1) {
        EXPECT_LE(n * 8 * parts, 264) << "n " << n << " len " << len << ": the workspace bound";
      }
    }
}

// Host-side plan of the Engine test's first step (5 + 28 + a 31-token chunk) and of a mixed step: every
// token maps to its sequence, single-token rows are decodes, longer ones prefill tiles of 128 rows.
TEST(AttentionPlan, ShortPromptBesidePrefillChunks) {
  static_assert(cuda::kPrefillTileRows == 128, "the expected tiles below are 128 rows");
  auto make = [](const std::vector<Seq>& seqs) {
    backend::StepPlan p;
    p.query_start_loc.push_back(0);
    p.max_blocks_per_seq = 16;
    for (const Seq& s : seqs) {
      for (int i = 0; i < s.q_len; ++i) {
        p.token_ids.push_back(1);
        p.positions.push_back(s.cached + i);
        p.slot_mapping.push_back(0);
      }
      p.query_start_loc.push_back(p.num_tokens());
      p.seq_lens.push_back(s.cached + s.q_len);
      p.block_tables.resize(p.block_tables.size() + 16, 0);
    }
    return p;
  };
  const cuda::AttentionPlanHost a = cuda::build_attention_plan(make({{0, 5}, {0, 28}, {0, 31}}));
  EXPECT_EQ(a.num_decode(), 0);
  EXPECT_EQ(a.prefill_items, (std::vector<int32_t>{0, 0, 1, 0, 2, 0}));
  ASSERT_EQ(a.token_seq.size(), 64u);
  for (int t = 0; t < 64; ++t) EXPECT_EQ(a.token_seq[static_cast<size_t>(t)], t < 5 ? 0 : t < 33 ? 1 : 2) << t;
  const cuda::AttentionPlanHost b = cuda::build_attention_plan(make({{4, 1}, {0, 130}, {20, 1}, {0, 2}}));
  EXPECT_EQ(b.decode_seqs, (std::vector<int32_t>{0, 2}));
  EXPECT_EQ(b.decode_lens, (std::vector<int32_t>{5, 21}));
  EXPECT_EQ(b.max_decode_len, 21);
  EXPECT_EQ(b.prefill_items, (std::vector<int32_t>{1, 0, 1, 128, 3, 0}));
  EXPECT_EQ(b.token_seq.front(), 0);
  EXPECT_EQ(b.token_seq[130], 1);
  EXPECT_EQ(b.token_seq[131], 2);
  EXPECT_EQ(b.token_seq.size(), 134u);
  EXPECT_EQ(b.token_seq.back(), 3);
  // Prefill kernel choice: mean context per query tile (130, 130, 2) -> short: mma.sync.
  EXPECT_EQ(b.prefill_tile_context, 130 + 130 + 2);
  EXPECT_FALSE(cuda::prefer_wgmma_prefill(b));
  EXPECT_FALSE(cuda::prefer_wgmma_prefill(a));
  EXPECT_TRUE(cuda::prefer_wgmma_prefill(cuda::build_attention_plan(make({{0, 2048}}))));
  EXPECT_TRUE(cuda::prefer_wgmma_prefill(cuda::build_attention_plan(make({{3584, 512}, {0, 64}}))));
  EXPECT_FALSE(cuda::prefer_wgmma_prefill(cuda::build_attention_plan(make({{4, 1}}))));  // no prefill at all
  EXPECT_TRUE(cuda::prefer_wgmma_prefill(cuda::build_attention_plan(make({{0, 1024}}))));  // the bound itself
  EXPECT_FALSE(cuda::prefer_wgmma_prefill(cuda::build_attention_plan(make({{0, 512}, {0, 512}}))));
}

}  // namespace
}  // namespace xinfer
