#include "xinfer/backend/cuda/kernels/elementwise/gather_rows.h"

#include "xinfer/backend/cuda/cuda_check.h"
#include "xinfer/backend/cuda/kernels/pdl.cuh"

namespace xinfer::cuda {
namespace {

template <typename Vec>
__global__ void gather_rows_kernel(GatherRowsArgs a) {
  pdl_release();  // the next kernel may launch now: it waits for this one's results itself
  pdl_wait();     // first access: earlier kernels in the stream may still be running (pdl.cuh)
  const int r = blockIdx.x;
  const int vecs = a.width * static_cast<int>(sizeof(__nv_bfloat16)) / static_cast<int>(sizeof(Vec));
  const Vec* src = reinterpret_cast<const Vec*>(a.src + static_cast<size_t>(a.index[r]) * a.width);
  Vec* out = reinterpret_cast<Vec*>(a.out + static_cast<size_t>(r) * a.width);
  for (int i = threadIdx.x; i < vecs; i += blockDim.x) out[i] = src[i];
}

}  // namespace

void launch_gather_rows(const GatherRowsArgs& a, cudaStream_t stream) {
  if (a.rows == 0) return;
  if (a.width % 8 == 0)
    launch_pdl(gather_rows_kernel<uint4>, a.rows, 256, 0, stream, a);
  else
    launch_pdl(gather_rows_kernel<__nv_bfloat16>, a.rows, 256, 0, stream, a);
}

}  // namespace xinfer::cuda
