#include "xinfer/backend/cuda/kernels/gemm/gemv.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "xinfer/backend/cuda/cuda_check.h"
#include "xinfer/backend/cuda/kernels/elementwise/silu.cuh"
#include "xinfer/backend/cuda/kernels/pdl.cuh"

namespace xinfer::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kVec = 8;                 // bf16 per 16-byte load
constexpr int kWarpStep = 32 * kVec;    // elements of k one warp covers per step

struct GemvParams {
  const __nv_bfloat16* x;     // [m, k] (not read by the fused kernel)
  const __nv_bfloat16* w;     // [n, k]
  const __nv_bfloat16* bias;  // [n] or nullptr
  void* y;                    // [m, n]
  int m, n, k;
  int k_split;
  bool pdl;
  // Fused kernel only (FusedGemvArgs).
  __nv_bfloat16* residual = nullptr;
  const __nv_bfloat16* delta = nullptr;
  const __nv_bfloat16* norm_weight = nullptr;
  float eps = 0;
  __nv_bfloat16* normed_out = nullptr;
  unsigned* counter = nullptr;
  __nv_bfloat16* act = nullptr;
  int num_sms = 0;  // host side: sizes the fused kernel's persistent grid
};

// Weights are read exactly once: keep them out of L1 (x stays there) and fetch 256-byte L2 lines.
__device__ __forceinline__ uint4 load_weights(const __nv_bfloat16* p) {
  uint4 v;
  // volatile: kept where it is written (before pdl_wait() for a lane's first steps), never sunk below it.
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// The two bf16 of a 32-bit word as f32: the element at the lower address is the low half.
__device__ __forceinline__ float bf16_lo(uint32_t v) { return __uint_as_float(v << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t v) { return __uint_as_float(v & 0xffff0000u); }

__device__ __forceinline__ uint32_t word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// acc[mi][r][.] += the dot products of U loaded 8-element chunks: weights wv[u][r] with inputs xv[u][mi]. The
// low and high bf16 of each 32-bit word feed chains 0 and S - 1 (two chains when outputs are few). Shared by
// the plain and the fused kernel, so both sum in the same order (the fused one is bit-identical).
template <int M, int R, int S, int U>
__device__ __forceinline__ void fma_steps(const uint4 (&wv)[U][R], const uint4 (&xv)[U][M], float (&acc)[M][R][S]) {
#pragma unroll
  for (int u = 0; u < U; ++u) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float wlo[R], whi[R], xlo[M], xhi[M];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const uint32_t v = word(wv[u][r], i);
        wlo[r] = bf16_lo(v);
        whi[r] = bf16_hi(v);
      }
#pragma unroll
      for (int mi = 0; mi < M; ++mi) {
        const uint32_t v = word(xv[u][mi], i);
        xlo[mi] = bf16_lo(v);
        xhi[mi] = bf16_hi(v);
      }
#pragma unroll
      for (int mi = 0; mi < M; ++mi)
#pragma unroll
        for (int r = 0; r < R; ++r) {
          acc[mi][r][0] = fmaf(wlo[r], xlo[mi], acc[mi][r][0]);
          acc[mi][r][S - 1] = fmaf(whi[r], xhi[mi], acc[mi][r][S - 1]);
        }
    }
  }
}

// This lane's U steps of its R weight rows from element `base` on (zeros past k: no load).
template <int U, int R>
__device__ __forceinline__ void load_weight_steps(uint4 (&wv)[U][R], const __nv_bfloat16* const (&wrow)[R],
                                                  int base, int stride, int k) {
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int kk = base + u * stride;
    const bool in_k = kk < k;  // k % 8 == 0: the whole 8-element chunk is in range
#pragma unroll
    for (int r = 0; r < R; ++r) wv[u][r] = in_k ? load_weights(wrow[r] + kk) : make_uint4(0, 0, 0, 0);
  }
}

