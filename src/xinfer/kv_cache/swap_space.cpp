#include "xinfer/kv_cache/swap_space.h"

#include "xinfer/core/check.h"

namespace xinfer::kv {

SwapSpace::SwapSpace(int num_blocks) : num_blocks_(num_blocks) {
  XI_CHECK_GE(num_blocks, 0);
  free_.reserve(static_cast<size_t>(num_blocks));
  for (int32_t id = num_blocks - 1; id >= 0; --id) free_.push_back(id);
}

bool SwapSpace::allocate(int n, std::vector<int32_t>& out) {
  XI_CHECK_GE(n, 0);
  if (n > num_free()) return false;
  for (int i = 0; i < n; ++i) {
    out.push_back(free_.back());
    free_.pop_back();
  }
  return true;
}

void SwapSpace::release(std::span<const int32_t> ids) {
  for (const int32_t id : ids) {
    XI_CHECK(id >= 0 && id < num_blocks_) << "swap block " << id << " of " << num_blocks_;
    free_.push_back(id);
  }
  XI_CHECK_LE(num_free(), num_blocks_) << "a swap block was released twice";
}

void SwapSpace::check_invariants(std::span<const std::vector<int32_t>* const> owned) const {
  std::vector<int> seen(static_cast<size_t>(num_blocks_), 0);
  auto mark = [&](int32_t id, const char* where) {
    XI_CHECK(id >= 0 && id < num_blocks_) << where << " swap block " << id << " of " << num_blocks_;
    XI_CHECK_EQ(seen[static_cast<size_t>(id)]++, 0) << where << " swap block " << id << " is held twice";
  };
  for (const int32_t id : free_) mark(id, "free");
  for (const std::vector<int32_t>* ids : owned)
    for (const int32_t id : *ids) mark(id, "owned");
  for (int32_t id = 0; id < num_blocks_; ++id)
    XI_CHECK_EQ(seen[static_cast<size_t>(id)], 1) << "swap block " << id << " is neither free nor owned";
}

}  // namespace xinfer::kv
