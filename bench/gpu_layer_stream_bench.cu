// gpu_kernel_bench --layer-stream: a probe for a persistent batch-1 decode kernel (issue 16's batch-1 ITL
// targets; docs/PERF.md sessions 15, 19 and 30).
//
// A batch-1 FP8 token runs ~6 kernels a layer. The layer chain reaches ~64% of the copy ceiling because every
// weight-streaming kernel ramps up and drains on its own (session 15). Neither a shared-memory ring inside
// each GEMV (session 15) nor an L2 prefetch ahead of it (session 19) hid that. This probe asks whether ONE
// kernel for the whole token can, before any of it goes into the engine:
// - one CTA per SM, launched cooperatively (all resident, so a grid-wide barrier cannot deadlock);
// - a producer warp streams the CTA's share of every linear of every layer, in order, through a ring of
//   shared-memory slots (bulk copies completing on mbarriers). It never waits for activations, only for a
//   free slot, so HBM keeps streaming across the barriers for as long as the ring has room;
// - eight consumer warps compute a linear once its input is complete, with a grid-wide barrier between
//   dependent stages; each stage's input (RMSNorm, per-token e4m3 quantization) is rebuilt redundantly by
//   every CTA from L2.
//
// The layer: Llama-3.1-8B shape, W8A8-FP8 (e4m3 weights with a scale per row, e4m3 activations with a scale
// per token), or W8A16 (int8 weights with a scale per row, activations in f16) on the same weight bytes.
// RMSNorm + quantization, qkv, decode attention over a bf16 cache of 256 tokens (a CTA per q head; no RoPE
// and no KV write: both are small), o (+ residual), RMSNorm + quantization, gate_up with the SwiGLU in its
// epilogue (rows interleaved 4 gate / 4 up per chunk), quantization, down (+ residual).
//
// Modes:
// - full: the layer as above;
// - no attention: o reads q's first 4096 values instead (so full minus this is what the attention stage
// costs);
// - stream only: the consumers release each slot unread, with no barriers (the ring's own streaming rate).
//
// Checked first: 2 layers of "full" against a host reference that quantizes the same way (relative L2 of the
// residual stream and of the last SwiGLU output).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "gpu_bench_util.h"
#include "xinfer/backend/cuda/cuda_backend.h"
#include "xinfer/backend/cuda/cuda_check.h"
#include "xinfer/backend/cuda/device_ceilings.h"
#include "xinfer/backend/cuda/kernels/cp_async.cuh"
#include "xinfer/backend/cuda/kernels/mbarrier.cuh"

#include "layer_stream_dot.cuh"

namespace xinfer::bench {
namespace {

using cuda::mbar_arrive;
using cuda::mbar_arrive_expect_tx;
using cuda::mbar_init;
using cuda::mbar_init_fence;
using cuda::named_barrier_sync;
using cuda::smem_u32;

constexpr int kH = 4096, kHq = 32, kHkv = 8, kD = 128, kI = 14336, kCtx = 256;
constexpr int kQkvRows = (kHq + 2 * kHkv) * kD;
constexpr int kConsumerWarps = 8, kConsumers = kConsumerWarps * 32, kThreads = kConsumers + 32;
constexpr int kSlotBytes = 32 * 1024, kSlots = 5;
constexpr float kFp8Max = 448.0f;
static_assert(kCtx == kConsumers, "the attention stage gives each consumer thread one cached token");

// The four linears in stream order: 0 qkv, 1 o, 2 gate_up, 3 down. y[n] = sum_k w[n, k] x[k].
__host__ __device__ constexpr int linear_n(int lin) {
  return lin == 0 ? kQkvRows : lin == 2 ? 2 * kI : kH;
}
__host__ __device__ constexpr int linear_k(int lin) {
  return lin == 3 ? kI : kH;
}
// Weight rows per ring slot (a chunk): 8 rows of 4096, 2 of 14336; 8 / rows warps share a row.
__host__ __device__ constexpr int rows_per_chunk(int k) {
  return k * 8 <= kSlotBytes ? 8 : kSlotBytes / k;
}
static_assert(rows_per_chunk(kH) == 8 && rows_per_chunk(kI) == 2,
              "the warp-to-row split assumes 8 or 2 rows");

struct StreamLayer {
  const uint8_t* w[4];    // e4m3 [n, k]; gate_up's rows interleaved: chunk c = gate 4c..4c+3, up 4c..4c+3
  const float* scale[4];  // [n]
  const __nv_bfloat16* norm1;
  const __nv_bfloat16* norm2;
  const __nv_bfloat16* k_cache;  // [kCtx, kHkv, kD]
  const __nv_bfloat16* v_cache;
};

enum StreamMode : int { kFull = 0, kNoAttention = 1, kStreamOnly = 2 };

struct StreamParams {
  const StreamLayer* layers;  // device array [num_layers]
  int num_layers;
  int mode;
  float eps, attn_scale;
  float* residual;    // [kH]
  float* qkv;         // [kQkvRows]
  float* attn;        // [kH]
  float* act;         // [kI]
  unsigned* barrier;  // zero at launch
};

struct StreamSmem {
  uint8_t slot[kSlots][kSlotBytes];
  __half
      x[kI];  // the stage's input: e4m3 values times 2^-8 (exact in f16), so 8 products sum without overflow
  float red[2][kConsumerWarps];
  float part[2][kConsumerWarps];  // per-warp sums of a chunk's rows, alternating chunk by chunk
  float q[kD];
  float probs[kCtx];
  float attn_part[kConsumerWarps][kD];
  uint64_t full[kSlots], empty[kSlots];
};

__device__ __forceinline__ void bulk_copy_g2s(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
      "l"(src), "r"(bytes), "r"(bar)
      : "memory");
}
__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// A hang would hold every SM until the call's time limit: the probe's waits give up after 2 s with a trap.
__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}
constexpr uint64_t kHangNs = 2000000000ull;
__device__ __forceinline__ void wait_slot(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  const uint64_t t0 = global_ns();
  for (;;) {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
    if (done) return;
    if (global_ns() - t0 > kHangNs) __trap();
  }
}

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// Sum / max over the 256 consumer threads through red (its next writer is past another consumer barrier).
__device__ float consumers_sum(float v, float* red) {
  v = warp_sum(v);
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
  named_barrier_sync(1, kConsumers);
  float s = 0;
  for (int i = 0; i < kConsumerWarps; ++i) s += red[i];
  return s;
}
__device__ float consumers_max(float v, float* red) {
  v = warp_max(v);
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
  named_barrier_sync(1, kConsumers);
  float m = red[0];
  for (int i = 1; i < kConsumerWarps; ++i) m = fmaxf(m, red[i]);
  return m;
}

