// The int4 decode GEMV for 1..16 rows of x on tensor cores (int4_decode_gemv.h).
#include "xinfer/backend/cuda/kernels/gemm/int4_decode_gemv.h"

#include <cuda_bf16.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "xinfer/backend/cuda/cuda_check.h"
#include "xinfer/backend/cuda/kernels/device_launch.h"
#include "xinfer/backend/cuda/kernels/gemm/quant_gemv_math.cuh"
#include "xinfer/backend/cuda/kernels/pdl.cuh"

namespace xinfer::cuda {
namespace {

constexpr int kStepCols = 128;  // columns of a warp step: 4 lanes x 32
constexpr int kBatch = 4;       // steps a warp's lanes load at once (16 bytes of two rows each)
constexpr int kMaxK = 65536;    // x in shared memory: 2 k bytes (past 48 KB with the opt-in attribute)

struct Params {
  const __nv_bfloat16* x;     // [k]
  const uint8_t* w;           // [n, k / 2]
  const float* scales;        // [n, G]
  const uint8_t* zeros;       // [n, G] or nullptr (8)
  const float* mins;          // [n, G] or nullptr: W = scale * value + min (kMin)
  const __nv_bfloat16* bias;  // [n] or nullptr
  void* y;                    // [n] bf16 or f32
  bool y_f32;
  int m, n, k, G;   // x [m, k], y [m, n] (rows ldy apart)
  int group_shift;  // column c is in group c >> group_shift (31: one group)
  int ldy;
};

// One step's operands of a lane: 16 bytes of rows g and g + 8, the step's group scales and zero points (raw:
// the f16 constants a zero point makes are formed at use, two integer operations, fewer registers held per
// step).
struct Step {
  uint4 w[2];
  float s[2];
  uint32_t z[2];
  float mn[2];  // kMin only
};

// (a & kMask) | kMagic as one LOP3 (written as C, ptxas splits it in two: one immediate per LOP3).
template <uint32_t kMask, uint32_t kMagic>
__device__ __forceinline__ uint32_t and_or(uint32_t a) {
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(a), "n"(kMask), "n"(kMagic));
  return d;
}
using quant_gemv::f16x2_sub;
using quant_gemv::hfma2;

// The 8 nibbles of word `wd` as f16 pairs q - z, exactly, in the pairing (e0, e4), (e1, e5), (e2, e6), (e3,
// e7): under the exponent 0x6400 the low nibble of each half is 1024 + q, the next one 1024 + 16 q; one SHF,
// four LOP3 and four f16x2 subtracts / FMAs (x 1/16) per word.
__device__ __forceinline__ void nibble_pairs(uint32_t wd, uint32_t z, uint32_t (&a)[4]) {
  constexpr uint32_t kMagic = 0x64006400u, kSixteenth = 0x2C002C00u;
  const uint32_t zlo = (0x6400u + z) * 0x00010001u;         // 1024 + z
  const uint32_t zhi = (0xD400u + (z << 4)) * 0x00010001u;  // -(64 + z)
  const uint32_t w8 = wd >> 8;
  a[0] = f16x2_sub(and_or<0x000F000Fu, kMagic>(wd), zlo);
  a[1] = hfma2(and_or<0x00F000F0u, kMagic>(wd), kSixteenth, zhi);
  a[2] = f16x2_sub(and_or<0x000F000Fu, kMagic>(w8), zlo);
  a[3] = hfma2(and_or<0x00F000F0u, kMagic>(w8), kSixteenth, zhi);
}

// The 8 nibbles of word `wd` as bf16 pairs q - z, exactly, in the same pairing: 128 + q under the exponent
// 0x4300 (one shift per nibble position), minus zz = 128 + z in both halves. The rows of x tokens (kTiles >
// 0) multiply them with bf16 x as it is.
__device__ __forceinline__ void nibble_pairs_bf16(uint32_t wd, uint32_t zz, uint32_t (&a)[4]) {
  constexpr uint32_t kMagic = 0x43004300u;
  a[0] = quant_gemv::bf16x2_sub(and_or<0x000F000Fu, kMagic>(wd), zz);
  a[1] = quant_gemv::bf16x2_sub(and_or<0x000F000Fu, kMagic>(wd >> 4), zz);
  a[2] = quant_gemv::bf16x2_sub(and_or<0x000F000Fu, kMagic>(wd >> 8), zz);
  a[3] = quant_gemv::bf16x2_sub(and_or<0x000F000Fu, kMagic>(wd >> 12), zz);
}

// The same times the bf16 scale ss (kFold: groups of 32 / 64), one bf16 rounding: the weights the mma GEMV
// (quant_gemv.cu) folds for these groups, bit for bit.
__device__ __forceinline__ void nibble_pairs_folded(uint32_t wd, uint32_t zz, uint32_t ss, uint32_t (&a)[4]) {
  nibble_pairs_bf16(wd, zz, a);
#pragma unroll
  for (int j = 0; j < 4; ++j) a[j] = quant_gemv::bf16x2_mul(a[j], ss);
}

// f16 pair (v, v): exact for a GGUF block's f16 scale or min stored as f32.
__device__ __forceinline__ uint32_t f16x2_of(float v) {
  uint32_t d;
  asm("cvt.rn.f16x2.f32 %0, %1, %1;" : "=r"(d) : "f"(v));
  return d;
}

// The 8 nibbles of word `wd` as f16 scale * q + min (kMin: GGUF Q4_1 repacked; groups of 32 / 64), in the
// same pairing: q exactly (nibble_pairs with zero 0), then one f16 FMA with the block's f16 scale and min,
// both exact in f16: one rounding to f16's 11 bits (x goes through f16 too, as at m = 1 for groups of 128).
__device__ __forceinline__ void nibble_pairs_min(uint32_t wd, uint32_t dd, uint32_t mm, uint32_t (&a)[4]) {
  nibble_pairs(wd, 0, a);
#pragma unroll
  for (int j = 0; j < 4; ++j) a[j] = hfma2(a[j], dd, mm);
}

// x's columns c .. c + 7 of one token (16 bytes of bf16) as the B fragments' pairs (x0, x4), (x1, x5), (x2,
// x6), (x3, x7): the pairing of the nibble masks above.
__device__ __forceinline__ uint4 pair_x8(const uint4 a) {
  return make_uint4(__byte_perm(a.x, a.z, 0x5410), __byte_perm(a.x, a.z, 0x7632),
                    __byte_perm(a.y, a.w, 0x5410), __byte_perm(a.y, a.w, 0x7632));
}

// A step's per-row constants for the bf16 forms of the weights: zz = bf16 128 + z in both halves; ss = the
// scale (kFold: bf16; kMin: f16) and mm = the min (kMin: f16).
template <bool kFold, bool kMin>
__device__ __forceinline__ void step_constants(const Step& st, uint32_t (&zz)[2], uint32_t (&ss)[2],
                                               uint32_t (&mm)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    zz[r] = (0x4300u | st.z[r]) * 0x00010001u;
    if constexpr (kMin) {
      ss[r] = f16x2_of(st.s[r]);
      mm[r] = f16x2_of(st.mn[r]);
    } else if constexpr (kFold) {
      ss[r] = quant_gemv::pack_bf16x2(st.s[r], st.s[r]);
    }
  }
}