// acc = this lane's share of the R rows' dot products with x. On entry wv holds the weights of the
// lane's first U steps (loaded early, e.g. before pdl_wait); each iteration queues the next U steps'
// weights before it multiplies the current ones, so two sets of loads overlap the FMAs. x_steps(xv, base)
// fills x's U steps at base. The same FMA order whatever the loads' timing (fma_steps).
template <int M, int R, int S, int U, typename XSteps>
__device__ __forceinline__ void row_dots(uint4 (&wv)[U][R], const __nv_bfloat16* const (&wrow)[R], int first,
                                         int stride, int k, XSteps x_steps, float (&acc)[M][R][S]) {
#pragma unroll
  for (int mi = 0; mi < M; ++mi)
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int s = 0; s < S; ++s) acc[mi][r][s] = 0.0f;
  for (int base = first; base < k; base += U * stride) {
    uint4 xv[U][M], next[U][R];
    x_steps(xv, base);
    load_weight_steps<U, R>(next, wrow, base + U * stride, stride, k);
    fma_steps<M, R, S, U>(wv, xv, acc);
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int r = 0; r < R; ++r) wv[u][r] = next[u][r];
  }
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Each output's two FMA chains (S == 2) added, summed over the warp's lanes; lane 0 writes the warp's
// partial sums, [mi * R + r], to its row of shared memory.
template <int M, int R, int S>
__device__ __forceinline__ void warp_partials(const float (&acc)[M][R][S], float* warp_row, int lane) {
#pragma unroll
  for (int mi = 0; mi < M; ++mi)
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float v = acc[mi][r][0];
      if constexpr (S == 2) v += acc[mi][r][1];
      v = warp_sum(v);
      if (lane == 0) warp_row[mi * R + r] = v;
    }
}

__device__ __forceinline__ void store(float* y, size_t i, float v) { y[i] = v; }
__device__ __forceinline__ void store(__nv_bfloat16* y, size_t i, float v) { y[i] = __float2bfloat16(v); }

// The row of w (and y) that local row q (0 <= q < rows_per_cta) of row block blk computes, clamped into
// range for loads, and whether it is a real row (only those are stored). kSilu: the block's first half
// are gate rows blk * half + q, the second half the matching up rows n / 2 + blk * half + (q - half).
struct BlockRow {
  int row;
  bool valid;
};
template <bool kSilu>
__device__ __forceinline__ BlockRow block_row(int n, int rows_per_cta, int blk, int q) {
  if constexpr (kSilu) {
    const int half = rows_per_cta / 2, inter = n / 2;
    const int i = blk * half + (q < half ? q : q - half);
    const int c = min(i, inter - 1);
    return {q < half ? c : inter + c, i < inter};
  } else {
    const int row = blk * rows_per_cta + q;
    return {min(row, n - 1), row < n};
  }
}

// Row block blk's outputs from the warps' partial sums (partial[warp][mi * R + r]; the k_split warps of a
// group are consecutive): y (+ bias), and with kSilu act[m, n / 2] = bf16(silu(gate) * up) of the rounded
// y values, silu_mul's expression. rounded: kSilu scratch in shared memory, [M][rows_per_cta]. A caller
// that reuses partial or rounded afterwards needs a barrier first.
template <int M, int R, bool kSilu, typename OutT>
__device__ __forceinline__ void store_block(const GemvParams& p, int blk, int groups,
                                            const float (*partial)[M * R], float* rounded) {
  static_assert(!kSilu || std::is_same_v<OutT, __nv_bfloat16>, "the SwiGLU epilogue reads bf16-rounded y");
  const int rows_per_cta = groups * R;
  const int t = static_cast<int>(threadIdx.x);  // groups * M * R <= 8 * 8 * 4 = kThreads outputs per CTA
  if (t < groups * M * R) {
    const int g = t / (M * R), j = t % (M * R), mi = j / R, q = g * R + j % R;
    const BlockRow br = block_row<kSilu>(p.n, rows_per_cta, blk, q);
    if (mi < p.m && br.valid) {
      float v = 0.0f;
      for (int s = 0; s < p.k_split; ++s) v += partial[g * p.k_split + s][j];
      if (p.bias) v += __bfloat162float(p.bias[br.row]);
      store(static_cast<OutT*>(p.y), static_cast<size_t>(mi) * p.n + br.row, v);
      if constexpr (kSilu) rounded[mi * rows_per_cta + q] = __bfloat162float(__float2bfloat16(v));
    }
  }
  if constexpr (kSilu) {
    __syncthreads();
    const int half = rows_per_cta / 2, inter = p.n / 2;
    if (t < M * half) {
      const int mi = t / half, q = t % half, i = blk * half + q;
      if (mi < p.m && i < inter)
        p.act[static_cast<size_t>(mi) * inter + i] = __float2bfloat16(
            silu_mul_f32(rounded[mi * rows_per_cta + q], rounded[mi * rows_per_cta + half + q]));
    }
  }
}

