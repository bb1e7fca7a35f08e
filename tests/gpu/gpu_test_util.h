// Helpers for the GPU checks: one CudaBackend and one CpuBackend per test binary, random bf16-valued
// inputs uploaded identically to both, NaN poisoning of CUDA outputs, and relative L2 comparison.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "xinfer/backend/cpu/cpu_backend.h"
#include "xinfer/backend/cuda/cuda_backend.h"
#include "xinfer/backend/cuda/cuda_check.h"
#include "xinfer/backend/cuda/kernels/attention/attention_plan.h"

namespace xinfer::gpu_test {

inline cuda::CudaBackend& gpu() {
  static cuda::CudaBackend backend;
  return backend;
}
inline cpu::CpuBackend& cpu() {
  static cpu::CpuBackend backend;
  return backend;
}

// Device copy of a host int32 array (a plan's prefill items), freed at scope exit.
struct DeviceInts {
  explicit DeviceInts(const std::vector<int32_t>& v) {
    XI_CUDA_CHECK(cudaMalloc(&ptr, std::max<size_t>(v.size(), 1) * sizeof(int32_t)));
    XI_CUDA_CHECK(
        cudaMemcpyAsync(ptr, v.data(), v.size() * sizeof(int32_t), cudaMemcpyHostToDevice, gpu().stream()));
    XI_CUDA_CHECK(cudaStreamSynchronize(gpu().stream()));
  }
  ~DeviceInts() { XI_CUDA_CHECK(cudaFree(ptr)); }
  DeviceInts(const DeviceInts&) = delete;
  DeviceInts& operator=(const DeviceInts&) = delete;
  int32_t* ptr = nullptr;
};

// For a decode step whose grid is more than a wave of 8-warp CTAs (cuda::decode_warps: many one-partition
// CTAs), runs run(w) with the backend's decode attention forced to w = 8, 4 and 2 warps per CTA, then restores
// its setting; for other steps does nothing.
template <typename Run>
void at_each_decode_warps(int num_decode, int num_kv_heads, int group, Run&& run) {
  if (cuda::decode_warps(num_decode, 1, num_kv_heads, group, gpu().num_sms(), 2) == cuda::kDecodeWarps) return;
  const int default_warps = gpu().decode_many_warps();
  for (const int w : {8, 4, 2}) {
    gpu().set_decode_many_warps(w);
    run(w);
  }
  gpu().set_decode_many_warps(default_warps);
}

// Normal(0, scale) values rounded to bf16 so both backends see identical inputs.
// One decode-like step uploaded on gpu() (recording a CUDA graph needs one).
inline void upload_trivial_step() {
  backend::StepPlan p;
  p.token_ids = {0};
  p.positions = {0};
  p.slot_mapping = {-1};
  p.query_start_loc = {0, 1};
  p.seq_lens = {1};
  p.block_tables = {0};
  p.max_blocks_per_seq = 1;
  p.max_seq_len = 1;
  p.logit_rows = {0};
  gpu().upload_step(p);
}

inline std::vector<float> random_bf16(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = to_float(to_bf16(d(rng)));
  return v;
}

inline TensorView host_view(const std::vector<float>& v, const Shape& s) {
  EXPECT_EQ(static_cast<int64_t>(v.size()), s.numel());
  return TensorView{const_cast<float*>(v.data()), DType::kF32, s, Device::kCpu};
}

// Uploads the same values to both backends in their activation dtypes (f32 / bf16).
struct Both {
  backend::DeviceTensor c, g;
};
inline Both upload_both(const std::vector<float>& v, const Shape& s) {
  return Both{cpu().upload(host_view(v, s), DType::kF32), gpu().upload(host_view(v, s), DType::kBF16)};
}
inline Both allocate_both(const Shape& s, DType gpu_dtype = DType::kBF16) {
  return Both{cpu().allocate(DType::kF32, s), gpu().allocate(gpu_dtype, s)};
}

// Fills a CUDA tensor with all-ones bits: NaN in bf16 and f32, so unwritten elements show.
inline void poison(const TensorView& t) {
  XI_CUDA_CHECK(cudaMemsetAsync(t.data, 0xff, t.bytes(), gpu().stream()));
}

inline std::vector<float> download(backend::Backend& b, const TensorView& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  b.to_host_f32(t, out.data());
  return out;
}

// ||a - ref|| / ||ref||; counts NaNs in a (unwritten or broken elements).
struct Compare {
  double rel_l2 = 0;
  double max_abs = 0;
  int64_t nans = 0;
};
inline Compare compare(const std::vector<float>& a, const std::vector<float>& ref) {
  Compare c;
  double err = 0, norm = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::isnan(a[i])) {
      ++c.nans;
      continue;
    }
    const double d = static_cast<double>(a[i]) - ref[i];
    err += d * d;
    norm += static_cast<double>(ref[i]) * ref[i];
    c.max_abs = std::max(c.max_abs, std::abs(d));
  }
  c.rel_l2 = norm > 0 ? std::sqrt(err / norm) : std::sqrt(err);
  return c;
}

