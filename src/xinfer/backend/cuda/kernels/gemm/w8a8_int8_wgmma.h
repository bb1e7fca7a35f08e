// W8A8-INT8 GEMM on Hopper's warpgroup MMAs with the scales fused into its epilogue (sm_90a):
//   y[m, n] = f32(sw[n] * sx[m]) * f32(xq[m, k] . wq[n, k]) (+ bias[n]),  xq, wq int8, exact int32 sums,
// y bf16 or f32: the CPU oracle's arithmetic (quant/int_matmul.cpp run_w8a8_int8) and the cuBLASLt path's
// (cublaslt_int8_gemm.h kInt32Epilogue) bit for bit, without its int32 round trip through memory (4 bytes
// written and read back per output, plus a third kernel per linear) and without a workspace.
//
// Two kernels (w8a8_int8_wgmma.cu) share the 128-byte k steps, the MMAs and the epilogue.
// cp.async kernel: a CTA of two warpgroups owns a 128 x bn tile of y (bn 128 or 256); warpgroup w
// computes rows 64w .. 64w + 63 with wgmma.m64n{bn}k32.s32.s8.s8, both operands in shared memory. k runs in
// steps of 128 bytes through a ring of `stages` buffers (x tile 16 KB + w tile bn x 128 bytes each), filled
// by cp.async (16-byte chunks, every thread) in the 128-byte-swizzled K-major layout the descriptors name
// (chunk c of row r at c ^ (r % 8)); loads run stages - 2 steps ahead and one wgmma group stays in flight
// across the barrier. Rows past m / n and columns past k are zero-filled, so any m, n and k % 16 == 0 work.
// The grid runs the m tiles of one n tile next to each other (blockIdx.x over m): the weight tile is read
// from HBM once and from L2 by the other row tiles. No allocation, no synchronization: graph-capturable.
//
// TMA kernel (tma), persistent (grid: at most one CTA per SM, each walking its tiles): three warpgroups; one
// thread of the first issues the tiles' TMA loads (2-D tensor maps of xq and wq, 128-byte swizzle, zero fill
// past the edges) into the ring, each stage guarded by a "full" mbarrier (the loads' bytes) and an "empty"
// one (its consumer threads, once their wgmma group on it has completed); the other two warpgroups only wait,
// multiply and store: both on each 128-row tile (cooperative) or each on its own 64-row tiles in turn, one
// storing while the other multiplies (ping-pong). The epilogue loads the scales of a few column pairs at
// once, then stores them. The tensor maps are encoded per call on the host (cuTensorMapEncodeTiled through
// the runtime's driver entry point: no libcuda link).
//
// Status: the backend's default for W8A8-INT8 past the GEMV's rows since session 18 (int8_wgmma_auto_config:
// ping-pong); the cp.async and cooperative TMA configurations stay for the bench (slower wherever it
// measured).
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "xinfer/backend/cuda/kernels/gemm/cublaslt_int8_gemm.h"

namespace xinfer::cuda {

struct Int8WgmmaConfig {
  int bn = 128;    // y columns per CTA: 128 or 256
  int stages = 4;  // shared-memory ring (cp.async: 3 or 4, bn 128 with 3 stages: two CTAs per SM; tma: 6 for
                   // bn 128, 4 for bn 256, one CTA per SM)
  bool tma = false;  // the warp-specialized kernel: a producer warpgroup's TMA loads, two consumer warpgroups
  bool ping_pong =
      false;  // tma: 64-row tiles, each consumer warpgroup on its own (stages 8 for bn 128, 5 for 256)
};
// "wgmma 128x128 s4", "wgmma 128x128 s6 tma", "wgmma 64x128 s8 tma ping-pong"
std::string to_string(const Int8WgmmaConfig& c);
// The name set_int8_gemm / XINFER_INT8_GEMM take for it: "wgmma128s4", "wgmma128s6tma", "wgmma128s8pp".
std::string config_name(const Int8WgmmaConfig& c);
// The compiled configurations (the bench times each).
inline constexpr Int8WgmmaConfig kInt8WgmmaConfigs[] = {
    {128, 3, false}, {128, 4, false}, {256, 3, false},      {256, 4, false},
    {128, 6, true},  {256, 4, true},  {128, 8, true, true}, {256, 5, true, true}};

// The backend's default by rows (CudaBackend::set_int8_gemm "auto"): ping-pong with 64 x 128 tiles up to
// kInt8WgmmaWideRows rows, 64 x 256 above. H200, the four Llama-3.1-8B linears together (docs/PERF.md session
// 18, `gpu_kernel_bench --int8-wgmma`): 0.82 / 0.87 / 0.84 / 0.91 / 0.82 of cuBLASLt int8 + epilogue's time
// at 128 / 481 / 954 / 2048 / 8192 rows; of the shapes alone only down at 954 rows was slower (92.1 vs 84.9
// us).
inline constexpr int kInt8WgmmaWideRows = 512;
Int8WgmmaConfig int8_wgmma_auto_config(int m);

// True if the kernels take this shape: m, n, k > 0 and k % 16 == 0 (16-byte rows). xq and wq must also be
// 16-byte aligned (launch_w8a8_int8_wgmma checks). The build is sm_90a only.
bool w8a8_int8_wgmma_supports(int m, int n, int k);
// Runs the GEMM (a.acc is not used). XI_CHECK-fails on unsupported arguments or configurations.
void launch_w8a8_int8_wgmma(const Int8GemmArgs& a, cudaStream_t stream, Int8WgmmaConfig config = {});

}  // namespace xinfer::cuda