// M: rows of x the kernel is built for (p.m <= M); R: rows of w per warp; OutT: float or __nv_bfloat16.
template <int M, int R, typename OutT>
__global__ void __launch_bounds__(kThreads, 2) gemv_kernel(GemvParams p) {
  // Steps in flight per lane: enough 16-byte weight loads to cover DRAM latency, bounded so the raw
  // loads (U * (R + M) uint4) stay within ~64 registers.
  constexpr int U = std::max(1, std::min(8 / R, 16 / (R + M)));
  constexpr int S = M * R >= 4 ? 1 : 2;  // independent FMA chains per output when there are few outputs

  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int groups = kWarps / p.k_split;
  const int group = warp / p.k_split, part = warp % p.k_split;
  const int blk = static_cast<int>(blockIdx.x), rows_per_cta = groups * R;
  const __nv_bfloat16* wrow[R];
#pragma unroll
  for (int r = 0; r < R; ++r)
    wrow[r] = p.w + static_cast<size_t>(block_row<false>(p.n, rows_per_cta, blk, group * R + r).row) * p.k;
  const int stride = p.k_split * kWarpStep;
  const int first = (part * 32 + lane) * kVec;

  // Weights never depend on earlier kernels: while the previous kernel finishes (PDL), this lane's first
  // weights are already on their way into registers. Everything else waits for it (pdl.cuh; a no-op
  // without PDL). (Prefetching into L2 instead measured slower on the H200: docs/PERF.md.)
  uint4 wv[U][R];
  load_weight_steps<U, R>(wv, wrow, first, stride, p.k);
  pdl_wait();

  float acc[M][R][S];
  row_dots<M, R, S, U>(
      wv, wrow, first, stride, p.k,
      [&](uint4(&xv)[U][M], int base) {
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int kk = base + u * stride;
#pragma unroll
          for (int mi = 0; mi < M; ++mi)
            xv[u][mi] = kk < p.k && mi < p.m
                            ? __ldg(reinterpret_cast<const uint4*>(p.x + static_cast<size_t>(mi) * p.k + kk))
                            : make_uint4(0, 0, 0, 0);
        }
      },
      acc);

  // All weights are read: the next kernel may start launching (it still waits for this one's results).
  pdl_release();

  // Warp sums, then the k_split warps of each group meet in shared memory.
  __shared__ float partial[kWarps][M * R];
  warp_partials<M, R, S>(acc, partial[warp], lane);
  __syncthreads();
  store_block<M, R, false, OutT>(p, blk, groups, partial, nullptr);
}

