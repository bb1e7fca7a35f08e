#include "xinfer/backend/cuda/kernels/elementwise/silu_mul.h"

#include "xinfer/backend/cuda/cuda_check.h"
#include "xinfer/backend/cuda/kernels/elementwise/silu.cuh"
#include "xinfer/backend/cuda/kernels/pdl.cuh"

namespace xinfer::cuda {
namespace {

template <int kVec>
__global__ void silu_mul_kernel(SiluMulArgs a) {
  pdl_release();  // the next kernel may launch now: it waits for this one's results itself
  pdl_wait();     // first access: earlier kernels in the stream may still be running (pdl.cuh)
  const int64_t chunks_per_row = a.inter / kVec;
  const int64_t total = chunks_per_row * a.rows;
  for (int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; c < total;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = c / chunks_per_row, i = (c % chunks_per_row) * kVec;
    const __nv_bfloat16* g = a.gate_up + r * 2 * a.inter + i;
    const __nv_bfloat16* u = g + a.inter;
    __nv_bfloat16* o = a.out + r * a.inter + i;
    if constexpr (kVec == 8) {
      uint4 gv = *reinterpret_cast<const uint4*>(g), uv = *reinterpret_cast<const uint4*>(u), ov;
      const __nv_bfloat16* gb = reinterpret_cast<const __nv_bfloat16*>(&gv);
      const __nv_bfloat16* ub = reinterpret_cast<const __nv_bfloat16*>(&uv);
      __nv_bfloat16* ob = reinterpret_cast<__nv_bfloat16*>(&ov);
#pragma unroll
      for (int j = 0; j < 8; ++j) ob[j] = __float2bfloat16(silu_mul_f32(__bfloat162float(gb[j]), __bfloat162float(ub[j])));
      *reinterpret_cast<uint4*>(o) = ov;
    } else {
      o[0] = __float2bfloat16(silu_mul_f32(__bfloat162float(g[0]), __bfloat162float(u[0])));
    }
  }
}

}  // namespace

void launch_silu_mul(const SiluMulArgs& a, cudaStream_t stream) {
  if (a.rows == 0) return;
  const int vec = a.inter % 8 == 0 ? 8 : 1;
  const int64_t work = static_cast<int64_t>(a.rows) * a.inter / vec;
  const int blocks = static_cast<int>(std::min<int64_t>((work + 255) / 256, 132 * 16));
  if (vec == 8)
    launch_pdl(silu_mul_kernel<8>, blocks, 256, 0, stream, a);
  else
    launch_pdl(silu_mul_kernel<1>, blocks, 256, 0, stream, a);
}

}  // namespace xinfer::cuda