// Word i of a step's two rows as A fragments: f16 scale * q + min (kMin), bf16 (q - z) * scale (kFold) or
// bf16 q - z.
template <bool kFold, bool kMin>
__device__ __forceinline__ void weight_pairs(const Step& st, int i, const uint32_t (&zz)[2],
                                             const uint32_t (&ss)[2], const uint32_t (&mm)[2],
                                             uint32_t (&a)[2][4]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if constexpr (kMin)
      nibble_pairs_min((&st.w[r].x)[i], ss[r], mm[r], a[r]);
    else if constexpr (kFold)
      nibble_pairs_folded((&st.w[r].x)[i], zz[r], ss[r], a[r]);
    else
      nibble_pairs_bf16((&st.w[r].x)[i], zz[r], a[r]);
  }
}

// d += the word's two m16n8k16 products: its 16 columns (x0, x4) .. (x3, x7) in b, f16 operands (kF16) or
// bf16.
template <bool kF16>
__device__ __forceinline__ void mma_word(float (&d)[4], const uint32_t (&a)[2][4], const uint4 b) {
  if constexpr (kF16) {
    quant_gemv::mma_f16(d, a[0][0], a[1][0], a[0][1], a[1][1], b.x, b.y);
    quant_gemv::mma_f16(d, a[0][2], a[1][2], a[0][3], a[1][3], b.z, b.w);
  } else {
    quant_gemv::mma(d, a[0][0], a[1][0], a[0][1], a[1][1], b.x, b.y);
    quant_gemv::mma(d, a[0][2], a[1][2], a[0][3], a[1][3], b.z, b.w);
  }
}