// Adds delta to residual (bf16 rounding) for this CTA's copy, sums squares exactly as add_rms_norm_kernel
// (rms_norm.cu) does, and leaves x = bf16(residual * inv_rms * norm_weight) in xs[m][k / 8]; CTA 0 also
// writes x to normed_out. Returns (to every thread) whether this CTA took the last ticket and so writes
// the updated residual (norm_epilogue).
template <int M>
__device__ __forceinline__ bool norm_prologue(const GemvParams& p, uint4* xs) {
  const int t = static_cast<int>(threadIdx.x), warp = t / 32, lane = t % 32;
  const int vecs = p.k / kVec;
  float ss[M];
#pragma unroll
  for (int mi = 0; mi < M; ++mi) {
    ss[mi] = 0.0f;
    if (mi >= p.m) continue;
    // Plain loads: the residual is written later in this kernel (by the last CTA, after every CTA's reads).
    const uint4* res = reinterpret_cast<const uint4*>(p.residual + static_cast<size_t>(mi) * p.k);
    const uint4* del = p.delta ? reinterpret_cast<const uint4*>(p.delta + static_cast<size_t>(mi) * p.k) : nullptr;
    // Unrolled for loads in flight; the sum stays in rms_norm.cu's order (float adds are not reordered).
#pragma unroll 4
    for (int i = t; i < vecs; i += kThreads) {
      uint4 r = res[i];
      __nv_bfloat16* rv = reinterpret_cast<__nv_bfloat16*>(&r);
      if (del) {
        uint4 d = del[i];
        const __nv_bfloat16* dv = reinterpret_cast<const __nv_bfloat16*>(&d);
        for (int j = 0; j < kVec; ++j) rv[j] = __float2bfloat16(__bfloat162float(rv[j]) + __bfloat162float(dv[j]));
      }
      for (int j = 0; j < kVec; ++j) {
        const float x = __bfloat162float(rv[j]);
        ss[mi] += x * x;
      }
      xs[mi * vecs + i] = r;
    }
  }
  // block_sum of rms_norm.cu, for M rows at once (same order per row).
  __shared__ float warp_sums[M][kWarps];
  __shared__ float totals[M];
  __shared__ bool last;
#pragma unroll
  for (int mi = 0; mi < M; ++mi) {
    float v = ss[mi];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
    if (lane == 0) warp_sums[mi][warp] = v;
  }
  __syncthreads();
  if (warp == 0) {
#pragma unroll
    for (int mi = 0; mi < M; ++mi) {
      float v = lane < kWarps ? warp_sums[mi][lane] : 0.0f;
      for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
      if (lane == 0) totals[mi] = v;
    }
  }
  if (t == 0) {
    bool l = false;
    if (p.delta) {
      // Every thread of this CTA has used its residual loads (the barrier above); order them before the
      // ticket. The last ticket's holder writes the residual at the end and resets the counter now.
      __threadfence();
      l = atomicAdd(p.counter, 1u) == gridDim.x - 1;
      if (l) *p.counter = 0u;
    }
    last = l;
  }
  __syncthreads();
  const uint4* gw = reinterpret_cast<const uint4*>(p.norm_weight);
#pragma unroll
  for (int mi = 0; mi < M; ++mi) {
    if (mi >= p.m) continue;
    const float inv = rsqrtf(totals[mi] / static_cast<float>(p.k) + p.eps);
    uint4* out = reinterpret_cast<uint4*>(p.normed_out + static_cast<size_t>(mi) * p.k);
#pragma unroll 4
    for (int i = t; i < vecs; i += kThreads) {
      uint4 r = xs[mi * vecs + i], wv = __ldg(gw + i), o;
      const __nv_bfloat16* rv = reinterpret_cast<const __nv_bfloat16*>(&r);
      const __nv_bfloat16* ww = reinterpret_cast<const __nv_bfloat16*>(&wv);
      __nv_bfloat16* ov = reinterpret_cast<__nv_bfloat16*>(&o);
      for (int j = 0; j < kVec; ++j)
        ov[j] = __float2bfloat16(__bfloat162float(rv[j]) * inv * __bfloat162float(ww[j]));
      xs[mi * vecs + i] = o;
      if (blockIdx.x == 0) out[i] = o;
    }
  }
  const bool writes_residual = last;
  __syncthreads();  // xs complete (and `last` read by every thread before anyone could reuse it)
  return writes_residual;
}

