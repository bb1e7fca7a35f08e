#include "xinfer/backend/cuda/kernels/gemm/gemv.h"

#include <algorithm>
#include <cstdint>

#include "xinfer/backend/cuda/cuda_check.h"
#include "xinfer/backend/cuda/kernels/pdl.cuh"

namespace xinfer::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kVec = 8;                 // bf16 per 16-byte load
constexpr int kWarpStep = 32 * kVec;    // elements of k one warp covers per step

struct GemvParams {
  const __nv_bfloat16* x;     // [m, k]
  const __nv_bfloat16* w;     // [n, k]
  const __nv_bfloat16* bias;  // [n] or nullptr
  void* y;                    // [m, n]
  int m, n, k;
  int k_split;
  bool pdl;
};

// Weights are read exactly once: keep them out of L1 (x stays there) and fetch 256-byte L2 lines.
__device__ __forceinline__ uint4 load_weights(const __nv_bfloat16* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }

// The two bf16 of a 32-bit word as f32: the element at the lower address is the low half.
__device__ __forceinline__ float bf16_lo(uint32_t v) { return __uint_as_float(v << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t v) { return __uint_as_float(v & 0xffff0000u); }

__device__ __forceinline__ uint32_t word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ void store(float* y, size_t i, float v) { y[i] = v; }
__device__ __forceinline__ void store(__nv_bfloat16* y, size_t i, float v) { y[i] = __float2bfloat16(v); }

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
  const int row0 = (static_cast<int>(blockIdx.x) * groups + group) * R;
  const __nv_bfloat16* wrow[R];
#pragma unroll
  for (int r = 0; r < R; ++r) wrow[r] = p.w + static_cast<size_t>(std::min(row0 + r, p.n - 1)) * p.k;
  const int stride = p.k_split * kWarpStep;
  const int first = (part * 32 + lane) * kVec;

  // Weights never depend on earlier kernels: while the previous kernel finishes (PDL), start fetching
  // this lane's first steps into L2. Everything else waits for it (pdl.cuh; a no-op without PDL).
  if (p.pdl) {
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (first + u * stride < p.k)
#pragma unroll
        for (int r = 0; r < R; ++r) prefetch_l2(wrow[r] + first + u * stride);
  }
  pdl_wait();

  float acc[M][R][S];
#pragma unroll
  for (int mi = 0; mi < M; ++mi)
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int s = 0; s < S; ++s) acc[mi][r][s] = 0.0f;

  for (int base = first; base < p.k; base += U * stride) {
    uint4 wv[U][R], xv[U][M];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int kk = base + u * stride;
      const bool in_k = kk < p.k;  // k % 8 == 0: the whole 8-element chunk is in range
#pragma unroll
      for (int r = 0; r < R; ++r) wv[u][r] = in_k ? load_weights(wrow[r] + kk) : make_uint4(0, 0, 0, 0);
#pragma unroll
      for (int mi = 0; mi < M; ++mi)
        xv[u][mi] = in_k && mi < p.m ? __ldg(reinterpret_cast<const uint4*>(p.x + static_cast<size_t>(mi) * p.k + kk))
                                     : make_uint4(0, 0, 0, 0);
    }
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

  // All weights are read: the next kernel may start launching (it still waits for this one's results).
  pdl_release();

  // Warp sums, then the k_split warps of each group meet in shared memory.
  __shared__ float partial[kWarps][M * R];
#pragma unroll
  for (int mi = 0; mi < M; ++mi)
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float v = acc[mi][r][0];
      if constexpr (S == 2) v += acc[mi][r][1];
      v = warp_sum(v);
      if (lane == 0) partial[warp][mi * R + r] = v;
    }
  __syncthreads();
  const int t = static_cast<int>(threadIdx.x);  // groups * M * R <= 8 * 8 * 4 = kThreads outputs per CTA
  if (t < groups * M * R) {
    const int g = t / (M * R), j = t % (M * R), mi = j / R, r = j % R;
    const int row = (static_cast<int>(blockIdx.x) * groups + g) * R + r;
    if (mi < p.m && row < p.n) {
      float v = 0.0f;
      for (int s = 0; s < p.k_split; ++s) v += partial[g * p.k_split + s][j];
      if (p.bias) v += __bfloat162float(p.bias[row]);
      store(static_cast<OutT*>(p.y), static_cast<size_t>(mi) * p.n + row, v);
    }
  }
}

template <int M, int R, typename OutT>
void launch_typed(const GemvParams& p, cudaStream_t stream) {
  const int rows_per_cta = kWarps / p.k_split * R;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>((p.n + rows_per_cta - 1) / rows_per_cta));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = 0;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = p.pdl ? 1 : 0;
  XI_CUDA_CHECK(cudaLaunchKernelEx(&cfg, gemv_kernel<M, R, OutT>, p));
}

template <int M, typename OutT>
void dispatch_rows(const GemvParams& p, int rows_per_warp, cudaStream_t stream) {
  switch (rows_per_warp) {
    case 1: return launch_typed<M, 1, OutT>(p, stream);
    case 2: return launch_typed<M, 2, OutT>(p, stream);
    case 4: return launch_typed<M, 4, OutT>(p, stream);
  }
  XI_CHECK(false) << "gemv: unsupported rows_per_warp " << rows_per_warp;
}

template <typename OutT>
void dispatch_m(const GemvParams& p, int rows_per_warp, cudaStream_t stream) {
  if (p.m == 1) return dispatch_rows<1, OutT>(p, rows_per_warp, stream);
  if (p.m == 2) return dispatch_rows<2, OutT>(p, rows_per_warp, stream);
  if (p.m <= 4) return dispatch_rows<4, OutT>(p, rows_per_warp, stream);
  return dispatch_rows<8, OutT>(p, rows_per_warp, stream);
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

}  // namespace xinfer::cuda
