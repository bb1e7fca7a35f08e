// StepFollowers: the other ranks of a tensor-parallel model, as the rank-0 ModelRunner sees them. Before each
// forward the runner hands them the step's plan (the "step plan broadcast", docs/tensor_parallel.md); each
// follower uploads it to its own device and runs its shard's forward, meeting rank 0 at every collective.
//
// What a follower does with one step, in this order (rank 0 does the same on its side):
//   feed_rows > 0   broadcast: rank 0's ids buffer feed_buffer (rows [0, feed_rows), the ids the step in
//   flight
//                   sampled on the device) into the follower's own buffer feed_buffer
//   kv copies       plan.kv_copies on its own cache and swap space (swap-to-host preemption), in order
//   upload          upload_step(plan); feed_tokens(meta, ids buffer feed_buffer) when the plan has
//   token_sources forward         graph_key != 0: replay the follower's own recording of that key, recording
//   it first when it
//                   has none (a failed recording runs eagerly); graph_key 0: eager
// Every rank therefore runs each forward exactly once and the same collectives in the same order, whether it
// replays, records or runs eagerly (recording runs nothing: the collectives happen at the replay).
#pragma once

#include <cstdint>

#include "xinfer/backend/backend.h"

namespace xinfer::engine {

struct FollowerStep {
  uint64_t graph_key = 0;  // rank 0's ModelRunner key of a padded decode step recorded as a graph; 0: eager
  int feed_buffer = -1;    // 0 / 1: the ids buffer the plan's token_sources index (rank 0's double buffer)
  int64_t feed_rows = 0;   // rows of it to receive from rank 0 before the upload
};

class StepFollowers {
 public:
  virtual ~StepFollowers() = default;
  // Queues `plan` (copied) for every follower and returns without waiting for them; rank 0 then runs the same
  // step (and, with feed_rows > 0, broadcasts its ids first). Steps are run in the order given.
  virtual void launch(const backend::StepPlan& plan, const FollowerStep& step = {}) = 0;
};

}  // namespace xinfer::engine