// Compares a CUDA tensor against the CPU one: no NaN and relative L2 error below tol.
inline Compare expect_close(const TensorView& gpu_t, const TensorView& cpu_t, double tol, const std::string& what) {
  const auto a = download(gpu(), gpu_t);
  const auto ref = download(cpu(), cpu_t);
  EXPECT_EQ(a.size(), ref.size()) << what;
  const Compare c = compare(a, ref);
  EXPECT_EQ(c.nans, 0) << what << ": " << c.nans << " NaN elements (unwritten?)";
  EXPECT_LT(c.rel_l2, tol) << what << ": relative L2 error (max abs " << c.max_abs << ")";
  return c;
}

// The raw bf16 bits of a device tensor.
inline std::vector<uint16_t> raw_bf16(const TensorView& t, backend::Backend& b = gpu()) {
  std::vector<uint16_t> out(static_cast<size_t>(t.numel()));
  b.to_host_raw(t, out.data());
  return out;
}

// Bitwise equality of two bf16 device tensors of backend b; names the first difference.
inline void expect_same_bits(const TensorView& got, const TensorView& want, const std::string& what,
                             backend::Backend& b = gpu()) {
  const auto g = raw_bf16(got, b), w = raw_bf16(want, b);
  ASSERT_EQ(g.size(), w.size()) << what;
  size_t diff = 0, first = 0;
  for (size_t i = 0; i < g.size(); ++i)
    if (g[i] != w[i] && diff++ == 0) first = i;
  EXPECT_EQ(diff, 0u) << what << ": " << diff << " of " << g.size() << " elements differ, first at " << first
                      << " (bits " << g[first] << " vs " << w[first] << ")";
}

// Top token of a logits row and its lead over the runner-up (top-2 gap).
inline std::pair<int32_t, float> top1_gap(const float* row, int vocab) {
  int best = 0;
  for (int i = 1; i < vocab; ++i)
    if (row[i] > row[best]) best = i;
  float second = -INFINITY;
  for (int i = 0; i < vocab; ++i)
    if (i != best) second = std::max(second, row[i]);
  return {best, row[best] - second};
}

// Logit tolerances of the bf16 CUDA model against f32 references, per golden model.
inline constexpr double kDefaultLogitTol = 5e-2;  // relative L2 of bf16-model logits vs f32 references
// llama_tied has large weights (std 0.25): emulating bf16 in numpy (tools/bf16_error_floor.py) gives it a
// floor of 0.14 from rounding the weights alone and 0.20 with bf16 activations on teacher-forced decode
// rows; an f32 residual stream does not lower it. Its tolerance follows that floor.
inline double logit_tol(const std::string& model) { return model == "llama_tied" ? 0.25 : kDefaultLogitTol; }

// Greedy-flip margin: bf16 rounding adds an error e to the f32 logits c; the top token a loses to a
// runner-up b when c[a] - c[b] < e[b] - e[a]. The margin is the 99th percentile of that "pairwise gain"
// max over the f32 top-2..6 of e[b] - e[a], measured with the numpy bf16 emulation of
// tools/bf16_error_floor.py (weights and activations rounded; 672 rows of 12 random 64-token prompts)
// and rounded up: llama_gqa p99 0.043 (max 0.058), mistral p99 0.043 (max 0.050) -> 0.05;
// llama_tied p99 0.167 (max 0.31) -> 0.20 (the same rounding that sets its 5x logit tolerance).
// A CUDA token that differs from the f32 one is accepted only when its f32 logit is within this
// margin of the f32 top logit.
inline constexpr float kDefaultGapMargin = 0.05f;
inline float gap_margin(const std::string& model) { return model == "llama_tied" ? 0.20f : kDefaultGapMargin; }
// The same gain for W8A8-FP8 (e4m3 weights per channel, activations per token) against the CPU oracle (f32
// activations, the same codes): tools/fp8_error_floor.py emulates the CUDA path (bf16 rounding of every op
// output, so each linear quantizes a bf16 row) on 2,304 teacher-forced rows of three random models of the
// engine equivalence test's spec: p99 0.548, max 0.775 (the top token differs from the oracle's in 15% of the
// rows, overturning oracle leads of up to 0.616; bf16 alone, the same way: p99 0.070) -> 0.8, the max rounded
// up. A row of e4m3 codes moves to the next code wherever one bf16 rounding crosses a code boundary, a
// relative step of up to 2^-3. The p99 (0.6 until session 34) is no bound for a test that checks every token
// of three paths
// (~1,800 rows a run): on an H100 (2026-12-05), with the FP8 GEMMs of the 32..64-row prefill chunks on our
// wgmma kernel (as accurate as cuBLASLt's: QuantLinear.Fp8MatchesCpuOracle, the same rel L2 to three digits),
// one solo token needed 0.627.
inline constexpr float kFp8GapMargin = 0.8f;

}  // namespace xinfer::gpu_test
