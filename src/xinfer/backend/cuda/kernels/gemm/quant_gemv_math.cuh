// Device pieces shared by the two schedules of the quantized GEMV (quant_gemv.cu: batches of loads into
// registers; quant_gemv_pipelined.cu: a cp.async ring in shared memory). See quant_linear.h for the tile,
// the lane layout and the numerics. One warp step covers kStep columns of 16 weight rows; lane (g = lane / 4,
// t = lane % 4) owns 16 bytes of rows g and g + 8 at column t * kLaneCols of the step and the matching
// columns of x row g. An mma's k order is free as long as A and B agree, so each lane feeds the mma the
// columns it loaded.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "xinfer/backend/cuda/kernels/elementwise/silu.cuh"
#include "xinfer/backend/cuda/kernels/gemm/quant_linear.h"

namespace xinfer::cuda::quant_gemv {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kTileRows = 16;   // weight rows per CTA tile (one mma M tile)
constexpr int kTileTokens = 8;  // rows of x per launch (one mma N tile)

// What the weight bytes are: int4 nibbles, int8 bytes (u8 - zero, or i8 via sign_xor), e4m3 (W8A8-FP8: x is
// e4m3 too, both converted exactly to f16), i8 with i8 x (W8A8-INT8: int8 mma m16n8k32, exact int32 sums over
// all of k; the C fragments hold int32 bits in the f32 registers).
enum class Kind { kInt4, kInt8, kFp8, kW8A8Int8 };
// The W8A8 kinds: x quantized beforehand (p.xq, p.xs), no per-step scales, the scales applied per output.
__host__ __device__ constexpr bool is_w8a8(Kind k) { return k == Kind::kFp8 || k == Kind::kW8A8Int8; }

struct Params {
  const __nv_bfloat16* x;     // [m, k] (kInt4 / kInt8)
  const uint8_t* xq;          // [m, k] e4m3 (kFp8) / i8 (kW8A8Int8)
  const float* xs;            // [m] f32 per-token scales (kFp8, kW8A8Int8)
  const uint8_t* w;           // [n, row_bytes]
  const float* scales;        // [n, G] (kFp8: [n] per channel or [1]; kW8A8Int8: [n])
  const uint8_t* zeros;       // [n, G] or nullptr
  const __nv_bfloat16* bias;  // [n] or nullptr
  void* y;                    // [m, n]
  bool y_f32;
  bool per_channel;           // kFp8: scales [n] (else [1])
  int m, n, k, group, G;
  int ldy;            // y's row stride (elements)
  uint32_t sign_xor;  // 0x80808080 for i8 values (-> u8 = v + 128, zero 128), else 0
  int sym_zero;       // the zero point of symmetric weights
  // The fused decode chain (QuantGemvFusion; pipelined schedule only).
  bool add_to_y;                     // y = bf16(y + bf16(result))
  const __nv_bfloat16* norm_weight;  // [k]: x -> rms_norm(x) * norm_weight (template kNormed)
  float eps;
  __nv_bfloat16* swiglu_out;         // [m, n / 2] or nullptr: tiles pair gate rows with their up rows
};

// Weight row of the lane's rows r = 0, 1 (g, g + 8) in tile `tile` (clamped into the matrix). SwiGLU tiles
// take 8 gate rows tile * 8 + g and their up rows n / 2 + tile * 8 + g, so one CTA holds both halves.
template <bool kFusion = true>  // false: no SwiGLU possible (the plain batch kernels)
__device__ __forceinline__ int tile_row(const Params& p, int tile, int g, int r) {
  if (kFusion && p.swiglu_out) {
    const int half = p.n / 2, gate = min(tile * 8 + g, half - 1);
    return r == 0 ? gate : half + gate;
  }
  return min(tile * kTileRows + g + 8 * r, p.n - 1);
}
__host__ __device__ inline int tile_count(int n, bool swiglu) {
  return swiglu ? (n / 2 + 7) / 8 : (n + kTileRows - 1) / kTileRows;
}

template <Kind kKind>
struct Geometry {
  static constexpr int kStep = kKind == Kind::kInt4 ? 128 : 64;  // columns of k per warp step
  static constexpr int kLaneCols = kStep / 4;                    // consecutive columns per lane per step
  static constexpr int kXVecs = kKind == Kind::kInt4 ? 4 : kKind == Kind::kInt8 ? 2 : 1;  // 16-byte x loads
  __host__ __device__ static constexpr int row_bytes(int k) { return kKind == Kind::kInt4 ? k / 2 : k; }
};

// Weights are read once: past L1, 256-byte L2 lines (as gemv.cu).
__device__ __forceinline__ uint4 load_weights(const uint8_t* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}
__device__ __forceinline__ uint4 load_x16(const void* p) { return __ldg(reinterpret_cast<const uint4*>(p)); }

__device__ __forceinline__ uint32_t bf16x2_sub(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("sub.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}
__device__ __forceinline__ uint32_t bf16x2_mul(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  uint32_t d;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
}
// Bytes 0, 1 (lo) or 2, 3 (hi) of v, two e4m3, as f16x2 (exact: e4m3 is a subset of f16).
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint32_t v, bool hi) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(hi ? v >> 16 : v & 0xffffu), __NV_E4M3);
  return static_cast<uint32_t>(h.x) | (static_cast<uint32_t>(h.y) << 16);
}

