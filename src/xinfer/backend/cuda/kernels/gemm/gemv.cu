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

// How the kernel treats x and y (gemv.h, GemvFusion).
enum class Mode {
  kPlain,    // y = x @ w^T + bias
  kAddToY,   // y = bf16(y + bf16(x @ w^T + bias)): the residual add in the epilogue
  kNormedX,  // y = (rms_norm(x) * norm_weight) @ w^T + bias: the RMSNorm folded into the loads and epilogue
};

struct GemvParams {
  const __nv_bfloat16* x;     // [m, k]
  const __nv_bfloat16* w;     // [n, k]
  const __nv_bfloat16* bias;  // [n] or nullptr
  void* y;                    // [m, n]
  __nv_bfloat16* swiglu_out;  // [m, n / 2], kSwiGlu
  int m, n, k;
  int k_split;
  bool pdl;
  const __nv_bfloat16* norm_weight;  // [k], Mode::kNormedX
  float eps;                         // Mode::kNormedX
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
// loads x's U steps at base; x_prep(xv) transforms them (if at all) once the next weights are queued. The
// same FMA order whatever the loads' timing (fma_steps).
template <int M, int R, int S, int U, typename XSteps, typename XPrep>
__device__ __forceinline__ void row_dots(uint4 (&wv)[U][R], const __nv_bfloat16* const (&wrow)[R], int first,
                                         int stride, int k, XSteps x_steps, XPrep x_prep, float (&acc)[M][R][S]) {
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
    x_prep(xv);  // after the next weights are queued: waiting for x here does not hold them back
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

// kSwiGlu: a row group reads R / 2 consecutive pairs of rows, gate row `pair` and its up row n / 2 + pair, so
// one warp computes both halves of a SwiGLU output. The row of w (and column of y) of local row r, whose pair
// is `pair`:
template <int R>
__device__ __forceinline__ int paired_row(int pair, int r, int n) {
  return r < R / 2 ? pair : n / 2 + pair;
}

// The output a thread stores at the end of row block blk: thread t < groups * M * R takes (x row mi,
// local row r of group g), j = mi * R + r indexing the warps' partial sums. valid: a real output (mi < m, and
// row < n, or kSwiGlu: pair < n / 2); only those are loaded (Mode::kAddToY) and stored.
struct OutSlot {
  int g, j, mi, row;
  bool valid;
};
template <int M, int R, bool kSwiGlu>
__device__ __forceinline__ OutSlot out_slot(const GemvParams& p, int blk, int groups) {
  const int t = static_cast<int>(threadIdx.x);  // groups * M * R <= 8 * 8 * 4 = kThreads outputs per CTA
  OutSlot o;
  o.g = t / (M * R);
  o.j = t % (M * R);
  o.mi = o.j / R;
  if constexpr (kSwiGlu) {
    const int r = o.j % R, pair = (blk * groups + o.g) * (R / 2) + r % (R / 2);
    o.row = paired_row<R>(pair, r, p.n);
    o.valid = t < groups * M * R && o.mi < p.m && pair < p.n / 2;
  } else {
    o.row = blk * groups * R + o.g * R + o.j % R;
    o.valid = t < groups * M * R && o.mi < p.m && o.row < p.n;
  }
  return o;
}

// x's 8 elements h (one 16-byte chunk) times the norm weight's g, each product rounded to bf16 (bf16 x bf16 is
// exact in f32, so the packed multiply equals bf16(f32 product)); with `sum`, ss += the squares of h
// (Mode::kNormedX: the RMS of x, summed on the way).
__device__ __forceinline__ uint4 weighted_chunk(const uint4& h, const uint4& g, float& ss, bool sum) {
  uint32_t out[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t hw = word(h, i), gw = word(g, i);
    if (sum) {
      const float lo = bf16_lo(hw), hi = bf16_hi(hw);
      ss = fmaf(lo, lo, ss);
      ss = fmaf(hi, hi, ss);
    }
    const __nv_bfloat162 p =
        __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&hw), *reinterpret_cast<const __nv_bfloat162*>(&gw));
    out[i] = *reinterpret_cast<const uint32_t*>(&p);
  }
  return make_uint4(out[0], out[1], out[2], out[3]);
}

// CTAs per SM the kernel is compiled for (launch bounds: registers per thread <= 65536 / (256 * this)). Three
// for 1-2 rows of x (<= 80 registers, no spills in the plain and add_to_y kernels): the next kernel's CTAs
// then find a free slot while this one's last CTAs finish, so a GEMV after a GEMV loads its first weights
// early too (H200, Llama-3.1-8B batch 1: ITL 85.3 / 85.6% MBU against 84.9 / 84.8% with two; docs/PERF.md).
// Two for 4-8 rows, where 80 registers would spill.
constexpr int ctas_per_sm(int m) { return m <= 2 ? 3 : 2; }

