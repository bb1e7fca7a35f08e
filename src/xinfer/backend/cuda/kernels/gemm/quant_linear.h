// Weight-only quantized linears on the GPU: y[m, n] = x[m, k] @ W[n, k]^T (+ bias[n]) with W stored as
// integers plus scales (and zero points) in the CPU layout of quant/weight_format.h, bf16 x, f32
// accumulation, y bf16 or f32. Two ways to run one:
//
//   launch_quant_gemv     decode rows (m <= 8 per launch, 16 with QuantGemvConfig::tokens16; more rows run in
//                         launches of that many): the weight is
//                         streamed once per launch and dequantized in registers straight into tensor-core
//                         mma.sync m16n8k16 operands (16 weight rows x 8 rows of x per warp tile).
//   launch_dequantize_weight + a bf16 GEMM (CudaBackend::linear, m > 8 or what the GEMV does not take): the
//                         whole weight dequantized to bf16 [n, k] into a workspace, then cuBLASLt.
//
// Layout (the CPU's, no repack): int4 u8 [n, k/2] (element k in the low nibble of byte k/2 for even k);
// int8 per group u8 [n, k] (value - 128 symmetric); int8 per channel i8 [n, k]; scales f32 [n, G],
// zeros u8 [n, G] or none, G = ceil(k / group); g_idx i32 [k] or none (act-order: column k is in group
// g_idx[k]). Int8 per channel is the group format with one group of k columns, signed values.
//
// GEMV kernel (quant_gemv.cu): a CTA of 8 warps owns 16 weight rows; its warps take turns over k in steps
// of 128 (int4) or 64 (int8) columns. Lane (g = lane / 4, t = lane % 4) loads 16 bytes of weight rows g
// and g + 8 at column offset t * 32 (int4) or t * 16 (int8) of the step and the matching columns of x row
// g (rows >= m are zero). Nibbles become bf16 (q - zero) exactly with the 0x4300 exponent trick and a
// bf16x2 subtract; bytes through the f32 0x4B000000 trick. An mma's k order is free as long as A and B
// agree, so each lane feeds the mma the columns it loaded (int4: x pairs re-paired with byte_perm to
// match the nibble pairs). Scales: where a step lies within one group (group % step == 0, int8 per
// channel) each step's f32 partial sums are scaled in f32 (the oracle's arithmetic up to summation
// order); groups of 32 / 64 under an int4 step of 128 fold the scale into the bf16 weight instead (one
// extra bf16 rounding of each weight, as a bf16 checkpoint has). The 8 warps' partial tiles meet in
// shared memory. No allocation, no synchronization: graph-capturable.
//
// Requirements (quant_gemv_supports): k % 32 == 0 (int4) / k % 16 == 0 (int8) (a last partial step: lanes
// past k load nothing and read x as zeros), group % 32 == 0 (int4) / group % 16 == 0 (int8), no g_idx, x
// 16-byte aligned. The dequantization
// kernel takes every layout above.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

