#include "xinfer/backend/cuda/kernels/rope/rope_kv_write.h"

#include "xinfer/backend/cuda/cuda_check.h"
#include "xinfer/backend/cuda/kernels/attention/kv_fp8.cuh"
#include "xinfer/backend/cuda/kernels/pdl.cuh"
#include "xinfer/backend/cuda/kernels/rope/rope_rotate.cuh"

namespace xinfer::cuda {
namespace {

constexpr int kWarps = 4;  // heads per CTA: one warp per head

// The FP8 scale of KV head h: its own, or the layer's.
__device__ __forceinline__ float head_scale(const float* head_scales, float layer_scale, int h) {
  return head_scales != nullptr ? __ldg(head_scales + h) : layer_scale;
}

// kv_rotation.h's transform of one head, 16 values y[0, 16) per thread (flat index 16 j + e for the head's thread
// j of `lanes`): the butterflies of bits 1..8 in registers, then of 16 j's bits across the threads (shuffles
// within the head's aligned group of lanes, `mask`), each y[f] + y[f + b] / y[f] - y[f + b] as the host does;
// then the power-of-two scale.
__device__ __forceinline__ void hadamard_rotate16(float (&y)[16], int j, int lanes, unsigned mask, float scale) {
#pragma unroll
  for (int b = 1; b < 16; b *= 2)
#pragma unroll
    for (int f = 0; f < 16; ++f)
      if ((f & b) == 0) {
        const float u = y[f], v = y[f + b];
        y[f] = __fadd_rn(u, v);
        y[f + b] = __fsub_rn(u, v);
      }
  for (int b = 1; b < lanes; b *= 2) {
    // This thread holds y[f + 16 b] (upper) or y[f]; either way one fma(+-1, mine, partner's) is the host's
    // y[f] - y[f + b] or y[f] + y[f + b] with its single rounding.
    const float sign = (j & b) != 0 ? -1.0f : 1.0f;
#pragma unroll
    for (int e = 0; e < 16; ++e) y[e] = __fmaf_rn(sign, y[e], __shfl_xor_sync(mask, y[e], b));
  }
#pragma unroll
  for (int e = 0; e < 16; ++e) y[e] = __fmul_rn(y[e], scale);
}

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
    const float ks = k8 != nullptr ? head_scale(a.k_head_scales, a.k_scale, item - a.num_heads) : 1.0f;
    const float ks_inv = __frcp_rn(ks);
    auto rotate = [&](int i, float c, float s) {
      if constexpr (kFp8) {
        if (k8 != nullptr) {  // the f32 rotation of rope_rotate(), quantized before any bf16 rounding
          float r1, r2;
          rope_rotate_f32(__bfloat162float(x[i]), __bfloat162float(x[i + half]), c, s, r1, r2);
          k8[i] = e4m3_from_float(r1, ks, ks_inv);
          k8[i + half] = e4m3_from_float(r2, ks, ks_inv);
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
    const float vs = head_scale(a.v_head_scales, a.v_scale, h), vs_inv = __frcp_rn(vs);
    for (int d = lane; d < D; d += 32) dst[d] = e4m3_from_float(__bfloat162float(v[d]), vs, vs_inv);
  } else {
    __nv_bfloat16* dst = a.v_cache + cache_row(h);
    for (int d = lane; d < D; d += 32) dst[d] = v[d];
  }
}

// Vectorized path (head_dim % 16 == 0, 16-byte aligned qkv, caches and cos_sin): thread g of a token takes
// chunk g % (D / 16) of head item g / (D / 16): 8 pairs x[i0 .. i0 + 8), x[D/2 + i0 .. + 8) of a q / k head
// (two 16-byte loads, rope_rotate8) or 16 values of a v head. The same arithmetic as rope_kv_write_kernel,
// so the same bits; one thread per 16 values instead of one per 2 (the scalar kernel's 2-byte accesses ran
// at a third of the copy bandwidth at 2048 tokens).
constexpr int kVecThreads = 128;
template <bool kFp8, bool kRotate>
__global__ void __launch_bounds__(kVecThreads) rope_kv_write_vec_kernel(RopeKvWriteArgs a) {
  pdl_release();  // the next kernel may launch now: it waits for this one's results itself
  const int t = blockIdx.x;
  const int D = a.head_dim, half = D / 2, per_head = D / 16, rope_heads = a.num_heads + a.num_kv_heads;
  const int items = rope_heads + a.num_kv_heads;
  const int g = static_cast<int>(blockIdx.y * kVecThreads + threadIdx.x);
  const int item = g / per_head, j = g % per_head;
  const int pos = a.positions[t];
  const int slot = a.slot_mapping[t];
  float c[8], s[8];  // this chunk's cos / sin (a constant table: loaded before the wait)
  if (item < rope_heads) {
    const float4* cp = reinterpret_cast<const float4*>(a.cos_sin + static_cast<size_t>(pos) * D + 8 * j);
    const float4* sp = reinterpret_cast<const float4*>(a.cos_sin + static_cast<size_t>(pos) * D + half + 8 * j);
    const float4 c0 = __ldg(cp), c1 = __ldg(cp + 1), s0 = __ldg(sp), s1 = __ldg(sp + 1);
    const float cv[8] = {c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w};
    const float sv[8] = {s0.x, s0.y, s0.z, s0.w, s1.x, s1.y, s1.z, s1.w};
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      c[e] = cv[e];
      s[e] = sv[e];
    }
  }
  pdl_wait();
  if (item >= items) return;  // whole heads: a head's per_head threads return together
  __nv_bfloat16* row = a.qkv + static_cast<size_t>(t) * items * D;
  const size_t block = slot >= 0 ? static_cast<size_t>(slot / a.block_size) : 0;
  const int offset = slot >= 0 ? slot % a.block_size : 0;
  auto cache_row = [&](int kv_head) { return ((block * a.num_kv_heads + kv_head) * a.block_size + offset) * D; };
  // FP8 caches: this thread's 16 f32 key values (dims 8j.. and half + 8j..) as e4m3 codes into the cache row.
  auto write_k_codes = [&](int kv_head, const float(&y)[16]) {
    const float ks = head_scale(a.k_head_scales, a.k_scale, kv_head), inv = __frcp_rn(ks);
    uint2 k_lo, k_hi;
    uint16_t* cl = reinterpret_cast<uint16_t*>(&k_lo);
    uint16_t* ch = reinterpret_cast<uint16_t*>(&k_hi);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      cl[e] = e4m3x2_from_float(y[2 * e], y[2 * e + 1], ks, inv);
      ch[e] = e4m3x2_from_float(y[8 + 2 * e], y[8 + 2 * e + 1], ks, inv);
    }
    uint2* k8 = reinterpret_cast<uint2*>(reinterpret_cast<uint8_t*>(a.k_cache) + cache_row(kv_head));
    k8[j] = k_lo;
    k8[half / 8 + j] = k_hi;
  };
  if (item < rope_heads) {
    uint4* x = reinterpret_cast<uint4*>(row + static_cast<size_t>(item) * D);
    uint4 lo = x[j], hi = x[half / 8 + j];
    const bool is_k = item >= a.num_heads;
    const bool write_k = is_k && slot >= 0;
    if constexpr (kRotate) {
      // The f32 RoPE of the 8 pairs, rotated; then bf16 in place, and the cache row (codes or bf16).
      float y[16];
      const __nv_bfloat16* p = reinterpret_cast<const __nv_bfloat16*>(&lo);
      const __nv_bfloat16* q = reinterpret_cast<const __nv_bfloat16*>(&hi);
#pragma unroll
      for (int e = 0; e < 8; ++e)
        rope_rotate_f32(__bfloat162float(p[e]), __bfloat162float(q[e]), c[e], s[e], y[e], y[8 + e]);
      const int lane = static_cast<int>(threadIdx.x % 32);
      const unsigned mask = per_head >= 32 ? 0xffffffffu : ((1u << per_head) - 1u) << (lane & ~(per_head - 1));
      const int lg = __ffs(D) - 1;  // D is a power of two
      hadamard_rotate16(y, j, per_head, mask, __int_as_float((127 - (is_k ? (lg + 1) / 2 : lg / 2)) << 23));
      __nv_bfloat16* bl = reinterpret_cast<__nv_bfloat16*>(&lo);
      __nv_bfloat16* bh = reinterpret_cast<__nv_bfloat16*>(&hi);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        bl[e] = __float2bfloat16_rn(y[e]);
        bh[e] = __float2bfloat16_rn(y[8 + e]);
      }
      if constexpr (kFp8)
        if (write_k) write_k_codes(item - a.num_heads, y);
    } else {
      if constexpr (kFp8) {
        if (write_k) {  // the f32 rotation of rope_rotate(), quantized before any bf16 rounding
          const __nv_bfloat16* p = reinterpret_cast<const __nv_bfloat16*>(&lo);
          const __nv_bfloat16* q = reinterpret_cast<const __nv_bfloat16*>(&hi);
          float y[16];
#pragma unroll
          for (int e = 0; e < 8; ++e)
            rope_rotate_f32(__bfloat162float(p[e]), __bfloat162float(q[e]), c[e], s[e], y[e], y[8 + e]);
          write_k_codes(item - a.num_heads, y);
        }
      }
      rope_rotate8(lo, hi, c, s);
    }
    x[j] = lo;
    x[half / 8 + j] = hi;
    if (!kFp8 && write_k) {
      uint4* k = reinterpret_cast<uint4*>(a.k_cache + cache_row(item - a.num_heads));
      k[j] = lo;
      k[half / 8 + j] = hi;
    }
    return;
  }
  if (slot < 0) return;
  const int h = item - rope_heads;
  const uint4* v = reinterpret_cast<const uint4*>(row + static_cast<size_t>(item) * D);
  const uint4 v0 = v[2 * j], v1 = v[2 * j + 1];
  if constexpr (kFp8) {
    const float vs = head_scale(a.v_head_scales, a.v_scale, h), inv = __frcp_rn(vs);
    uint4 out;
    uint16_t* ob = reinterpret_cast<uint16_t*>(&out);
    const __nv_bfloat16* b0 = reinterpret_cast<const __nv_bfloat16*>(&v0);
    const __nv_bfloat16* b1 = reinterpret_cast<const __nv_bfloat16*>(&v1);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      ob[e] = e4m3x2_from_float(__bfloat162float(b0[2 * e]), __bfloat162float(b0[2 * e + 1]), vs, inv);
      ob[4 + e] = e4m3x2_from_float(__bfloat162float(b1[2 * e]), __bfloat162float(b1[2 * e + 1]), vs, inv);
    }
    reinterpret_cast<uint4*>(reinterpret_cast<uint8_t*>(a.v_cache) + cache_row(h))[j] = out;
  } else {
    uint4* dst = reinterpret_cast<uint4*>(a.v_cache + cache_row(h));
    dst[2 * j] = v0;
    dst[2 * j + 1] = v1;
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

void launch_rope_kv_write(const RopeKvWriteArgs& a, cudaStream_t stream) {
  XI_CHECK_EQ(a.head_dim % 2, 0) << "rope: odd head_dim";
  if (a.num_tokens == 0) return;
  const int items = a.num_heads + 2 * a.num_kv_heads;
  if (a.kv_fp8 && a.k_head_scales == nullptr)
    XI_CHECK(a.k_scale > 0 && a.v_scale > 0) << "rope_kv_write: fp8 KV scales must be positive";
  const bool vec = a.head_dim % 16 == 0 && aligned16(a.qkv) && aligned16(a.k_cache) && aligned16(a.v_cache) &&
                   aligned16(a.cos_sin);
  // The rotation's lane groups (head_dim / 16 threads) are whole and aligned inside a warp up to head_dim 512.
  XI_CHECK(!a.k_rotation || (vec && a.head_dim >= 16 && a.head_dim <= 256 && (a.head_dim & (a.head_dim - 1)) == 0))
      << "rope_kv_write: key rotation needs a power-of-two head_dim in [16, 256] and 16-byte aligned buffers; got "
      << a.head_dim;
  if (vec) {
    const int threads = items * (a.head_dim / 16);
    const dim3 grid(static_cast<unsigned>(a.num_tokens), static_cast<unsigned>((threads + kVecThreads - 1) / kVecThreads));
    auto go = [&](auto kernel) { launch_pdl(kernel, grid, kVecThreads, 0, stream, a); };
    if (a.kv_fp8)
      a.k_rotation ? go(rope_kv_write_vec_kernel<true, true>) : go(rope_kv_write_vec_kernel<true, false>);
    else
      a.k_rotation ? go(rope_kv_write_vec_kernel<false, true>) : go(rope_kv_write_vec_kernel<false, false>);
    return;
  }
  const dim3 grid(static_cast<unsigned>(a.num_tokens), static_cast<unsigned>((items + kWarps - 1) / kWarps));
  if (a.kv_fp8)
    launch_pdl(rope_kv_write_kernel<true>, grid, kWarps * 32, 0, stream, a);
  else
    launch_pdl(rope_kv_write_kernel<false>, grid, kWarps * 32, 0, stream, a);
}

}  // namespace xinfer::cuda