// M: rows of x the kernel is built for (p.m <= M); R: rows of w per warp; OutT: float or __nv_bfloat16
// (bf16 only for the fused modes); kSwiGlu (with kNormedX, even R): rows paired for the SwiGLU epilogue.
template <int M, int R, typename OutT, Mode kMode, bool kSwiGlu>
__global__ void __launch_bounds__(kThreads, ctas_per_sm(M)) gemv_kernel(GemvParams p) {
  static_assert(kMode == Mode::kPlain || std::is_same_v<OutT, __nv_bfloat16>, "fused modes write bf16");
  static_assert(!kSwiGlu || (kMode == Mode::kNormedX && R % 2 == 0), "SwiGLU: normed x, rows in pairs");
  // Steps in flight per lane: enough 16-byte weight loads to cover DRAM latency, bounded so the raw
  // loads (U * (R + M) uint4) stay within ~64 registers.
  constexpr int U = std::max(1, std::min(8 / R, 16 / (R + M)));
  constexpr int S = M * R >= 4 ? 1 : 2;  // independent FMA chains per output when there are few outputs

  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int groups = kWarps / p.k_split;
  const int group = warp / p.k_split, part = warp % p.k_split;
  const int blk = static_cast<int>(blockIdx.x), rows_per_cta = groups * R;
  // This lane's weight rows; kSwiGlu: R / 2 gate rows, then their up rows (past n / 2: the last pair).
  const __nv_bfloat16* wrow[R];
  if constexpr (kSwiGlu) {
#pragma unroll
    for (int r = 0; r < R / 2; ++r) {
      wrow[r] = p.w + static_cast<size_t>(min((blk * groups + group) * (R / 2) + r, p.n / 2 - 1)) * p.k;
      wrow[r + R / 2] = wrow[r] + static_cast<size_t>(p.n / 2) * p.k;
    }
  } else {
#pragma unroll
    for (int r = 0; r < R; ++r)
      wrow[r] = p.w + static_cast<size_t>(min(blk * rows_per_cta + group * R + r, p.n - 1)) * p.k;
  }
  const int stride = p.k_split * kWarpStep;
  const int first = (part * 32 + lane) * kVec;
  // The output slot (below), computed here or after the main loop: whichever keeps that loop free of register
  // spills at 3 CTAs per SM (checked with cuobjdump --dump-resource-usage).
  const OutSlot early_slot = kSwiGlu ? OutSlot{} : out_slot<M, R, kSwiGlu>(p, blk, groups);

  // Weights never depend on earlier kernels: while the previous kernel finishes (PDL), this lane's first
  // weights are already on their way into registers. Everything else waits for it (pdl.cuh; a no-op
  // without PDL). (Prefetching into L2 instead measured slower on the H200: docs/PERF.md.)
  uint4 wv[U][R];
  load_weight_steps<U, R>(wv, wrow, first, stride, p.k);
  pdl_wait();

  OutT* const y = static_cast<OutT*>(p.y);
  float y_old = 0.0f;  // kAddToY: the value this thread's output adds to, fetched during the main loop
  if constexpr (kMode == Mode::kAddToY)
    if (early_slot.valid)
      y_old = __bfloat162float(y[static_cast<size_t>(early_slot.mi) * p.n + early_slot.row]);

  // kNormedX: each row group sums the squares of x over every groups-th step of the loop (step s: group
  // s % groups), so the groups between them cover every k once.
  float ss[M];
#pragma unroll
  for (int mi = 0; mi < M; ++mi) ss[mi] = 0.0f;
  uint4 gv[U];  // kNormedX: the norm weight's chunks of the current steps
  int step0 = 0;
  float acc[M][R][S];
  row_dots<M, R, S, U>(
      wv, wrow, first, stride, p.k,
      [&](uint4(&xv)[U][M], int base) {
        step0 = (base - first) / stride;
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int kk = base + u * stride;
          const bool in_k = kk < p.k;
          if constexpr (kMode == Mode::kNormedX)
            gv[u] = in_k ? __ldg(reinterpret_cast<const uint4*>(p.norm_weight + kk)) : make_uint4(0, 0, 0, 0);
#pragma unroll
          for (int mi = 0; mi < M; ++mi)
            xv[u][mi] = in_k && mi < p.m
                            ? __ldg(reinterpret_cast<const uint4*>(p.x + static_cast<size_t>(mi) * p.k + kk))
                            : make_uint4(0, 0, 0, 0);
        }
      },
      [&](uint4(&xv)[U][M]) {
        if constexpr (kMode == Mode::kNormedX) {
#pragma unroll
          for (int u = 0; u < U; ++u) {
            const bool sum = (step0 + u) % groups == group;
#pragma unroll
            for (int mi = 0; mi < M; ++mi) xv[u][mi] = weighted_chunk(xv[u][mi], gv[u], ss[mi], sum);
          }
        }
      },
      acc);

  // All weights are read: the next kernel may start launching (it still waits for this one's results).
  pdl_release();

  // Warp sums, then the k_split warps of each group meet in shared memory (and, kNormedX, all warps' sums
  // of squares: each x row's RMS, the same in every CTA).
  __shared__ float partial[kWarps][M * R];
  __shared__ float sum_sq[kWarps][M];
  warp_partials<M, R, S>(acc, partial[warp], lane);
  if constexpr (kMode == Mode::kNormedX) {
#pragma unroll
    for (int mi = 0; mi < M; ++mi) {
      const float v = warp_sum(ss[mi]);
      if (lane == 0) sum_sq[warp][mi] = v;
    }
  }
  __syncthreads();
  const OutSlot slot = kSwiGlu ? out_slot<M, R, kSwiGlu>(p, blk, groups) : early_slot;
  if (!slot.valid) return;
  float inv_rms = 1.0f;  // kNormedX: 1 / RMS of the x row
  if constexpr (kMode == Mode::kNormedX) {
    float total = 0.0f;
    for (int w = 0; w < kWarps; ++w) total += sum_sq[w][slot.mi];
    inv_rms = rsqrtf(total / static_cast<float>(p.k) + p.eps);
  }
  // Output j (partial sums) of w's row `row`: the k_split warps' sum, scaled (kNormedX), plus the bias, with
  // explicit roundings (nothing left for the compiler to contract differently at the two call sites: the
  // SwiGLU epilogue recomputes the up output its own thread stores, and must get the same bits).
  auto output = [&](int j, int row) {
    float v = 0.0f;
    for (int s = 0; s < p.k_split; ++s) v += partial[slot.g * p.k_split + s][j];
    const float b = p.bias ? __bfloat162float(p.bias[row]) : 0.0f;
    if constexpr (kMode == Mode::kNormedX) return p.bias ? __fmaf_rn(v, inv_rms, b) : __fmul_rn(v, inv_rms);
    return p.bias ? __fadd_rn(v, b) : v;
  };
  float v = output(slot.j, slot.row);
  // kAddToY: linear's bf16 output, then add_rms_norm's bf16 residual sum.
  if constexpr (kMode == Mode::kAddToY) v = y_old + __bfloat162float(__float2bfloat16(v));
  store(y, static_cast<size_t>(slot.mi) * p.n + slot.row, v);
  if constexpr (kSwiGlu) {
    // The gate's thread also forms its up partner's output and stores silu(gate) * up from the two bf16
    // outputs, as silu_mul does. A gate row's index is its pair's.
    if (slot.j % R < R / 2) {
      const float up = output(slot.j + R / 2, p.n / 2 + slot.row);
      const float act =
          silu_mul_f32(__bfloat162float(__float2bfloat16(v)), __bfloat162float(__float2bfloat16(up)));
      p.swiglu_out[static_cast<size_t>(slot.mi) * (p.n / 2) + slot.row] = __float2bfloat16(act);
    }
  }
}