// A lane's read positions, advanced by whole batches so that the steps of a batch are immediate offsets
// (session 23's first version spent as many integer instructions on addresses as on the nibbles).
struct LaneCursor {
  const uint8_t* w[2];  // rows g, g + 8 at this lane's 16 bytes of its warp's first step of the batch
  int grp[2];           // the rows' index into scales / zeros at that step (row * G + group); kFold: row * G
  int step;             // the batch's first step (of this warp)
  int t;                // the lane's 32-column piece of a step
};

// Step s of the batch (s = c.step + u * kWarps): its weights at byte offset u * kWarps * 64; its group
// (s * 128) >> group_shift, i.e. s itself for groups of 128 (kG128: immediate offsets too). kFold (groups of
// 32 / 64): the group of the lane's own 32 columns, a lane past k taking the last group (its weights are not
// loaded and x is 0 there).
template <int kWarps, bool kZeros, bool kG128, bool kFold, bool kMin>
__device__ __forceinline__ void load_step(const Params& p, const LaneCursor& c, int u, bool live, Step& st) {
  const int gi = kFold   ? min(((c.step + u * kWarps) << 7) + 32 * c.t, p.k - 32) >> p.group_shift
                 : kG128 ? u * kWarps
                         : ((c.step + u * kWarps) << 7 >> p.group_shift) - (c.step << 7 >> p.group_shift);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    st.w[r] = live ? quant_gemv::load_weights(c.w[r] + u * kWarps * 64) : make_uint4(0, 0, 0, 0);
    st.s[r] = __ldg(p.scales + c.grp[r] + gi);
    st.z[r] = kZeros ? static_cast<uint32_t>(__ldg(p.zeros + c.grp[r] + gi)) : kMin ? 0u : 8u;
    if constexpr (kMin) st.mn[r] = __ldg(p.mins + c.grp[r] + gi);
  }
}

// grid: ceil(n / 16) CTAs of kWarps warps. kTiles 0 (m = 1): dynamic shared memory of steps * 256 bytes holds
// x's pairs (f16; kFold: bf16, the mma in bf16 with the scales in the weights and the sums over all steps in
// the mma's f32), every B column x. kTiles 1 / 2 (m 2..8 / 9..16): the B columns are x's tokens, lane (g, t)
// reading its token g of each tile of 8 from global memory as bf16 (L1 serves the CTAs of an SM: they walk x
// in the same order), the weights bf16 (q - z) exactly, no shared memory for x. Occupancy: 24 warps per SM
// (<= 85 registers), 16 with prefetch, zero points, mins or tokens (<= 128: held to 85 registers the
// zero-point kernels spilled 32-40 bytes and ran gate_up at 25.2 us against the symmetric kernel's 19.0).
template <int kWarps, int kU, int kTiles, bool kZeros, bool kG128, bool kPrefetch, bool kFold,
          bool kMin = false>
