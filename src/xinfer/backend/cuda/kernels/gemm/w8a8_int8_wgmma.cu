// The W8A8-INT8 GEMM on warpgroup MMAs with its scales fused (w8a8_int8_wgmma.h).
#include "xinfer/backend/cuda/kernels/gemm/w8a8_int8_wgmma.h"

#include <cuda_bf16.h>

#include <cstdint>

#include "xinfer/backend/cuda/cuda_check.h"
#include "xinfer/backend/cuda/kernels/cp_async.cuh"
#include "xinfer/backend/cuda/kernels/gemm/int8_scale.cuh"
#include "xinfer/backend/cuda/kernels/wgmma.cuh"

namespace xinfer::cuda {
namespace {

constexpr int kThreads = 256;  // two warpgroups
constexpr int kBM = 128;       // y rows per CTA (64 per warpgroup)
constexpr int kBK = 128;       // k bytes per step: one 128-byte swizzle row

#define XI_S32X8(d, i)                                                                                           \
  "+r"(d[i]), "+r"(d[i + 1]), "+r"(d[i + 2]), "+r"(d[i + 3]), "+r"(d[i + 4]), "+r"(d[i + 5]), "+r"(d[i + 6]), \
      "+r"(d[i + 7])

// d[64 x 128] += A[64 x 32] . B[128 x 32]^T, s8 in (both K-major in shared memory), s32 accumulate.
__device__ __forceinline__ void wgmma_s8(uint32_t (&d)[64], uint64_t a, uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "%64, %65, p;\n}\n"
      : XI_S32X8(d, 0), XI_S32X8(d, 8), XI_S32X8(d, 16), XI_S32X8(d, 24), XI_S32X8(d, 32), XI_S32X8(d, 40),
        XI_S32X8(d, 48), XI_S32X8(d, 56)
      : "l"(a), "l"(b), "r"(1)
      : "memory");
}
// d[64 x 256] += A[64 x 32] . B[256 x 32]^T.
__device__ __forceinline__ void wgmma_s8(uint32_t (&d)[128], uint64_t a, uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k32.s32.s8.s8 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
      "%128, %129, p;\n}\n"
      : XI_S32X8(d, 0), XI_S32X8(d, 8), XI_S32X8(d, 16), XI_S32X8(d, 24), XI_S32X8(d, 32), XI_S32X8(d, 40),
        XI_S32X8(d, 48), XI_S32X8(d, 56), XI_S32X8(d, 64), XI_S32X8(d, 72), XI_S32X8(d, 80), XI_S32X8(d, 88),
        XI_S32X8(d, 96), XI_S32X8(d, 104), XI_S32X8(d, 112), XI_S32X8(d, 120)
      : "l"(a), "l"(b), "r"(1)
      : "memory");
}
#undef XI_S32X8

template <int kBN, int kStages>
constexpr int smem_bytes() {
  return kStages * (kBM + kBN) * kBK + 1024;  // + alignment of the ring to the 1024-byte swizzle atom
}

// Grid (ceil(m / kBM), ceil(n / kBN)), kThreads threads, smem_bytes() of dynamic shared memory.
template <int kBN, int kStages>
__global__ void __launch_bounds__(kThreads, kBN == 128 && kStages == 3 ? 2 : 1)
    w8a8_int8_wgmma_kernel(Int8GemmArgs a) {
  static_assert(kStages >= 3, "loads run stages - 2 steps ahead of a wgmma group left in flight");
  constexpr int kABytes = kBM * kBK, kStageBytes = (kBM + kBN) * kBK;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t ring = (smem_u32(smem_raw) + 1023u) & ~1023u;
  const int tid = static_cast<int>(threadIdx.x), wg = tid / 128, warp = (tid % 128) / 32, lane = tid % 32;
  const int m0 = static_cast<int>(blockIdx.x) * kBM, n0 = static_cast<int>(blockIdx.y) * kBN;
  const int steps = (a.k + kBK - 1) / kBK;

  // Step s into buffer b: row r's 16-byte chunk c at r * 128 + ((c ^ (r % 8)) * 16); rows past m / n and chunks
  // past k (k % 16 == 0: a chunk is all in or all out) are zeros.
  auto load_step = [&](int s, int b) {
    const uint32_t sa = ring + static_cast<uint32_t>(b * kStageBytes), sb = sa + kABytes;
    const int k0 = s * kBK;
#pragma unroll
    for (int i = 0; i < kBM * 8 / kThreads; ++i) {
      const int idx = tid + i * kThreads, r = idx / 8, c = idx % 8;
      const bool ok = m0 + r < a.m && k0 + 16 * c < a.k;
      const int8_t* src = ok ? a.xq + static_cast<size_t>(m0 + r) * a.k + k0 + 16 * c : a.xq;
      cp_async_16(sa + static_cast<uint32_t>(r * 128 + ((c ^ (r & 7)) << 4)), src, ok);
    }
#pragma unroll
    for (int i = 0; i < kBN * 8 / kThreads; ++i) {
      const int idx = tid + i * kThreads, r = idx / 8, c = idx % 8;
      const bool ok = n0 + r < a.n && k0 + 16 * c < a.k;
      const int8_t* src = ok ? a.wq + static_cast<size_t>(n0 + r) * a.k + k0 + 16 * c : a.wq;
      cp_async_16_stream(sb + static_cast<uint32_t>(r * 128 + ((c ^ (r & 7)) << 4)), src, ok);
    }
  };

  uint32_t acc[kBN / 2];
#pragma unroll
  for (int i = 0; i < kBN / 2; ++i) acc[i] = 0;

#pragma unroll
  for (int s = 0; s < kStages - 2; ++s) {
    if (s < steps) load_step(s, s);
    cp_async_commit();
  }
  for (int s = 0; s < steps; ++s) {
    cp_async_wait<kStages - 3>();  // this thread's copies of step s landed
    fence_proxy_async();           // ... and are visible to the async proxy wgmma reads through
    __syncthreads();               // everyone's; and every wgmma group of step s - 2 has completed (waited below)
    const int next = s + kStages - 2;  // its buffer, (s - 2) % kStages, is free now
    if (next < steps) load_step(next, next % kStages);
    cp_async_commit();
    const uint32_t sa = ring + static_cast<uint32_t>((s % kStages) * kStageBytes + wg * 64 * 128);
    const uint32_t sb = ring + static_cast<uint32_t>((s % kStages) * kStageBytes + kABytes);
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kBK / 32; ++ks)  // 32 bytes of k per wgmma: the descriptors' start moves along the row
      wgmma_s8(acc, make_desc(sa + 32 * ks, 16, 1024), make_desc(sb + 32 * ks, 16, 1024));
    wgmma_commit();
    wgmma_wait<1>();  // step s - 1's group done: its buffer may be refilled after the next barrier
  }
  wgmma_wait<0>();
  fence_regs(acc);

  // Epilogue straight from the accumulators: acc[4j + 2h + e] = y[row0 + 8h][n0 + 8j + 2 (lane % 4) + e].
  const int row0 = m0 + wg * 64 + warp * 16 + lane / 4;
  const bool pairs = a.n % 2 == 0;  // two consecutive outputs per store (aligned: even column, even n)
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row0 + 8 * h;
    if (row >= a.m) continue;
    const float sx = __ldg(a.x_scales + row);
    const size_t base = static_cast<size_t>(row) * a.n;