// All CTAs' consumers meet here; data written before it by any CTA is then visible to loads that skip L1.
__device__ void grid_barrier(unsigned* counter, unsigned epoch) {
  named_barrier_sync(1, kConsumers);
  if (threadIdx.x == 0) {
    __threadfence();
    atomicAdd(counter, 1u);
    const unsigned target = epoch * gridDim.x;
    const uint64_t t0 = global_ns();
    while (ld_acquire(counter) < target)
      if (global_ns() - t0 > kHangNs) __trap();
    __threadfence();
  }
  named_barrier_sync(1, kConsumers);
}

// The stage input into sm.x, v * rms * gamma (kNorm: RMSNorm first), and the factor that turns a dot product
// over sm.x back into the linear's output (before the weight row's scale):
// - FP8 (!kW8a16): e4m3(v / s) times 2^-8, s = max|.| / 448 per token; the factor is s * 256;
// - W8A16: f16(v / 16); the factor is 16.
// v was written by other CTAs: read past L1.
template <int N, bool kNorm, bool kW8a16>
__device__ float load_stage_input(StreamSmem& sm, const float* v, const __nv_bfloat16* gamma, float eps) {
  static_assert(N % (4 * kConsumers) == 0, "float4 per thread");
  constexpr int kPer = N / (4 * kConsumers);
  const int t = threadIdx.x;
  float4 r[kPer];
#pragma unroll
  for (int i = 0; i < kPer; ++i) r[i] = __ldcg(reinterpret_cast<const float4*>(v) + t + i * kConsumers);
  if constexpr (kNorm) {
    float ss = 0;
#pragma unroll
    for (int i = 0; i < kPer; ++i)
      ss += r[i].x * r[i].x + r[i].y * r[i].y + r[i].z * r[i].z + r[i].w * r[i].w;
    const float inv = rsqrtf(consumers_sum(ss, sm.red[0]) / N + eps);
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const uint2 g = __ldg(reinterpret_cast<const uint2*>(gamma) + t + i * kConsumers);
      const float2 g01 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&g.x));
      const float2 g23 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&g.y));
      r[i] =
          make_float4(r[i].x * inv * g01.x, r[i].y * inv * g01.y, r[i].z * inv * g23.x, r[i].w * inv * g23.y);
    }
  }
  if constexpr (kW8a16) {
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      __half2* dst = reinterpret_cast<__half2*>(sm.x + 4 * (t + i * kConsumers));
      dst[0] = __floats2half2_rn(r[i].x / 16.0f, r[i].y / 16.0f);
      dst[1] = __floats2half2_rn(r[i].z / 16.0f, r[i].w / 16.0f);
    }
    named_barrier_sync(1, kConsumers);  // x complete before any warp reads it
    return 16.0f;
  }
  float m = 0;
