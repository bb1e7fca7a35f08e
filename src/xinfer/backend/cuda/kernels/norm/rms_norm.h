// Fused residual add + RMSNorm for bf16 activations on Hopper.
//
//   residual[T, H] += delta[T, H]          (skipped when delta is null)
//   out[T, H] = residual / sqrt(mean(residual^2) + eps) * weight[H]
//
// One thread block per row; each thread loads 16 bytes (8 bf16) per iteration, accumulates the sum of
// squares in f32, reduces across the block with warp shuffles, then normalizes. H % 8 != 0 takes a scalar
// path. Plain rms_norm is the same kernel with delta == nullptr (residual is then only read).
//
// Optionally (q_kind != kNone, hidden % 8 == 0 only) the kernel also quantizes each row of out for a W8A8
// linear, with quantize_activations.h's arithmetic on the bf16 values it writes (so the codes and scales are
// those of add_rms_norm followed by launch_quantize_*_rows, bit for bit): q[row, :] e4m3 or int8 codes,
// q_scales[row] the row's scale (*q_input_scale when static, else max |out[row, :]| / 448 or / 127). out may
// then be null: the bf16 row is not written.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace xinfer::cuda {

enum class RowQuant { kNone, kFp8, kInt8 };

struct RmsNormArgs {
  __nv_bfloat16* residual;      // [rows, hidden], updated in place when delta != nullptr
  const __nv_bfloat16* delta;   // [rows, hidden] or nullptr
  const __nv_bfloat16* weight;  // [hidden]
  __nv_bfloat16* out;           // [rows, hidden]
  int rows;
  int hidden;
  float eps;
  RowQuant q_kind = RowQuant::kNone;    // the quantized copy of out, or none
  uint8_t* q = nullptr;                 // [rows, hidden] e4m3 / int8 codes
  float* q_scales = nullptr;            // [rows]
  const float* q_input_scale = nullptr; // [1] static per-tensor scale, or nullptr (dynamic per token)
};

void launch_add_rms_norm(const RmsNormArgs& args, cudaStream_t stream);

}  // namespace xinfer::cuda
