// BlockPool state transitions: free -> active -> cached -> active (hit) / evicted, LRU order, null block.
#include "xinfer/kv_cache/block_pool.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace xinfer::kv {
namespace {

std::vector<int32_t> toks(int a, int b, int c, int d) { return {a, b, c, d}; }

TEST(BlockPool, NullBlockIsNeverHandedOut) {
  BlockPool pool(5, 4);
  EXPECT_EQ(pool.num_usable_blocks(), 4);
  EXPECT_EQ(pool.num_free_blocks(), 4);
  std::vector<int32_t> got;
  while (auto id = pool.allocate()) got.push_back(*id);
  EXPECT_EQ(got, (std::vector<int32_t>{1, 2, 3, 4}));
  EXPECT_EQ(pool.num_free_blocks(), 0);
  EXPECT_DOUBLE_EQ(pool.usage(), 1.0);
  EXPECT_EQ(pool.ref_count(kNullBlock), 0);
  pool.check_invariants();
}

TEST(BlockPool, ReleasedBlocksAreReusedLeastRecentlyReleasedFirst) {
  BlockPool pool(6, 4);
  int32_t a = *pool.allocate(), b = *pool.allocate(), c = *pool.allocate();  // 1 2 3; free: 4 5
  pool.release(b);
  pool.release(a);  // free list: 4 5 2 1
  pool.check_invariants();
  EXPECT_EQ(*pool.allocate(), 4);
  EXPECT_EQ(*pool.allocate(), 5);
  EXPECT_EQ(*pool.allocate(), b);
  EXPECT_EQ(*pool.allocate(), a);
  EXPECT_FALSE(pool.allocate().has_value());
  pool.release(c);
  EXPECT_EQ(pool.num_free_blocks(), 1);
  pool.check_invariants();
}

TEST(BlockPool, RefCountsKeepSharedBlocksActive) {
  BlockPool pool(3, 4);
  int32_t a = *pool.allocate();
  ASSERT_TRUE(pool.register_full(a, 77, 1, toks(1, 2, 3, 4)));
  pool.acquire(a);  // a second table shares it
  EXPECT_EQ(pool.ref_count(a), 2);
  pool.release(a);
  EXPECT_EQ(pool.ref_count(a), 1);
  EXPECT_EQ(pool.num_free_blocks(), 1);
  pool.release(a);
  EXPECT_EQ(pool.num_free_blocks(), 2);
  pool.check_invariants();
}

TEST(BlockPool, CachedBlockIsFoundReacquiredThenEvictedLru) {
  BlockPool pool(4, 4);  // usable: 1 2 3
  int32_t a = *pool.allocate();
  int32_t b = *pool.allocate();
  ASSERT_TRUE(pool.register_full(a, 100, 5, toks(1, 2, 3, 4)));
  ASSERT_TRUE(pool.register_full(b, 200, 100, toks(5, 6, 7, 8)));
  pool.release(b);
  pool.release(a);  // free list: 3, b, a (both cached)
  EXPECT_EQ(pool.num_cached_blocks(), 2);
  EXPECT_EQ(pool.lookup(100, 5, toks(1, 2, 3, 4)), a);

  // Hit: cached -> active, leaves the free list.
  pool.acquire(a);
  EXPECT_EQ(pool.ref_count(a), 1);
  EXPECT_EQ(pool.num_free_blocks(), 2);
  pool.check_invariants();

  // Allocation takes the never-used block first, then evicts the LRU cached block b.
  EXPECT_EQ(*pool.allocate(), 3);
  EXPECT_EQ(pool.num_evictions(), 0);
  EXPECT_EQ(*pool.allocate(), b);
  EXPECT_EQ(pool.num_evictions(), 1);
  EXPECT_FALSE(pool.lookup(200, 100, toks(5, 6, 7, 8)).has_value()) << "evicted block still findable";
  EXPECT_FALSE(pool.is_hashed(b));
  EXPECT_TRUE(pool.lookup(100, 5, toks(1, 2, 3, 4)).has_value()) << "active hashed block must stay findable";
  pool.check_invariants();
}

TEST(BlockPool, LookupComparesTheStoredKeySoCollisionsMiss) {
  BlockPool pool(3, 4);
  int32_t a = *pool.allocate();
  ASSERT_TRUE(pool.register_full(a, 42, 9, toks(1, 2, 3, 4)));
  EXPECT_FALSE(pool.lookup(42, 9, toks(1, 2, 3, 5)).has_value());  // same hash, other tokens
  EXPECT_FALSE(pool.lookup(42, 8, toks(1, 2, 3, 4)).has_value());  // same hash, other parent
  EXPECT_EQ(pool.lookup(42, 9, toks(1, 2, 3, 4)), a);
  // A second block with the same key stays unhashed (the first copy serves hits).
  int32_t b = *pool.allocate();
  EXPECT_FALSE(pool.register_full(b, 42, 9, toks(1, 2, 3, 4)));
  EXPECT_FALSE(pool.is_hashed(b));
  pool.check_invariants();
}

// Random operations with hashes that collide in their low bits (long probe runs in the open-addressing
// index), checked against a plain model of which keys are cached and against the pool invariants.
TEST(BlockPool, RandomOperationsWithCollidingHashesKeepTheIndexExact) {
  constexpr int kBlocks = 40;
  BlockPool pool(kBlocks, 4);
  std::mt19937 rng(11);
  std::vector<int32_t> active;  // one entry per reference held
  std::vector<int64_t> key_of(kBlocks, -1);  // model: key registered for a block (while hashed)
  auto key_hash = [](int k) { return (static_cast<uint64_t>(k) << 20) | 5u; };  // same low bits
  auto key_tokens = [](int k) { return toks(k, k + 1, k + 2, k + 3); };
  for (int step = 0; step < 20000; ++step) {
    int op = std::uniform_int_distribution<int>(0, 3)(rng);
    if (op == 0) {
      if (auto id = pool.allocate()) {
        key_of[*id] = -1;  // eviction drops the key
        active.push_back(*id);
      }
    } else if (op == 1 && !active.empty()) {
      size_t i = std::uniform_int_distribution<size_t>(0, active.size() - 1)(rng);
      pool.release(active[i]);
      active.erase(active.begin() + static_cast<ptrdiff_t>(i));
    } else if (op == 2 && !active.empty()) {
      int32_t id = active[std::uniform_int_distribution<size_t>(0, active.size() - 1)(rng)];
      int k = std::uniform_int_distribution<int>(0, 60)(rng);
      if (!pool.is_hashed(id)) {
        bool taken = false;
        for (int b = 1; b < kBlocks; ++b) taken = taken || key_of[b] == k;
        EXPECT_EQ(pool.register_full(id, key_hash(k), 0, key_tokens(k)), !taken);
        if (!taken) key_of[id] = k;
      }
    } else {
      int k = std::uniform_int_distribution<int>(0, 60)(rng);
      std::optional<int32_t> hit = pool.lookup(key_hash(k), 0, key_tokens(k));
      int32_t expect = -1;
      for (int b = 1; b < kBlocks; ++b) {
        if (key_of[b] == k) expect = b;
      }
      ASSERT_EQ(hit.value_or(-1), expect) << "key " << k << " at step " << step;
      if (hit) {
        pool.acquire(*hit);
        active.push_back(*hit);
      }
    }
    pool.check_invariants();
  }
}

TEST(BlockPoolDeathTest, DoubleFreeAndBadAcquireAbort) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  BlockPool pool(3, 4);
  int32_t a = *pool.allocate();
  pool.release(a);
  EXPECT_DEATH(pool.release(a), "double free");
  EXPECT_DEATH(pool.acquire(a), "uncached");
  EXPECT_DEATH(pool.release(kNullBlock), "block 0");
}

}  // namespace
}  // namespace xinfer::kv