// d += A[16 x 16] * B[16 x 8] (bf16 in, f32 accumulate), the standard m16n8k16 fragments.
__device__ __forceinline__ void mma(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                    uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
// The same with f16 operands (kFp8: products of two e4m3 are exact, f32 accumulation).
__device__ __forceinline__ void mma_f16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                        uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// d += A[16 x 32] * B[32 x 8], s8 in, s32 accumulate (kW8A8Int8): d holds int32 bits in f32 registers.
__device__ __forceinline__ void mma_s8(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                       uint32_t b1) {
  int c[4] = {__float_as_int(d[0]), __float_as_int(d[1]), __float_as_int(d[2]), __float_as_int(d[3])};
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#pragma unroll
  for (int i = 0; i < 4; ++i) d[i] = __int_as_float(c[i]);
}

// One step's operands of one lane: 16 bytes of weight rows g and g + 8, their group's scale and zero.
struct StepLoad {
  uint4 w[2];
  float s[2];
  int z[2];
};

// The lane's column of step `step` and the group its scale comes from. The last step may end inside k
// (k % step != 0): lanes past k load no weights (x reads as 0 too), but they still scale their C columns
// (rows 2t, 2t + 1 of x) by the step's group scale (unfolded scales): their group is the step's first column's.
template <Kind kKind>
__device__ __forceinline__ int lane_col(int step, int t) {
  return step * Geometry<kKind>::kStep + t * Geometry<kKind>::kLaneCols;
}
template <Kind kKind>
__device__ __forceinline__ int lane_group(const Params& p, int step, int col) {
  return (col < p.k ? col : step * Geometry<kKind>::kStep) / p.group;
}

// x's columns of this lane's step (token row g: the lane's B column, + 8 for a second token tile; zeros for
// rows past m and columns past k).
template <Kind kKind>
__device__ __forceinline__ void load_x_step(const Params& p, int step, int g, int t, uint4 (&xv)[4]) {
  using G = Geometry<kKind>;
  const int col = lane_col<kKind>(step, t);
  const bool live = g < p.m && col < p.k;
#pragma unroll
  for (int i = 0; i < G::kXVecs; ++i) {
    if constexpr (is_w8a8(kKind))
      xv[i] = live ? load_x16(p.xq + static_cast<size_t>(g) * p.k + col) : make_uint4(0, 0, 0, 0);
    else
      xv[i] = live ? load_x16(p.x + static_cast<size_t>(g) * p.k + col + i * 8) : make_uint4(0, 0, 0, 0);
  }
}

// One step: the lane's 32 (int4) or 16 (int8, e4m3) columns of rows g, g + 8 times x rows 0..7 (and, with
// kTok = 2 token tiles, rows 8..15: xv[1] / acc[1], the same weight fragments) into acc (kFold: the scale is
// in the bf16 weights; kFp8: no scale here, applied per output at the end; else the step is scaled in f32
// here).
template <Kind kKind, bool kFold, int kTok>
__device__ __forceinline__ void compute_step(const Params& p, const StepLoad& l, const uint4 (&xv)[kTok][4],
                                             float (&acc)[kTok][4]) {
  float d[kTok][4] = {};
  constexpr bool kDirect = kFold || is_w8a8(kKind);
  float(&sum)[kTok][4] = kDirect ? acc : d;
  if constexpr (kKind == Kind::kInt4) {
    uint32_t zz[2], ss[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      zz[r] = (0x4300u | static_cast<uint32_t>(l.z[r])) * 0x00010001u;  // bf16 128 + z, both halves
      if constexpr (kFold) ss[r] = pack_bf16x2(l.s[r], l.s[r]);
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      // Nibbles e0..e7 of word i (columns i * 8 + 0..7): pairs (e0, e4), (e1, e5), (e2, e6), (e3, e7).
      uint32_t a[2][4];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const uint32_t wd = (&l.w[r].x)[i];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          uint32_t v = bf16x2_sub(((wd >> (4 * j)) & 0x000F000Fu) | 0x43004300u, zz[r]);
          if constexpr (kFold) v = bf16x2_mul(v, ss[r]);
          a[r][j] = v;
        }
      }
#pragma unroll
      for (int tt = 0; tt < kTok; ++tt) {
        const uint32_t x01 = (&xv[tt][i].x)[0], x23 = (&xv[tt][i].x)[1], x45 = (&xv[tt][i].x)[2],
                       x67 = (&xv[tt][i].x)[3];
        const uint32_t x04 = __byte_perm(x01, x45, 0x5410), x15 = __byte_perm(x01, x45, 0x7632);
        const uint32_t x26 = __byte_perm(x23, x67, 0x5410), x37 = __byte_perm(x23, x67, 0x7632);
        mma(sum[tt], a[0][0], a[1][0], a[0][1], a[1][1], x04, x15);
        mma(sum[tt], a[0][2], a[1][2], a[0][3], a[1][3], x26, x37);
      }
    }
  } else if constexpr (kKind == Kind::kInt8) {
    float zf[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) zf[r] = 8388608.0f + static_cast<float>(l.z[r]);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      // Bytes e0..e3 of word i (columns i * 4 + 0..3) -> bf16 pairs (e0, e1), (e2, e3) through f32.
      uint32_t a[2][2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const uint32_t wd = (&l.w[r].x)[i] ^ p.sign_xor;
        float f[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          f[j] = __uint_as_float(__byte_perm(wd, 0x4B000000u, 0x7650 + j)) - zf[r];
          if constexpr (kFold) f[j] *= l.s[r];
        }
        a[r][0] = pack_bf16x2(f[0], f[1]);
        a[r][1] = pack_bf16x2(f[2], f[3]);
      }
#pragma unroll
      for (int tt = 0; tt < kTok; ++tt) {
        const uint32_t x01 = (&xv[tt][i / 2].x)[(i % 2) * 2], x23 = (&xv[tt][i / 2].x)[(i % 2) * 2 + 1];
        mma(sum[tt], a[0][0], a[1][0], a[0][1], a[1][1], x01, x23);
      }
    }
  } else if constexpr (kKind == Kind::kW8A8Int8) {
    // Words 0, 1 and 2, 3 of the lane's 16 bytes as one k32 mma each: A's k slots 4t..4t+3 (a0 / a1: rows g,
    // g + 8) and 16+4t.. (a2 / a3) take the same 8 columns as B's b0 / b1 from x row g (columns free, as above).
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const uint32_t w00 = (&l.w[0].x)[2 * i], w01 = (&l.w[0].x)[2 * i + 1];
      const uint32_t w10 = (&l.w[1].x)[2 * i], w11 = (&l.w[1].x)[2 * i + 1];
#pragma unroll
      for (int tt = 0; tt < kTok; ++tt)
        mma_s8(sum[tt], w00, w10, w01, w11, (&xv[tt][0].x)[2 * i], (&xv[tt][0].x)[2 * i + 1]);
    }
  } else {
    // e4m3 word i (columns i * 4 + 0..3) -> f16 pairs (e0, e1), (e2, e3), weights and x alike.
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t w0 = (&l.w[0].x)[i], w1 = (&l.w[1].x)[i];
      const uint32_t a0 = e4m3x2_to_f16x2(w0, false), a1 = e4m3x2_to_f16x2(w1, false),
                     a2 = e4m3x2_to_f16x2(w0, true), a3 = e4m3x2_to_f16x2(w1, true);
#pragma unroll
      for (int tt = 0; tt < kTok; ++tt) {
        const uint32_t xw = (&xv[tt][0].x)[i];
        mma_f16(sum[tt], a0, a1, a2, a3, e4m3x2_to_f16x2(xw, false), e4m3x2_to_f16x2(xw, true));
      }
    }
  }
  if constexpr (!kDirect) {
#pragma unroll
    for (int tt = 0; tt < kTok; ++tt) {
      acc[tt][0] = fmaf(d[tt][0], l.s[0], acc[tt][0]);
      acc[tt][1] = fmaf(d[tt][1], l.s[0], acc[tt][1]);
      acc[tt][2] = fmaf(d[tt][2], l.s[1], acc[tt][2]);
      acc[tt][3] = fmaf(d[tt][3], l.s[1], acc[tt][3]);
    }
  }
}