#pragma unroll
  for (int i = 0; i < kPer; ++i)
    m = fmaxf(m, fmaxf(fmaxf(fabsf(r[i].x), fabsf(r[i].y)), fmaxf(fabsf(r[i].z), fabsf(r[i].w))));
  m = consumers_max(m, sm.red[1]);
  const float s = m > 0 ? m / kFp8Max : 1.0f, inv_s = 1.0f / s;
  const __half2 down = __float2half2_rn(1.0f / 256.0f);
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const uint32_t lo =
        __nv_cvt_float2_to_fp8x2(make_float2(r[i].x * inv_s, r[i].y * inv_s), __NV_SATFINITE, __NV_E4M3);
    const uint32_t hi =
        __nv_cvt_float2_to_fp8x2(make_float2(r[i].z * inv_s, r[i].w * inv_s), __NV_SATFINITE, __NV_E4M3);
    __half2* dst = reinterpret_cast<__half2*>(sm.x + 4 * (t + i * kConsumers));
    dst[0] = __hmul2(e4m3x2_to_half2(lo), down);
    dst[1] = __hmul2(e4m3x2_to_half2(hi), down);
  }
  named_barrier_sync(1, kConsumers);  // x complete before any warp reads it
  return s * 256.0f;                  // undoes x's 2^-8
}

// The CTA's chunks [first, last) of linear `lin`.
__device__ __forceinline__ void chunk_range(int lin, int& first, int& last) {
  const int64_t chunks = linear_n(lin) / rows_per_chunk(linear_k(lin));
  first = static_cast<int>(chunks * blockIdx.x / gridDim.x);
  last = static_cast<int>(chunks * (blockIdx.x + 1) / gridDim.x);
}

// One linear over the CTA's chunks as they land in the ring; `it` counts chunks through the ring.
// out_scale: load_stage_input's factor.
template <int kLin, bool kW8a16>
__device__ void consume_linear(StreamSmem& sm, const StreamParams& p, const StreamLayer& L, int& it,
                               float out_scale) {
  constexpr int k = linear_k(kLin), R = rows_per_chunk(k), wpr = kConsumerWarps / R, kb = k / wpr;
  constexpr int passes = kb / 512;
  static_assert(kb % 512 == 0, "a warp's share of a row is whole 512-byte passes");
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row = warp / wpr, part = warp % wpr;
  const float* scale = L.scale[kLin];
  // A lane meets the same 16-byte columns of x in every chunk of the stage: they live in registers.
  uint32_t xr[passes][8];
#pragma unroll
  for (int i = 0; i < passes; ++i) {
    const uint4 a = *reinterpret_cast<const uint4*>(sm.x + part * kb + i * 512 + lane * 16);
    const uint4 b = *reinterpret_cast<const uint4*>(sm.x + part * kb + i * 512 + lane * 16 + 8);
    const uint32_t v[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
    for (int j = 0; j < 8; ++j) xr[i][j] = v[j];
  }
  int first, last;
  chunk_range(kLin, first, last);
  for (int c = first; c < last; ++c, ++it) {
    const int s = it % kSlots;
    wait_slot(smem_u32(&sm.full[s]), static_cast<uint32_t>(it / kSlots) & 1u);
    const uint8_t* wrow = sm.slot[s] + row * k + part * kb + lane * 16;
    float acc = 0;
#pragma unroll
    for (int i = 0; i < passes; ++i) {
      const uint4 w = *reinterpret_cast<const uint4*>(wrow + i * 512);
      acc += kW8a16 ? dot16_i8(w, xr[i]) : dot16(w, xr[i]);
    }
    acc = warp_sum(acc);  // every lane's slot reads are done
    float* partial = sm.part[it & 1];
    if (lane == 0) {
      mbar_arrive(smem_u32(&sm.empty[s]));
      partial[warp] = acc;
    }
    named_barrier_sync(1, kConsumers);
    const int t = threadIdx.x;
    if constexpr (kLin == 2) {  // SwiGLU: rows t (gate) and t + 4 (up) of the chunk
      if (t < 4) {
        const float g = partial[t] * __ldg(scale + c * 8 + t) * out_scale;
        const float u = partial[t + 4] * __ldg(scale + c * 8 + 4 + t) * out_scale;
        __stcg(p.act + c * 4 + t, g / (1.0f + __expf(-g)) * u);
      }
    } else if (t < R) {
      float sum = 0;
#pragma unroll
      for (int j = 0; j < wpr; ++j) sum += partial[t * wpr + j];
      const int n = c * R + t;
      const float y = sum * __ldg(scale + n) * out_scale;
      if constexpr (kLin == 0) {
        __stcg(p.qkv + n, y);
      } else {  // o and down add into the residual stream (row n has one owner per stage)
        __stcg(p.residual + n, __ldcg(p.residual + n) + y);
      }
    }
  }
}

// Decode attention of q head h over the layer's 256 cached tokens (bf16), into attn[h * kD ..].
__device__ void attention_head(StreamSmem& sm, const StreamParams& p, const StreamLayer& L, int h) {
  const int t = threadIdx.x, warp = t / 32, lane = t % 32, kvh = h / (kHq / kHkv);
  if (t < kD) sm.q[t] = __ldcg(p.qkv + h * kD + t);
  named_barrier_sync(1, kConsumers);
  const uint4* krow = reinterpret_cast<const uint4*>(L.k_cache + (static_cast<size_t>(t) * kHkv + kvh) * kD);
  float sc = 0;
#pragma unroll 4
  for (int i = 0; i < kD / 8; ++i) {
    const uint4 kv = __ldg(krow + i);
    const uint32_t words[4] = {kv.x, kv.y, kv.z, kv.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&words[j]));
      sc += f.x * sm.q[8 * i + 2 * j] + f.y * sm.q[8 * i + 2 * j + 1];
    }
  }
  sc *= p.attn_scale;
  const float mx = consumers_max(sc, sm.red[0]);
  const float e = __expf(sc - mx);
  sm.probs[t] = e;
  const float sum = consumers_sum(e, sm.red[1]);  // its barrier also publishes probs
  float a[4] = {0, 0, 0, 0};
  for (int j = 0; j < 32; ++j) {
    const int tok = warp * 32 + j;
    const uint2 vv = __ldg(
        reinterpret_cast<const uint2*>(L.v_cache + (static_cast<size_t>(tok) * kHkv + kvh) * kD) + lane);
    const float2 v01 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&vv.x));
    const float2 v23 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&vv.y));
    const float pj = sm.probs[tok];
    a[0] += pj * v01.x;
    a[1] += pj * v01.y;
    a[2] += pj * v23.x;
    a[3] += pj * v23.y;
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) sm.attn_part[warp][lane * 4 + i] = a[i];
  named_barrier_sync(1, kConsumers);
  if (t < kD) {
    float o = 0;
    for (int w = 0; w < kConsumerWarps; ++w) o += sm.attn_part[w][t];
    __stcg(p.attn + h * kD + t, o / sum);
  }
}

