// Probe (not part of the build): how fast one persistent CTA per SM streams a weight matrix through a ring of
// shared-memory stages filled by bulk copies (cp.async.bulk + mbarrier), against plain 16-byte loads, as a
// function of stage size, ring depth, copies per stage, CTAs per SM, threads per CTA and what the consumer does
// with each stage (nothing, XOR, the streaming FP8 GEMV's f16 math, that math plus shuffle sums); and whether a
// programmatic dependent (PDL) whose CTAs sit resident in griddepcontrol.wait slows the kernel it waits for.
// The question behind it: session 21's streaming batch-1 FP8 GEMV (quant_stream_gemv.cu, commit 5a6c0e9, not
// kept) reached 40-67% of the copy bandwidth and its decode chain ran slower with PDL than without (docs/PERF.md
// "Session 21").
//   nvcc -arch=sm_90a -O3 -std=c++17 -o /tmp/bulk_stream_probe bench/probes/bulk_stream_probe.cu
//   /tmp/bulk_stream_probe   (prints one line per variant: GB/s of the matrix's bytes)
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <vector>

#define CK(x)                                                                       \
  do {                                                                              \
    cudaError_t e = (x);                                                            \
    if (e != cudaSuccess) {                                                         \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e), __FILE__, __LINE__); \
      return 1;                                                                     \
    }                                                                               \
  } while (0)

__device__ __forceinline__ uint32_t smem_u32(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done) : "r"(bar), "r"(parity) : "memory");
  } while (!done);
}
__device__ __forceinline__ void bulk(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar) : "memory");
}

struct P {
  const uint8_t* w;
  size_t bytes;
  int stage, stages, pieces;
  int read;  // 0: no reads; 1: XOR the stage's 16-byte units; 2: the streaming GEMV's f16 math on them (e4m3
             // pairs, two HFMA2 chains of 4 per unit) and 3: that math plus a warp shuffle sum per unit group
  uint32_t* out;
  bool release;  // griddepcontrol.launch_dependents at the start (the PDL-waiter experiment)
};

__device__ __forceinline__ uint32_t hfma2(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}
__device__ __forceinline__ uint32_t e4m3x2(uint32_t v) {
  uint32_t d;
  asm("{\n.reg .b16 lo;\ncvt.u16.u32 lo, %1;\ncvt.rn.f16x2.e4m3x2 %0, lo;\n}" : "=r"(d) : "r"(v));
  return d;
}

__global__ void __launch_bounds__(1024) ring_kernel(P p) {
  extern __shared__ __align__(128) uint8_t ring[];
  __shared__ __align__(8) uint64_t full[32];
  const int tid = threadIdx.x;
  const size_t per = p.bytes / gridDim.x / p.stage * p.stage;  // whole stages per CTA
  const uint8_t* base = p.w + per * blockIdx.x;
  const int total = static_cast<int>(per / p.stage);
  auto issue = [&](int j) {
    const int b = j % p.stages;
    const uint32_t bar = smem_u32(&full[b]);
    mbar_expect(bar, p.stage);
    const int piece = p.stage / p.pieces;
    for (int i = 0; i < p.pieces; ++i)
      bulk(smem_u32(ring + static_cast<size_t>(b) * p.stage + i * piece), base + static_cast<size_t>(j) * p.stage + i * piece,
           piece, bar);
  };
  if (tid == 0) {
    for (int b = 0; b < p.stages; ++b) mbar_init(smem_u32(&full[b]), 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    for (int j = 0; j < p.stages && j < total; ++j) issue(j);
  }
  if (p.release) asm volatile("griddepcontrol.launch_dependents;" :::);
  __syncthreads();
  uint32_t acc = 0;
  float facc = 0.f;
  const uint32_t xpair = 0x3C003C00u + threadIdx.x;
  for (int j = 0; j < total; ++j) {
    const int b = j % p.stages;
    mbar_wait(smem_u32(&full[b]), (j / p.stages) & 1);
    if (p.read == 1) {
      const uint4* s = reinterpret_cast<const uint4*>(ring + static_cast<size_t>(b) * p.stage);
      for (int i = tid; i < p.stage / 16; i += blockDim.x) {
        const uint4 v = s[i];
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
      }
    } else if (p.read >= 2) {
      const uint4* s = reinterpret_cast<const uint4*>(ring + static_cast<size_t>(b) * p.stage);
      float part = 0.f;
      for (int i = tid; i < p.stage / 16; i += blockDim.x) {
        const uint4 v = s[i];
        uint32_t h[2] = {0u, 0u};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const uint32_t wd = (&v.x)[e];
          h[e / 2] = hfma2(e4m3x2(wd & 0xffffu), xpair, h[e / 2]);
          h[e / 2] = hfma2(e4m3x2(wd >> 16), xpair, h[e / 2]);
        }
        const __half2 a = *reinterpret_cast<const __half2*>(&h[0]), c = *reinterpret_cast<const __half2*>(&h[1]);
        part += (__low2float(a) + __high2float(a)) + (__low2float(c) + __high2float(c));
      }
      if (p.read == 3)
        for (int o = 16; o > 0; o >>= 1) part += __shfl_xor_sync(0xffffffffu, part, o);
      facc += part;
    }
    __syncthreads();
    if (tid == 0 && j + p.stages < total) {
      asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
      issue(j + p.stages);
    }
  }
  if (acc == 0x12345678u || facc == 1234.5f) p.out[tid] = acc;
}