// The zero-point-folded variant of compute_step (QuantGemvConfig::sum_x; unfolded scales only): the weights
// enter the mma as exact bf16 magic + u with no subtract, and the magic and the zero point come off once per
// step with x's column sums: acc += s * (d - (magic + z) * sum_x). int4: 128 + q (one LOP3 per nibble pair);
// int8: u = 16 h + l split into bf16 128 + l and 2048 + 16 h (both exact), twice the mmas, magic 2176.
// sx: x's sums over this step's columns for tokens 2t, 2t + 1 (the C fragment's columns).
template <Kind kKind>
__device__ __forceinline__ void compute_step_sum_x(const Params& p, const StepLoad& l, const uint4 (&xv)[4],
                                                   float2 sx, float (&acc)[4]) {
  static_assert(kKind != Kind::kFp8, "int weights only");
  float d[4] = {0.f, 0.f, 0.f, 0.f};
  float c[2];
  if constexpr (kKind == Kind::kInt4) {
#pragma unroll
    for (int r = 0; r < 2; ++r) c[r] = 128.0f + static_cast<float>(l.z[r]);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      uint32_t a[2][4];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const uint32_t wd = (&l.w[r].x)[i];
#pragma unroll
        for (int j = 0; j < 4; ++j) a[r][j] = ((wd >> (4 * j)) & 0x000F000Fu) | 0x43004300u;
      }
      const uint32_t x01 = (&xv[i].x)[0], x23 = (&xv[i].x)[1], x45 = (&xv[i].x)[2], x67 = (&xv[i].x)[3];
      const uint32_t x04 = __byte_perm(x01, x45, 0x5410), x15 = __byte_perm(x01, x45, 0x7632);
      const uint32_t x26 = __byte_perm(x23, x67, 0x5410), x37 = __byte_perm(x23, x67, 0x7632);
      mma(d, a[0][0], a[1][0], a[0][1], a[1][1], x04, x15);
      mma(d, a[0][2], a[1][2], a[0][3], a[1][3], x26, x37);
    }
  } else {
#pragma unroll
    for (int r = 0; r < 2; ++r) c[r] = 2176.0f + static_cast<float>(l.z[r]);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      // Bytes u0..u3 of word i: low nibbles (l0, l2), (l1, l3) as 128 + l, high nibbles as 2048 + 16 h.
      uint32_t lo02[2], lo13[2], hi02[2], hi13[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const uint32_t wd = (&l.w[r].x)[i] ^ p.sign_xor;
        lo02[r] = (wd & 0x000F000Fu) | 0x43004300u;
        lo13[r] = ((wd >> 8) & 0x000F000Fu) | 0x43004300u;
        hi02[r] = ((wd >> 4) & 0x000F000Fu) | 0x45004500u;
        hi13[r] = ((wd >> 12) & 0x000F000Fu) | 0x45004500u;
      }
      const uint32_t x01 = (&xv[i / 2].x)[(i % 2) * 2], x23 = (&xv[i / 2].x)[(i % 2) * 2 + 1];
      const uint32_t x02 = __byte_perm(x01, x23, 0x5410), x13 = __byte_perm(x01, x23, 0x7632);
      mma(d, lo02[0], lo02[1], lo13[0], lo13[1], x02, x13);
      mma(d, hi02[0], hi02[1], hi13[0], hi13[1], x02, x13);
    }
  }
  acc[0] = fmaf(fmaf(-c[0], sx.x, d[0]), l.s[0], acc[0]);
  acc[1] = fmaf(fmaf(-c[0], sx.y, d[1]), l.s[0], acc[1]);
  acc[2] = fmaf(fmaf(-c[1], sx.x, d[2]), l.s[1], acc[2]);
  acc[3] = fmaf(fmaf(-c[1], sx.y, d[3]), l.s[1], acc[3]);
}