// The last ticket's CTA: residual += delta (every other CTA has read the old residual).
__device__ __forceinline__ void norm_epilogue(const GemvParams& p) {
  for (int mi = 0; mi < p.m; ++mi) {
    uint4* res = reinterpret_cast<uint4*>(p.residual + static_cast<size_t>(mi) * p.k);
    const uint4* del = reinterpret_cast<const uint4*>(p.delta + static_cast<size_t>(mi) * p.k);
    for (int i = static_cast<int>(threadIdx.x); i < p.k / kVec; i += kThreads) {
      uint4 r = res[i], d = del[i];
      __nv_bfloat16* rv = reinterpret_cast<__nv_bfloat16*>(&r);
      const __nv_bfloat16* dv = reinterpret_cast<const __nv_bfloat16*>(&d);
      for (int j = 0; j < kVec; ++j) rv[j] = __float2bfloat16(__bfloat162float(rv[j]) + __bfloat162float(dv[j]));
      res[i] = r;
    }
  }
}

// The fused kernel (gemv.h): gemv_kernel's main loop and reduction, x from the RMSNorm prologue in shared
// memory, persistent CTAs looping over row blocks, y bf16; kSilu: the SwiGLU epilogue over paired gate/up
// rows. The per-output arithmetic must stay gemv_kernel's (the tests compare the two bit for bit).
template <int M, int R, bool kSilu>
__global__ void __launch_bounds__(kThreads, 2) fused_gemv_kernel(GemvParams p) {
  using OutT = __nv_bfloat16;
  // Steps in flight per lane: enough 16-byte weight loads to cover DRAM latency, bounded so the raw
  // loads (U * (R + M) uint4) stay within ~64 registers.
  constexpr int U = std::max(1, std::min(8 / R, 16 / (R + M)));
  constexpr int S = M * R >= 4 ? 1 : 2;  // independent FMA chains per output when there are few outputs

  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int groups = kWarps / p.k_split;
  const int group = warp / p.k_split, part = warp % p.k_split;
  const int rows_per_cta = groups * R;
  const int num_blocks =
      kSilu ? (p.n / 2 + rows_per_cta / 2 - 1) / (rows_per_cta / 2) : (p.n + rows_per_cta - 1) / rows_per_cta;
  const int stride = p.k_split * kWarpStep;
  const int first = (part * 32 + lane) * kVec;

  auto rows_of = [&](int blk, const __nv_bfloat16*(&wrow)[R]) {
#pragma unroll
    for (int r = 0; r < R; ++r)
      wrow[r] = p.w + static_cast<size_t>(block_row<kSilu>(p.n, rows_per_cta, blk, group * R + r).row) * p.k;
  };
  // Weights never depend on earlier kernels: while the previous kernel finishes (PDL), and then during the
  // norm prologue, this lane's first weights are on their way into registers. Everything else waits for
  // it (pdl.cuh; a no-op without PDL).
  const __nv_bfloat16* wrow[R];
  rows_of(static_cast<int>(blockIdx.x), wrow);
  uint4 wv[U][R];
  load_weight_steps<U, R>(wv, wrow, first, stride, p.k);
  pdl_wait();

  extern __shared__ uint4 xs[];  // x [m][k / 8]
  const bool writes_residual = norm_prologue<M>(p, xs);

  __shared__ float partial[kWarps][M * R];
  __shared__ float rounded[kSilu ? M * kWarps * 4 : 1];  // kSilu: bf16-rounded y of the block [M][rows_per_cta]
  for (int blk = static_cast<int>(blockIdx.x); blk < num_blocks; blk += static_cast<int>(gridDim.x)) {
    if (blk != static_cast<int>(blockIdx.x)) {
      rows_of(blk, wrow);
      load_weight_steps<U, R>(wv, wrow, first, stride, p.k);
    }
    float acc[M][R][S];
    row_dots<M, R, S, U>(
        wv, wrow, first, stride, p.k,
        [&](uint4(&xv)[U][M], int base) {
#pragma unroll
          for (int u = 0; u < U; ++u) {
            const int kk = base + u * stride;
#pragma unroll
            for (int mi = 0; mi < M; ++mi)
              xv[u][mi] = kk < p.k && mi < p.m ? xs[(mi * p.k + kk) / kVec] : make_uint4(0, 0, 0, 0);
          }
        },
        acc);

    // All weights are read: the next kernel may start launching (it still waits for this one's results).
    if (blk + static_cast<int>(gridDim.x) >= num_blocks) pdl_release();

    // Warp sums, then the k_split warps of each group meet in shared memory.
    warp_partials<M, R, S>(acc, partial[warp], lane);
    __syncthreads();
    store_block<M, R, kSilu, OutT>(p, blk, groups, partial, rounded);
    // partial (and rounded) are reused by the next row block.
    if (blk + static_cast<int>(gridDim.x) < num_blocks) __syncthreads();
  }
  if (writes_residual) norm_epilogue(p);
}