__global__ void __launch_bounds__(kWarps * 32, (kPrefetch || kZeros || kMin || kTiles > 0 ? 16 : 24) / kWarps)
    int4_decode_gemv_kernel(Params p) {
  constexpr int kTok = kTiles == 0 ? 1 : 8 * kTiles;  // outputs per row a CTA reduces
  extern __shared__ uint4
      xs[];  // kTiles 0: [step][word i][t]: x columns 128 s + 32 t + 8 i .. + 7, re-paired, f16
  __shared__ float red[kWarps][16][kTok];
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const int g = lane / 4, t = lane % 4;
  const int steps = (p.k + kStepCols - 1) / kStepCols;
  LaneCursor c;
  c.step = warp;
  c.t = t;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = min(static_cast<int>(blockIdx.x) * 16 + g + 8 * r, p.n - 1);
    c.w[r] = p.w + static_cast<size_t>(row) * (p.k / 2) + warp * 64 + t * 16;
    c.grp[r] = row * p.G + (kFold ? 0 : (warp << 7) >> p.group_shift);
  }
  // A lane's last step may end past k (k % 128 != 0): its 16 bytes are then not loaded (x reads as 0 there).
  const bool tail = p.k % kStepCols != 0;
  auto load_batch = [&](Step(&st)[kU]) {
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int step = c.step + u * kWarps;
      if (step < steps)
        load_step<kWarps, kZeros, kG128, kFold, kMin>(p, c, u, !tail || step * kStepCols + t * 32 < p.k,
                                                      st[u]);
    }
  };
  auto advance = [&] {
    const int next = c.step + kU * kWarps;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      c.w[r] += kU * kWarps * 64;
      if constexpr (!kFold)
        c.grp[r] += kG128 ? kU * kWarps : (next << 7 >> p.group_shift) - (c.step << 7 >> p.group_shift);
    }
    c.step = next;
  };
  Step st0[kU], st1[kU];
  load_batch(st0);
  pdl_release();
  pdl_wait();
  if constexpr (kTiles == 0) {
    // x -> shared memory: 8 columns per thread and pass, pairs (x0, x4), (x1, x5), (x2, x6), (x3, x7); zeros
    // past k.
    for (int c8 = static_cast<int>(threadIdx.x); c8 < steps * 16; c8 += kWarps * 32) {
      uint4 v = make_uint4(0, 0, 0, 0);
      if (c8 * 8 < p.k) {
        v = pair_x8(__ldg(reinterpret_cast<const uint4*>(p.x) + c8));
        if constexpr (!kFold || kMin) {
          using quant_gemv::bf16x2_to_f16x2;
          v = make_uint4(bf16x2_to_f16x2(v.x), bf16x2_to_f16x2(v.y), bf16x2_to_f16x2(v.z),
                         bf16x2_to_f16x2(v.w));
        }
      }
      const int step = c8 / 16, tt = (c8 / 4) % 4, i = c8 % 4;
      xs[(step * 4 + i) * 4 + tt] = v;
    }
    __syncthreads();
  }
  float acc[2] = {0.f, 0.f};
  float dsum[4] = {0.f, 0.f, 0.f, 0.f};  // kFold: the mma's sums over all steps
  const uint4* xl = xs + warp * 16 + t;  // this warp's batch's first step, word 0, lane column t
  // kTiles > 0: tile j's sums (rows g, g + 8 x tokens 8 j + 2 t, + 1: the C fragment), and the lane's x rows,
  // token 8 j + g (the last token past m: its columns are not stored).
  float tacc[kTiles > 0 ? kTiles : 1][4] = {};
  const uint4* xrow[kTiles > 0 ? kTiles : 1] = {};
  if constexpr (kTiles > 0) {
#pragma unroll
    for (int j = 0; j < kTiles; ++j)
      xrow[j] =
          reinterpret_cast<const uint4*>(p.x + static_cast<size_t>(min(8 * j + g, p.m - 1)) * p.k) + 4 * t;
  }
  // The batch whose first step is `step0` (weights in st) into acc (kFold: dsum; kTiles > 0: tacc).
  auto compute = [&](const Step(&st)[kU], int step0) {
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int step = step0 + u * kWarps;
      if (step >= steps) break;
      if constexpr (kTiles > 0) {
        // x's words for word i of the weights, loaded one word ahead (the nibble work covers L1's latency)
        const bool live = !tail || step * kStepCols + t * 32 < p.k;
        auto load_x = [&](int i, uint4(&xv)[kTiles]) {
#pragma unroll
          for (int j = 0; j < kTiles; ++j)
            xv[j] = live ? __ldg(xrow[j] + step * 16 + i) : make_uint4(0, 0, 0, 0);
        };
        uint4 xv[2][kTiles];
        load_x(0, xv[0]);
        uint32_t zz[2], ss[2], mm[2];
        step_constants<kFold, kMin>(st[u], zz, ss, mm);
        float d[kTiles][4] = {};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          if (i < 3) load_x(i + 1, xv[(i + 1) % 2]);
          uint32_t a[2][4];
          weight_pairs<kFold, kMin>(st[u], i, zz, ss, mm, a);
#pragma unroll
          for (int j = 0; j < kTiles; ++j) {
            uint4 b = pair_x8(xv[i % 2][j]);
            if constexpr (kMin) {  // f16 weights: x to f16 as well
              using quant_gemv::bf16x2_to_f16x2;
              b = make_uint4(bf16x2_to_f16x2(b.x), bf16x2_to_f16x2(b.y), bf16x2_to_f16x2(b.z),
                             bf16x2_to_f16x2(b.w));
            }
            mma_word<kMin>(kFold ? tacc[j] : d[j], a, b);
          }
        }
        if constexpr (!kFold) {
#pragma unroll
          for (int j = 0; j < kTiles; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) tacc[j][e] = fmaf(d[j][e], st[u].s[e / 2], tacc[j][e]);
        }
        continue;
      }
      if constexpr (kFold) {  // kMin: f16 weights and f16 x in shared memory
        uint32_t zz[2], ss[2], mm[2];
        step_constants<kFold, kMin>(st[u], zz, ss, mm);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const uint4 xv = xl[u * kWarps * 16 + i * 4];
          uint32_t a[2][4];
          weight_pairs<kFold, kMin>(st[u], i, zz, ss, mm, a);
          mma_word<kMin>(dsum, a, xv);
        }
        continue;
      }
      float d[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const uint4 xv = xl[u * kWarps * 16 + i * 4];
        uint32_t a[2][4];
#pragma unroll
        for (int r = 0; r < 2; ++r) nibble_pairs((&st[u].w[r].x)[i], st[u].z[r], a[r]);
        mma_word<true>(d, a, xv);
      }
      acc[0] = fmaf(d[0], st[u].s[0], acc[0]);
      acc[1] = fmaf(d[2], st[u].s[1], acc[1]);
    }
  };
  // Batches alternate between st0 and st1; kPrefetch requests the next batch's weights before computing this
  // one (twice the registers), else after it.
  auto run = [&](const Step(&cur)[kU], Step(&nxt)[kU]) {
    const int step0 = c.step;
    const bool more = step0 + kU * kWarps < steps;
    if (kPrefetch && more) {
      advance();
      load_batch(nxt);
    }
    compute(cur, step0);
    if (!kPrefetch && more) {
      advance();
      load_batch(nxt);
    }
    xl += kU * kWarps * 16;
    return more;
  };
  if constexpr (kPrefetch) {
    while (run(st0, st1) && run(st1, st0)) {
    }
  } else {
    while (run(st0, st0)) {
    }
  }
  if constexpr (kTiles > 0) {
#pragma unroll
    for (int j = 0; j < kTiles; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) red[warp][g + 8 * (e / 2)][8 * j + 2 * t + e % 2] = tacc[j][e];
  } else {
    if constexpr (kFold) {
      acc[0] = dsum[0];
      acc[1] = dsum[2];
    }
    if (t == 0) {
      red[warp][g][0] = acc[0];
      red[warp][g + 8][0] = acc[1];
    }
  }
  __syncthreads();
  // Thread i sums row i % 16's output for token i / 16 over the warps; bias; store.
  auto store = [&](int i) {
    const int row = static_cast<int>(blockIdx.x) * 16 + i % 16, tok = i / 16;
    if (row >= p.n || tok >= p.m) return;
    float v = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) v += red[w][i % 16][tok];
    if (p.bias) v += __bfloat162float(p.bias[row]);
    const size_t at = static_cast<size_t>(tok) * p.ldy + row;
    if (p.y_f32)
      static_cast<float*>(p.y)[at] = v;
    else
      static_cast<__nv_bfloat16*>(p.y)[at] = __float2bfloat16(v);
  };
  if constexpr (kTiles == 0) {
    if (threadIdx.x < 16) store(static_cast<int>(threadIdx.x));
  } else {
    for (int i = static_cast<int>(threadIdx.x); i < 16 * kTok; i += kWarps * 32) store(i);
  }
}

