// ldmatrix (sm_75+): 8 x 8 b16 matrices from shared memory into the mma.sync fragment layout, one register
// per matrix per lane (lane i holds row i / 4, elements 2 (i % 4) and 2 (i % 4) + 1). Lanes 8j..8j+7 give the
// row addresses of matrix j (x2: lanes 0-15 only); .trans loads each matrix transposed. Addresses are 32-bit
// shared-window addresses (cp_async.cuh smem_u32), rows 16-byte aligned. Used by the prefill attention
// (attention/paged_prefill_attention.cu) and the tiled weight-only GEMM (gemm/wq_gemm.cu).
#pragma once

#include <cstdint>

namespace xinfer::cuda {

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}
// Two matrices into r[0], r[1] (r[2], r[3] untouched).
__device__ __forceinline__ void ldmatrix_x2(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(addr)
               : "memory");
}

}  // namespace xinfer::cuda