// The PDL waiter: launched as the ring kernel's programmatic dependent, its CTAs become resident beside the
// ring's and wait for it in griddepcontrol.wait (as the streaming GEMV's next linear did), then exit.
__global__ void __launch_bounds__(512) waiter_kernel(uint32_t* out) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  if (threadIdx.x == 1023) out[0] = 1;
}

// Plain loads: each thread keeps kU 16-byte loads in flight over the CTA's band (the dot GEMV's pattern).
template <int kU>
__global__ void __launch_bounds__(256) load_kernel(P p) {
  const size_t per = p.bytes / gridDim.x / (256 * 16 * kU) * (256 * 16 * kU);
  const uint8_t* base = p.w + per * blockIdx.x;
  uint32_t acc = 0;
  for (size_t off = 0; off < per; off += 256 * 16 * kU) {
    uint4 v[kU];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const uint8_t* a = base + off + (static_cast<size_t>(u) * 256 + threadIdx.x) * 16;
      asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
                   : "=r"(v[u].x), "=r"(v[u].y), "=r"(v[u].z), "=r"(v[u].w) : "l"(a));
    }
#pragma unroll
    for (int u = 0; u < kU; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  if (acc == 0x12345678u) p.out[threadIdx.x] = acc;
}

int main() {
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const size_t bytes = size_t{28672} * 4096;  // the 8B gate_up in FP8
  const int copies = 4;                       // rotate past L2
  uint8_t* w = nullptr;
  uint32_t* out = nullptr;
  CK(cudaMalloc(&w, bytes * copies));
  CK(cudaMemset(w, 1, bytes * copies));
  CK(cudaMalloc(&out, 4096));
  CK(cudaFuncSetAttribute(ring_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  auto time_it = [&](auto launch) -> double {
    for (int i = 0; i < 3; ++i) launch(i % copies);
    cudaEventRecord(a);
    const int reps = 20;
    for (int i = 0; i < reps; ++i) launch(i % copies);
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    return bytes * reps / (ms * 1e-3) / 1e9;
  };
  struct V { int stage, stages, pieces, per_sm, threads, read; };
  std::vector<V> vs = {{16384, 6, 1, 1, 256, 0}, {16384, 6, 1, 1, 256, 1},  {16384, 6, 1, 1, 256, 2}, {16384, 6, 1, 1, 256, 3},
                       {16384, 6, 1, 1, 512, 1}, {16384, 6, 1, 1, 512, 2},  {16384, 6, 1, 1, 512, 3}, {16384, 5, 1, 1, 1024, 2},
                       {16384, 6, 1, 2, 256, 2}, {16384, 3, 1, 2, 512, 2},  {32768, 3, 1, 1, 512, 2}, {16384, 12, 1, 1, 512, 2}};
  for (const V& v : vs) {
    P p{nullptr, bytes, v.stage, v.stages, v.pieces, v.read, out, false};
    const double gbs = time_it([&](int c) {
      p.w = w + bytes * c;
      ring_kernel<<<sms * v.per_sm, v.threads, static_cast<size_t>(v.stage) * v.stages>>>(p);
    });
    CK(cudaGetLastError());
    std::printf("ring stage %6d x %2d stages, %d CTA/SM of %4d threads, consumer %s: %7.0f GB/s\n", v.stage, v.stages,
                v.per_sm, v.threads, v.read == 0 ? "none" : v.read == 1 ? "xor" : v.read == 2 ? "f16 math" : "f16 math + shuffles",
                gbs);
  }
  // The ring with its programmatic dependent resident and waiting (512 threads per CTA, one per SM) vs alone.
  for (const int read : {1, 2}) {
    P p{nullptr, bytes, 16384, 5, 1, read, out, true};
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(sms);
    cfg.blockDim = dim3(512);
    cfg.dynamicSmemBytes = 0;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    const double alone = time_it([&](int c) {
      p.w = w + bytes * c;
      ring_kernel<<<sms, 512, 16384 * 5>>>(p);
    });
    const double with_waiter = time_it([&](int c) {
      p.w = w + bytes * c;
      ring_kernel<<<sms, 512, 16384 * 5>>>(p);
      cudaLaunchKernelEx(&cfg, waiter_kernel, out);
    });
    CK(cudaGetLastError());
    std::printf("ring 16 KB x 5, 512 threads, consumer %s: alone %7.0f GB/s, with a PDL dependent waiting beside it %7.0f GB/s\n",
                read == 1 ? "xor" : "f16 math", alone, with_waiter);
  }
  for (int per_sm : {1, 2, 4}) {
    P p{nullptr, bytes, 0, 0, 0, 0, out, false};
    const double g4 = time_it([&](int c) { p.w = w + bytes * c; load_kernel<4><<<sms * per_sm, 256>>>(p); });
    const double g8 = time_it([&](int c) { p.w = w + bytes * c; load_kernel<8><<<sms * per_sm, 256>>>(p); });
    std::printf("plain loads, %d CTA/SM: 4 in flight %7.0f GB/s, 8 in flight %7.0f GB/s\n", per_sm, g4, g8);
  }
  return 0;
}
