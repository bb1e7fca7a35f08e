// Row gather for bf16 matrices: out[r, :] = src[index[r] - index_begin, :]. Serves the embedding lookup
// (index = token ids, src = the embedding table or a vocabulary shard of it) and the logit-row gather
// (index = logit rows). With src_rows > 0, an index outside [index_begin, index_begin + src_rows) writes a row
// of -0.0 (bf16 0x8000): the vocabulary-parallel embedding's masked lookup, whose all-reduced sum over ranks is
// the whole table's row bit for bit (backend.h, Backend::embedding).
// One CTA per output row; 16-byte copies when the row width is a multiple of 8.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace xinfer::cuda {

struct GatherRowsArgs {
  const __nv_bfloat16* src;  // [src_rows, width]
  const int32_t* index;      // [rows]; unmasked: each in [index_begin, index_begin + rows of src) (checked
                             // on the host by the caller)
  __nv_bfloat16* out;        // [rows, width]
  int rows;
  int width;
  int index_begin = 0;  // src row 0 is index index_begin
  int src_rows = 0;     // > 0: mask indices outside [index_begin, index_begin + src_rows); 0: every index is in src
};

void launch_gather_rows(const GatherRowsArgs& args, cudaStream_t stream);

}  // namespace xinfer::cuda
