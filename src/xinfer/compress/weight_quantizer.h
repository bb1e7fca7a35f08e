// Round-to-nearest quantization of one linear's float weight W [N, K] (y = x W^T) into the integer and
// FP8 schemes `xinfer quantize` writes, stored as compressed-tensors lays them out (quantization args):
// scale and zero point are stored, so any rounding rule loads; ours are:
//
//   int, `bits` b, qmin = -2^(b-1), qmax = 2^(b-1) - 1; values q are signed and W ~= scale * (q - zero):
//     symmetric:  scale = max|W_block| / qmax, zero = 0, q = clamp(round(W / scale), -qmax, qmax)
//     asymmetric: lo = min(W_block, 0), hi = max(W_block, 0), scale = (hi - lo) / (2^b - 1),
//                 zero = clamp(qmin - round(lo / scale)), q = clamp(round(W / scale) + zero)
//   float (FP8 E4M3FN): scale = max|W_block| / 448, q = e4m3(W / scale) (stored as its bit pattern)
// where a block is, by `granularity`: the whole tensor, one output row (channel), or `group_size`
// consecutive input columns of one row (group; the last group of a row may be shorter). An all-zero block
// gets scale 1 (its values are 0).
//
// MSE clipping (`mse_clip`; integers: GPTQ's Quantizer(mse=True) / llm-compressor's MSE observer): the
// block's range is shrunk by a ratio p before the rule above (lo, hi -> p lo, p hi), p = 1 - i / 100 for i =
// 0 .. 79 (p from 1 down to 0.21), and the p with the smallest error E(p) = sum_c h_c (w_c - deq_p(w_c))^2 over
// the block is kept (ties: the larger p, so p = 1 = plain RTN wins unless clipping is strictly better). h_c
// are column weights [k] (e.g. the calibration Hessian's diagonal sum_t x_tc^2, which makes E the output
// error of the block's columns with cross terms ignored), or 1 when none are given. GPTQ's reference uses
// |w - deq|^2.4 unweighted; ours is the squared error the output sees.
// FP8 (`mse_clip` with is_float): e4m3's relative grid repeats every factor 2, so clipping is no use but
// where the block's max falls inside the top binade changes how every value rounds: scale = s0 2^(i / 16),
// s0 = max|W_block| / 448, i = 0 .. 15 (the max lands on 448 / 2^(i / 16), never clipped), keeping the i with
// the smallest E as above (ties: i = 0, plain RTN). 2^(i / 16) is the double exp2 rounded to f32.
// The symmetric rule is GPTQ's / AutoRound's max|W| / qmax (no clipping, the range -qmin is unused);
// compressed-tensors' own observer (calculate_qparams) uses max|W| / ((qmax - qmin) / 2), i.e. / 7.5 for int4, and
// clamps to [qmin, qmax]: a slightly finer step that clips +max|W| by half a step. Not the same rounding: the
// RTN rows of PERF.md are ours, not llm-compressor's.
//
// Layout of a QuantizedWeight: q [N, K] (int8 values, or e4m3 bits), scales [N, G] (G = 1 per channel, G =
// ceil(K / group_size) per group; [1] per tensor), zeros [N, G] like scales or empty when symmetric.
//
// Activations (W8A8): fake_quantize_rows rounds each row x_t with its own scale, as the CPU kernels do
// (quant/quantized_linear.h): int8 scale max|x_t| / 127, q clamped to +-127; fp8 scale max|x_t| / 448.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "xinfer/core/status.h"

namespace xinfer::compress {

enum class Granularity { kTensor, kChannel, kGroup };
constexpr int kFp8ScaleSteps = 16;  // FP8 scale candidates per block of the MSE search (above)
const char* granularity_name(Granularity g);  // "tensor", "channel", "group" (compressed-tensors strategies)

struct WeightQuantArgs {
  int bits = 8;                 // 4 or 8 (int); 8 for fp8
  bool is_float = false;        // FP8 E4M3
  Granularity granularity = Granularity::kChannel;
  int group_size = 0;           // kGroup only
  bool symmetric = true;        // int only; fp8 is always symmetric
  bool mse_clip = false;        // the clip ratio (int) or the max's place in the top binade (fp8) searched
  int qmin() const { return -(1 << (bits - 1)); }
  int qmax() const { return (1 << (bits - 1)) - 1; }
};

struct QuantizedWeight {
  int64_t n = 0, k = 0;
  WeightQuantArgs args;
  std::vector<int8_t> q;       // [n, k]: int values, or e4m3 bit patterns
  std::vector<float> scales;   // [n, groups()] ([1] per tensor)
  std::vector<int8_t> zeros;   // like scales, or empty (symmetric)
  std::vector<int32_t> g_idx;  // [k] group of each input column (GPTQ act-order "group"), or empty: col / group
  int64_t groups() const;      // scale columns per row: 1 (tensor / channel) or ceil(k / group_size)
  int64_t group_of(int64_t col) const {
    if (args.granularity != Granularity::kGroup) return 0;
    return g_idx.empty() ? col / args.group_size : g_idx[static_cast<size_t>(col)];
  }
  float scale(int64_t row, int64_t col) const;
  int zero(int64_t row, int64_t col) const;
  // out: [n, k] = scale * (q - zero) (int) or scale * e4m3(q) (fp8)
  void dequantize(float* out) const;
};

// Scales (and zero points) for the blocks of w: [n, k], shaped as QuantizedWeight says; q left empty.
// col_weights: [k] (h_c >= 0 of the MSE clip search) or nullptr (all 1); unused without args.mse_clip.
QuantizedWeight compute_qparams(const float* w, int64_t n, int64_t k, const WeightQuantArgs& args,
                                const double* col_weights = nullptr);
// One value with the block's parameters: returns q; `deq` receives its dequantized value.
int8_t quantize_value(float x, float scale, int zero, const WeightQuantArgs& args, float* deq);
// RTN: compute_qparams then quantize every element. w: [n, k]; col_weights as compute_qparams.
QuantizedWeight quantize_rtn(const float* w, int64_t n, int64_t k, const WeightQuantArgs& args,
                             const double* col_weights = nullptr);

enum class ActQuant { kNone, kInt8PerToken, kFp8PerToken };
// x: [rows, k], rounded in place per row as the CPU W8A8 kernels do (kNone: unchanged).
void fake_quantize_rows(float* x, int64_t rows, int64_t k, ActQuant mode);

}  // namespace xinfer::compress
