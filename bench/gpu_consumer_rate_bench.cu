// gpu_kernel_bench --layer-stream, last part: the consumer rate of each format's inner loop (FP8, W8A16, int4
// g128) on a chunk resident in shared memory, against one SM's share of the copy ceiling. The layer-stream
// probe (gpu_layer_stream_bench.cu) streams FP8 and W8A16; W4A16 has no stream variant, and what decides
// whether one could stream at HBM's rate is whether its consumers keep up with twice the weights per byte.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstdio>

#include "gpu_bench_util.h"
#include "layer_stream_dot.cuh"
#include "xinfer/backend/cuda/cuda_backend.h"
#include "xinfer/backend/cuda/cuda_check.h"
#include "xinfer/backend/cuda/device_ceilings.h"
#include "xinfer/backend/cuda/kernels/mbarrier.cuh"

namespace xinfer::bench {
namespace {

using cuda::named_barrier_sync;

constexpr int kConsumerWarps = 8, kConsumers = kConsumerWarps * 32;  // the probe's consumer warps

// W4A16 (int4 g128, zero 8) has no layer-stream variant; what decides whether one could stream at HBM's rate
// is whether its consumers keep up with twice the weights per byte. consumer_rate_kernel runs each format's
// inner loop as the layer stream does (x in registers, one 32 KB chunk at a time, a warp sum and a consumer
// barrier per chunk) over a resident shared-memory chunk, so the rate printed is compute alone: bytes per
// second per SM against the copy ceiling's share of one SM.

constexpr int kRateChunk = 32 * 1024;
enum RateFormat : int { kRateFp8 = 0, kRateW8a16 = 1, kRateInt4 = 2 };

template <int kFmt>
__global__ void __launch_bounds__(kConsumers, 1) consumer_rate_kernel(int chunks, float* out) {
  extern __shared__ __align__(16) uint8_t rate_smem[];  // the chunk, then int4's scales [16 rows][32 groups]
  float* scales = reinterpret_cast<float*>(rate_smem + kRateChunk);
  // e4m3 codes below 0x70 are finite; every int8 and nibble is.
  const uint32_t mask = kFmt == kRateFp8 ? 0x6F6F6F6Fu : 0xFFFFFFFFu;
  for (int i = static_cast<int>(threadIdx.x); i < kRateChunk / 4; i += kConsumers)
    reinterpret_cast<uint32_t*>(rate_smem)[i] =
        hash32(static_cast<uint32_t>(i) * 2654435761u + blockIdx.x) & mask;
  for (int i = static_cast<int>(threadIdx.x); i < 16 * 32; i += kConsumers)
    scales[i] = 1e-3f * (1.0f + static_cast<float>(i % 7));
  __syncthreads();
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  uint32_t x[8][16];  // FP8 / W8A16: 8 passes of 8 words; int4: 4 passes of 16 (64 registers either way)
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int j = 0; j < 16; ++j)
      x[i][j] = 0x3C003C00u ^ (hash32(static_cast<uint32_t>(threadIdx.x * 131 + i * 16 + j)) & 0x03FF03FFu);
  float acc = 0.0f;
  for (int c = 0; c < chunks; ++c) {
    float sum = 0.0f;
    if constexpr (kFmt != kRateInt4) {  // 8 rows of 4096 bytes: a row per warp, 8 passes of 512 bytes
      const uint8_t* row = rate_smem + warp * 4096 + lane * 16;
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const uint4 w = *reinterpret_cast<const uint4*>(row + i * 512);
        const uint32_t(&xi)[8] = *reinterpret_cast<const uint32_t(*)[8]>(&x[i][0]);
        sum += kFmt == kRateW8a16 ? dot16_i8(w, xi) : dot16(w, xi);
      }
    } else {  // 16 rows of 2048 bytes (4096 int4): two rows per warp, 4 passes of 512 bytes (groups of 128)
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) {
        const int r = warp * 2 + rr;
        const uint8_t* row = rate_smem + r * 2048 + lane * 16;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const uint4 w = *reinterpret_cast<const uint4*>(row + i * 512);
          sum += dot32_i4(w, x[i], scales[r * 32 + (i * 512 + lane * 16) / 64]);
        }
      }
    }
    sum = warp_sum(sum);
    acc += sum;
    named_barrier_sync(1, kConsumers);  // the layer stream's per-chunk barrier
  }
  if (threadIdx.x % 32 == 0) out[blockIdx.x * kConsumerWarps + warp] = acc;
}

}  // namespace

void bench_consumer_rate(cuda::CudaBackend& be, double bw) {
  cudaStream_t st = be.stream();
  const int ctas = be.num_sms();
  backend::DeviceTensor out_t = be.allocate(DType::kF32, Shape{int64_t{1} * ctas * kConsumerWarps});
  auto* out = static_cast<float*>(out_t.view.data);
  {
    const int chunks = 4000;
    const size_t rate_smem = kRateChunk + 16 * 32 * 4;
    const double share = bw * 1e9 / ctas;  // one SM's share of the copy ceiling, bytes per second
    const char* fmt_names[] = {"fp8 (e4m3 x e4m3)", "w8a16 (int8 x f16)", "w4a16 (int4 g128 x f16)"};
    for (const int f : {kRateFp8, kRateW8a16, kRateInt4}) {
      const auto run = [&](int) {
        if (f == kRateFp8)
          consumer_rate_kernel<kRateFp8><<<ctas, kConsumers, rate_smem, st>>>(chunks, out);
        else if (f == kRateW8a16)
          consumer_rate_kernel<kRateW8a16><<<ctas, kConsumers, rate_smem, st>>>(chunks, out);
        else
          consumer_rate_kernel<kRateInt4><<<ctas, kConsumers, rate_smem, st>>>(chunks, out);
        XI_CUDA_CHECK_LAUNCH();
      };
      const double sec = cuda::time_on_stream(st, 3, run);
      const double per_sm = static_cast<double>(chunks) * kRateChunk / sec;
      std::printf(
          "consumer rate %-24s: %7.1f GB/s per SM = %5.2fx the copy ceiling's share of an SM (%.1f GB/s); "
          "%.0f weights per SM per us\n",
          fmt_names[f], per_sm / 1e9, per_sm / share, share / 1e9,
          per_sm * (f == kRateInt4 ? 2.0 : 1.0) / 1e6);
    }
  }
  be.synchronize();
}

}  // namespace xinfer::bench
