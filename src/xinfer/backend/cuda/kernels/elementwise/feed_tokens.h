// Device token feed for asynchronous scheduling: token_ids[t] = ids[sources[t]] where sources[t] >= 0
// (the previous step's sampled ids replace the placeholders of the step about to run). One thread per
// token; launched in stream order after the step metadata upload and before the forward reads the ids.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace xinfer::cuda {

struct FeedTokensArgs {
  int32_t* token_ids;      // [num_tokens], patched in place
  const int32_t* sources;  // [num_tokens]: -1 keeps token_ids[t]; else a row of ids (checked on the host)
  const int32_t* ids;      // [>= max source + 1]
  int num_tokens;
};

void launch_feed_tokens(const FeedTokensArgs& args, cudaStream_t stream);

}  // namespace xinfer::cuda