#pragma unroll
    for (int j = 0; j < kBN / 8; ++j) {
      const int col = n0 + 8 * j + 2 * (lane % 4);
      if (col >= a.n) continue;
      const bool two = col + 1 < a.n;
      const float v0 = int8_scaled(static_cast<int32_t>(acc[4 * j + 2 * h]), sx, __ldg(a.w_scales + col), a.bias, col);
      const float v1 = two ? int8_scaled(static_cast<int32_t>(acc[4 * j + 2 * h + 1]), sx, __ldg(a.w_scales + col + 1), a.bias, col + 1) : 0.0f;
      if (a.y_f32) {
        float* y = static_cast<float*>(a.y) + base + col;
        if (pairs && two) {
          *reinterpret_cast<float2*>(y) = make_float2(v0, v1);
        } else {
          y[0] = v0;
          if (two) y[1] = v1;
        }
      } else {
        __nv_bfloat16* y = static_cast<__nv_bfloat16*>(a.y) + base + col;
        if (pairs && two) {
          *reinterpret_cast<__nv_bfloat162*>(y) = __floats2bfloat162_rn(v0, v1);
        } else {
          y[0] = __float2bfloat16(v0);
          if (two) y[1] = __float2bfloat16(v1);
        }
      }
    }
  }
}

template <int kBN, int kStages>
void launch(const Int8GemmArgs& a, cudaStream_t stream) {
  constexpr int kSmem = smem_bytes<kBN, kStages>();
  static const bool attributes_set = [] {
    XI_CUDA_CHECK(cudaFuncSetAttribute(w8a8_int8_wgmma_kernel<kBN, kStages>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    return true;
  }();
  (void)attributes_set;
  const dim3 grid(static_cast<unsigned>((a.m + kBM - 1) / kBM), static_cast<unsigned>((a.n + kBN - 1) / kBN));
  w8a8_int8_wgmma_kernel<kBN, kStages><<<grid, kThreads, kSmem, stream>>>(a);
  XI_CUDA_CHECK_LAUNCH();
}

}  // namespace

std::string to_string(const Int8WgmmaConfig& c) {
  return "wgmma 128x" + std::to_string(c.bn) + " s" + std::to_string(c.stages);
}

bool w8a8_int8_wgmma_supports(int m, int n, int k) { return m > 0 && n > 0 && k > 0 && k % 16 == 0; }

void launch_w8a8_int8_wgmma(const Int8GemmArgs& a, cudaStream_t stream, Int8WgmmaConfig config) {
  XI_CHECK(w8a8_int8_wgmma_supports(a.m, a.n, a.k))
      << "W8A8-INT8 wgmma GEMM: m " << a.m << " n " << a.n << " k " << a.k << " (k must be a multiple of 16)";
  XI_CHECK((a.n + 255) / 256 <= 65535) << "W8A8-INT8 wgmma GEMM: n " << a.n << " too large";
  XI_CHECK(reinterpret_cast<uintptr_t>(a.xq) % 16 == 0 && reinterpret_cast<uintptr_t>(a.wq) % 16 == 0)
      << "W8A8-INT8 wgmma GEMM: xq / wq must be 16-byte aligned";
  if (config.bn == 128 && config.stages == 3) return launch<128, 3>(a, stream);
  if (config.bn == 128 && config.stages == 4) return launch<128, 4>(a, stream);
  if (config.bn == 256 && config.stages == 3) return launch<256, 3>(a, stream);
  if (config.bn == 256 && config.stages == 4) return launch<256, 4>(a, stream);
  XI_CHECK(false) << "W8A8-INT8 wgmma GEMM: no " << to_string(config) << " kernel";
}

}  // namespace xinfer::cuda
