// add_rms_norm (bf16, CUDA) vs the CPU backend's add_rms_norm (f32) on the same bf16-rounded inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "xinfer/backend/cpu/cpu_backend.h"
#include "xinfer/backend/cuda/cuda_check.h"
#include "xinfer/backend/cuda/kernels/norm/rms_norm.h"

namespace xinfer {
namespace {

std::vector<float> random_bf16_values(size_t n, std::mt19937& rng, float scale) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = to_float(to_bf16(d(rng)));
  return v;
}

template <typename T>
T* device_copy(const std::vector<float>& host) {
  std::vector<bf16> b(host.size());
  for (size_t i = 0; i < host.size(); ++i) b[i] = to_bf16(host[i]);
  T* d = nullptr;
  XI_CUDA_CHECK(cudaMalloc(&d, b.size() * sizeof(bf16)));
  XI_CUDA_CHECK(cudaMemcpy(d, b.data(), b.size() * sizeof(bf16), cudaMemcpyHostToDevice));
  return d;
}

std::vector<float> host_copy(const __nv_bfloat16* d, size_t n) {
  std::vector<bf16> b(n);
  XI_CUDA_CHECK(cudaMemcpy(b.data(), d, n * sizeof(bf16), cudaMemcpyDeviceToHost));
  std::vector<float> f(n);
  for (size_t i = 0; i < n; ++i) f[i] = to_float(b[i]);
  return f;
}

class RmsNormTest : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(RmsNormTest, MatchesCpu) {
  const auto [rows, hidden] = GetParam();
  std::mt19937 rng(rows * 7919 + hidden);
  const size_t n = static_cast<size_t>(rows) * hidden;
  auto res = random_bf16_values(n, rng, 1.0f), del = random_bf16_values(n, rng, 0.5f);
  auto w = random_bf16_values(static_cast<size_t>(hidden), rng, 1.0f);

  auto* d_res = device_copy<__nv_bfloat16>(res);
  auto* d_del = device_copy<__nv_bfloat16>(del);
  auto* d_w = device_copy<__nv_bfloat16>(w);
  __nv_bfloat16* d_out = nullptr;
  XI_CUDA_CHECK(cudaMalloc(&d_out, n * sizeof(bf16)));
  XI_CUDA_CHECK(cudaMemset(d_out, 0xff, n * sizeof(bf16)));  // poison: NaN everywhere
  cuda::launch_add_rms_norm({d_res, d_del, d_w, d_out, rows, hidden, 1e-5f}, nullptr);
  XI_CUDA_CHECK(cudaDeviceSynchronize());
  auto out = host_copy(d_out, n);

  cpu::CpuBackend cpu;
  std::vector<float> ref_out(n);
  auto view = [&](std::vector<float>& v, Shape s) { return TensorView{v.data(), DType::kF32, s, Device::kCpu}; };
  // The GPU rounds residual + delta to bf16 before normalizing (it writes the residual stream in bf16).
  std::vector<float> ref_res(n);
  for (size_t i = 0; i < n; ++i) ref_res[i] = to_float(to_bf16(res[i] + del[i]));
  std::vector<float> zero(n, 0.0f);
  cpu.add_rms_norm(view(ref_res, Shape{rows, hidden}), view(zero, Shape{rows, hidden}),
                   view(w, Shape{hidden}), 1e-5f, view(ref_out, Shape{rows, hidden}));

  double err = 0, ref_norm = 0;
  for (size_t i = 0; i < n; ++i) {
    ASSERT_FALSE(std::isnan(out[i])) << "element " << i << " not written";
    err += (out[i] - ref_out[i]) * static_cast<double>(out[i] - ref_out[i]);
    ref_norm += static_cast<double>(ref_out[i]) * ref_out[i];
  }
  EXPECT_LT(std::sqrt(err / ref_norm), 8e-3) << "relative L2 error, bf16 output";
  auto new_res = host_copy(d_res, n);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(new_res[i], ref_res[i]) << i;
  for (void* p : {static_cast<void*>(d_res), static_cast<void*>(d_del), static_cast<void*>(d_w),
                  static_cast<void*>(d_out)})
    XI_CUDA_CHECK(cudaFree(p));
}

INSTANTIATE_TEST_SUITE_P(Shapes, RmsNormTest,
                         ::testing::Values(std::make_tuple(1, 8), std::make_tuple(3, 64),
                                           std::make_tuple(7, 4096), std::make_tuple(97, 5120),
                                           std::make_tuple(54, 8192),
                                           std::make_tuple(3, 16400)));  // past the preloaded weight chunks

}  // namespace
}  // namespace xinfer