namespace xinfer::cuda {

// A weight-only quantized weight on the device (pointers in the layout above).
struct QuantWeight {
  int bits = 4;                      // 4 or 8
  bool is_signed = false;            // int8 per channel: i8 values, no zero point
  const uint8_t* w = nullptr;        // [n, k / 2] (bits 4) or [n, k]
  const float* scales = nullptr;     // [n, G]
  const uint8_t* zeros = nullptr;    // [n, G] or nullptr: symmetric (8 for int4, 128 for unsigned int8)
  const float* mins = nullptr;       // [n, G] or nullptr: W = scale * value + min (int4, no zeros; GGUF Q4_1)
  const int32_t* g_idx = nullptr;    // [k] or nullptr
  int group_size = 128;              // columns per group (k for int8 per channel)
  int n = 0, k = 0;
  int groups() const { return (k + group_size - 1) / group_size; }
  size_t weight_bytes() const { return static_cast<size_t>(n) * (bits == 4 ? (k + 1) / 2 : k); }
  // The quantized bytes one pass over the weight reads: values, scales, zero points or mins.
  size_t bytes() const {
    return weight_bytes() + static_cast<size_t>(n) * groups() * (4 + (zeros ? 1 : 0) + (mins ? 4 : 0));
  }
};

struct QuantLinearArgs {
  const __nv_bfloat16* x = nullptr;     // [m, k]
  QuantWeight w;
  const __nv_bfloat16* bias = nullptr;  // [n] or nullptr
  void* y = nullptr;                    // [m, n], bf16 or f32 (y_f32)
  bool y_f32 = false;
  int m = 0;
  // y's row stride in elements, 0: n. Wider: the columns of a segment of a wider output (backend.h
  // LinearWeights::segments); the int4 decode GEMV, the quant GEMV and the tiled GEMM take it.
  int ldy = 0;
};

std::string describe(const QuantWeight& w);  // "int4 g128 zp [4096, 4096]"

// How the GEMV runs (the compiled variants; quant_gemv_default_config picks per shape).
//   stages 0: the batch schedule (quant_gemv.cu): each lane loads 4 steps of weights into registers, then
//             computes them; ctas_per_sm 2 (~95 registers) or 3 (80 registers, a few bytes of spills).
//   stages 4 / 8: the pipelined schedule (quant_gemv_pipelined.cu): a cp.async ring of that many steps per
//             warp in shared memory (1.5 KB a step), stages - 1 in flight while one is computed; compiled for
//             4 x 3 CTAs per SM (56 KB each), 4 x 2 and 8 x 2 (104 KB). Zero points must be 4-byte aligned.
//   persistent (pipelined): min(tiles, SMs x ctas_per_sm) CTAs loop over the 16-row tiles, each warp's ring
//             running on across tiles.
// With pdl, the launch allows programmatic dependent launch (pdl.cuh): the first steps of weights are
// requested before pdl_wait(), x is read after it.
//   wide (batch, 2 CTAs per SM): 32 rows per CTA, each lane's 4 rows share one load of x per step (2 steps
//             in flight instead of 4: the same bytes), fewer x loads and permutes per weight.
//   sum_x (batch, unfolded scales, no folded norm, k <= 512 steps): weights enter the mma as exact magic + u
//             (no per-weight subtract; int8 split into nibbles), the magic and zero point come off per step
//             with x's column sums (computed by each CTA): fewer dequantization instructions per weight.
//   tokens16 (int8 weight-only in the batch schedule, plain or wide; the W8A8 GEMVs pipelined; 2 CTAs per SM,
//             no sum_x / f16_x / fusion): 16 rows of x per launch, rows 8..15 a second mma N tile on the same
//             dequantized weight fragments, so 9..16 rows read the weight once instead of twice (int4 has the
//             int4 decode GEMV for that). Each output's products and sums are the launch of 8's: the same
//             bits.
struct QuantGemvConfig {
  int ctas_per_sm = 2;
  bool pdl = false;
  int stages = 0;
  bool persistent = false;
  bool wide = false;
  bool sum_x = false;
  bool f16_x = false;  // int8, unfolded scales, batch: bytes -> f16 1024 + u by PRMT, x to f16 per step
  bool tokens16 = false;
};
std::string to_string(const QuantGemvConfig& c);  // "pipe4 3 ctas/sm pdl"
// The backend's choice for this weight / FP8 shape (H200 measurements: docs/PERF.md "Quantized linears").
QuantGemvConfig quant_gemv_default_config(const QuantWeight& w, bool pdl);
QuantGemvConfig fp8_gemv_default_config(int n, int k, bool pdl);
QuantGemvConfig w8a8_int8_gemv_default_config(int n, int k, int m, bool pdl);  // m: rows of x

// The fused decode chain (CudaBackend::add_rms_norm_linear on quantized linears; as gemv.h GemvFusion does
// for bf16): one per launch, bf16 y, m <= 8; every batch configuration, the pipelined one at 4 x 3 and 8 x 2.
//   add_to_y     y[m, n] = bf16(y + bf16(x @ W^T + bias)): the residual add of the linear that makes delta;
//   norm_weight  [k]: the linear reads x = residual and applies rms_norm(x) * norm_weight on its way in
//                (each x * norm_weight product rounded to bf16, 1 / rms applied to the dot products);
//   swiglu_out   [m, n / 2] (with norm_weight, even n): CTAs pair gate row j with up row n / 2 + j and
//                also store silu(gate) * up from the two bf16 outputs (y is still written in full).
struct QuantGemvFusion {
  bool add_to_y = false;
  const __nv_bfloat16* norm_weight = nullptr;
  float eps = 0.0f;
  __nv_bfloat16* swiglu_out = nullptr;
};

// True if launch_quant_gemv takes this weight (see Requirements above; any m >= 1).
bool quant_gemv_supports(const QuantWeight& w);
// True if launch_quant_gemv takes this weight, these rows and fusion with `config`.
bool quant_gemv_fusion_supports(const QuantWeight& w, int m, const QuantGemvFusion& f, const QuantGemvConfig& config);
// The GEMV (ceil(m / 8) launches, ceil(m / 16) with tokens16). XI_CHECK-fails on unsupported arguments.
void launch_quant_gemv(const QuantLinearArgs& a, cudaStream_t stream, QuantGemvConfig config = {},
                       const QuantGemvFusion& fusion = {});

// W8A8-FP8 decode GEMV: y[m, n] = (xq[m, k] . w[n, k]) * x_scales[m] * w_scales[n or 0] (+ bias[n]), xq and w
// e4m3 (the activations quantized per token beforehand: quantize_activations.h), converted exactly to f16
// for the tensor cores (mma m16n8k16, f32 accumulation): the oracle's products, summed in another order.
// The pipelined schedule's tile and ring (int8's geometry: steps of 64 columns); ceil(m / 8) launches
// (ceil(m / 16) with tokens16).
struct Fp8GemvArgs {
  const uint8_t* xq = nullptr;          // [m, k] e4m3
  const float* x_scales = nullptr;      // [m]
  const uint8_t* w = nullptr;           // [n, k] e4m3
  const float* w_scales = nullptr;      // [n] (per_channel) or [1]
  bool per_channel = true;
  const __nv_bfloat16* bias = nullptr;  // [n] or nullptr
  void* y = nullptr;                    // [m, n], bf16 or f32 (y_f32)
  bool y_f32 = false;
  int m = 0, n = 0, k = 0;
};
bool fp8_gemv_supports(int n, int k);  // k % 16 == 0 (the W8A8-INT8 GEMV's requirement too)
void launch_fp8_gemv(const Fp8GemvArgs& a, cudaStream_t stream, QuantGemvConfig config);
// W8A8-INT8 decode GEMV (SmoothQuant's format): the same arguments with xq [m, k] and w [n, k] i8 and [n]
// weight scales; the FP8 GEMV's schedule with no conversion at all: the bytes go straight into int8 mma
// m16n8k32 (s32 accumulation, exact over all of k and the 8 warps), then y = f32(w_scales[n] * x_scales[t]) *
// f32(dot) (+ bias): with f32 y and no bias, the CPU oracle's bits (quant/int_matmul.cpp run_w8a8_int8).
void launch_w8a8_int8_gemv(const Fp8GemvArgs& a, cudaStream_t stream, QuantGemvConfig config);
// dst[n, k] = the dequantized weight, rounded to bf16 (dst: [w.n, w.k]). Any layout above, incl. g_idx.
// col_perm (i32 [k], act order sorted at load: LinearWeights::input_perm): stored column c goes to dst column
// col_perm[c], so dst is the weight in the input's column order.
void launch_dequantize_weight(const QuantWeight& w, __nv_bfloat16* dst, cudaStream_t stream,
                              const int32_t* col_perm = nullptr);
// out[r, j] = x[r, perm[j]] for r < m, j < k (x's columns in a weight's stored order:
// LinearWeights::input_perm).
void launch_gather_columns(const __nv_bfloat16* x, const int32_t* perm, int m, int k, __nv_bfloat16* out,
                           cudaStream_t stream);

}  // namespace xinfer::cuda