// The f16 variant of compute_step for int8 with unfolded scales (QuantGemvConfig::f16_x): each byte pair
// becomes f16 1024 + u with one PRMT, one f16x2 subtract of 1024 + z gives u - z exactly, and x is converted
// to f16 once per step (exact for |x| in f16's normal range, 6.1e-5 .. 65504; saturating past it), so the
// mma runs f16 x f16 -> f32 with ~2 instructions per weight pair instead of ~5.
__device__ __forceinline__ uint32_t bf16x2_to_f16x2(uint32_t v) {
  uint32_t d;
  asm("cvt.rn.satfinite.f16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(__uint_as_float(v & 0xffff0000u)), "f"(__uint_as_float(v << 16)));
  return d;
}
__device__ __forceinline__ uint32_t f16x2_sub(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}
// a * b + c on f16 pairs (the CUDA-core GEMV's products, the int4 decode GEMV's nibble scaling).
__device__ __forceinline__ uint32_t hfma2(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}
// xh: x's 16 columns of this step as 8 f16 pairs (bf16x2_to_f16x2 of the loaded words, shared by all rows).
__device__ __forceinline__ void compute_step_int8_f16(const Params& p, const StepLoad& l, const uint32_t (&xh)[8],
                                                      float (&acc)[4]) {
  float d[4] = {0.f, 0.f, 0.f, 0.f};
  uint32_t zz[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) zz[r] = (0x6400u | static_cast<uint32_t>(l.z[r])) * 0x00010001u;  // f16 1024 + z
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    uint32_t a[2][2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const uint32_t wd = (&l.w[r].x)[i] ^ p.sign_xor;
      a[r][0] = f16x2_sub(__byte_perm(wd, 0x64646464u, 0x5140), zz[r]);  // (u0, u1) - z
      a[r][1] = f16x2_sub(__byte_perm(wd, 0x64646464u, 0x5342), zz[r]);  // (u2, u3) - z
    }
    mma_f16(d, a[0][0], a[1][0], a[0][1], a[1][1], xh[2 * i], xh[2 * i + 1]);
  }
  acc[0] = fmaf(d[0], l.s[0], acc[0]);
  acc[1] = fmaf(d[1], l.s[0], acc[1]);
  acc[2] = fmaf(d[2], l.s[1], acc[2]);
  acc[3] = fmaf(d[3], l.s[1], acc[3]);
}

