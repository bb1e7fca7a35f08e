// SwapSpace: the host blocks that hold preempted sequences' KV (swap-to-host preemption, docs/scheduler.md),
// as integer ids with a free list; the backend owns their memory (backend::KvCache::swap). BlockCopy: one
// whole block copied between the device cache and the swap space.
//
// A swapped-out sequence owns its swap blocks while it waits; when it is admitted again the blocks are copied
// back (swap-in) and released. The copies run on the device's stream in step order, so a block released by
// one step's swap-in may be written by a later step's swap-out (which runs after it).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace xinfer::kv {

// One block copy: device block -> swap block (swap-out) or swap block -> device block (swap-in).
struct BlockCopy {
  int32_t from = 0;
  int32_t to = 0;
  bool operator==(const BlockCopy&) const = default;
};

class SwapSpace {
 public:
  explicit SwapSpace(int num_blocks);  // 0: no swap space (every allocate() fails)

  int num_blocks() const { return num_blocks_; }
  int num_free() const { return static_cast<int>(free_.size()); }
  // Appends n free block ids to `out`; all or nothing: false (nothing taken) when fewer than n are free.
  bool allocate(int n, std::vector<int32_t>& out);
  // Returns blocks taken by allocate().
  void release(std::span<const int32_t> ids);
  // XI_CHECKs that the free blocks and the blocks in `owned` (every owner's list) are each block exactly
  // once.
  void check_invariants(std::span<const std::vector<int32_t>* const> owned) const;

 private:
  int num_blocks_;
  std::vector<int32_t> free_;  // a stack: the most recently released block is taken first
};

}  // namespace xinfer::kv