int group_shift(const QuantWeight& w) {
  if (w.group_size >= w.k) return 31;
  int shift = 0;
  while ((1 << shift) < w.group_size) ++shift;
  return (1 << shift) == w.group_size ? shift : -1;
}

}  // namespace

// Groups of 32 / 64 below k: the scales go into the bf16 weights (an mma's 16 columns span 4 lanes' groups).
bool folded(const QuantWeight& w) {
  return w.group_size < kStepCols && w.group_size < w.k;
}

bool int4_decode_gemv_supports(const QuantWeight& w) {
  return w.bits == 4 && !w.is_signed && w.g_idx == nullptr && w.n >= 1 && w.k >= 32 && w.k % 32 == 0 &&
         w.k <= kMaxK && (w.group_size >= w.k || w.group_size % kStepCols == 0 || w.group_size % 32 == 0) &&
         group_shift(w) >= 0 && static_cast<int64_t>(w.n) * w.groups() < (int64_t{1} << 31) &&
         reinterpret_cast<uintptr_t>(w.w) % 16 == 0 &&
         (w.mins == nullptr || (folded(w) && w.zeros == nullptr));
}

std::string to_string(const Int4GemvSchedule& s) {
  return std::to_string(s.warps) + " warps" + (s.prefetch ? " prefetch" : "") +
         (s.direct_x ? " direct x" : "");
}

