// Row gather for bf16 matrices: out[r, :] = src[index[r], :]. Serves the embedding lookup
// (index = token ids, src = the embedding table) and the logit-row gather (index = logit rows).
// One CTA per output row; 16-byte copies when the row width is a multiple of 8.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace xinfer::cuda {

struct GatherRowsArgs {
  const __nv_bfloat16* src;  // [src_rows, width]
  const int32_t* index;      // [rows], each in [0, src_rows) (checked on the host by the caller)
  __nv_bfloat16* out;        // [rows, width]
  int rows;
  int width;
};

void launch_gather_rows(const GatherRowsArgs& args, cudaStream_t stream);

}  // namespace xinfer::cuda