__device__ void produce(StreamSmem& sm, const StreamParams& p) {
  int it = 0;
  for (int l = 0; l < p.num_layers; ++l) {
    const StreamLayer& L = p.layers[l];
    for (int lin = 0; lin < 4; ++lin) {
      const uint32_t bytes = static_cast<uint32_t>(rows_per_chunk(linear_k(lin)) * linear_k(lin));
      int first, last;
      chunk_range(lin, first, last);
      for (int c = first; c < last; ++c, ++it) {
        const int s = it % kSlots;
        wait_slot(smem_u32(&sm.empty[s]), (static_cast<uint32_t>(it / kSlots) & 1u) ^ 1u);
        mbar_arrive_expect_tx(smem_u32(&sm.full[s]), bytes);
        bulk_copy_g2s(smem_u32(sm.slot[s]), L.w[lin] + static_cast<size_t>(c) * bytes, bytes,
                      smem_u32(&sm.full[s]));
      }
    }
  }
}

template <bool kW8a16>
__device__ void consume(StreamSmem& sm, const StreamParams& p) {
  int it = 0;
  if (p.mode == kStreamOnly) {
    for (int l = 0; l < p.num_layers; ++l)
      for (int lin = 0; lin < 4; ++lin) {
        int first, last;
        chunk_range(lin, first, last);
        for (int c = first; c < last; ++c, ++it) {
          const int s = it % kSlots;
          wait_slot(smem_u32(&sm.full[s]), static_cast<uint32_t>(it / kSlots) & 1u);
          __syncwarp();
          if (threadIdx.x % 32 == 0) mbar_arrive(smem_u32(&sm.empty[s]));
        }
      }
    return;
  }
  unsigned epoch = 0;
  for (int l = 0; l < p.num_layers; ++l) {
    const StreamLayer& L = p.layers[l];
    grid_barrier(p.barrier, ++epoch);  // the previous layer's down projection is in the residual
    float s = load_stage_input<kH, true, kW8a16>(sm, p.residual, L.norm1, p.eps);
    consume_linear<0, kW8a16>(sm, p, L, it, s);
    grid_barrier(p.barrier, ++epoch);
    const float* o_in = p.qkv;
    if (p.mode == kFull) {
      for (int h = static_cast<int>(blockIdx.x); h < kHq; h += static_cast<int>(gridDim.x))
        attention_head(sm, p, L, h);
      grid_barrier(p.barrier, ++epoch);
      o_in = p.attn;
    }
    s = load_stage_input<kH, false, kW8a16>(sm, o_in, nullptr, 0.0f);
    consume_linear<1, kW8a16>(sm, p, L, it, s);
    grid_barrier(p.barrier, ++epoch);
    s = load_stage_input<kH, true, kW8a16>(sm, p.residual, L.norm2, p.eps);
    consume_linear<2, kW8a16>(sm, p, L, it, s);
    grid_barrier(p.barrier, ++epoch);
    s = load_stage_input<kI, false, kW8a16>(sm, p.act, nullptr, 0.0f);
    consume_linear<3, kW8a16>(sm, p, L, it, s);
  }
}

// kW8a16: the weights are int8 per channel and x stays in f16 (W8A16) instead of e4m3 weights and x (FP8).
template <bool kW8a16>
__global__ void __launch_bounds__(kThreads, 1) layer_stream_kernel(const StreamParams p) {
  extern __shared__ __align__(128) uint8_t smem_raw[];
  StreamSmem& sm = *reinterpret_cast<StreamSmem*>(smem_raw);
  if (threadIdx.x == 0) {
    for (int s = 0; s < kSlots; ++s) {
      mbar_init(smem_u32(&sm.full[s]), 1);
      mbar_init(smem_u32(&sm.empty[s]), kConsumerWarps);
    }
    mbar_init_fence();
  }
  __syncthreads();
  if (threadIdx.x >= kConsumers) {  // the producer warp: one lane issues every copy
    if (threadIdx.x == kConsumers) produce(sm, p);
    return;
  }
  consume<kW8a16>(sm, p);
}

