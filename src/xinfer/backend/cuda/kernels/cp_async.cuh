// cp.async (sm_80+): 16-byte global -> shared copies that skip L1 and run asynchronously to the issuing
// thread, in commit groups it waits for by count. Shared-memory operands are 32-bit shared-window addresses
// (smem_u32). A thread's own copies are visible to it after its wait; other threads need a barrier too.
#pragma once

#include <cstdint>

namespace xinfer::cuda {

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Copies 16 bytes from src to dst; writes zeros instead when !valid (src is then not read).
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
  // No "memory" clobber: the compiler may hoist independent loads (block table) above it; the copies stay
  // ordered with the commit / wait / barrier around them (volatile asm and barriers are not reordered).
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
}
// The same for streamed weights: L2 fetches in 256-byte lines (the next 16-byte chunks of the row come with it).
__device__ __forceinline__ void cp_async_16_stream(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0)
               : "memory");
}
// 4 bytes, of which the first src_bytes (0..4) are read and the rest zero-filled.
__device__ __forceinline__ void cp_async_4(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
// Closes the thread's copies issued since the last commit into one group.
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
// Blocks until at most kPending of the thread's most recent groups are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}
__device__ __forceinline__ void cp_async_wait_all() {
  cp_async_wait<0>();
}

}  // namespace xinfer::cuda
