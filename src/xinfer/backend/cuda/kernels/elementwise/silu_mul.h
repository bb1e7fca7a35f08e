// SwiGLU activation for bf16: out[r, i] = silu(gate_up[r, i]) * gate_up[r, I + i], computed in f32.
// 8 elements (16 bytes) per thread when I is a multiple of 8, else one.
//
// Optionally (q_kind != kNone, I % 8 == 0 only; one CTA per row then) each row of out is also quantized for
// the W8A8 linear that reads it next (the down projection), with quantize_activations.h's arithmetic on the
// bf16 values written: the codes and scales of silu_mul followed by launch_quantize_*_rows, bit for bit. From
// 128 rows on, a row of up to 24064 values waits for its scale as bf16 in shared memory (gate / up streamed: 6-7
// rows in flight per SM); fewer rows keep a row of up to 16384 values in registers (one CTA of 1024 threads per
// row: every load in flight before the first SwiGLU). Either way out may be nullptr: the codes alone
// (silu_mul_codes_only_supported), 2 bytes per value fewer written.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "xinfer/backend/cuda/kernels/norm/rms_norm.h"  // RowQuant

namespace xinfer::cuda {

struct SiluMulArgs {
  const __nv_bfloat16* gate_up;  // [rows, 2 * inter]: gate then up
  __nv_bfloat16* out;            // [rows, inter], or nullptr with q_kind set: the codes alone (see above)
  int rows;
  int inter;
  RowQuant q_kind = RowQuant::kNone;    // the quantized copy of out, or none
  uint8_t* q = nullptr;                 // [rows, inter] e4m3 / int8 codes
  float* q_scales = nullptr;            // [rows]
  const float* q_input_scale = nullptr; // [1] static per-tensor scale, or nullptr (dynamic per token)
  bool in_registers = true;             // false: the two-pass kernel (out written, then read back; the bench)
};

void launch_silu_mul(const SiluMulArgs& args, cudaStream_t stream);

// Whether launch_silu_mul takes out == nullptr (codes alone) for rows of this width.
bool silu_mul_codes_only_supported(int inter);

}  // namespace xinfer::cuda
