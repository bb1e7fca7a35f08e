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
// warpgroups only wait, multiply and store: both on each 128-row tile (cooperative) or each on its own 64- or
// 128-row tiles in turn, one storing while the other multiplies (ping-pong; on 128-row tiles each consumer
// multiplies two m64 row blocks and takes registers from the producer, setmaxnreg). The epilogue loads the
// scales of a few column pairs at once, then stores them. The tensor maps are encoded per call on the host
// (cuTensorMapEncodeTiled through the runtime's driver entry point: no libcuda link).
//
// k runs in steps of 128 bytes through a ring of `stages` buffers; wgmma.m64n{bn}k32.s32.s8.s8 reads both
// operands from shared memory. Rows past m / n and columns past k are zero-filled, so any m, n and
// k % 16 == 0 work. CTAs running at once take neighbouring m tiles of one n tile (m tiles fastest): the
// weight tile comes from HBM once and from L2 for the others; once x outgrows half of L2 the tiles run in
// bands of n tiles (int8_wgmma_band), so x is read from HBM once per band instead of once per n tile. No
// allocation, no synchronization: graph-capturable.
//
// The backend's default for W8A8-INT8 past the GEMV's rows since session 18 (int8_wgmma_auto_config by rows
// and k, or per shape the configuration CudaBackend::measure_int8_gemms found fastest). A first mainloop in
// which every warp cp.async-loaded the ring, one CTA barrier per k step, reached 45-54% of the INT8 peak and
// was removed (docs/PERF.md session 18).
//
// The same kernels also run on FP8 e4m3 codes (launch_w8a8_fp8_wgmma, session 31: wgmma ...f32.e4m3.e4m3, f32
// sums); the configurations and their names are shared, hence "Int8WgmmaConfig" for both. On an H200 they take
// 1.12-1.29x cuBLASLt FP8's time at the 8B shapes, so the FP8 path measures them against cuBLASLt at start-up
// (CudaBackend::measure_fp8_gemms) rather than running them by a rule.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "xinfer/backend/cuda/kernels/gemm/cublaslt_fp8_gemm.h"
#include "xinfer/backend/cuda/kernels/gemm/cublaslt_int8_gemm.h"
#include "xinfer/backend/decode_graph_buckets.h"

