// The dot products of the layer-stream probe (gpu_layer_stream_bench.cu) and of the consumer-rate bench
// (gpu_consumer_rate_bench.cu): one lane's 16-byte word of weights against its x values in registers, summed
// in f16 pairs (the host reference in gpu_layer_stream_bench.cu emulates dot16 / dot16_i8 exactly), then f32.
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace xinfer::bench {

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ __half2 e4m3x2_to_half2(uint32_t v) {
  return __half2(__nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(v & 0xffffu), __NV_E4M3));
}
__device__ __forceinline__ __half2 as_half2(uint32_t v) {
  return *reinterpret_cast<const __half2*>(&v);
}

// 16 e4m3 weights (one 16-byte word) times 16 f16 inputs: two f16 accumulators (even and odd columns), 8 f16
// FMAs (each product of two e4m3 is exact in f16, each sum rounds to f16; 8 products of at most 240 x 1.75
// cannot overflow), then f32. host_linear emulates exactly this.
__device__ __forceinline__ float dot16(const uint4& w, const uint32_t (&x)[8]) {
  const uint32_t ws[4] = {w.x, w.y, w.z, w.w};
  __half2 a = __float2half2_rn(0.0f);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    a = __hfma2(e4m3x2_to_half2(ws[j]), as_half2(x[2 * j]), a);
    a = __hfma2(e4m3x2_to_half2(ws[j] >> 16), as_half2(x[2 * j + 1]), a);
  }
  const float2 f = __half22float2(a);
  return f.x + f.y;
}

// W8A16: 16 int8 weights times 16 f16 inputs (x / 16, so 8 sums of at most 128 x |x| / 16 stay in f16's
// range): each byte pair becomes f16 (1024 + 128 + q) with one PRMT (u = q ^ 0x80 in the mantissa of 1024 +
// u), one f16 subtract of 1152 gives q exactly, then the same two f16 accumulators as dot16. host_linear
// emulates it.
__device__ __forceinline__ float dot16_i8(const uint4& w, const uint32_t (&x)[8]) {
  const uint32_t ws[4] = {w.x ^ 0x80808080u, w.y ^ 0x80808080u, w.z ^ 0x80808080u, w.w ^ 0x80808080u};
  const __half2 bias = __float2half2_rn(1152.0f);
  __half2 a = __float2half2_rn(0.0f);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const __half2 lo = __hsub2(as_half2(__byte_perm(ws[j], 0x64646464u, 0x4140)), bias);
    const __half2 hi = __hsub2(as_half2(__byte_perm(ws[j], 0x64646464u, 0x4342)), bias);
    a = __hfma2(lo, as_half2(x[2 * j]), a);
    a = __hfma2(hi, as_half2(x[2 * j + 1]), a);
  }
  const float2 f = __half22float2(a);
  return f.x + f.y;
}

// 32 int4 weights (one 16-byte word, element 2i in the low nibble of byte i) times x pairs: nibble p of each
// byte pair (elements e_p, e_{p+4} of an 8-element word) becomes f16 1024 + q by one LOP3, minus 1032 gives q
// - 8 exactly; 16 f16 FMAs into one f16 accumulator (|q - 8| <= 8, x / 16), then f32 times the group's scale.
// x[4 j + p] holds the pair (x_{8j+p}, x_{8j+p+4}).
__device__ __forceinline__ float dot32_i4(const uint4& w, const uint32_t (&x)[16], float scale) {
  const uint32_t ws[4] = {w.x, w.y, w.z, w.w};
  const __half2 bias = __float2half2_rn(1032.0f);
  __half2 a = __float2half2_rn(0.0f);
#pragma unroll
  for (int j = 0; j < 4; ++j)
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const __half2 v = __hsub2(as_half2(((ws[j] >> (4 * q)) & 0x000F000Fu) | 0x64006400u), bias);
      a = __hfma2(v, as_half2(x[4 * j + q]), a);
    }
  const float2 f = __half22float2(a);
  return (f.x + f.y) * scale;
}

}  // namespace xinfer::bench
