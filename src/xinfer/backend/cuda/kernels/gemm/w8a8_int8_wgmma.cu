// The W8A8 GEMM on warpgroup MMAs with its scales fused, int8 and FP8 e4m3 (w8a8_int8_wgmma.h).
#include "xinfer/backend/cuda/kernels/gemm/w8a8_int8_wgmma.h"

#include <cuda.h>  // CUtensorMap and its encoder's types (the encoder itself comes through the runtime)
#include <cudaTypedefs.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "xinfer/backend/cuda/cuda_check.h"
#include "xinfer/backend/cuda/kernels/cp_async.cuh"
#include "xinfer/backend/cuda/kernels/device_launch.h"
#include "xinfer/backend/cuda/kernels/gemm/int8_scale.cuh"
#include "xinfer/backend/cuda/kernels/mbarrier.cuh"
#include "xinfer/backend/cuda/kernels/wgmma.cuh"

namespace xinfer::cuda {
namespace {

constexpr int kBK = 128;  // k bytes per step: one 128-byte swizzle row

#define XI_S32X8(d, i)                                                                        \
  "+r"(d[i]), "+r"(d[i + 1]), "+r"(d[i + 2]), "+r"(d[i + 3]), "+r"(d[i + 4]), "+r"(d[i + 5]), \
      "+r"(d[i + 6]), "+r"(d[i + 7])

// d[64 x 128] += A[64 x 32] . B[128 x 32]^T, s8 in (both K-major in shared memory), s32 accumulate.
__device__ __forceinline__ void wgmma_s8(uint32_t (&d)[64], uint64_t a, uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8 "
      XI_WGMMA_D64 ", "
      "%64, %65, p;\n}\n"
      : XI_S32X8(d, 0), XI_S32X8(d, 8), XI_S32X8(d, 16), XI_S32X8(d, 24), XI_S32X8(d, 32), XI_S32X8(d, 40),
        XI_S32X8(d, 48), XI_S32X8(d, 56)
      : "l"(a), "l"(b), "r"(1)
      : "memory");
}
// d[64 x 256] += A[64 x 32] . B[256 x 32]^T.
__device__ __forceinline__ void wgmma_s8(uint32_t (&d)[128], uint64_t a, uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k32.s32.s8.s8 "
      XI_WGMMA_D128 ", "
      "%128, %129, p;\n}\n"
      : XI_S32X8(d, 0), XI_S32X8(d, 8), XI_S32X8(d, 16), XI_S32X8(d, 24), XI_S32X8(d, 32), XI_S32X8(d, 40),
        XI_S32X8(d, 48), XI_S32X8(d, 56), XI_S32X8(d, 64), XI_S32X8(d, 72), XI_S32X8(d, 80), XI_S32X8(d, 88),
        XI_S32X8(d, 96), XI_S32X8(d, 104), XI_S32X8(d, 112), XI_S32X8(d, 120)
      : "l"(a), "l"(b), "r"(1)
      : "memory");
}
#undef XI_S32X8

#define XI_F32X8(d, i)                                                                        \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
      "+f"(d[i + 6]), "+f"(d[i + 7])

// d[64 x 128] += A[64 x 32] . B[128 x 32]^T, e4m3 in (both K-major in shared memory: the int8 layout), f32
// accumulate (the tensor cores' FP8 accumulation, cuBLASLt's "fast accumulation").
__device__ __forceinline__ void wgmma_e4m3(float (&d)[64], uint64_t a, uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 " XI_WGMMA_D64
      ", "
      "%64, %65, p, 1, 1;\n}\n"
      : XI_F32X8(d, 0), XI_F32X8(d, 8), XI_F32X8(d, 16), XI_F32X8(d, 24), XI_F32X8(d, 32), XI_F32X8(d, 40),
        XI_F32X8(d, 48), XI_F32X8(d, 56)
      : "l"(a), "l"(b), "r"(1)
      : "memory");
}
// d[64 x 256] += A[64 x 32] . B[256 x 32]^T.
__device__ __forceinline__ void wgmma_e4m3(float (&d)[128], uint64_t a, uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3 " XI_WGMMA_D128
      ", "
      "%128, %129, p, 1, 1;\n}\n"
      : XI_F32X8(d, 0), XI_F32X8(d, 8), XI_F32X8(d, 16), XI_F32X8(d, 24), XI_F32X8(d, 32), XI_F32X8(d, 40),
        XI_F32X8(d, 48), XI_F32X8(d, 56), XI_F32X8(d, 64), XI_F32X8(d, 72), XI_F32X8(d, 80), XI_F32X8(d, 88),
        XI_F32X8(d, 96), XI_F32X8(d, 104), XI_F32X8(d, 112), XI_F32X8(d, 120)
      : "l"(a), "l"(b), "r"(1)
      : "memory");
}
#undef XI_F32X8

