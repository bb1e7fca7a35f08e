// KVCacheManager: per-sequence block tables on top of a BlockPool, with prefix caching.
//
// A sequence's BlockTable maps its token positions to blocks: position p lives in block
// blocks[p / block_size] at offset p % block_size (slot = blocks[p / block_size] * block_size +
// p % block_size). Tables are append-only while a sequence runs; free() drops the whole table.
//
// Prefix caching: a block becomes findable only after the forward that wrote its last token has run
// (commit(), called from Scheduler::update()), so a hit never points at KV that is still being computed.
// match_prefix() walks the hash chain (block_hash.h) over full blocks and always leaves at least one token
// uncomputed, because the last prompt token must go through the model to produce logits.
//
// Lifecycle for one sequence:
//   m = match_prefix(tokens)                    // hits, no refs taken
//   allocate(table, num_total_tokens, &m)       // hits acquired (cached -> active), new blocks allocated
//   commit(table, tokens, num_computed)         // after each forward: newly full blocks get hashed
//   allocate(table, num_total_tokens)           // growing by chunks / decode tokens
//   free(table)                                 // released in reverse: the tail is evicted first
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "xinfer/kv_cache/block_pool.h"

namespace xinfer::kv {

// Blocks that fit a memory budget: bytes / bytes_per_block, plus nothing for the null block (which is
// one of the returned blocks). bytes_per_block = 2 (K,V) * layers * kv_heads * block_size * head_dim *
// dtype bytes. Returns 0 when fewer than 2 blocks fit (caller reports the error).
int num_blocks_for_budget(size_t bytes, size_t bytes_per_block);

struct KVCacheConfig {
  int num_blocks = 0;                 // including the null block
  int block_size = 16;                // tokens per block
  bool enable_prefix_caching = true;  // false: match_prefix() finds nothing and commit() hashes nothing
};

class BlockTable {
 public:
  std::span<const int32_t> blocks() const { return blocks_; }
  int num_blocks() const { return static_cast<int>(blocks_.size()); }
  bool empty() const { return blocks_.empty(); }

 private:
  friend class KVCacheManager;
  std::vector<int32_t> blocks_;
  // hashes_[i]: hash of full block i, known for the leading blocks that were hits or are committed.
  std::vector<uint64_t> hashes_;
};

// Result of match_prefix(): leading cached blocks of a token sequence.
struct PrefixMatch {
  std::vector<int32_t> blocks;
  std::vector<uint64_t> hashes;
  int num_query_tokens = 0;  // length of the token sequence that was matched (for the hit rate)
  int num_tokens(int block_size) const { return static_cast<int>(blocks.size()) * block_size; }
};

struct KVCacheStats {
  int num_usable_blocks = 0;
  int num_free_blocks = 0;    // includes cached blocks
  int num_cached_blocks = 0;  // hashed blocks, active or not
  double usage = 0;           // active / usable
  int64_t prefix_query_tokens = 0;
  int64_t prefix_hit_tokens = 0;
  int64_t num_evictions = 0;
  double prefix_hit_rate() const {
    return prefix_query_tokens == 0 ? 0.0 : static_cast<double>(prefix_hit_tokens) / prefix_query_tokens;
  }
};

class KVCacheManager {
 public:
  explicit KVCacheManager(const KVCacheConfig& config);

  int block_size() const { return config_.block_size; }
  const BlockPool& pool() const { return pool_; }
  // Tokens the whole pool can hold (usable blocks * block_size).
  int64_t capacity_tokens() const { return static_cast<int64_t>(pool_.num_usable_blocks()) * config_.block_size; }

  // Longest run of cached full blocks at the start of `tokens`, at most (tokens.size() - 1) / block_size.
  PrefixMatch match_prefix(std::span<const int32_t> tokens) const;

  // The most tokens `table` could hold after allocate() (with `match` when the table is empty), keeping
  // `reserve_blocks` free blocks untouched.
  int64_t max_total_tokens(const BlockTable& table, const PrefixMatch* match, int reserve_blocks) const;

  // Grows `table` to hold num_total_tokens tokens; an empty table first takes `match`'s hit blocks.
  // All or nothing: returns false and changes nothing when it would leave fewer than reserve_blocks free.
  bool allocate(BlockTable& table, int64_t num_total_tokens, const PrefixMatch* match = nullptr, int reserve_blocks = 0);

  // The forward has written KV for tokens [0, num_computed): hash and register newly full blocks.
  // tokens: the sequence's known tokens (at least num_computed of them).
  void commit(BlockTable& table, std::span<const int32_t> tokens, int64_t num_computed);

  // Releases every block of `table` (tail first, so the tail is evicted first) and empties it.
  void free(BlockTable& table);

  KVCacheStats stats() const;

  // Pool invariants, plus: each block's ref count equals its number of occurrences in `tables` (the
  // tables of every live sequence), no block twice in one table, no null block in a table.
  void check_invariants(std::span<const BlockTable* const> tables) const;

 private:
  KVCacheConfig config_;
  BlockPool pool_;
  int64_t prefix_query_tokens_ = 0;
  int64_t prefix_hit_tokens_ = 0;
};

}  // namespace xinfer::kv