Int4GemvSchedule int4_decode_gemv_default_schedule(const QuantWeight& w, int m) {
  // H200, m = 1, the 8B shapes (docs/PERF.md session 23, us): symmetric weights take 8 warps (16 warps lost
  // everywhere, e.g. gate_up 34.2 vs 19.1), prefetching where a warp has more than one batch (k > 4096 at 8
  // warps: down 12.1 vs 13.1; qkv 7.1 vs 6.3 without). Zero points hold ~92 registers, 16 warps per SM: no
  // prefetch (down 14.3 vs 12.2), and 4-warp CTAs on the many-tile shapes (gate_up 20.3 vs 23.3 at 8; o, qkv,
  // down best at 8).
  Int4GemvSchedule s;
  const int tiles = (w.n + 15) / 16, steps = (w.k + kStepCols - 1) / kStepCols;
  if (m >
      1) {  // x's tokens as the B columns, no prefetch (the x words take its registers). H100, session 35:
    // 8 warps, but 4-warp CTAs on the many-tile shapes at m > 8 (qkv 13.2 vs 15.3 us, gate_up 50.7 vs 52.6; o
    // and down, 256 tiles, 8.4 vs 12.4 and 22.4 vs 37.8 at 8 warps)
    s.warps = m > 8 && tiles >= 384 ? 4 : 8;
    s.prefetch = false;
    s.direct_x = true;
  } else if (w.zeros || w.mins) {  // mins: as zero points (their prefetch kernels spill)
    s.warps = tiles >= 1024 ? 4 : 8;
    s.prefetch = false;
  } else {
    s.warps = 8;
    s.prefetch = steps > kBatch * s.warps;
  }
  return s;
}