// The kernel's operands, int8 or e4m3 codes alike (Int8GemmArgs / Fp8GemmArgs without their pointer types).
struct WgmmaArgs {
  const void* xq;             // [m, k] codes
  const float* x_scales;      // [m]
  const void* wq;             // [n, k] codes
  const float* w_scales;      // [n]
  const __nv_bfloat16* bias;  // [n] or nullptr
  void* y;                    // [m, n] bf16 or f32
  bool y_f32;
  int m, n, k;
};

// One output's scaling: int8's exact int32 sum in the oracle's order (int8_scale.cuh), FP8's f32 sum alike.
__device__ __forceinline__ float scaled_sum(uint32_t acc, float sx, float sw) {
  return int8_scaled(static_cast<int32_t>(acc), sx, sw);
}
__device__ __forceinline__ float scaled_sum(float acc, float sx, float sw) {
  return (sw * sx) * acc;
}

// The epilogue straight from one warp's accumulators, in the oracle's order (int8_scale.cuh):
// acc[4j + 2h + e] = y[row0 + 8h][n0 + 8j + 2 (lane % 4) + e]. The weight scales (and bias) of kChunk column
// pairs are loaded together (indices clamped into range), then their outputs stored: one load latency per
// chunk, not one per column behind each store.
template <int kN, typename Acc>
__device__ __forceinline__ void store_tile(const WgmmaArgs& a, const Acc (&acc)[kN], int row0, int n0,
                                           int lane) {
  constexpr int kPairs = kN / 4, kChunk = kN >= 128 ? 2 : 4;  // bn 256: fewer registers beside its 128 sums
  // Two consecutive outputs per store where every pair is aligned: even n (even columns) and an aligned y.
  const bool pairs = a.n % 2 == 0 && reinterpret_cast<uintptr_t>(a.y) % (a.y_f32 ? 8 : 4) == 0;
  float sx[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) sx[h] = __ldg(a.x_scales + min(row0 + 8 * h, a.m - 1));
#pragma unroll
  for (int j0 = 0; j0 < kPairs; j0 += kChunk) {
    float sw[kChunk][2], bias[kChunk][2];
#pragma unroll
    for (int jj = 0; jj < kChunk; ++jj)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int col = min(n0 + 8 * (j0 + jj) + 2 * (lane % 4) + e, a.n - 1);
        sw[jj][e] = __ldg(a.w_scales + col);
        bias[jj][e] = a.bias ? __bfloat162float(a.bias[col]) : 0.0f;
      }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = row0 + 8 * h;
      if (row >= a.m) continue;
      const size_t base = static_cast<size_t>(row) * a.n;
#pragma unroll
      for (int jj = 0; jj < kChunk; ++jj) {
        const int j = j0 + jj, col = n0 + 8 * j + 2 * (lane % 4);
        if (col >= a.n) continue;
        const bool two = col + 1 < a.n;
        float v[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          v[e] = scaled_sum(acc[4 * j + 2 * h + e], sx[h], sw[jj][e]);
          if (a.bias) v[e] = int8_biased(v[e], bias[jj][e]);
        }
        if (a.y_f32) {
          float* y = static_cast<float*>(a.y) + base + col;
          if (pairs && two) {
            *reinterpret_cast<float2*>(y) = make_float2(v[0], v[1]);
          } else {
            y[0] = v[0];
            if (two) y[1] = v[1];
          }
        } else {
          __nv_bfloat16* y = static_cast<__nv_bfloat16*>(a.y) + base + col;
          if (pairs && two) {
            *reinterpret_cast<__nv_bfloat162*>(y) = __floats2bfloat162_rn(v[0], v[1]);
          } else {
            y[0] = __float2bfloat16(v[0]);
            if (two) y[1] = __float2bfloat16(v[1]);
          }
        }
      }
    }
  }
}

// A 2-D TMA load of the box at (c0: bytes along the row, c1: rows) into shared memory, completing on `bar`.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0,
                                            int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], "
      "[%2];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1)
      : "memory");
}