// The epilogue's value of output (row n, token tok) from its f32 dot product v: kFp8's scales, the norm's
// 1 / rms (inv_rms, 1 without it), bias; stored (or added into y, p.add_to_y: the residual's bf16 sum as
// add_rms_norm forms it). Returns the stored bf16 value of the linear's output (the SwiGLU's input).
// kFusion false: no fusion possible (the plain batch kernels: those branches compiled out).
template <Kind kKind, bool kFusion = true>
__device__ __forceinline__ float store_output(const Params& p, int n, int tok, float v, float inv_rms = 1.0f) {
  if constexpr (is_w8a8(kKind)) v *= __ldg(p.scales + (p.per_channel ? n : 0)) * __ldg(p.xs + tok);
  const float b = p.bias ? __bfloat162float(p.bias[n]) : 0.0f;
  v = kFusion && p.norm_weight ? __fmaf_rn(v, inv_rms, b) : __fadd_rn(v, b);
  const size_t i = static_cast<size_t>(tok) * p.ldy + n;
  if (p.y_f32) {
    static_cast<float*>(p.y)[i] = v;
    return v;
  }
  __nv_bfloat16* y = static_cast<__nv_bfloat16*>(p.y);
  const float out = __bfloat162float(__float2bfloat16(v));
  y[i] = __float2bfloat16(kFusion && p.add_to_y ? __bfloat162float(y[i]) + out : out);
  return out;
}

// kNormed: x's 16-byte chunks replaced by bf16(x * norm_weight) (each product rounded to bf16, as gemv.cu's
// normed GEMV does), the squares of the raw x summed into ss (zeros past m and k add nothing).
template <Kind kKind>
__device__ __forceinline__ void normalize_x_step(const Params& p, int step, int t, uint4 (&xv)[4], float& ss) {
  using G = Geometry<kKind>;
  const int col = lane_col<kKind>(step, t);
  const bool in_k = col < p.k;
#pragma unroll
  for (int i = 0; i < G::kXVecs; ++i) {
    const uint4 nw = in_k ? load_x16(p.norm_weight + col + i * 8) : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      uint32_t& h = (&xv[i].x)[j];
      const float lo = __uint_as_float(h << 16), hi = __uint_as_float(h & 0xffff0000u);
      ss = fmaf(lo, lo, ss);
      ss = fmaf(hi, hi, ss);
      const __nv_bfloat162 prod = __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&h),
                                          *reinterpret_cast<const __nv_bfloat162*>(&(&nw.x)[j]));
      h = *reinterpret_cast<const uint32_t*>(&prod);
    }
  }
}