template <int M, int R, typename OutT, bool kNorm, bool kSilu>
void launch_typed(const GemvParams& p, cudaStream_t stream) {
  static_assert(!kNorm || std::is_same_v<OutT, __nv_bfloat16>, "the fused kernel writes bf16");
  static_assert(!kSilu || kNorm, "the SwiGLU epilogue exists only in the fused kernel");
  const auto kernel = [] {
    if constexpr (kNorm)
      return fused_gemv_kernel<M, R, kSilu>;
    else
      return gemv_kernel<M, R, OutT>;
  }();
  const int rows_per_cta = kWarps / p.k_split * R;
  int grid = kSilu ? (p.n / 2 + rows_per_cta / 2 - 1) / (rows_per_cta / 2) : (p.n + rows_per_cta - 1) / rows_per_cta;
  size_t smem = 0;
  if constexpr (kNorm) {
    smem = static_cast<size_t>(p.m) * p.k * sizeof(__nv_bfloat16);
    // The attribute belongs to the current device: set on every launch (not a stream operation, so it is
    // allowed while a graph is being recorded).
    if (smem > 48 * 1024)
      XI_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kFusedGemvMaxSmemBytes));
    // Persistent CTAs: at most one wave, so the prologue runs once per resident CTA.
    int per_sm = 0;
    XI_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem));
    XI_CHECK(per_sm > 0) << "fused gemv: no CTA fits an SM with " << smem << " bytes of shared memory";
    grid = std::min(grid, per_sm * p.num_sms);
  }
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(grid));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = p.pdl ? 1 : 0;
  XI_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, p));
}

template <int M, typename OutT, bool kNorm, bool kSilu>
void dispatch_rows(const GemvParams& p, int rows_per_warp, cudaStream_t stream) {
  switch (rows_per_warp) {
    case 1: return launch_typed<M, 1, OutT, kNorm, kSilu>(p, stream);
    case 2: return launch_typed<M, 2, OutT, kNorm, kSilu>(p, stream);
    case 4: return launch_typed<M, 4, OutT, kNorm, kSilu>(p, stream);
  }
  XI_CHECK(false) << "gemv: unsupported rows_per_warp " << rows_per_warp;
}

template <typename OutT, bool kNorm = false, bool kSilu = false>
void dispatch_m(const GemvParams& p, int rows_per_warp, cudaStream_t stream) {
  if (p.m == 1) return dispatch_rows<1, OutT, kNorm, kSilu>(p, rows_per_warp, stream);
  if (p.m == 2) return dispatch_rows<2, OutT, kNorm, kSilu>(p, rows_per_warp, stream);
  if (p.m <= 4) return dispatch_rows<4, OutT, kNorm, kSilu>(p, rows_per_warp, stream);
  return dispatch_rows<8, OutT, kNorm, kSilu>(p, rows_per_warp, stream);
}

bool valid_config(const GemvConfig& c) {
  return (c.rows_per_warp == 1 || c.rows_per_warp == 2 || c.rows_per_warp == 4) &&
         (c.k_split == 1 || c.k_split == 2 || c.k_split == 4 || c.k_split == 8);
}

}  // namespace

std::string to_string(const GemvConfig& c) {
  return "gemv r" + std::to_string(c.rows_per_warp) + " ks" + std::to_string(c.k_split) + (c.pdl ? " pdl" : "");
}

bool gemv_supports(const GemmArgs& a) {
  return a.m >= 1 && a.n >= 1 && a.k >= 8 && a.k % kVec == 0 && reinterpret_cast<uintptr_t>(a.x) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(a.w) % 16 == 0;
}

