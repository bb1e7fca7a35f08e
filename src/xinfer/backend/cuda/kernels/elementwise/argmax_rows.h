// Row-wise argmax of f32 logits: the device side of greedy sampling, bit-for-bit the host Sampler's choice.
// out[r] = lowest c with logits[r, c] == max (NaN never wins; -0 == +0), 0 if the row has no non-NaN value.
// One CTA of 1024 threads per row; each thread scans a strided slice (16-byte loads when V % 4 == 0 and the
// base is aligned), then (value desc, id asc) pairs are reduced by warp shuffles and shared memory. The
// order "better(a, b) = a.v > b.v || (a.v == b.v && a.i < b.i)" is total on non-NaN values, so the result does
// not depend on the reduction order.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace xinfer::cuda {

struct ArgmaxRowsArgs {
  const float* logits;  // [rows, vocab]
  int32_t* out;         // [rows]
  int rows;
  int vocab;
};

void launch_argmax_rows(const ArgmaxRowsArgs& args, cudaStream_t stream);

}  // namespace xinfer::cuda
