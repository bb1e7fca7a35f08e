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
  const int row = a.index[r] - a.index_begin;
  Vec* out = reinterpret_cast<Vec*>(a.out + static_cast<size_t>(r) * a.width);
  if (a.src_rows > 0 && (row < 0 || row >= a.src_rows)) {  // another rank's vocabulary row: -0.0
    Vec neg_zero;
    uint16_t* h = reinterpret_cast<uint16_t*>(&neg_zero);
    for (int j = 0; j < static_cast<int>(sizeof(Vec) / sizeof(uint16_t)); ++j) h[j] = 0x8000u;
    for (int i = threadIdx.x; i < vecs; i += blockDim.x) out[i] = neg_zero;
    return;
  }
  const Vec* src = reinterpret_cast<const Vec*>(a.src + static_cast<size_t>(row) * a.width);
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
