// dispatch_fast_head_dim(head_dim, f): calls f.template operator()<kD>() for the head dims the fast
// attention kernels are instantiated for (64, 128: Llama, Mistral, Qwen); fails with
// "unsupported head_dim: 96" otherwise (callers route other sizes to the generic kernel first).
#pragma once

#include "xinfer/core/check.h"

namespace xinfer::cuda {

template <typename F>
void dispatch_fast_head_dim(int head_dim, F&& f) {
  switch (head_dim) {
    case 64: f.template operator()<64>(); break;
    case 128: f.template operator()<128>(); break;
    default: XI_CHECK(false) << "unsupported head_dim: " << head_dim;
  }
}

}  // namespace xinfer::cuda
