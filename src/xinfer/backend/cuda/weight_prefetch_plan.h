// The decode chain's L2 weight prefetch plan (host side, no CUDA call: tested on the CPU).
//
// A decode step at small batch streams every linear's weights once, in a fixed order (layer by layer: qkv,
// o, gate_up, down). Its GEMVs run near HBM bandwidth, but between them the light kernels (norms, RoPE,
// attention, SwiGLU) and each GEMV's ramp and drain leave HBM idle: ~30% of a batch-1 FP8 token on an H200
// (docs/PERF.md session 15). The plan keeps a window of `lead` bytes ahead of the linear about to run in
// flight to L2, so those gaps fetch the next weights and the next GEMV reads them from L2.
//
// The model registers its linears in the order a step runs them (set()); before each linear the backend
// calls advance(weight) and prefetches the ranges it returns: everything from the last prefetched byte up to
// `lead` bytes past the start of that linear in the stream. A linear earlier in the stream than the last one
// seen starts a new step (the window restarts there); a weight not registered (the lm_head, another model)
// returns nothing. The lead must stay well under the L2 (50 MB on an H200): a line prefetched too early is
// evicted by the streaming GEMVs before its own GEMV reads it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "xinfer/backend/cuda/kernels/memory/l2_prefetch.h"

namespace xinfer::cuda {

class WeightPrefetchPlan {
 public:
  // One linear's device byte ranges (its weight, scales, zero points), keyed by its weight's address.
  struct Linear {
    const void* weight = nullptr;
    std::vector<L2PrefetchRange> ranges;
  };

  // The linears in the order a decode step runs them; lead 0 (or no linears) turns the plan off. Ranges are
  // trimmed to 16-byte multiples (the prefetch instruction's unit); empty ones are dropped.
  void set(const std::vector<Linear>& linears, size_t lead_bytes);
  void clear() { set({}, 0); }
  bool enabled() const { return lead_ > 0 && !ranges_.empty(); }
  size_t lead_bytes() const { return lead_; }
  size_t stream_bytes() const { return total_; }

  // The ranges to prefetch now, before the linear whose weight is at `weight` runs (see above).
  std::vector<L2PrefetchRange> advance(const void* weight);

 private:
  struct Piece {
    L2PrefetchRange range;
    size_t start = 0;  // position of its first byte in the stream
  };
  std::vector<Piece> ranges_;                           // in stream order
  std::unordered_map<const void*, size_t> linear_pos_;  // weight -> the stream position of its first byte
  size_t lead_ = 0, total_ = 0;
  size_t cursor_ = 0;  // stream bytes before this position are prefetched (this step)
  size_t last_ = 0;    // the position of the last linear advance() saw
};

}  // namespace xinfer::cuda