template <int M, int R, typename OutT, Mode kMode, bool kSwiGlu>
void launch_typed(const GemvParams& p, cudaStream_t stream) {
  // Outputs (kSwiGlu: gate / up pairs) per CTA, and how many there are.
  const int per_cta = kWarps / p.k_split * (kSwiGlu ? R / 2 : R), outputs = kSwiGlu ? p.n / 2 : p.n;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>((outputs + per_cta - 1) / per_cta));
  cfg.blockDim = dim3(kThreads);
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = p.pdl ? 1 : 0;
  XI_CUDA_CHECK(cudaLaunchKernelEx(&cfg, gemv_kernel<M, R, OutT, kMode, kSwiGlu>, p));
}

template <int M, typename OutT, Mode kMode, bool kSwiGlu>
void dispatch_rows(const GemvParams& p, int rows_per_warp, cudaStream_t stream) {
  switch (rows_per_warp) {
    case 1:
      if constexpr (!kSwiGlu) return launch_typed<M, 1, OutT, kMode, false>(p, stream);
      break;
    case 2:
      return launch_typed<M, 2, OutT, kMode, kSwiGlu>(p, stream);
    case 4:
      return launch_typed<M, 4, OutT, kMode, kSwiGlu>(p, stream);
  }
  XI_CHECK(false) << "gemv: unsupported rows_per_warp " << rows_per_warp
                  << (kSwiGlu ? " (SwiGLU needs 2 or 4)" : "");
}

