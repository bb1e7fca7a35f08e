// The arguments of one bf16 linear: y[m, n] = x[m, k] @ w[n, k]^T (+ bias[n]), f32 accumulation, y in bf16
// or f32. Row-major, contiguous. Shared by every GEMM implementation (cuBLASLt, the small-M GEMV) and
// the tuner that chooses between them (GemmShape: what the tuner is asked to tune).
#pragma once

#include <cuda_bf16.h>

namespace xinfer::cuda {

struct GemmArgs {
  const __nv_bfloat16* x;     // [m, k]
  const __nv_bfloat16* w;     // [n, k]
  const __nv_bfloat16* bias;  // [n] or nullptr
  void* y;                    // [m, n], bf16 or f32 (y_f32)
  bool y_f32;
  int m, n, k;
};

// One linear of a model as the GEMM tuner sees it: y[m, n] = x[m, k] @ w[n, k]^T (+ bias) for any m in
// 1..max_m (the most rows the model runs it with: a step's token budget, or its logit rows).
struct GemmShape {
  int n = 0, k = 0;
  bool y_f32 = false;
  bool bias = false;
  int max_m = 1;
  // The linear's input is the residual stream through an RMSNorm (qkv, gate_up): for m <= 8 the tuner also
  // times the GEMV with the norm's scale folded in (gemv.h GemvFusion::norm_weight) against add + RMSNorm + the
  // plain choice.
  bool normed_input = false;
};

}  // namespace xinfer::cuda
