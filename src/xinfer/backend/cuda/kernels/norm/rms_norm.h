// Fused residual add + RMSNorm for bf16 activations on Hopper.
//
//   residual[T, H] += delta[T, H]          (skipped when delta is null)
//   out[T, H] = residual / sqrt(mean(residual^2) + eps) * weight[H]
//
// One thread block per row; each thread loads 16 bytes (8 bf16) per iteration, accumulates the sum of
// squares in f32, reduces across the block with warp shuffles, then normalizes. H % 8 != 0 takes a scalar
// path. Plain rms_norm is the same kernel with delta == nullptr (residual is then only read).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace xinfer::cuda {

struct RmsNormArgs {
  __nv_bfloat16* residual;      // [rows, hidden], updated in place when delta != nullptr
  const __nv_bfloat16* delta;   // [rows, hidden] or nullptr
  const __nv_bfloat16* weight;  // [hidden]
  __nv_bfloat16* out;           // [rows, hidden]
  int rows;
  int hidden;
  float eps;
};

void launch_add_rms_norm(const RmsNormArgs& args, cudaStream_t stream);

}  // namespace xinfer::cuda
