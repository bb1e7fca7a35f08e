// Warpgroup MMA (wgmma, sm_90a) helpers shared by the kernels that use it (paged_prefill_attention.cu, the
// W8A8-INT8 GEMM gemm/w8a8_int8_wgmma.cu): the fence / commit / wait of the asynchronous MMAs, the
// generic-to-async proxy fence for operands written to shared memory by st.shared or cp.async, register pins,
// and the 128-byte-swizzle shared-memory matrix descriptor.
#pragma once

#include <cstdint>

// The accumulator operand lists of the m64n128 and m64n256 wgmma inline asm (the accumulators are operands %0..
// in every form the kernels use): "{%0, %1, ..., %63}" and "{%0, %1, ..., %127}".
#define XI_WGMMA_D64                                                                   \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "            \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "   \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "   \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
#define XI_WGMMA_D128                                                                               \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                         \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "                \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "                \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "                \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "                \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "                \
  "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "    \
  "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}"

namespace xinfer::cuda {

// Shared operands are described by 64-bit matrix descriptors (make_desc); the accumulator fragment of
// m64nN is, per warp w of the warpgroup, the m16n8 layout repeated over N: d[4i + 2h + e] =
// D[16w + lane / 4 + 8h][8i + 2 (lane % 4) + e] (f32, or s32 for integer MMAs). A register fragments (RS
// form) use the m16n8k16 A layout.
__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
__device__ __forceinline__ void wgmma_wait_all() {
  wgmma_wait<0>();
}
// Makes this thread's generic-proxy shared-memory writes (st.shared, cp.async) visible to the async proxy
// that wgmma reads operands through.
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// Pins register operands of asynchronous wgmma in program order relative to the fence / wait around it
// (the compiler must not move their reads or writes across those, which it cannot see through).
template <int N>
__device__ __forceinline__ void fence_regs(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N>
__device__ __forceinline__ void fence_regs(uint32_t (&r)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(r[i][j])::"memory");
}
template <int N>
__device__ __forceinline__ void fence_regs(uint32_t (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

// 128-byte-swizzle descriptor: start address, leading / stride byte offsets (16-byte units), mode 1 in bits
// 62-63. K-major operands: lbo unused (1), sbo = 1024 (8 rows of 128 bytes). MN-major operands: lbo = the
// distance between 64-element column panels, sbo = 1024 (8 rows along K).
__device__ __forceinline__ uint64_t make_desc(uint32_t addr, uint32_t lbo_bytes, uint32_t sbo_bytes) {
  return static_cast<uint64_t>((addr & 0x3FFFFu) >> 4) |
         (static_cast<uint64_t>((lbo_bytes >> 4) & 0x3FFFu) << 16) |
         (static_cast<uint64_t>((sbo_bytes >> 4) & 0x3FFFu) << 32) | (uint64_t{1} << 62);
}

}  // namespace xinfer::cuda
