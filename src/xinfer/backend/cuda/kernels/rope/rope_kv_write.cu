#include "xinfer/backend/cuda/kernels/rope/rope_kv_write.h"

#include "xinfer/backend/cuda/cuda_check.h"
#include "xinfer/backend/cuda/kernels/attention/kv_fp8.cuh"
#include "xinfer/backend/cuda/kernels/pdl.cuh"
#include "xinfer/backend/cuda/kernels/rope/rope_rotate.cuh"

namespace xinfer::cuda {
namespace {

constexpr int kWarps = 4;  // heads per CTA: one warp per head

// Grid (token, head group of kWarps). Warp w of CTA (t, y) takes head item y * kWarps + w of token t:
// items [0, Hq + Hkv) are the q and k heads (rotated in place; k heads also go to the cache), items
// [Hq + Hkv, Hq + 2 Hkv) are the v heads (copied to the cache).
template <bool kFp8>
__global__ void __launch_bounds__(kWarps * 32) rope_kv_write_kernel(RopeKvWriteArgs a) {
  const int t = blockIdx.x, lane = threadIdx.x % 32;
  const int item = blockIdx.y * kWarps + static_cast<int>(threadIdx.x / 32);
  // The step's positions and slots were uploaded before the forward: read them while the previous kernel
  // (the qkv projection) finishes; qkv itself only after pdl_wait() (pdl.cuh).
  pdl_release();  // the next kernel may launch now: it waits for this one's results itself
  const int pos = a.positions[t];
  const int slot = a.slot_mapping[t];
  const int D = a.head_dim, half = D / 2, rope_heads = a.num_heads + a.num_kv_heads;
  // So are this lane's cos/sin (the table is constant): up to head_dim 256 before the wait.
  constexpr int kEarly = 4;
  const float* cs = a.cos_sin + static_cast<size_t>(pos) * D;
  float c_early[kEarly], s_early[kEarly];
#pragma unroll
  for (int j = 0; j < kEarly; ++j) {
    const int i = lane + 32 * j;
    c_early[j] = i < half ? __ldg(cs + i) : 0.0f;
    s_early[j] = i < half ? __ldg(cs + half + i) : 0.0f;
  }
  pdl_wait();
  if (item >= rope_heads + a.num_kv_heads) return;
  __nv_bfloat16* row = a.qkv + static_cast<size_t>(t) * (rope_heads + a.num_kv_heads) * D;
  const size_t block = slot >= 0 ? static_cast<size_t>(slot / a.block_size) : 0;
  const int offset = slot >= 0 ? slot % a.block_size : 0;
  auto cache_row = [&](int kv_head) { return ((block * a.num_kv_heads + kv_head) * a.block_size + offset) * D; };

  if (item < rope_heads) {
    __nv_bfloat16* x = row + static_cast<size_t>(item) * D;
    const bool write_k = item >= a.num_heads && slot >= 0;
    __nv_bfloat16* k = write_k && !kFp8 ? a.k_cache + cache_row(item - a.num_heads) : nullptr;
    uint8_t* k8 = write_k && kFp8 ? reinterpret_cast<uint8_t*>(a.k_cache) + cache_row(item - a.num_heads) : nullptr;
    auto rotate = [&](int i, float c, float s) {
      if constexpr (kFp8) {
        if (k8 != nullptr) {  // the f32 rotation of rope_rotate(), quantized before any bf16 rounding
          const float p = __bfloat162float(x[i]), q = __bfloat162float(x[i + half]);
          k8[i] = e4m3_from_float(__fmaf_rn(p, c, -__fmul_rn(q, s)), a.k_scale);
          k8[i + half] = e4m3_from_float(__fmaf_rn(q, c, __fmul_rn(p, s)), a.k_scale);
        }
      }
      __nv_bfloat16 y1, y2;
      rope_rotate(x[i], x[i + half], c, s, y1,
                  y2);  // the fused decode attention's arithmetic (rope_rotate.cuh)
      x[i] = y1;
      x[i + half] = y2;
      if (k != nullptr) {
        k[i] = y1;
        k[i + half] = y2;
      }
    };
#pragma unroll
    for (int j = 0; j < kEarly; ++j)
      if (lane + 32 * j < half) rotate(lane + 32 * j, c_early[j], s_early[j]);
    for (int i = lane + 32 * kEarly; i < half; i += 32) rotate(i, cs[i], cs[half + i]);
    return;
  }
  if (slot < 0) return;
  const int h = item - rope_heads;
  const __nv_bfloat16* v = row + static_cast<size_t>(item) * D;
  if constexpr (kFp8) {
    uint8_t* dst = reinterpret_cast<uint8_t*>(a.v_cache) + cache_row(h);
    for (int d = lane; d < D; d += 32) dst[d] = e4m3_from_float(__bfloat162float(v[d]), a.v_scale);
  } else {
    __nv_bfloat16* dst = a.v_cache + cache_row(h);
    for (int d = lane; d < D; d += 32) dst[d] = v[d];
  }
}

}  // namespace

void launch_rope_kv_write(const RopeKvWriteArgs& a, cudaStream_t stream) {
  XI_CHECK_EQ(a.head_dim % 2, 0) << "rope: odd head_dim";
  if (a.num_tokens == 0) return;
  const int items = a.num_heads + 2 * a.num_kv_heads;
  const dim3 grid(static_cast<unsigned>(a.num_tokens), static_cast<unsigned>((items + kWarps - 1) / kWarps));
  if (a.kv_fp8) {
    XI_CHECK(a.k_scale > 0 && a.v_scale > 0) << "rope_kv_write: fp8 KV scales must be positive";
    launch_pdl(rope_kv_write_kernel<true>, grid, kWarps * 32, 0, stream, a);
  } else {
    launch_pdl(rope_kv_write_kernel<false>, grid, kWarps * 32, 0, stream, a);
  }
}

}  // namespace xinfer::cuda
