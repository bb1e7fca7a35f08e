// W8A8-INT8 GEMM on Hopper's warpgroup MMAs with the scales fused into its epilogue (sm_90a):
//   y[m, n] = f32(sw[n] * sx[m]) * f32(xq[m, k] . wq[n, k]) (+ bias[n]),  xq, wq int8, exact int32 sums,
// y bf16 or f32: the CPU oracle's arithmetic (quant/int_matmul.cpp run_w8a8_int8) and the cuBLASLt path's
// (cublaslt_int8_gemm.h kInt32Epilogue) bit for bit, without its int32 round trip through memory (4 bytes
// written and read back per output, plus a third kernel per linear) and without a workspace.
//
// Kernel (w8a8_int8_wgmma.cu), persistent (grid: at most one CTA per SM, each walking its tiles): three
// warpgroups; one thread of the first issues the tiles' TMA loads (2-D tensor maps of xq and wq, 128-byte
// swizzle, zero fill past the edges) into the ring, each stage guarded by a "full" mbarrier (the loads'
// bytes) and an "empty" one (its consumer threads, once their wgmma group on it has completed); the other two
// warpgroups only wait, multiply and store: both on each 128-row tile (cooperative) or each on its own 64-row
// tiles in turn, one storing while the other multiplies (ping-pong). The epilogue loads the scales of a few
// column pairs at once, then stores them. The tensor maps are encoded per call on the host
// (cuTensorMapEncodeTiled through the runtime's driver entry point: no libcuda link).
//
// k runs in steps of 128 bytes through a ring of `stages` buffers; wgmma.m64n{bn}k32.s32.s8.s8 reads both
// operands from shared memory. Rows past m / n and columns past k are zero-filled, so any m, n and
// k % 16 == 0 work. CTAs running at once take neighbouring m tiles of one n tile (m tiles fastest): the
// weight tile comes from HBM once and from L2 for the others. No allocation, no synchronization:
// graph-capturable.
//
// The backend's default for W8A8-INT8 past the GEMV's rows since session 18 (int8_wgmma_auto_config:
// ping-pong, or per shape the configuration CudaBackend::measure_int8_gemms found fastest, cooperative ones
// included). A first mainloop in which every warp cp.async-loaded the ring, one CTA barrier per k step,
// reached 45-54% of the INT8 peak and was removed (docs/PERF.md session 18).
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "xinfer/backend/cuda/kernels/gemm/cublaslt_int8_gemm.h"

namespace xinfer::cuda {

struct Int8WgmmaConfig {
  int bn = 128;    // y columns per tile: 128 or 256
  int stages = 8;  // shared-memory ring: 6 / 4 (cooperative, bn 128 / 256), 8 / 5 (ping-pong)
  // 64-row tiles, each consumer warpgroup on its own; else 128-row tiles shared by both (cooperative)
  bool ping_pong = true;
};
// "wgmma 128x128 s6", "wgmma 64x128 s8 ping-pong"
std::string to_string(const Int8WgmmaConfig& c);
// The name set_int8_gemm / XINFER_INT8_GEMM take for it: "wgmma128s6", "wgmma128s8pp".
std::string config_name(const Int8WgmmaConfig& c);
// The compiled configurations (the bench times each).
inline constexpr Int8WgmmaConfig kInt8WgmmaConfigs[] = {
    {128, 6, false}, {256, 4, false}, {128, 8, true}, {256, 5, true}};

// The backend's default by rows (CudaBackend::set_int8_gemm "auto"): ping-pong with 64 x 128 tiles up to
// kInt8WgmmaWideRows rows, 64 x 256 above. H200, the four Llama-3.1-8B linears together (docs/PERF.md session
// 18, `gpu_kernel_bench --int8-wgmma`): 0.82 / 0.87 / 0.84 / 0.91 / 0.82 of cuBLASLt int8 + epilogue's time
// at 128 / 481 / 954 / 2048 / 8192 rows; of the shapes alone only down at 954 rows was slower (92.1 vs 84.9
// us).
inline constexpr int kInt8WgmmaWideRows = 512;
Int8WgmmaConfig int8_wgmma_auto_config(int m);

// The measured choice (CudaBackend::measure_int8_gemms) covers decode-sized steps: rows 17 to
// kInt8MeasuredMaxRows in power-of-two buckets (a bucket b holds the rows b / 2 + 1 .. b; 32 holds 17..32);
// the rule past them. On an H200 (docs/PERF.md session 19) it gained 0.7% at 128/128; measuring the
// prefill-sized rows too looked slower for those steps, in runs confounded with a first-run effect.
inline constexpr int kInt8MeasuredMaxRows = 1024;
constexpr int int8_wgmma_row_bucket(int m) {
  int b = 32;
  while (b < m) b *= 2;
  return b;
}

// True if the kernels take this shape: m, n, k > 0 and k % 16 == 0 (16-byte rows). xq and wq must also be
// 16-byte aligned (launch_w8a8_int8_wgmma checks). The build is sm_90a only.
bool w8a8_int8_wgmma_supports(int m, int n, int k);
// Runs the GEMM (a.acc is not used). XI_CHECK-fails on unsupported arguments or configurations.
void launch_w8a8_int8_wgmma(const Int8GemmArgs& a, cudaStream_t stream, Int8WgmmaConfig config = {});

}  // namespace xinfer::cuda
