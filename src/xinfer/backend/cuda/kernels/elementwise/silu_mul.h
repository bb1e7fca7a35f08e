// SwiGLU activation for bf16: out[r, i] = silu(gate_up[r, i]) * gate_up[r, I + i], computed in f32.
// 8 elements (16 bytes) per thread when I is a multiple of 8, else one.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace xinfer::cuda {

struct SiluMulArgs {
  const __nv_bfloat16* gate_up;  // [rows, 2 * inter]: gate then up
  __nv_bfloat16* out;            // [rows, inter]
  int rows;
  int inter;
};

void launch_silu_mul(const SiluMulArgs& args, cudaStream_t stream);

}  // namespace xinfer::cuda