template <typename OutT, Mode kMode, bool kSwiGlu = false>
void dispatch_m(const GemvParams& p, int rows_per_warp, cudaStream_t stream) {
  if (p.m == 1) return dispatch_rows<1, OutT, kMode, kSwiGlu>(p, rows_per_warp, stream);
  if (p.m == 2) return dispatch_rows<2, OutT, kMode, kSwiGlu>(p, rows_per_warp, stream);
  if (p.m <= 4) return dispatch_rows<4, OutT, kMode, kSwiGlu>(p, rows_per_warp, stream);
  return dispatch_rows<8, OutT, kMode, kSwiGlu>(p, rows_per_warp, stream);
}

bool valid_config(const GemvConfig& c) {
  return (c.rows_per_warp == 1 || c.rows_per_warp == 2 || c.rows_per_warp == 4) &&
         (c.k_split == 1 || c.k_split == 2 || c.k_split == 4 || c.k_split == 8);
}

}  // namespace

std::string to_string(const GemvConfig& c) {
  return "gemv r" + std::to_string(c.rows_per_warp) + " ks" + std::to_string(c.k_split) + (c.pdl ? " pdl" : "");
}

bool gemv_supports(const GemmArgs& a, const GemvFusion& f) {
  auto aligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
  if (a.m < 1 || a.n < 1 || a.k < 8 || a.k % kVec != 0 || !aligned(a.x) || !aligned(a.w)) return false;
  if (f.add_to_y && f.norm_weight) return false;  // one fusion per launch
  if ((f.add_to_y || f.norm_weight) && a.y_f32) return false;
  // SwiGLU: paired rows of a normed GEMV.
  if (f.swiglu_out && (f.norm_weight == nullptr || a.n % 2 != 0)) return false;
  return f.norm_weight == nullptr || aligned(f.norm_weight);
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

void launch_gemv(const GemmArgs& a, const GemvConfig& c, cudaStream_t stream, const GemvFusion& f) {
  XI_CHECK(gemv_supports(a, f))
      << "gemv: unsupported m=" << a.m << " n=" << a.n << " k=" << a.k << (f.add_to_y ? " +add_to_y" : "")
      << (f.norm_weight ? " +rms_norm" : "") << (f.swiglu_out ? " +swiglu" : "")
      << " (needs m >= 1, k >= 8, k % 8 == 0, 16-byte aligned x, w and norm weight; "
         "fusions: one at a time, bf16 y; SwiGLU: with rms_norm, even n)";
  XI_CHECK(valid_config(c)) << "gemv: unsupported config " << to_string(c);
  XI_CHECK(!f.swiglu_out || c.rows_per_warp % 2 == 0)
      << "gemv: the SwiGLU epilogue needs rows in pairs, not " << to_string(c);
  constexpr int kMaxRows = 8;  // rows of x per launch (the largest m bucket)
  const size_t y_elem = a.y_f32 ? sizeof(float) : sizeof(__nv_bfloat16);
  for (int row = 0; row < a.m; row += kMaxRows) {
    const GemvParams p{a.x + static_cast<size_t>(row) * a.k,
                       a.w,
                       a.bias,
                       static_cast<char*>(a.y) + static_cast<size_t>(row) * a.n * y_elem,
                       f.swiglu_out ? f.swiglu_out + static_cast<size_t>(row) * (a.n / 2) : nullptr,
                       std::min(kMaxRows, a.m - row),
                       a.n,
                       a.k,
                       c.k_split,
                       c.pdl,
                       f.norm_weight,
                       f.eps};
    if (a.y_f32)
      dispatch_m<float, Mode::kPlain>(p, c.rows_per_warp, stream);
    else if (f.add_to_y)
      dispatch_m<__nv_bfloat16, Mode::kAddToY>(p, c.rows_per_warp, stream);
    else if (f.swiglu_out)
      dispatch_m<__nv_bfloat16, Mode::kNormedX, true>(p, c.rows_per_warp, stream);
    else if (f.norm_weight)
      dispatch_m<__nv_bfloat16, Mode::kNormedX>(p, c.rows_per_warp, stream);
    else
      dispatch_m<__nv_bfloat16, Mode::kPlain>(p, c.rows_per_warp, stream);
  }
}

}  // namespace xinfer::cuda