__global__ void fill_e4m3_codes(uint8_t* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const uint32_t x = hash32(static_cast<uint32_t>(i) ^ hash32(seed) ^ static_cast<uint32_t>(i >> 32));
    p[i] = static_cast<uint8_t>((x % 120) | ((x >> 31) << 7));  // |code| < 120: finite, at most 240
  }
}
__global__ void fill_bf16_uniform(__nv_bfloat16* p, size_t n, uint32_t seed, float center, float spread) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const uint32_t x = hash32(static_cast<uint32_t>(i) ^ hash32(seed));
    p[i] = __float2bfloat16(center + spread * (static_cast<float>(x >> 8) / 16777216.0f * 2.0f - 1.0f));
  }
}

// ---- host side ----

float e4m3_value(uint8_t code) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(code), __NV_E4M3)));
}
float bf16_value(uint16_t bits) {
  const uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

struct HostLayer {
  std::vector<uint8_t> w[4];
  std::vector<float> scale[4];
  std::vector<uint16_t> norm1, norm2, k, v;
};

// load_stage_input on the host: x as the device holds it (FP8: the e4m3 codes' values times 2^-8, s = max|v|
// / 448 by the same f32 operations and conversion; W8A16: f16(v / 16)) and the factor the dot products take.
std::vector<double> host_stage_input(const std::vector<double>& v, bool w8a16, double* factor) {
  std::vector<double> x(v.size());
  if (w8a16) {
    for (size_t i = 0; i < v.size(); ++i)
      x[i] = __half2float(__float2half_rn(static_cast<float>(v[i]) / 16.0f));
    *factor = 16.0;
    return x;
  }
  double m = 0;
  for (double e : v) m = std::max(m, std::fabs(e));
  const float s = m > 0 ? static_cast<float>(m) / kFp8Max : 1.0f, inv_s = 1.0f / s;
  for (size_t i = 0; i < v.size(); ++i)
    x[i] = e4m3_value(__nv_cvt_float_to_fp8(static_cast<float>(v[i]) * inv_s, __NV_SATFINITE, __NV_E4M3)) /
           256.0;
  *factor = static_cast<double>(s) * 256.0;
  return x;
}
// dot16 / dot16_i8 on the host: per 16 columns an even and an odd f16 accumulator, each rounded once per
// product (a double holds the exact a + w * x), then the sums in higher precision (the device's f32 additions
// differ from these in the last bits only); times the row's scale and the stage's factor. Rows over all
// cores.
std::vector<double> host_linear(const HostLayer& L, int lin, const std::vector<double>& x, double factor,
                                bool w8a16) {
  const int n = linear_n(lin), k = linear_k(lin);
  float table[256];
  for (int c = 0; c < 256; ++c)
    table[c] = w8a16 ? static_cast<float>(static_cast<int8_t>(c)) : e4m3_value(static_cast<uint8_t>(c));
  std::vector<double> y(static_cast<size_t>(n));
  auto rows = [&](int r0, int r1) {
    for (int r = r0; r < r1; ++r) {
      const uint8_t* w = L.w[lin].data() + static_cast<size_t>(r) * k;
      double acc = 0;
      for (int g = 0; g < k; g += 16) {
        double a[2] = {0, 0};
        for (int j = 0; j < 16; ++j)
          a[j & 1] = __half2float(__double2half(a[j & 1] + table[w[g + j]] * x[static_cast<size_t>(g + j)]));
        acc += a[0] + a[1];
      }
      y[static_cast<size_t>(r)] = acc * L.scale[lin][static_cast<size_t>(r)] * factor;
    }
  };
  const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(rows, n * t / threads, n * (t + 1) / threads);
  for (std::thread& t : pool) t.join();
  return y;
}
std::vector<double> host_rms_norm(const std::vector<double>& v, const std::vector<uint16_t>& g, double eps) {
  double ss = 0;
  for (double x : v) ss += x * x;
  const double inv = 1.0 / std::sqrt(ss / static_cast<double>(v.size()) + eps);
  std::vector<double> o(v.size());
  for (size_t i = 0; i < v.size(); ++i) o[i] = v[i] * inv * bf16_value(g[i]);
  return o;
}
// One layer of the "full" mode on the host: updates the residual, returns the layer's qkv and SwiGLU output.
struct HostOut {
  std::vector<double> qkv, act;
};
HostOut host_layer(const HostLayer& L, std::vector<double>& res, double eps, double attn_scale, bool w8a16) {
  double s = 0;
  std::vector<double> xq = host_stage_input(host_rms_norm(res, L.norm1, eps), w8a16, &s);
  std::vector<double> qkv = host_linear(L, 0, xq, s, w8a16);
  std::vector<double> attn(static_cast<size_t>(kH));
  for (int h = 0; h < kHq; ++h) {
    const int kvh = h / (kHq / kHkv);
    std::vector<double> sc(kCtx);
    double mx = -1e300;
    for (int t = 0; t < kCtx; ++t) {
      double d = 0;
      for (int i = 0; i < kD; ++i)
        d += qkv[static_cast<size_t>(h * kD + i)] *
             bf16_value(L.k[(static_cast<size_t>(t) * kHkv + kvh) * kD + i]);
      sc[static_cast<size_t>(t)] = d * attn_scale;
      mx = std::max(mx, sc[static_cast<size_t>(t)]);
    }
    double sum = 0;
    for (double& x : sc) sum += (x = std::exp(x - mx));
    for (int i = 0; i < kD; ++i) {
      double o = 0;
      for (int t = 0; t < kCtx; ++t)
        o += sc[static_cast<size_t>(t)] * bf16_value(L.v[(static_cast<size_t>(t) * kHkv + kvh) * kD + i]);
      attn[static_cast<size_t>(h * kD + i)] = o / sum;
    }
  }
  xq = host_stage_input(attn, w8a16, &s);
  std::vector<double> y = host_linear(L, 1, xq, s, w8a16);
  for (int i = 0; i < kH; ++i) res[static_cast<size_t>(i)] += y[static_cast<size_t>(i)];
  xq = host_stage_input(host_rms_norm(res, L.norm2, eps), w8a16, &s);
  const std::vector<double> gu = host_linear(L, 2, xq, s, w8a16);
  std::vector<double> act(static_cast<size_t>(kI));
  for (int c = 0; c < kI / 4; ++c)
    for (int t = 0; t < 4; ++t) {
      const double g = gu[static_cast<size_t>(c * 8 + t)], u = gu[static_cast<size_t>(c * 8 + 4 + t)];
      act[static_cast<size_t>(c * 4 + t)] = g / (1.0 + std::exp(-g)) * u;
    }
  xq = host_stage_input(act, w8a16, &s);
  y = host_linear(L, 3, xq, s, w8a16);
  for (int i = 0; i < kH; ++i) res[static_cast<size_t>(i)] += y[static_cast<size_t>(i)];
  return {std::move(qkv), std::move(act)};
}

// ||got - want|| / ||want||, or infinity where want is all zeros (a vacuous check fails).
double rel_l2_host(const std::vector<float>& got, const std::vector<double>& want) {
  double e = 0, n = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    e += (got[i] - want[i]) * (got[i] - want[i]);
    n += want[i] * want[i];
  }
  return n > 0 ? std::sqrt(e / n) : INFINITY;
}

}  // namespace

