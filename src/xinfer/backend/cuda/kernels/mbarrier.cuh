// Shared-memory transaction barriers (mbarrier, sm_90) and the bulk copies that complete on them: the
// producer / consumer rings of the TMA kernels (gemm/w8a8_int8_wgmma.cu, gemm/quant_stream_gemv.cu).
// Addresses are 32-bit shared-window addresses (cp_async.cuh smem_u32). A phase of a barrier completes once
// its expected arrivals have arrived and the transaction bytes announced with them have landed; waiters name
// the phase by its parity.
#pragma once

#include <cstdint>

namespace xinfer::cuda {

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// Makes the initializations visible to the async proxy (the bulk copies) and to the other threads after the
// barrier that follows.
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// One arrival that also announces `bytes` of transactions (the TMA loads completing on this barrier).
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Blocks until the barrier's phase of this parity has completed (parity 1 before any phase: at once).
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}
// Orders this thread's earlier generic-proxy accesses of shared memory (and those the CTA barrier before it
// ordered) before its later async-proxy ones: a bulk copy into a buffer the CTA has just read.
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// Copies `bytes` (a multiple of 16; both addresses 16-byte aligned) from global memory into shared memory,
// completing as transactions on `bar`.
__device__ __forceinline__ void bulk_copy_g2s(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
      "l"(src), "r"(bytes), "r"(bar)
      : "memory");
}

}  // namespace xinfer::cuda