constexpr int kThreads = 384;  // a producer warpgroup and two consumer warpgroups
// Registers per thread after the hand-off of ping-pong on 128-row tiles (setmaxnreg): the producer's warpgroup
// drops to kProducerRegs, the consumers' rise to kConsumerRegs. The CTA's pool is what it launched with
// (launch bounds: 65536 / kThreads rounded down to 8 = 168 per thread); an increase past the pool would wait
// forever, so the launch checks the compiled count (kRegsAtLaunch) once.
constexpr int kProducerRegs = 40, kConsumerRegs = 232, kRegsAtLaunch = (65536 / kThreads) & ~7;
static_assert(128 * kProducerRegs + 256 * kConsumerRegs <= kThreads * kRegsAtLaunch,
              "setmaxnreg hand-off larger than the CTA's registers");

template <int kRows, int kBN, int kStages>
constexpr int smem_bytes() {
  // The ring, the slack to align it to 1024 bytes, its full / empty barriers and the two order barriers.
  return kStages * (kRows + kBN) * kBK + 1024 + (2 * kStages + 2) * 8;
}

// Tile t's first row and column. The tiles run in bands of `band` n tiles (the last band may be narrower); within
// a band m goes slowest, so the CTAs running at once (consecutive t) share a few weight tiles and a few x row
// blocks through L2, and a band's weight tiles stay in L2 while it walks down m. band 1: m tiles fastest.
// Needs 1 <= band <= tiles_n (the launch clamps it).
__device__ __forceinline__ void tile_origin(int t, int tiles_m, int tiles_n, int band, int rows, int cols,
                                            int& m0, int& n0) {
  const int per_band = band * tiles_m, b = t / per_band, r = t - b * per_band;
  const int width = min(band, tiles_n - b * band);
  m0 = (r / width) * rows;
  n0 = (b * band + r % width) * cols;
}

