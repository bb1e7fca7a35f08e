#include "xinfer/kv_cache/block_pool.h"

#include <algorithm>

#include "xinfer/core/check.h"

namespace xinfer::kv {

BlockPool::BlockPool(int num_blocks, int block_size)
    : block_size_(block_size),
      ref_count_(num_blocks, 0),
      prev_(num_blocks + 1, -1),
      next_(num_blocks + 1, -1),
      sentinel_(num_blocks),
      has_hash_(num_blocks, 0),
      hash_(num_blocks, 0),
      parent_(num_blocks, 0),
      tokens_(static_cast<size_t>(num_blocks) * block_size, 0) {
  XI_CHECK_GE(num_blocks, 2) << "the pool needs the null block and at least one usable block";
  XI_CHECK_GE(block_size, 1);
  prev_[sentinel_] = next_[sentinel_] = sentinel_;
  for (int32_t id = 1; id < num_blocks; ++id) push_tail(id);
  size_t cap = 16;
  while (cap < 2 * static_cast<size_t>(num_blocks)) cap *= 2;
  index_.assign(cap, -1);
  index_mask_ = cap - 1;
}

int32_t BlockPool::index_find(uint64_t hash) const {
  for (uint64_t i = hash & index_mask_;; i = (i + 1) & index_mask_) {
    int32_t id = index_[i];
    if (id < 0 || hash_[id] == hash) return id;
  }
}

double BlockPool::usage() const {
  return 1.0 - static_cast<double>(num_free_) / static_cast<double>(num_usable_blocks());
}

void BlockPool::unlink(int32_t id) {
  next_[prev_[id]] = next_[id];
  prev_[next_[id]] = prev_[id];
  prev_[id] = next_[id] = -1;
  --num_free_;
}

void BlockPool::push_tail(int32_t id) {
  int32_t last = prev_[sentinel_];
  next_[last] = id;
  prev_[id] = last;
  next_[id] = sentinel_;
  prev_[sentinel_] = id;
  ++num_free_;
}

void BlockPool::drop_hash(int32_t id) {
  uint64_t hole = hash_[id] & index_mask_;
  while (index_[hole] != id) {
    XI_CHECK_GE(index_[hole], 0) << "block " << id << " hashed but not indexed";
    hole = (hole + 1) & index_mask_;
  }
  // Backward-shift deletion: pull later entries of the probe run into the hole when their home slot
  // does not lie cyclically in (hole, j], so every remaining entry stays reachable from its home.
  for (uint64_t j = (hole + 1) & index_mask_; index_[j] >= 0; j = (j + 1) & index_mask_) {
    const uint64_t home = hash_[index_[j]] & index_mask_;
    const bool home_in_range = hole < j ? (home > hole && home <= j) : (home > hole || home <= j);
    if (!home_in_range) {
      index_[hole] = index_[j];
      hole = j;
    }
  }
  index_[hole] = -1;
  --num_indexed_;
  has_hash_[id] = 0;
}

std::optional<int32_t> BlockPool::allocate() {
  int32_t id = next_[sentinel_];
  if (id == sentinel_) return std::nullopt;
  XI_CHECK_EQ(ref_count_[id], 0) << "block " << id;
  unlink(id);
  if (has_hash_[id]) {  // cached -> active: its old content is overwritten, so forget the key
    drop_hash(id);
    ++num_evictions_;
  }
  ref_count_[id] = 1;
  return id;
}

void BlockPool::acquire(int32_t id) {
  XI_CHECK(id > kNullBlock && id < num_blocks()) << "block " << id;
  if (ref_count_[id] == 0) {
    XI_CHECK(has_hash_[id]) << "acquire of free, uncached block " << id;
    unlink(id);
  }
  ++ref_count_[id];
}

void BlockPool::release(int32_t id) {
  XI_CHECK(id > kNullBlock && id < num_blocks()) << "block " << id;
  XI_CHECK_GT(ref_count_[id], 0) << "double free of block " << id;
  if (--ref_count_[id] == 0) push_tail(id);
}

bool BlockPool::register_full(int32_t id, uint64_t hash, uint64_t parent_hash, std::span<const int32_t> tokens) {
  XI_CHECK_GT(ref_count_[id], 0) << "register_full of inactive block " << id;
  XI_CHECK_EQ(static_cast<int>(tokens.size()), block_size_);
  XI_CHECK(!has_hash_[id]) << "block " << id << " registered twice";
  uint64_t i = hash & index_mask_;
  for (; index_[i] >= 0; i = (i + 1) & index_mask_) {
    if (hash_[index_[i]] == hash) return false;
  }
  index_[i] = id;
  ++num_indexed_;
  has_hash_[id] = 1;
  hash_[id] = hash;
  parent_[id] = parent_hash;
  std::copy(tokens.begin(), tokens.end(), tokens_.begin() + static_cast<ptrdiff_t>(id) * block_size_);
  return true;
}

std::optional<int32_t> BlockPool::lookup(uint64_t hash, uint64_t parent_hash, std::span<const int32_t> tokens) const {
  int32_t id = index_find(hash);
  if (id < 0) return std::nullopt;
  if (parent_[id] != parent_hash) return std::nullopt;
  const int32_t* stored = tokens_.data() + static_cast<ptrdiff_t>(id) * block_size_;
  if (!std::equal(tokens.begin(), tokens.end(), stored)) return std::nullopt;
  return id;
}

void BlockPool::check_invariants() const {
  XI_CHECK_EQ(ref_count_[kNullBlock], 0);
  XI_CHECK_EQ(prev_[kNullBlock], -1) << "null block in the free list";
  XI_CHECK(!has_hash_[kNullBlock]);
  std::vector<uint8_t> in_list(num_blocks(), 0);
  int n = 0;
  int32_t prev = sentinel_;
  for (int32_t id = next_[sentinel_]; id != sentinel_; id = next_[id]) {
    XI_CHECK(id > kNullBlock && id < num_blocks()) << "bad id in free list: " << id;
    XI_CHECK(!in_list[id]) << "block " << id << " twice in the free list";
    XI_CHECK_EQ(prev_[id], prev) << "broken back link at block " << id;
    XI_CHECK_EQ(ref_count_[id], 0) << "block " << id << " in free list with refs";
    in_list[id] = 1;
    prev = id;
    ++n;
    XI_CHECK_LE(n, num_blocks()) << "cycle in free list";
  }
  XI_CHECK_EQ(prev_[sentinel_], prev);
  XI_CHECK_EQ(n, num_free_);
  int hashed = 0;
  for (int32_t id = 1; id < num_blocks(); ++id) {
    XI_CHECK_GE(ref_count_[id], 0);
    XI_CHECK_EQ(ref_count_[id] == 0, in_list[id] != 0) << "block " << id << " ref " << ref_count_[id];
    if (has_hash_[id]) {
      ++hashed;
      XI_CHECK_EQ(index_find(hash_[id]), id) << "hashed block not indexed";
    }
  }
  int entries = 0;
  for (int32_t id : index_) {
    if (id < 0) continue;
    ++entries;
    XI_CHECK(has_hash_[id]) << "unhashed block " << id << " in the hash index";
  }
  XI_CHECK_EQ(hashed, entries) << "stale entries in the hash index";
  XI_CHECK_EQ(hashed, num_indexed_);
}

}  // namespace xinfer::kv
