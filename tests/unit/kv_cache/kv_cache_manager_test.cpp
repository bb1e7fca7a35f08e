// KVCacheManager: block tables, prefix matching (hash chain, at least one token left), all-or-nothing
// allocation with a reserve, commit only of computed full blocks, reverse-order free.
#include "xinfer/kv_cache/kv_cache_manager.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "xinfer/kv_cache/block_hash.h"

namespace xinfer::kv {
namespace {

std::vector<int32_t> iota_tokens(int n, int start = 0) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

std::vector<int32_t> ids(const BlockTable& t) { return {t.blocks().begin(), t.blocks().end()}; }

KVCacheManager make(int num_blocks, int block_size = 4, bool prefix = true) {
  KVCacheConfig c;
  c.num_blocks = num_blocks;
  c.block_size = block_size;
  c.enable_prefix_caching = prefix;
  return KVCacheManager(c);
}

TEST(NumBlocksForBudget, DividesAndRejectsTooSmall) {
  EXPECT_EQ(num_blocks_for_budget(1000, 100), 10);
  EXPECT_EQ(num_blocks_for_budget(1099, 100), 10);
  EXPECT_EQ(num_blocks_for_budget(199, 100), 0);  // only one block: no usable block beside the null one
  // 2 (K,V) * 12 layers * 4 kv heads * 16 tokens * 64 dims * 2 bytes = 196608 bytes per block
  EXPECT_EQ(num_blocks_for_budget(size_t{1} << 30, 196608), 5461);
}

TEST(BlockHash, ChainsAndDiffers) {
  std::vector<int32_t> a = {1, 2, 3, 4}, b = {1, 2, 3, 5};
  EXPECT_EQ(hash_block(kRootBlockHash, a), hash_block(kRootBlockHash, a));
  EXPECT_NE(hash_block(kRootBlockHash, a), hash_block(kRootBlockHash, b));
  EXPECT_NE(hash_block(1, a), hash_block(2, a));
}

TEST(KVCacheManager, AllocateGrowsTableAndFreeReturnsEverything) {
  auto kv = make(8);  // 7 usable blocks of 4
  BlockTable t;
  ASSERT_TRUE(kv.allocate(t, 5));  // 2 blocks
  EXPECT_EQ(ids(t), (std::vector<int32_t>{1, 2}));
  ASSERT_TRUE(kv.allocate(t, 8));  // still 2
  EXPECT_EQ(t.num_blocks(), 2);
  ASSERT_TRUE(kv.allocate(t, 9));
  EXPECT_EQ(ids(t), (std::vector<int32_t>{1, 2, 3}));
  std::vector<const BlockTable*> tables = {&t};
  kv.check_invariants(tables);
  EXPECT_FALSE(kv.allocate(t, 29)) << "needs 8 blocks, only 3 + 4 exist";
  EXPECT_EQ(t.num_blocks(), 3) << "failed allocate must not change the table";
  EXPECT_FALSE(kv.allocate(t, 28, nullptr, /*reserve_blocks=*/1));
  EXPECT_EQ(kv.max_total_tokens(t, nullptr, 1), (3 + 3) * 4);
  ASSERT_TRUE(kv.allocate(t, 28));
  EXPECT_EQ(kv.stats().num_free_blocks, 0);
  kv.free(t);
  EXPECT_TRUE(t.empty());
  EXPECT_EQ(kv.stats().num_free_blocks, 7);
  tables.clear();
  kv.check_invariants(tables);
}

TEST(KVCacheManager, PrefixHitReusesCommittedBlocksAndLeavesOneToken) {
  auto kv = make(16);
  std::vector<int32_t> a = iota_tokens(10);  // blocks [0..3] [4..7] + 2 tokens
  BlockTable ta;
  PrefixMatch miss = kv.match_prefix(a);
  EXPECT_TRUE(miss.blocks.empty());
  ASSERT_TRUE(kv.allocate(ta, 10, &miss));
  // Nothing is findable before the forward ran (commit).
  EXPECT_TRUE(kv.match_prefix(a).blocks.empty());
  kv.commit(ta, a, 6);  // only block 0 is full and computed
  EXPECT_EQ(kv.match_prefix(a).blocks.size(), 1u);
  kv.commit(ta, a, 10);
  PrefixMatch again = kv.match_prefix(a);
  ASSERT_EQ(again.blocks.size(), 2u);
  EXPECT_EQ(again.blocks[0], ta.blocks()[0]);
  EXPECT_EQ(again.blocks[1], ta.blocks()[1]);

  // Same first block, different second block: one block hit.
  std::vector<int32_t> b = iota_tokens(12);
  b[5] = 99;
  EXPECT_EQ(kv.match_prefix(b).blocks.size(), 1u);

  // Exactly two full blocks cached and a prompt of exactly 8 tokens: only one block may hit.
  std::vector<int32_t> c = iota_tokens(8);
  EXPECT_EQ(kv.match_prefix(c).blocks.size(), 1u);

  // Share: B takes A's first block (ref 2) and allocates its own for the rest.
  BlockTable tb;
  PrefixMatch mb = kv.match_prefix(b);
  ASSERT_TRUE(kv.allocate(tb, 12, &mb));
  EXPECT_EQ(tb.blocks()[0], ta.blocks()[0]);
  EXPECT_EQ(kv.pool().ref_count(ta.blocks()[0]), 2);
  EXPECT_EQ(kv.stats().prefix_hit_tokens, 4);
  EXPECT_EQ(kv.stats().prefix_query_tokens, 10 + 12);
  std::vector<const BlockTable*> tables = {&ta, &tb};
  kv.check_invariants(tables);

  // After both are freed the blocks stay cached and serve a new hit.
  int32_t a0 = ta.blocks()[0], a1 = ta.blocks()[1];
  kv.free(ta);
  kv.free(tb);
  tables.clear();
  kv.check_invariants(tables);
  PrefixMatch ma = kv.match_prefix(a);
  ASSERT_EQ(ma.blocks.size(), 2u);
  EXPECT_EQ(ma.blocks[0], a0);
  EXPECT_EQ(ma.blocks[1], a1);
  BlockTable t2;
  const int free_before = kv.stats().num_free_blocks;
  ASSERT_TRUE(kv.allocate(t2, 10, &ma));
  EXPECT_EQ(kv.stats().num_free_blocks, free_before - 3) << "2 hits leave the free list + 1 new block";
  tables = {&t2};
  kv.check_invariants(tables);
}

TEST(KVCacheManager, CachedHitBlocksCountAgainstFreeBlocks) {
  auto kv = make(4);  // 3 usable blocks
  std::vector<int32_t> a = iota_tokens(9);
  BlockTable ta;
  ASSERT_TRUE(kv.allocate(ta, 9));
  kv.commit(ta, a, 9);
  kv.free(ta);  // 2 cached + 1 free
  PrefixMatch m = kv.match_prefix(a);
  ASSERT_EQ(m.blocks.size(), 2u);
  BlockTable t;
  // The 2 hits are taken from the free list, so only 1 block remains for new tokens: 12 tokens fit, 13 not.
  EXPECT_EQ(kv.max_total_tokens(t, &m, 0), 12);
  EXPECT_FALSE(kv.allocate(t, 13, &m));
  EXPECT_TRUE(t.empty());
  ASSERT_TRUE(kv.allocate(t, 12, &m));
  EXPECT_EQ(kv.stats().num_free_blocks, 0);
}

TEST(KVCacheManager, FreeReleasesTailFirstSoTailIsEvictedFirst) {
  auto kv = make(4);
  std::vector<int32_t> a = iota_tokens(12);
  BlockTable ta;
  ASSERT_TRUE(kv.allocate(ta, 12));
  kv.commit(ta, a, 12);  // 3 cached blocks
  std::vector<int32_t> blocks = ids(ta);
  kv.free(ta);
  // A fresh allocation of one block evicts the last block of the old sequence, keeping its prefix.
  BlockTable t;
  ASSERT_TRUE(kv.allocate(t, 1));
  EXPECT_EQ(t.blocks()[0], blocks[2]);
  EXPECT_EQ(kv.match_prefix(a).blocks.size(), 2u);
}

TEST(KVCacheManager, DisabledPrefixCachingNeverHits) {
  auto kv = make(8, 4, /*prefix=*/false);
  std::vector<int32_t> a = iota_tokens(12);
  BlockTable ta;
  ASSERT_TRUE(kv.allocate(ta, 12));
  kv.commit(ta, a, 12);
  EXPECT_TRUE(kv.match_prefix(a).blocks.empty());
  EXPECT_EQ(kv.stats().num_cached_blocks, 0);
}

TEST(KVCacheManagerDeathTest, InvariantCheckCatchesLeakedReference) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto kv = make(8);
  BlockTable t;
  ASSERT_TRUE(kv.allocate(t, 4));
  std::vector<const BlockTable*> none;
  EXPECT_DEATH(kv.check_invariants(none), "table references vs pool ref count");
}

}  // namespace
}  // namespace xinfer::kv