void launch_int4_decode_gemv(const QuantLinearArgs& a, cudaStream_t stream, bool pdl,
                             const Int4GemvSchedule& sched) {
  const QuantWeight& w = a.w;
  XI_CHECK(int4_decode_gemv_supports(w)) << "int4 decode GEMV: unsupported weight " << describe(w);
  XI_CHECK(a.m >= 1 && a.m <= kInt4DecodeGemvMaxRows) << "int4 decode GEMV: " << a.m << " rows of x";
  XI_CHECK(reinterpret_cast<uintptr_t>(a.x) % 16 == 0) << "int4 decode GEMV: x must be 16-byte aligned";
  XI_CHECK(sched.warps == 4 || sched.warps == 8) << "int4 decode GEMV: " << to_string(sched);
  XI_CHECK(a.ldy == 0 || a.ldy >= w.n) << "int4 decode GEMV: y row stride " << a.ldy << " < n " << w.n;
  Params p{a.x,     w.w, w.scales, w.zeros, w.mins,     a.bias,         a.y,
           a.y_f32, a.m, w.n,      w.k,     w.groups(), group_shift(w), a.ldy > 0 ? a.ldy : w.n};
  const int tiles = (w.n + 15) / 16;
  const int steps = (w.k + kStepCols - 1) / kStepCols;
  // m = 1: x in shared memory, 128 f16 columns per step; more rows (or direct_x) read x from global memory.
  const bool staged = a.m == 1 && !sched.direct_x;
  const size_t smem = staged ? static_cast<size_t>(steps) * kStepCols * 2 : 0;
  auto launch = [&](auto kernel) {
    if (smem > 40 * 1024) raise_smem_limit(reinterpret_cast<const void*>(kernel), static_cast<int>(smem));
    if (pdl)
      launch_pdl(kernel, dim3(tiles), dim3(sched.warps * 32), smem, stream, p);
    else
      kernel<<<tiles, sched.warps * 32, smem, stream>>>(p);
  };
  auto pick = [&](auto zeros, auto g128, auto prefetch, auto fold, auto min) {
    constexpr bool kZ = decltype(zeros)::value, kG = decltype(g128)::value, kP = decltype(prefetch)::value;
    constexpr bool kF = decltype(fold)::value, kM = decltype(min)::value;
    auto by_tiles = [&](auto warps) {
      constexpr int kW = decltype(warps)::value;
      if (staged)
        launch(int4_decode_gemv_kernel<kW, kBatch, 0, kZ, kG, kP, kF, kM>);
      else if (a.m <= 8)  // no prefetch past m = 1: the x words take its registers
        launch(int4_decode_gemv_kernel<kW, kBatch, 1, kZ, kG, false, kF, kM>);
      else  // two tiles: two steps per batch, or the sums and x words spill
        launch(int4_decode_gemv_kernel<kW, kBatch / 2, 2, kZ, kG, false, kF, kM>);
    };
    if (sched.warps == 8)
      by_tiles(std::integral_constant<int, 8>{});
    else
      by_tiles(std::integral_constant<int, 4>{});
  };
  using T = std::true_type;
  using F = std::false_type;
  auto pick_prefetch = [&](auto zeros, auto g128, auto fold, auto min) {
    sched.prefetch ? pick(zeros, g128, T{}, fold, min) : pick(zeros, g128, F{}, fold, min);
  };
  auto pick_no_min = [&](auto zeros, auto g128, auto fold) { pick_prefetch(zeros, g128, fold, F{}); };
  const bool g128 = w.group_size == kStepCols && w.k > kStepCols;
  if (w.mins)  // supports(): folded, no zero points
    pick_prefetch(F{}, F{}, T{}, T{});
  else if (folded(w))
    w.zeros ? pick_no_min(T{}, F{}, T{}) : pick_no_min(F{}, F{}, T{});
  else if (w.zeros)
    g128 ? pick_no_min(T{}, T{}, F{}) : pick_no_min(T{}, F{}, F{});
  else
    g128 ? pick_no_min(F{}, T{}, F{}) : pick_no_min(F{}, F{}, F{});
  XI_CUDA_CHECK_LAUNCH();
}

}  // namespace xinfer::cuda
