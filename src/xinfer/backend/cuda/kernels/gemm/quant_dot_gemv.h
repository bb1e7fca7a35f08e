// The CUDA-core decode GEMV for int4 / int8 weights (m = 1..4 rows of x): y[m, n] = x[m, k] @ W[n, k]^T
// (+ bias[n]) built for the bandwidth of the quantized bytes, not for tensor cores (quant_linear.h's
// launch_quant_gemv feeds mma.sync and measured ~46% of the int4 roofline at m = 1: docs/PERF.md).
//
// Layout: the CPU's (quant_linear.h), no repack: int4 u8 [n, k / 2] (element 2i in the low nibble of byte
// i), scales f32 [n, G], zeros u8 [n, G] or none (symmetric: 8). A warp reads whole 16-byte chunks (32
// columns) of a row, consecutive lanes consecutive chunks: every load is one coalesced 512-byte warp access.
// A 32-bit word holds elements e0..e7 at nibbles 0..7; the masks 0x000f000f / 0x00f000f0 (on the word and on
// word >> 8) pick the pairs (e0, e4), (e1, e5), (e2, e6), (e3, e7) as f16x2 1024 + q or 1024 + 16 q (one LOP3
// each, the "magic number" conversion), one HFMA2 each makes them (q - z) / 16 exactly; x is converted to
// f16x2 in the same pairing once per chunk and row group (its pairs are built by the f32 -> f16x2 cvt, so
// the weight needs no permutation). Per 8 weights at m = 1: 1 SHF + 4 LOP3 + 8 HFMA2 (+ the x conversion,
// shared by the warp's rows): ~1.8 instructions per weight against the ~3.5 per weight an H200 issues at its
// HBM rate (docs/cuda_backend.md "CUDA-core int4 GEMV"). Int8 (u8 [n, k] with zeros / 128, or i8 per channel
// via an XOR with 0x80808080): a chunk is 16 columns; one PRMT puts two bytes under the f16 exponent byte 0x64
// (1024 + u), one HFMA2 makes them (u - z) / 256 exactly: 1.5 instructions per weight at twice the bytes.
//
// Numerics: products (q - z) / 16 * x (int8: (u - z) / 256 * x) in f16 (x bf16 -> f16 is exact in [6e-5, 65504]), summed in f16 over
// one 32-column chunk (16 products per half), then scaled by 16 * scale and accumulated in f32; rows of a
// warp reduced by shuffles, the split-K warps of a CTA through shared memory. Relative L2 error ~1e-3 of the
// outputs (the size of bf16 output rounding): the backend runs it for bf16 outputs only. An x over ~4000
// in magnitude can overflow a chunk's f16 sum (activations of the supported models stay far below).
//
// Requirements (dot_gemv_supports): int4 or int8, a group of a power-of-two number of chunks (or one group
// per row), k % 32 == 0 (int4) / % 16 (int8), no g_idx, 1 <= m <= 4, x and w 16-byte aligned. No allocation, no synchronization: graph-capturable; PDL as quant_linear.h.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <string>

#include "xinfer/backend/cuda/kernels/gemm/quant_linear.h"

namespace xinfer::cuda {

// A compiled schedule: each warp owns `rows` weight rows; its lanes take `unroll` chunks of each row per
// batch (rows x unroll 16-byte loads in flight per lane); `split` warps of the 4-warp CTA share the rows,
// each a 1 / split share of the chunks (split-K inside the CTA, for short n).
// smem_x: the CTA converts x to f16 pairs once into shared memory (m * k * 2 bytes <= 48 KB) for all its
// warps, instead of each warp converting the x of its chunks.
struct DotGemvConfig {
  int rows = 2;
  int unroll = 4;
  int split = 1;
  bool pdl = false;
  bool smem_x = false;
};
std::string to_string(const DotGemvConfig& c);  // "dot r2 u4 s1 xs pdl"
// The compiled schedules (the bench times each).
const DotGemvConfig* dot_gemv_configs(int* count);
// The backend's choice for this weight and m (H200 measurements: docs/PERF.md).
DotGemvConfig dot_gemv_default_config(const QuantWeight& w, int m, bool pdl);

bool dot_gemv_supports(const QuantWeight& w, int m);
// True if `config` runs at m rows of this weight's k (smem_x: m * k * 2 <= 48 KB).
bool dot_gemv_config_fits(const QuantWeight& w, int m, const DotGemvConfig& config);
// XI_CHECK-fails on what dot_gemv_supports rejects or an uncompiled config.
void launch_dot_gemv(const QuantLinearArgs& a, cudaStream_t stream, const DotGemvConfig& config);

// W8A8-FP8 on the same schedules (quant_linear.h Fp8GemvArgs: e4m3 xq [m, k] with per-token scales, e4m3 w
// [n, k] with per-channel or per-tensor scales): 16-column chunks, the e4m3 weight pairs by one cvt each
// (exact), x pairs converted once per chunk and row group (cvt + a multiply by 2^-8, exact: the products stay
// <= 784 so a chunk's 8 products per half sum in f16), f32 across chunks; y = dot * x_scale[t] * w_scale.
bool fp8_dot_gemv_supports(int n, int k, int m);  // k % 16 == 0, m 1..4
void launch_fp8_dot_gemv(const Fp8GemvArgs& a, cudaStream_t stream, const DotGemvConfig& config);

// The same with the activation quantization fused (the backend's W8A8-FP8 decode row, m = 1): x bf16 [m, k];
// every CTA computes the tokens' scales (dynamic: max |x| / 448; static: *input_scale) and e4m3 codes
// exactly as launch_quantize_fp8_rows (quantize_activations.h) does, into shared memory, so y equals
// launch_quantize_fp8_rows + launch_fp8_dot_gemv with the same schedule bit for bit, one launch instead of
// two (each CTA reads x twice from L2: m * k * 2 bytes, ~0.1-0.3% of the weight's bytes per CTA). smem_x
// schedules only.
struct Fp8QuantDotGemvArgs {
  const __nv_bfloat16* x = nullptr;            // [m, k] bf16
  const float* input_scale = nullptr;          // [1] static per-tensor scale, or nullptr: dynamic per token
  const uint8_t* w = nullptr;                  // [n, k] e4m3
  const float* w_scales = nullptr;             // [n] (per_channel) or [1]
  bool per_channel = true;
  const __nv_bfloat16* bias = nullptr;         // [n] or nullptr
  void* y = nullptr;                           // [m, n], bf16 or f32 (y_f32)
  bool y_f32 = false;
  int m = 0, n = 0, k = 0;
};
bool fp8_quant_dot_gemv_supports(int n, int k, int m, const DotGemvConfig& config);
DotGemvConfig fp8_quant_dot_gemv_default_config(int n, int k, bool pdl);  // an smem_x schedule
// The backend's rule at m = 1: fuse where the CTA-wide prologue (x read twice, k columns per CTA) pays, i.e.
// rows shorter than 8192; longer rows (down) run launch_quantize_fp8_rows + launch_fp8_dot_gemv with
// fp8_dot_gemv_default_config (split-K in the CTA, no smem_x).
bool fp8_dot_gemv_fuse_pays(int n, int k);
DotGemvConfig fp8_dot_gemv_default_config(int n, int k, bool pdl);
void launch_fp8_quant_dot_gemv(const Fp8QuantDotGemvArgs& a, cudaStream_t stream, const DotGemvConfig& config);

}  // namespace xinfer::cuda