std::vector<GemvConfig> gemv_candidates(const GemmArgs& a, bool pdl) {
  std::vector<GemvConfig> out;
  if (!gemv_supports(a)) return out;
  for (int r : {1, 2, 4})
    for (int ks : {1, 2, 4, 8}) {
      if (ks > 1 && ks * kWarpStep > a.k) continue;  // some warps would have no k at all
      out.push_back(GemvConfig{r, ks, pdl});
    }
  return out;
}

GemvConfig gemv_default_config(const GemmArgs& a) {
  int ks = 8;
  while (ks > 1 && ks * kWarpStep > a.k) ks /= 2;
  return GemvConfig{1, ks, false};
}

void launch_gemv(const GemmArgs& a, const GemvConfig& c, cudaStream_t stream) {
  XI_CHECK(gemv_supports(a)) << "gemv: unsupported m=" << a.m << " n=" << a.n << " k=" << a.k
                             << " (needs m >= 1, k >= 8, k % 8 == 0, 16-byte aligned x and w)";
  XI_CHECK(valid_config(c)) << "gemv: unsupported config " << to_string(c);
  constexpr int kMaxRows = 8;  // rows of x per launch (the largest m bucket)
  const size_t y_elem = a.y_f32 ? sizeof(float) : sizeof(__nv_bfloat16);
  for (int row = 0; row < a.m; row += kMaxRows) {
    const GemvParams p{a.x + static_cast<size_t>(row) * a.k, a.w, a.bias,
                       static_cast<char*>(a.y) + static_cast<size_t>(row) * a.n * y_elem,
                       std::min(kMaxRows, a.m - row), a.n, a.k, c.k_split, c.pdl};
    if (a.y_f32)
      dispatch_m<float>(p, c.rows_per_warp, stream);
    else
      dispatch_m<__nv_bfloat16>(p, c.rows_per_warp, stream);
  }
}

bool fused_gemv_supports(const FusedGemvArgs& a, const GemvConfig& c) {
  auto aligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
  const GemmArgs& g = a.gemm;
  if (!valid_config(c) || g.m < 1 || g.m > 8 || g.n < 1 || g.k < 8 || g.k % kVec != 0 || g.y_f32) return false;
  if (static_cast<size_t>(g.m) * g.k * sizeof(__nv_bfloat16) > kFusedGemvMaxSmemBytes) return false;
  if (!g.w || !g.y || !a.residual || !a.norm_weight || !a.normed_out || a.num_sms < 1) return false;
  if (!aligned(g.w) || !aligned(a.residual) || !aligned(a.delta) || !aligned(a.norm_weight) || !aligned(a.normed_out))
    return false;
  if (a.delta && !a.counter) return false;
  if (a.act && (g.n % 2 != 0 || (kWarps / c.k_split * c.rows_per_warp) % 2 != 0)) return false;
  return true;
}

void launch_fused_gemv(const FusedGemvArgs& a, const GemvConfig& c, cudaStream_t stream) {
  const GemmArgs& g = a.gemm;
  XI_CHECK(fused_gemv_supports(a, c)) << "fused gemv: unsupported m=" << g.m << " n=" << g.n << " k=" << g.k << " "
                                      << to_string(c) << (a.act ? " +silu_mul" : "");
  GemvParams p{nullptr, g.w, g.bias, g.y, g.m, g.n, g.k, c.k_split, c.pdl};
  p.residual = a.residual;
  p.delta = a.delta;
  p.norm_weight = a.norm_weight;
  p.eps = a.eps;
  p.normed_out = a.normed_out;
  p.counter = a.counter;
  p.act = a.act;
  p.num_sms = a.num_sms;
  if (a.act)
    dispatch_m<__nv_bfloat16, true, true>(p, c.rows_per_warp, stream);
  else
    dispatch_m<__nv_bfloat16, true, false>(p, c.rows_per_warp, stream);
}

}  // namespace xinfer::cuda