// Persistent: grid min(tiles, SMs), kThreads threads, smem_bytes() of dynamic shared memory. Tiles are kRows
// x kBN: 128 rows cooperative, 64 or 128 ping-pong (a consumer's 128 rows are two m64 row blocks per wgmma
// step). CTA i takes tiles i, i + gridDim.x, ... in tile_origin's order; the ring and its barrier phases run
// on across tiles, so the producer loads the next tile while the consumers store one. The producer loads the
// CTA's tiles in order, step by step; cooperative: both consumers take every step (rows 64c .. 64c + 63 of
// the tile), ping-pong: consumer c takes the steps of the CTA's tiles c, c + 2, ... (its ring position: the
// tile's index among the CTA's tiles x steps + step), so the two alternate on the tensor cores. Ping-pong
// also orders the consumers' mainloops (two more mbarriers): a consumer starts a tile's steps only once the
// other has issued all of its previous tile's, so every ring stage it waits on is at most one phase ahead of
// the phase it has seen (a barrier's parity tells only that much). kFp8: e4m3 codes and f32 sums, else int8
// codes and int32 sums.
template <int kRows, int kBN, int kStages, bool kPingPong, bool kFp8>
__global__ void __launch_bounds__(kThreads, 1)  // two CTAs per SM would leave too few registers for wgmma
    w8a8_wgmma_kernel(const __grid_constant__ CUtensorMap tm_x, const __grid_constant__ CUtensorMap tm_w,
                      WgmmaArgs a, int band) {
  // Row blocks of 64 (one wgmma's m) each consumer warpgroup multiplies per step.
  constexpr int kBlocks = kPingPong ? kRows / 64 : kRows / 128;
  static_assert(kBlocks >= 1 && (kPingPong ? kRows : kRows / 2) == 64 * kBlocks, "tile rows: 64 or 128");
  constexpr int kABytes = kRows * kBK, kStageBytes = (kRows + kBN) * kBK;
  constexpr uint32_t kConsumers = kPingPong ? 128 : 256;  // threads that release each stage
  extern __shared__ uint8_t smem_raw[];
  const uint32_t ring = (smem_u32(smem_raw) + 1023u) & ~1023u;
  // Barriers after the ring: full[kStages], empty[kStages], then order[2] (ping-pong: consumer c may go on).
  const uint32_t bars = ring + kStages * kStageBytes;
  auto full = [&](int b) { return bars + 8u * static_cast<uint32_t>(b); };
  auto empty = [&](int b) { return bars + 8u * static_cast<uint32_t>(kStages + b); };
  auto order = [&](int c) { return bars + 8u * static_cast<uint32_t>(2 * kStages + c); };
  const int tid = static_cast<int>(threadIdx.x), wg = tid / 128;
  const int tiles_m = (a.m + kRows - 1) / kRows, tiles_n = (a.n + kBN - 1) / kBN, tiles = tiles_m * tiles_n;
  const int steps = (a.k + kBK - 1) / kBK;
  if (tid == 0) {
#pragma unroll
    for (int b = 0; b < kStages; ++b) {
      mbar_init(full(b), 1);  // the producer's arrive (+ the loads' bytes)
      // Every consuming thread, once its wgmma group on the stage has completed.
      mbar_init(empty(b), kConsumers);
    }
    mbar_init(order(0), 128);  // ping-pong: the other consumer's threads, after each of their mainloops
    mbar_init(order(1), 128);
    mbar_init_fence();
  }
  __syncthreads();

  // Ping-pong on 128-row tiles keeps two row blocks' sums (128 registers) live through a tile's epilogue: the
  // producer gives registers to the consumers (40 + 2 x 232 per thread of each warpgroup, within the SM's 64K).
  constexpr bool kMoveRegisters = kPingPong && kBlocks == 2;
  if (wg == 0) {  // producer: one thread issues every load; the CTA stays resident until the consumers finish
    if constexpr (kMoveRegisters) asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kProducerRegs) : "memory");
    if (tid == 0) {
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&tm_x)) : "memory");
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&tm_w)) : "memory");
      int it = 0;  // steps issued so far, across tiles: buffer it % kStages, round it / kStages
      for (int tile = static_cast<int>(blockIdx.x); tile < tiles; tile += static_cast<int>(gridDim.x)) {
        int m0, n0;
        tile_origin(tile, tiles_m, tiles_n, band, kRows, kBN, m0, n0);
        for (int s = 0; s < steps; ++s, ++it) {
          const int b = it % kStages;
          // Round r waits for the consumers' release of round r - 1.
          mbar_wait(empty(b), ((it / kStages) & 1) ^ 1);
          const uint32_t dst = ring + static_cast<uint32_t>(b * kStageBytes);
          mbar_arrive_expect_tx(full(b), kStageBytes);  // whole boxes, zero-filled past the edges, count
          tma_load_2d(dst, &tm_x, full(b), s * kBK, m0);
          tma_load_2d(dst + kABytes, &tm_w, full(b), s * kBK, n0);
        }
      }
    }
    return;
  }

  if constexpr (kMoveRegisters) asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kConsumerRegs) : "memory");
  const int c = wg - 1, warp = (tid % 128) / 32, lane = tid % 32;
  const int first = static_cast<int>(blockIdx.x) + (kPingPong ? c * static_cast<int>(gridDim.x) : 0);
  const int stride = static_cast<int>(gridDim.x) * (kPingPong ? 2 : 1);
  const int row_in_tile = (kPingPong ? 0 : c * 64) + warp * 16 + lane / 4;
  using Acc = std::conditional_t<kFp8, float, uint32_t>;
  Acc acc[kBlocks][kBN / 2];
  int j = 0;  // this consumer's tiles so far
  for (int tile = first, local = kPingPong ? c : 0; tile < tiles;
       tile += stride, local += kPingPong ? 2 : 1, ++j) {
    int m0, n0;
    tile_origin(tile, tiles_m, tiles_n, band, kRows, kBN, m0, n0);
    // Ping-pong: consumer 0's tile j after consumer 1's tile j - 1; consumer 1's after consumer 0's j.
    if constexpr (kPingPong) {
      if (c == 1)
        mbar_wait(order(1), j & 1);
      else if (j > 0)
        mbar_wait(order(0), (j - 1) & 1);
    }
#pragma unroll
    for (int r = 0; r < kBlocks; ++r)
#pragma unroll
      for (int i = 0; i < kBN / 2; ++i) acc[r][i] = Acc{0};
    int it = local * steps;  // this tile's first ring position
    for (int s = 0; s < steps; ++s, ++it) {
      const int b = it % kStages;
      mbar_wait(full(b), (it / kStages) & 1);
      const uint32_t sa = ring + static_cast<uint32_t>(b * kStageBytes + (kPingPong ? 0 : c * 64 * 128));
      const uint32_t sb = ring + static_cast<uint32_t>(b * kStageBytes + kABytes);
      wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < kBK / 32; ++ks)
#pragma unroll
        for (int r = 0; r < kBlocks; ++r) {  // row block r: 64 rows of 128 bytes further into the A box
          const uint64_t da = make_desc(sa + r * 64 * kBK + 32 * ks, 16, 1024),
                         db = make_desc(sb + 32 * ks, 16, 1024);
          if constexpr (kFp8)
            wgmma_e4m3(acc[r], da, db);
          else
            wgmma_s8(acc[r], da, db);
        }
      wgmma_commit();
      wgmma_wait<1>();  // the previous step's group has completed: release it
      if (s > 0) mbar_arrive(empty((it - 1) % kStages));
    }
    if constexpr (kPingPong) mbar_arrive(order(1 - c));  // the other consumer may start its next tile's steps
    wgmma_wait<0>();
    mbar_arrive(empty((it - 1) % kStages));  // the tile's last stage