// The end of a tile: each warp's C fragment (acc[0], acc[1] = row g, tokens 2t, 2t + 1; acc[2], acc[3] = row
// g + 8) and (kNormed) its sums of squares of x rows into shared memory, one barrier, then the 8 warps' sums
// per output: 1 / rms, bias, the store; SwiGLU tiles also store silu(gate) * up. rb / ss_red: this tile's
// reduction buffers (a buffer is rewritten only after the next tile's barrier). tok0: the token tile's first
// row of x (8 for the second of two token tiles; never with the norm, whose inv_rms(tok) and ss_red index
// the first tile's tokens: the kernels static_assert it).
template <Kind kKind, bool kNormed, bool kFusion = true>
__device__ __forceinline__ void finish_tile(const Params& p, float (&rb)[kWarps][kTileRows][kTileTokens],
                                            float (&ss_red)[kWarps][kTileTokens], int tile, int warp,
                                            int lane, const float (&acc)[4], float ss, int tok0 = 0) {
  const int g = lane / 4, t = lane % 4;
  rb[warp][g][2 * t] = acc[0];
  rb[warp][g][2 * t + 1] = acc[1];
  rb[warp][g + 8][2 * t] = acc[2];
  rb[warp][g + 8][2 * t + 1] = acc[3];
  if constexpr (kNormed) {
    ss += __shfl_xor_sync(0xffffffffu, ss, 1);
    ss += __shfl_xor_sync(0xffffffffu, ss, 2);
    if (t == 0) ss_red[warp][g] = ss;
  }
  __syncthreads();
  const int tid = static_cast<int>(threadIdx.x);
  auto inv_rms = [&](int tok) {
    if constexpr (!kNormed) return 1.0f;
    float total = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) total += ss_red[w][tok];
    return rsqrtf(total / static_cast<float>(p.k) + p.eps);
  };
  if (kFusion && p.swiglu_out) {
    // 8 gate rows x 8 tokens: the gate's and its up row's outputs, then silu(gate) * up from their bf16 values.
    const int half = p.n / 2;
    if (tid < 8 * kTileTokens) {
      const int r = tid % 8, tok = tid / 8, gate = tile * 8 + r;
      if (tok0 + tok < p.m && gate < half) {
        float gv = 0.f, uv = 0.f;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) {
          gv += rb[w][r][tok];
          uv += rb[w][r + 8][tok];
        }
        const float inv = inv_rms(tok);
        const float go = store_output<kKind, kFusion>(p, gate, tok0 + tok, gv, inv);
        const float uo = store_output<kKind, kFusion>(p, half + gate, tok0 + tok, uv, inv);
        p.swiglu_out[static_cast<size_t>(tok0 + tok) * half + gate] = __float2bfloat16(silu_mul_f32(go, uo));
      }
    }
  } else if (tid < kTileRows * kTileTokens) {
    const int r = tid % kTileRows, tok = tid / kTileRows, n = tile * kTileRows + r;
    if (tok0 + tok < p.m && n < p.n) {
      float v = 0.f;
      if constexpr (kKind == Kind::kW8A8Int8) {  // exact int32 sums of the warps' int32 partial dots
        int32_t iv = 0;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) iv += __float_as_int(rb[w][r][tok]);
        v = static_cast<float>(iv);
      } else {
#pragma unroll
        for (int w = 0; w < kWarps; ++w) v += rb[w][r][tok];
      }
      store_output<kKind, kFusion>(p, n, tok0 + tok, v, inv_rms(tok));
    }
  }
}

// quant_gemv_pipelined.cu: one launch of the pipelined schedule (config.stages > 0) for p.m <= 8 rows (16
// with tokens16).
void launch_pipelined(Kind kind, bool fold, const Params& p, const QuantGemvConfig& config, cudaStream_t stream);

}  // namespace xinfer::cuda::quant_gemv
