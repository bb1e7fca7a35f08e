// BlockPool: the KV cache's physical blocks as integer ids, with reference counts, a free list kept in
// eviction order, and the prefix cache's hash -> block index. It knows nothing about devices: the backend
// owns memory laid out as k_cache/v_cache: [num_blocks, num_kv_heads, block_size, head_dim] per layer and
// uses these ids to index it.
//
// Block states (every block except the null block is in exactly one):
//   free     ref_count == 0, in the free list, no hash            (never written, or content worthless)
//   cached   ref_count == 0, in the free list, hash registered    (content valid; reusable on a hit)
//   active   ref_count >= 1, not in the free list, maybe hashed   (owned by one or more block tables)
// Transitions (one per method):
//   allocate():       head of free list -> active (ref 1); a cached head loses its hash (evicted, LRU)
//   acquire(id):      cached -> active (ref 1), or active ref += 1       (a prefix-cache hit)
//   release(id):      active ref -= 1; at 0 -> free-list tail (cached if hashed, else free)
//   register_full():  active, unhashed -> active, hashed (its key now findable by lookup())
// Invariants: block 0 is the null block (ref 0, never in the free list, never allocated: padding for block
// tables); the free list holds exactly the ref-0 blocks; the hash index holds exactly the hashed blocks;
// the tail of the free list is the most recently released block, the head the next one evicted.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace xinfer::kv {

inline constexpr int32_t kNullBlock = 0;

class BlockPool {
 public:
  // num_blocks includes the null block, so num_blocks - 1 blocks are usable. Requires num_blocks >= 2.
  BlockPool(int num_blocks, int block_size);

  int num_blocks() const { return static_cast<int>(ref_count_.size()); }
  int num_usable_blocks() const { return num_blocks() - 1; }
  int block_size() const { return block_size_; }
  // Blocks with ref 0 (free + cached): what allocate() can hand out.
  int num_free_blocks() const { return num_free_; }
  int num_cached_blocks() const { return num_indexed_; }
  // Fraction of usable blocks that are active.
  double usage() const;

  // free/cached -> active (ref 1). Returns nullopt when the free list is empty.
  std::optional<int32_t> allocate();
  // active ref += 1, or cached -> active.
  void acquire(int32_t id);
  // active ref -= 1; at zero the block goes to the free-list tail (most recently used end).
  void release(int32_t id);
  // Records that active block `id` is full and holds `tokens` after the block named parent_hash.
  // Returns false (and leaves the block unhashed) when another block already holds that key.
  // tokens: [block_size]
  bool register_full(int32_t id, uint64_t hash, uint64_t parent_hash, std::span<const int32_t> tokens);
  // The block holding exactly (parent_hash, tokens), if cached or active-and-hashed. Does not take a ref.
  std::optional<int32_t> lookup(uint64_t hash, uint64_t parent_hash, std::span<const int32_t> tokens) const;

  int ref_count(int32_t id) const { return ref_count_[id]; }
  bool is_hashed(int32_t id) const { return has_hash_[id] != 0; }
  int64_t num_evictions() const { return num_evictions_; }

  // Aborts (XI_CHECK) on any broken invariant above. O(num_blocks): for tests and debug builds.
  void check_invariants() const;

 private:
  void unlink(int32_t id);
  void push_tail(int32_t id);
  void drop_hash(int32_t id);
  // Open-addressing index hash -> block id (linear probing, backward-shift deletion). Its capacity is a
  // power of two >= 2 * num_blocks, so it never grows and never allocates after construction.
  int32_t index_find(uint64_t hash) const;

  int block_size_;
  std::vector<int32_t> ref_count_;
  // Doubly linked free list through prev_/next_; sentinel index = num_blocks (head = next_[sentinel]).
  std::vector<int32_t> prev_, next_;
  int32_t sentinel_;
  int num_free_ = 0;
  // Prefix-cache keys of hashed blocks: hash_[id], parent_[id], tokens_[id * block_size ...].
  std::vector<uint8_t> has_hash_;
  std::vector<uint64_t> hash_, parent_;
  std::vector<int32_t> tokens_;
  std::vector<int32_t> index_;  // block id or -1
  uint64_t index_mask_ = 0;
  int num_indexed_ = 0;
  int64_t num_evictions_ = 0;
};

}  // namespace xinfer::kv