#pragma unroll
    for (int r = 0; r < kBlocks; ++r) {
      fence_regs(acc[r]);
      store_tile(a, acc[r], m0 + r * 64 + row_in_tile, n0, lane);
    }
  }
}

// cuTensorMapEncodeTiled through the runtime (no libcuda link), looked up once.
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    XI_CUDA_CHECK(
        cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q));
    XI_CHECK(q == cudaDriverEntryPointSuccess && p != nullptr)
        << "W8A8-INT8 wgmma GEMM: no cuTensorMapEncodeTiled";
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

// The tensor map of a byte [rows, k] row-major matrix (int8 or e4m3 codes) in boxes of box_rows x 128 bytes,
// 128-byte swizzle.
CUtensorMap byte_tensor_map(const void* base, int rows, int k, int box_rows) {
  CUtensorMap map;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(k), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(k)};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(kBK), static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t elem_strides[2] = {1, 1};
  const CUresult r =
      tensor_map_encoder()(&map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<void*>(base), dims, strides,
                           box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                           CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  XI_CHECK(r == CUDA_SUCCESS) << "W8A8 wgmma GEMM: cuTensorMapEncodeTiled failed (" << static_cast<int>(r)
                              << ") for [" << rows << ", " << k << "] in boxes of " << box_rows;
  return map;
}

template <int kRows, int kBN, int kStages, bool kPingPong, bool kFp8>
void launch(const WgmmaArgs& a, cudaStream_t stream, int band) {
  constexpr int kSmem = smem_bytes<kRows, kBN, kStages>();
  const auto kernel = w8a8_wgmma_kernel<kRows, kBN, kStages, kPingPong, kFp8>;
  raise_smem_limit(reinterpret_cast<const void*>(kernel), kSmem);
  if constexpr (kPingPong && kRows == 128) {  // the setmaxnreg hand-off needs the registers it moves
    static const int regs = [&] {
      cudaFuncAttributes attr{};
      XI_CUDA_CHECK(cudaFuncGetAttributes(&attr, reinterpret_cast<const void*>(kernel)));
      return attr.numRegs;
    }();
    XI_CHECK(regs >= kRegsAtLaunch) << "W8A8 wgmma GEMM: the 128-row ping-pong kernel was built with " << regs
                                    << " registers per thread; its register hand-off needs " << kRegsAtLaunch;
  }
  const CUtensorMap tm_x = byte_tensor_map(a.xq, a.m, a.k, kRows),
                    tm_w = byte_tensor_map(a.wq, a.n, a.k, kBN);
  const int tiles_m = (a.m + kRows - 1) / kRows, tiles_n = (a.n + kBN - 1) / kBN;
  const unsigned grid =
      static_cast<unsigned>(std::min<int64_t>(static_cast<int64_t>(tiles_m) * tiles_n, sm_count()));
  if (band <= 0) {
    const int window = static_cast<int>(grid) * (kPingPong ? 2 : 1);
    band = int8_wgmma_band(a.m, a.k, kRows, kBN, window, l2_bytes());
  }
  kernel<<<grid, kThreads, kSmem, stream>>>(tm_x, tm_w, a, std::clamp(band, 1, tiles_n));
  XI_CUDA_CHECK_LAUNCH();
}

}  // namespace

std::string to_string(const Int8WgmmaConfig& c) {
  std::string s = "wgmma ";
  s.append(std::to_string(int8_wgmma_rows(c))).append("x").append(std::to_string(c.bn));
  s.append(" s").append(std::to_string(c.stages));
  if (c.ping_pong) s += " ping-pong";
  if (c.band > 0) s.append(" band ").append(std::to_string(c.band));
  return s;
}

