// StepFollowers: the other ranks of a tensor-parallel model, as the rank-0 ModelRunner sees them. Before each
// forward the runner hands them the step's plan (the "step plan broadcast", docs/tensor_parallel.md); each
// follower uploads it to its own device and runs its shard's forward, meeting rank 0 at every collective.
#pragma once

#include "xinfer/backend/backend.h"

namespace xinfer::engine {

class StepFollowers {
 public:
  virtual ~StepFollowers() = default;
  // Queues `plan` (copied) for every follower and returns without waiting for them; rank 0 then runs the same
  // forward. Plans are run in the order given. The plan must not feed device tokens (token_sources empty):
  // followers do not hold the sampled ids.
  virtual void launch(const backend::StepPlan& plan) = 0;
};

}  // namespace xinfer::engine
