// GPTQ (Frantar et al., 2022): quantizes W [N, K] column by column in the scheme of WeightQuantArgs while
// compensating each column's rounding error on the columns not yet quantized, using the inverse of the
// layer's input Hessian H = 2/m X^T X (X [m, K] the calibration inputs of this linear):
//
//   dead inputs (H_jj == 0): H_jj = 1, W[:, j] = 0;   H += damp * mean(diag H) * I
//   act_order: columns processed in decreasing H_jj; groups then either static (parameters up front from
//              the original W, original column order: llm-compressor's actorder "weight", no g_idx) or
//              formed in the permuted order (actorder "group" / desc_act, with g_idx: GptqOptions);
//              otherwise a group's parameters are computed from the current (error-updated) weights when
//              its first column is reached, channel/tensor ones up front.
//   U = upper Cholesky factor of H^-1 (H^-1 = U^T U); per block of `block_size` columns, column i:
//     q_i = quant(w_i); e = (w_i - deq(q_i)) / U_ii; w_j -= e U_ij for the block's j > i;
//   then the later blocks: W[:, i2:] -= E U[i1:i2, i2:].
// With args.mse_clip, every block's parameters (up front or at its first column) come from the MSE clip
// search of weight_quantizer.h with column weights H_jj (undamped, after the dead-input fix).
// The result has the same layout and conventions as quantize_rtn (weight_quantizer.h).
#pragma once

#include <cstdint>

#include "xinfer/compress/weight_quantizer.h"

namespace xinfer::compress {

struct GptqOptions {
  double damp = 0.01;  // fraction of the mean diagonal added to H
  int block_size = 128;
  bool act_order = false;
  // With act_order and groups: true, each group's parameters up front from the original W in the original
  // column order (llm-compressor's actorder "weight", no g_idx); false, groups of group_size consecutive
  // columns in the act-order permutation, parameters from the current weights when the group's first
  // column is reached (AutoGPTQ's desc_act, llm-compressor's actorder "group"): the result carries
  // g_idx[col] = (position of col in the permutation) / group_size.
  bool static_groups = true;
};

// w: [n, k] f32; hessian: [k, k] (symmetric, X^T X up to a positive factor).
QuantizedWeight quantize_gptq(const float* w, int64_t n, int64_t k, const double* hessian,
                              const WeightQuantArgs& args, const GptqOptions& options);

}  // namespace xinfer::compress