std::string config_name(const Int8WgmmaConfig& c) {
  std::string s = "wgmma";
  if (c.ping_pong && int8_wgmma_rows(c) == 128) s += "128x";  // named by both sides: "wgmma128x128s6pp"
  s.append(std::to_string(c.bn)).append("s").append(std::to_string(c.stages));
  if (c.ping_pong) s += "pp";
  if (c.band > 0) s.append("b").append(std::to_string(c.band));
  return s;
}

std::optional<Int8WgmmaConfig> wgmma_config_named(const std::string& name) {
  for (const Int8WgmmaConfig& c : kInt8WgmmaConfigs) {
    const std::string base = config_name(c);
    // The name alone (the band by shape), or with "b<n tiles>" for a fixed band of the tile order.
    if (name == base) return c;
    const std::string band = name.starts_with(base + "b") ? name.substr(base.size() + 1) : "";
    // b1..b999, written as config_name writes it (no leading zero).
    if (!band.empty() && band.size() <= 3 && band[0] != '0' &&
        band.find_first_not_of("0123456789") == std::string::npos) {
      Int8WgmmaConfig banded = c;
      banded.band = std::stoi(band);
      return banded;
    }
  }
  return std::nullopt;
}

std::string wgmma_config_names() {
  std::string names;
  for (const Int8WgmmaConfig& c : kInt8WgmmaConfigs) names += (names.empty() ? "" : ", ") + config_name(c);
  return names + " (each optionally with a band b1..b999, e.g. " + config_name(kInt8WgmmaConfigs[0]) + "b4)";
}

Int8WgmmaConfig int8_wgmma_auto_config(int m, int k) {
  if (m <= kInt8WgmmaSmallRows) return {128, 8, true};
  if (m > kInt8MeasuredMaxRows && k >= kInt8WgmmaLongK) return {256, 4, false};
  return {128, 6, true, 128};
}

bool w8a8_int8_wgmma_supports(int m, int n, int k) {
  return m > 0 && n > 0 && k > 0 && k % 16 == 0;
}

namespace {

template <bool kFp8>
void launch_config(const WgmmaArgs& a, cudaStream_t stream, const Int8WgmmaConfig& config) {
  const char* what = kFp8 ? "W8A8-FP8 wgmma GEMM" : "W8A8-INT8 wgmma GEMM";
  XI_CHECK(w8a8_int8_wgmma_supports(a.m, a.n, a.k))
      << what << ": m " << a.m << " n " << a.n << " k " << a.k << " (k must be a multiple of 16)";
  XI_CHECK(reinterpret_cast<uintptr_t>(a.xq) % 16 == 0 && reinterpret_cast<uintptr_t>(a.wq) % 16 == 0)
      << what << ": xq / wq must be 16-byte aligned";
  const int rows = int8_wgmma_rows(config), bn = config.bn, st = config.stages, band = config.band;
  if (!config.ping_pong && rows == 128 && bn == 128 && st == 6)
    return launch<128, 128, 6, false, kFp8>(a, stream, band);
  if (!config.ping_pong && rows == 128 && bn == 256 && st == 4)
    return launch<128, 256, 4, false, kFp8>(a, stream, band);
  if (config.ping_pong && rows == 64 && bn == 128 && st == 8)
    return launch<64, 128, 8, true, kFp8>(a, stream, band);
  if (config.ping_pong && rows == 64 && bn == 256 && st == 5)
    return launch<64, 256, 5, true, kFp8>(a, stream, band);
  if (config.ping_pong && rows == 128 && bn == 128 && st == 6)
    return launch<128, 128, 6, true, kFp8>(a, stream, band);
  XI_CHECK(false) << what << ": no " << to_string(config) << " kernel";
}

}  // namespace

void launch_w8a8_int8_wgmma(const Int8GemmArgs& a, cudaStream_t stream, Int8WgmmaConfig config) {
  launch_config<false>({a.xq, a.x_scales, a.wq, a.w_scales, a.bias, a.y, a.y_f32, a.m, a.n, a.k}, stream,
                       config);
}

void launch_w8a8_fp8_wgmma(const Fp8GemmArgs& a, cudaStream_t stream, Int8WgmmaConfig config) {
  launch_config<true>({a.xq, a.x_scales, a.wq, a.w_scales, a.bias, a.y, a.y_f32, a.m, a.n, a.k}, stream,
                      config);
}

}  // namespace xinfer::cuda
