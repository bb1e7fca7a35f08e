// Helpers for the GPU checks: one CudaBackend and one CpuBackend per test binary, random bf16-valued
// inputs uploaded identically to both, NaN poisoning of CUDA outputs, and relative L2 comparison.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "xinfer/backend/cpu/cpu_backend.h"
#include "xinfer/backend/cuda/cuda_backend.h"
#include "xinfer/backend/cuda/cuda_check.h"

namespace xinfer::gpu_test {

inline cuda::CudaBackend& gpu() {
  static cuda::CudaBackend backend;
  return backend;
}
inline cpu::CpuBackend& cpu() {
  static cpu::CpuBackend backend;
  return backend;
}

// Normal(0, scale) values rounded to bf16 so both backends see identical inputs.
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

}  // namespace xinfer::gpu_test
