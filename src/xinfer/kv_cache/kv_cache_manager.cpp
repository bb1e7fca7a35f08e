#include "xinfer/kv_cache/kv_cache_manager.h"

#include <algorithm>

#include "xinfer/core/check.h"
#include "xinfer/kv_cache/block_hash.h"

namespace xinfer::kv {

int num_blocks_for_budget(size_t bytes, size_t bytes_per_block) {
  XI_CHECK_GT(bytes_per_block, 0u);
  size_t n = bytes / bytes_per_block;
  if (n < 2) return 0;
  return static_cast<int>(std::min<size_t>(n, 1u << 30));
}

KVCacheManager::KVCacheManager(const KVCacheConfig& config)
    : config_(config), pool_(config.num_blocks, config.block_size) {}

PrefixMatch KVCacheManager::match_prefix(std::span<const int32_t> tokens) const {
  PrefixMatch m;
  m.num_query_tokens = static_cast<int>(tokens.size());
  if (!config_.enable_prefix_caching || tokens.empty()) return m;
  const size_t bs = config_.block_size;
  const size_t max_blocks = (tokens.size() - 1) / bs;
  uint64_t parent = kRootBlockHash;
  for (size_t i = 0; i < max_blocks; ++i) {
    auto block_tokens = tokens.subspan(i * bs, bs);
    uint64_t h = hash_block(parent, block_tokens);
    std::optional<int32_t> id = pool_.lookup(h, parent, block_tokens);
    if (!id) break;
    m.blocks.push_back(*id);
    m.hashes.push_back(h);
    parent = h;
  }
  return m;
}

int64_t KVCacheManager::max_total_tokens(const BlockTable& table, const PrefixMatch* match, int reserve_blocks) const {
  int64_t blocks = table.num_blocks();
  int64_t free = pool_.num_free_blocks();
  if (match != nullptr && table.empty()) {
    blocks += static_cast<int64_t>(match->blocks.size());
    for (int32_t id : match->blocks) free -= pool_.ref_count(id) == 0 ? 1 : 0;
  }
  blocks += std::max<int64_t>(0, free - reserve_blocks);
  return blocks * config_.block_size;
}

bool KVCacheManager::allocate(BlockTable& table, int64_t num_total_tokens, const PrefixMatch* match, int reserve_blocks) {
  const int64_t bs = config_.block_size;
  const int64_t needed_blocks = (num_total_tokens + bs - 1) / bs;
  const bool use_match = match != nullptr && table.empty() && !match->blocks.empty();
  int64_t have = table.num_blocks();
  int64_t free = pool_.num_free_blocks();
  if (use_match) {
    have += static_cast<int64_t>(match->blocks.size());
    for (int32_t id : match->blocks) free -= pool_.ref_count(id) == 0 ? 1 : 0;
  }
  const int64_t new_blocks = std::max<int64_t>(0, needed_blocks - have);
  if (new_blocks > free - reserve_blocks) return false;
  if (match != nullptr && table.empty()) {
    prefix_query_tokens_ += match->num_query_tokens;
    prefix_hit_tokens_ += static_cast<int64_t>(match->blocks.size()) * bs;
  }
  if (use_match) {
    for (int32_t id : match->blocks) pool_.acquire(id);
    table.blocks_ = match->blocks;
    table.hashes_ = match->hashes;
  }
  for (int64_t i = 0; i < new_blocks; ++i) {
    std::optional<int32_t> id = pool_.allocate();
    XI_CHECK(id.has_value()) << "free count said " << free << " blocks";
    table.blocks_.push_back(*id);
  }
  return true;
}

void KVCacheManager::commit(BlockTable& table, std::span<const int32_t> tokens, int64_t num_computed) {
  if (!config_.enable_prefix_caching) return;
  const int64_t bs = config_.block_size;
  XI_CHECK_LE(num_computed, static_cast<int64_t>(tokens.size()));
  const int64_t full = std::min<int64_t>(num_computed / bs, table.num_blocks());
  for (int64_t i = static_cast<int64_t>(table.hashes_.size()); i < full; ++i) {
    uint64_t parent = i == 0 ? kRootBlockHash : table.hashes_[i - 1];
    auto block_tokens = tokens.subspan(i * bs, bs);
    uint64_t h = hash_block(parent, block_tokens);
    int32_t id = table.blocks_[i];
    // A duplicate (same tokens computed twice concurrently) stays unhashed and is simply freed later;
    // the chain continues with the hash, so later blocks are still findable through the first copy.
    if (!pool_.is_hashed(id)) pool_.register_full(id, h, parent, block_tokens);
    table.hashes_.push_back(h);
  }
}

void KVCacheManager::free(BlockTable& table) {
  for (auto it = table.blocks_.rbegin(); it != table.blocks_.rend(); ++it) pool_.release(*it);
  table.blocks_.clear();
  table.hashes_.clear();
}

KVCacheStats KVCacheManager::stats() const {
  KVCacheStats s;
  s.num_usable_blocks = pool_.num_usable_blocks();
  s.num_free_blocks = pool_.num_free_blocks();
  s.num_cached_blocks = pool_.num_cached_blocks();
  s.usage = pool_.usage();
  s.prefix_query_tokens = prefix_query_tokens_;
  s.prefix_hit_tokens = prefix_hit_tokens_;
  s.num_evictions = pool_.num_evictions();
  return s;
}

void KVCacheManager::check_invariants(std::span<const BlockTable* const> tables) const {
  pool_.check_invariants();
  std::vector<int> refs(pool_.num_blocks(), 0);
  std::vector<int> seen(pool_.num_blocks(), -1);
  int t = 0;
  for (const BlockTable* table : tables) {
    for (int32_t id : table->blocks_) {
      XI_CHECK(id > kNullBlock && id < pool_.num_blocks()) << "bad block id " << id << " in a table";
      XI_CHECK_NE(seen[id], t) << "block " << id << " twice in one table";
      seen[id] = t;
      ++refs[id];
    }
    XI_CHECK_LE(table->hashes_.size(), table->blocks_.size());
    ++t;
  }
  for (int32_t id = 1; id < pool_.num_blocks(); ++id) {
    XI_CHECK_EQ(refs[id], pool_.ref_count(id)) << "block " << id << ": table references vs pool ref count";
  }
}

}  // namespace xinfer::kv
