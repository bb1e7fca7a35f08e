// Weight-only quantized linears on the GPU: y[m, n] = x[m, k] @ W[n, k]^T (+ bias[n]) with W stored as
// integers plus scales (and zero points) in the CPU layout of quant/weight_format.h, bf16 x, f32
// accumulation, y bf16 or f32. Two ways to run one:
//
//   launch_quant_gemv     decode rows (m <= 8 per launch; more rows run in launches of 8): the weight is
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
// past k load nothing and read x as zeros), group % 32 == 0, no g_idx, x 16-byte aligned. The dequantization
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
  const int32_t* g_idx = nullptr;    // [k] or nullptr
  int group_size = 128;              // columns per group (k for int8 per channel)
  int n = 0, k = 0;
  int groups() const { return (k + group_size - 1) / group_size; }
  size_t weight_bytes() const { return static_cast<size_t>(n) * (bits == 4 ? (k + 1) / 2 : k); }
  // The quantized bytes one pass over the weight reads: values, scales, zero points.
  size_t bytes() const {
    return weight_bytes() + static_cast<size_t>(n) * groups() * (4 + (zeros ? 1 : 0));
  }
};

struct QuantLinearArgs {
  const __nv_bfloat16* x = nullptr;     // [m, k]
  QuantWeight w;
  const __nv_bfloat16* bias = nullptr;  // [n] or nullptr
  void* y = nullptr;                    // [m, n], bf16 or f32 (y_f32)
  bool y_f32 = false;
  int m = 0;
};

std::string describe(const QuantWeight& w);  // "int4 g128 zp [4096, 4096]"

// The GEMV's compiled variants: registers capped for 2 CTAs (16 warps) per SM (~95 registers, no spills) or
// 3 (80 registers, a few bytes of spills); each lane keeps 4 steps of loads in flight (128 bytes).
// With pdl, the launch allows programmatic dependent launch (pdl.cuh): the first 4 steps of weights are
// requested before pdl_wait(), x is read after it.
struct QuantGemvConfig {
  int ctas_per_sm = 2;
  bool pdl = false;
};

// True if launch_quant_gemv takes this weight (see Requirements above; any m >= 1).
bool quant_gemv_supports(const QuantWeight& w);
// The GEMV (ceil(m / 8) launches). XI_CHECK-fails on unsupported arguments.
void launch_quant_gemv(const QuantLinearArgs& a, cudaStream_t stream, QuantGemvConfig config = {});
// dst[n, k] = the dequantized weight, rounded to bf16 (dst: [w.n, w.k]). Any layout above, incl. g_idx.
void launch_dequantize_weight(const QuantWeight& w, __nv_bfloat16* dst, cudaStream_t stream);

}  // namespace xinfer::cuda