namespace xinfer::cuda {

struct Int8WgmmaConfig {
  int bn = 128;    // y columns per tile: 128 or 256
  int stages = 8;  // shared-memory ring: 6 / 4 (cooperative, bn 128 / 256), 8 / 5 (ping-pong), 6 (ping-pong 128 rows)
  // 64-row tiles, each consumer warpgroup on its own; else 128-row tiles shared by both (cooperative)
  bool ping_pong = true;
  int rows = 0;  // y rows per tile: 0 = the mode's (64 ping-pong, 128 cooperative); 128 ping-pong: two m64 blocks
  int band = 0;  // n tiles per band of the tile order (tile_origin in the .cu); 0 = int8_wgmma_band's
};
// Tile rows of a configuration (its `rows`, or the mode's).
constexpr int int8_wgmma_rows(const Int8WgmmaConfig& c) {
  return c.rows > 0 ? c.rows : c.ping_pong ? 64 : 128;
}
// The band the launch takes for band 0 on an m x n x k GEMM with `rows` x `bn` tiles, `window` tiles in flight
// at once (the grid; twice it ping-pong) and l2_bytes of L2. While x (m x k bytes) fits in half of L2, or with
// 64-row ping-pong tiles, band 1: m tiles fastest. Otherwise the window forms about (window / band) row blocks x
// band column tiles, and band = sqrt(window * rows / bn) loads the fewest operand rows per k step, so that x is
// read from HBM tiles_n / band times instead of tiles_n. H200, `gpu_kernel_bench --int8-wgmma` (docs/PERF.md
// session 20), the four Llama-3.1-8B linears at 8192 rows: 128 x 128 ping-pong 2,509 us in bands of 16 vs 3,002
// in band 1; at 2048 rows band 1 was as fast or faster in every configuration, and 64-row ping-pong tiles were
// slower in bands at every row count (gate_up at 8192 rows: 2,028 vs 1,448 us).
constexpr int int8_wgmma_band(int m, int k, int rows, int bn, int window, int64_t l2_bytes) {
  if (rows < 128 || bn <= 0 || static_cast<int64_t>(m) * k <= l2_bytes / 2) return 1;
  int band = 1;
  while ((band + 1) * (band + 1) * bn <= window * rows) ++band;  // the largest band <= sqrt(window * rows / bn)
  return band;
}
// "wgmma 128x128 s6", "wgmma 64x128 s8 ping-pong", "wgmma 128x128 s6 ping-pong band 4"
std::string to_string(const Int8WgmmaConfig& c);
// The name set_int8_gemm / XINFER_INT8_GEMM take for it: "wgmma128s6", "wgmma128s8pp", "wgmma128x128s6pp",
// "wgmma256s5ppb8" (band 8).
std::string config_name(const Int8WgmmaConfig& c);
// The configuration config_name() calls `name` (with an optional band suffix "b<n>"), or nullopt.
std::optional<Int8WgmmaConfig> wgmma_config_named(const std::string& name);
// The names wgmma_config_named takes, for error messages.
std::string wgmma_config_names();
// The compiled configurations (the bench times each), band 0.
inline constexpr Int8WgmmaConfig kInt8WgmmaConfigs[] = {
    {128, 6, false}, {256, 4, false}, {128, 8, true}, {256, 5, true}, {128, 6, true, 128}};

// The backend's default by shape (CudaBackend::set_int8_gemm "auto" past the measured rows, "rule" everywhere):
// ping-pong on 64 x 128 tiles up to kInt8WgmmaSmallRows rows; past kInt8MeasuredMaxRows with k >= kInt8WgmmaLongK
// cooperative 128 x 256; else ping-pong on 128 x 128 tiles. H200, `gpu_kernel_bench --int8-wgmma` (docs/PERF.md
// session 20), the four Llama-3.1-8B linears together against cuBLASLt FP8 (the ceiling): 1.18 / 1.08 / 1.07 /
// 1.03 / 1.01 / 0.98 of its time at 128 / 256 / 481 / 954 / 2048 / 8192 rows.
inline constexpr int kInt8WgmmaSmallRows = 256;
inline constexpr int kInt8WgmmaLongK = 8192;
Int8WgmmaConfig int8_wgmma_auto_config(int m, int k);

// The measured choice (CudaBackend::measure_int8_gemms) covers decode-sized steps: rows 17 to
// kInt8MeasuredMaxRows in power-of-two buckets (a bucket b holds the rows b / 2 + 1 .. b; 32 holds 17..32);
// the rule past them (int8_wgmma_auto_config needs kInt8MeasuredMaxRows). On an H200 (docs/PERF.md session 19) it gained 0.7% at 128/128; measuring the
// prefill-sized rows too looked slower for those steps, in runs confounded with a first-run effect.
inline constexpr int kInt8MeasuredMaxRows = 1024;
constexpr int int8_wgmma_row_bucket(int m) {
  int b = 32;  // capped at 2^30 so that no m overflows it (past kInt8MeasuredMaxRows: unmeasured anyway)
  while (b < m && b < (1 << 30)) b *= 2;
  return b;
}
// The buckets CudaBackend::measure_int8_gemms and measure_wq_gemms time for steps of up to max_rows rows: 32,
// 64, .. up to the one holding max_rows, at most kInt8MeasuredMaxRows (rows <= 16 run the GEMVs).
inline std::vector<int> int8_measured_row_buckets(int max_rows) {
  std::vector<int> buckets;
  for (int b = 32; b / 2 < max_rows && b <= kInt8MeasuredMaxRows; b *= 2) buckets.push_back(b);
  return buckets;
}

// True if the kernels take this shape: m, n, k > 0 and k % 16 == 0 (16-byte rows). xq and wq must also be
// 16-byte aligned (launch_w8a8_int8_wgmma checks). The build is sm_90a only.
bool w8a8_int8_wgmma_supports(int m, int n, int k);
// Runs the GEMM (a.acc is not used). XI_CHECK-fails on unsupported arguments or configurations.
void launch_w8a8_int8_wgmma(const Int8GemmArgs& a, cudaStream_t stream, Int8WgmmaConfig config = {});

// The same kernels on e4m3 codes (wgmma ...f32.e4m3.e4m3, f32 sums: the tensor cores' FP8 accumulation, as
// cuBLASLt's fast accumulation), y = f32(sw[n] * sx[m]) * sum (+ bias): the FP8 path's GEMM where
// CudaBackend::measure_fp8_gemms found it faster than cuBLASLt's choice (fp8_wgmma_for). Every configuration
// sums each output over k in the same order (k steps of 128 in turn, four k32 MMAs each), so all give the
// same bits; cuBLASLt's differ by summation order. Same requirements as the int8 kernels.
void launch_w8a8_fp8_wgmma(const Fp8GemmArgs& a, cudaStream_t stream, Int8WgmmaConfig config = {});
// The most rows CudaBackend::measure_fp8_gemms times (its scratch output is rows x n bf16); steps past the
// bucket holding them run cuBLASLt.
inline constexpr int kFp8MeasuredMaxRows = 16384;
// The row bucket whose measured FP8 decision an m-row GEMM runs (CudaBackend::measure_fp8_gemms): the decode
// graph bucket up to backend::kMaxDecodeGraphRows (the rows decode steps are padded to), then powers of two
// from twice that.
constexpr int fp8_gemm_row_bucket(int m) {
  if (m <= backend::kMaxDecodeGraphRows) return backend::decode_graph_bucket(m < 1 ? 1 : m);
  int b = 2 * backend::kMaxDecodeGraphRows;  // capped at 2^30 as int8_wgmma_row_bucket
  while (b < m && b < (1 << 30)) b *= 2;
  return b;
}
static_assert(fp8_gemm_row_bucket(kFp8MeasuredMaxRows) == kFp8MeasuredMaxRows,
              "the measured rows' cap must be a bucket, or the last measured bucket would exceed it");
// The buckets CudaBackend::measure_fp8_gemms times for an engine whose steps hold up to max_tokens rows:
// every bucket from the one holding first_rows (the GEMVs take fewer) up to the one holding max_tokens, at
// most kFp8MeasuredMaxRows. Empty if first_rows > max_tokens.
inline std::vector<int> fp8_measured_row_buckets(int first_rows, int max_tokens) {
  std::vector<int> buckets;
  if (first_rows > max_tokens) return buckets;
  const int top = std::min(max_tokens, kFp8MeasuredMaxRows);
  for (int b = fp8_gemm_row_bucket(first_rows);; b = fp8_gemm_row_bucket(b + 1)) {
    buckets.push_back(b);
    if (b >= top) break;
  }
  return buckets;
}

}  // namespace xinfer::cuda