void bench_layer_stream(cuda::CudaBackend& be, double bw) {
  cudaStream_t st = be.stream();
  int dev = 0, coop = 0, per_sm = 0;
  XI_CUDA_CHECK(cudaGetDevice(&dev));
  XI_CUDA_CHECK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev));
  const int smem = static_cast<int>(sizeof(StreamSmem));
  for (const void* k : {reinterpret_cast<const void*>(layer_stream_kernel<false>),
                        reinterpret_cast<const void*>(layer_stream_kernel<true>)})
    XI_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  XI_CUDA_CHECK(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, layer_stream_kernel<false>, kThreads, smem));
  const int ctas = be.num_sms();
  std::printf(
      "layer stream: %d CTAs of %d threads, %d B of shared memory each (%d slots of %d KB), %d per SM, "
      "cooperative launch %s\n",
      ctas, kThreads, smem, kSlots, kSlotBytes / 1024, per_sm, coop ? "yes" : "no");
  if (!coop || per_sm < 1) {
    std::printf("layer stream: skipped (needs a cooperative launch of one CTA per SM)\n");
    return;
  }

  const int L = 32;
  // be.allocate zeroes on the backend's (non-blocking) stream: every upload below goes on that stream too.
  std::vector<backend::DeviceTensor> keep;
  auto alloc = [&](DType t, int64_t n) -> void* {
    keep.push_back(be.allocate(t, Shape{n}));
    return keep.back().view.data;
  };
  std::vector<StreamLayer> layers(L);
  double weight_bytes = 0;
  for (int l = 0; l < L; ++l) {
    StreamLayer& sl = layers[static_cast<size_t>(l)];
    for (int lin = 0; lin < 4; ++lin) {
      const int64_t n = linear_n(lin), nk = n * linear_k(lin);
      auto* w = static_cast<uint8_t*>(alloc(DType::kU8, nk));
      fill_e4m3_codes<<<1024, 256, 0, st>>>(w, static_cast<size_t>(nk), static_cast<uint32_t>(100 * l + lin));
      XI_CUDA_CHECK_LAUNCH();
      std::vector<float> sc(static_cast<size_t>(n));
      for (int64_t r = 0; r < n; ++r)
        sc[static_cast<size_t>(r)] = 1e-3f * (1.0f + static_cast<float>((r * 7 + l) % 11) / 11.0f);
      auto* sd = static_cast<float*>(alloc(DType::kF32, n));
      XI_CUDA_CHECK(cudaMemcpyAsync(sd, sc.data(), sc.size() * 4, cudaMemcpyHostToDevice, st));
      sl.w[lin] = w;
      sl.scale[lin] = sd;
      weight_bytes += static_cast<double>(nk) + 4.0 * static_cast<double>(n);
    }
    auto bf16 = [&](int64_t n, uint32_t seed, float center, float spread) {
      auto* p = static_cast<__nv_bfloat16*>(alloc(DType::kBF16, n));
      fill_bf16_uniform<<<256, 256, 0, st>>>(p, static_cast<size_t>(n), seed, center, spread);
      XI_CUDA_CHECK_LAUNCH();
      return p;
    };
    sl.norm1 = bf16(kH, 7000 + l, 1.0f, 0.2f);
    sl.norm2 = bf16(kH, 8000 + l, 1.0f, 0.2f);
    sl.k_cache = bf16(int64_t{kCtx} * kHkv * kD, 9000 + l, 0.0f, 1.0f);
    sl.v_cache = bf16(int64_t{kCtx} * kHkv * kD, 10000 + l, 0.0f, 1.0f);
  }
  auto* layers_dev =
      static_cast<StreamLayer*>(alloc(DType::kU8, static_cast<int64_t>(sizeof(StreamLayer)) * L));
  XI_CUDA_CHECK(
      cudaMemcpyAsync(layers_dev, layers.data(), sizeof(StreamLayer) * L, cudaMemcpyHostToDevice, st));
  StreamParams p{};
  p.layers = layers_dev;
  p.eps = 1e-5f;
  p.attn_scale = 1.0f / std::sqrt(static_cast<float>(kD));
  p.residual = static_cast<float*>(alloc(DType::kF32, kH));
  p.qkv = static_cast<float*>(alloc(DType::kF32, kQkvRows));
  p.attn = static_cast<float*>(alloc(DType::kF32, kH));
  p.act = static_cast<float*>(alloc(DType::kF32, kI));
  p.barrier = static_cast<unsigned*>(alloc(DType::kI32, 1));
  auto* residual0 = static_cast<float*>(alloc(DType::kF32, kH));
  std::vector<float> res0(kH);
  for (int i = 0; i < kH; ++i) res0[static_cast<size_t>(i)] = std::sin(0.37f * static_cast<float>(i)) * 2.0f;
  XI_CUDA_CHECK(cudaMemcpyAsync(residual0, res0.data(), 4 * kH, cudaMemcpyHostToDevice, st));
  be.synchronize();  // every upload above is ordered after its allocation's zeroing on the backend's stream

  // The same weight bytes serve both formats: FP8 reads them as e4m3 codes, W8A16 as int8.
  auto kernel = [](bool w8a16) {
    return w8a16 ? reinterpret_cast<const void*>(layer_stream_kernel<true>)
                 : reinterpret_cast<const void*>(layer_stream_kernel<false>);
  };
  auto launch = [&](int mode, int num_layers, bool w8a16) {
    p.mode = mode;
    p.num_layers = num_layers;
    XI_CUDA_CHECK(cudaMemcpyAsync(p.residual, residual0, 4 * kH, cudaMemcpyDeviceToDevice, st));
    XI_CUDA_CHECK(cudaMemsetAsync(p.barrier, 0, 4, st));
    void* args[] = {&p};
    XI_CUDA_CHECK(cudaLaunchCooperativeKernel(kernel(w8a16), dim3(ctas), dim3(kThreads), args,
                                              static_cast<size_t>(smem), st));
    XI_CUDA_CHECK_LAUNCH();
  };

  // ---- check: 2 layers of the full mode against the host, each format ----
  for (const bool w8a16 : {false, true}) {
    const int check_layers = 2;
    launch(kFull, check_layers, w8a16);
    std::vector<float> res(kH), act(kI), qkv(kQkvRows);
    XI_CUDA_CHECK(cudaStreamSynchronize(st));
    XI_CUDA_CHECK(cudaMemcpy(res.data(), p.residual, 4 * kH, cudaMemcpyDeviceToHost));
    XI_CUDA_CHECK(cudaMemcpy(act.data(), p.act, 4 * kI, cudaMemcpyDeviceToHost));
    XI_CUDA_CHECK(cudaMemcpy(qkv.data(), p.qkv, 4 * kQkvRows, cudaMemcpyDeviceToHost));
    std::vector<double> href(res0.begin(), res0.end());
    HostOut hout;
    for (int l = 0; l < check_layers; ++l) {
      const StreamLayer& sl = layers[static_cast<size_t>(l)];
      HostLayer h;
      for (int lin = 0; lin < 4; ++lin) {
        const size_t n = static_cast<size_t>(linear_n(lin)), nk = n * static_cast<size_t>(linear_k(lin));
        h.w[lin].resize(nk);
        h.scale[lin].resize(n);
        XI_CUDA_CHECK(cudaMemcpy(h.w[lin].data(), sl.w[lin], nk, cudaMemcpyDeviceToHost));
        XI_CUDA_CHECK(cudaMemcpy(h.scale[lin].data(), sl.scale[lin], 4 * n, cudaMemcpyDeviceToHost));
      }
      auto bf16_back = [](const __nv_bfloat16* src, size_t n) {
        std::vector<uint16_t> v(n);
        XI_CUDA_CHECK(cudaMemcpy(v.data(), src, 2 * n, cudaMemcpyDeviceToHost));
        return v;
      };
      h.norm1 = bf16_back(sl.norm1, kH);
      h.norm2 = bf16_back(sl.norm2, kH);
      h.k = bf16_back(sl.k_cache, size_t{kCtx} * kHkv * kD);
      h.v = bf16_back(sl.v_cache, size_t{kCtx} * kHkv * kD);
      hout = host_layer(h, href, p.eps, p.attn_scale, w8a16);
    }
    auto norm = [](const std::vector<double>& v) {
      double n = 0;
      for (double x : v) n += x * x;
      return std::sqrt(n);
    };
    const double e_res = rel_l2_host(res, href), e_act = rel_l2_host(act, hout.act),
                 e_qkv = rel_l2_host(qkv, hout.qkv);
    std::printf(
        "layer stream %s check (%d layers, full) vs host reference (norms %.3g / %.3g / %.3g): residual rel "
        "L2 "
        "%.2e, last qkv %.2e, last SwiGLU output %.2e: %s\n",
        w8a16 ? "w8a16" : "fp8", check_layers, norm(href), norm(hout.qkv), norm(hout.act), e_res, e_qkv,
        e_act, e_res < 1e-2 && e_qkv < 1e-2 && e_act < 1e-2 ? "ok" : "MISMATCH");
  }

  // ---- timing: one launch is one token's 32 layers ----
  const double kv_bytes = 2.0 * kCtx * kHkv * kD * 2;
  const char* names[] = {"full", "no attention", "stream only"};
  for (const auto& [mode, w8a16] : std::vector<std::pair<int, bool>>{{kStreamOnly, false},
                                                                     {kNoAttention, false},
                                                                     {kFull, false},
                                                                     {kNoAttention, true},
                                                                     {kFull, true}}) {
    const double sec = cuda::time_on_stream(st, 5, [&](int) { launch(mode, L, w8a16); });
    const double bytes = weight_bytes + (mode == kFull ? L * kv_bytes : 0.0);
    const double roof = bytes / (bw * 1e9);
    std::printf(
        "layer stream %-5s %-12s: %8.1f us per token (32 layers), %6.2f us per layer, %6.1f GB/s = %5.1f%% "
        "of "
        "the copy ceiling (roofline %.1f us per layer)\n",
        w8a16 ? "w8a16" : "fp8", names[mode], sec * 1e6, sec * 1e6 / L, bytes / sec / 1e9, 100.0 * roof / sec,
        roof * 1e6 / L);
  }
  // The engine replays decode steps as CUDA graphs: can the cooperative launch be captured, and at what cost?
  {
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    p.mode = kFull;
    p.num_layers = L;
    void* args[] = {&p};
    cudaError_t e = cudaStreamBeginCapture(st, cudaStreamCaptureModeRelaxed);
    if (e == cudaSuccess) {
      cudaError_t op = cudaMemcpyAsync(p.residual, residual0, 4 * kH, cudaMemcpyDeviceToDevice, st);
      if (op == cudaSuccess) op = cudaMemsetAsync(p.barrier, 0, 4, st);
      if (op == cudaSuccess)
        op = cudaLaunchCooperativeKernel(kernel(false), dim3(ctas), dim3(kThreads), args,
                                         static_cast<size_t>(smem), st);
      e = cudaStreamEndCapture(st, &graph);
      if (op != cudaSuccess) e = op;
    }
    if (e == cudaSuccess) e = cudaGraphInstantiate(&exec, graph, 0);
    if (e == cudaSuccess) {
      const double sec = cuda::time_on_stream(st, 5, [&](int) { XI_CUDA_CHECK(cudaGraphLaunch(exec, st)); });
      std::printf("layer stream fp8 full, as a CUDA graph replay: %8.1f us per token, %6.2f us per layer\n",
                  sec * 1e6, sec * 1e6 / L);
    } else {
      std::printf("layer stream: the cooperative launch does not capture into a CUDA graph here: %s\n",
                  cudaGetErrorString(e));
      (void)cudaGetLastError();
    }
    if (exec != nullptr) XI_CUDA_CHECK(cudaGraphExecDestroy(exec));
    if (graph != nullptr) XI_CUDA_CHECK(cudaGraphDestroy(graph));
  }
  std::printf(
      "layer stream: a token would add the lm_head (bf16 128256 x 4096, ~0.25 ms at m = 1, session 15) and "
      "RoPE + KV write (not in the probe)\n");
  be.synchronize();
}

}  // namespace xinfer::bench
