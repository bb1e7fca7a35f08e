#include "xinfer/backend/cuda/weight_prefetch_plan.h"

#include <algorithm>

namespace xinfer::cuda {

namespace {
constexpr size_t kAlign = 16;  // cp.async.bulk.prefetch: 16-byte aligned, 16-byte multiple sizes
}

void WeightPrefetchPlan::set(const std::vector<Linear>& linears, size_t lead_bytes) {
  ranges_.clear();
  linear_pos_.clear();
  total_ = cursor_ = last_ = 0;
  lead_ = lead_bytes;
  if (lead_ == 0) return;
  for (const Linear& l : linears) {
    linear_pos_.emplace(l.weight, total_);  // a weight registered twice (tied) keeps its first position
    for (const L2PrefetchRange& r : l.ranges) {
      const size_t bytes = r.bytes / kAlign * kAlign;
      if (r.ptr == nullptr || bytes == 0 || reinterpret_cast<uintptr_t>(r.ptr) % kAlign != 0) continue;
      ranges_.push_back({{r.ptr, bytes}, total_});
      total_ += bytes;
    }
  }
}

std::vector<L2PrefetchRange> WeightPrefetchPlan::advance(const void* weight) {
  std::vector<L2PrefetchRange> out;
  if (!enabled()) return out;
  const auto it = linear_pos_.find(weight);
  if (it == linear_pos_.end()) return out;
  const size_t pos = it->second;
  if (pos < last_ || cursor_ < pos) cursor_ = pos;  // a new step, or linears that ran without the plan
  last_ = pos;
  const size_t target = std::min(total_, pos + lead_);
  if (cursor_ >= target) return out;
  // The pieces overlapping [cursor_, target), cut at 16-byte boundaries (positions are 16-byte multiples).
  auto first = std::upper_bound(ranges_.begin(), ranges_.end(), cursor_,
                                [](size_t p, const Piece& piece) { return p < piece.start; });
  for (auto piece = first == ranges_.begin() ? first : std::prev(first); piece != ranges_.end(); ++piece) {
    const size_t begin = std::max(cursor_, piece->start);
    const size_t end = std::min(target, piece->start + piece->range.bytes);
    if (begin >= target) break;
    if (begin >= end) continue;
    const size_t from = (begin - piece->start) / kAlign * kAlign, to = (end - piece->start + kAlign - 1) / kAlign * kAlign;
    out.push_back({static_cast<const char*>(piece->range.ptr) + from, std::min(to, piece->range.bytes) - from});
  }
  cursor_ = target;
  return out;
}

}  // namespace xinfer::cuda
