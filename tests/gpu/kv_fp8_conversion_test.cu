// The FP8 KV cache's device conversions (kernels/attention/kv_fp8.cuh) against the host ones of core/dtype.h,
// which tests/unit/core/e4m3_reference_test.cpp checks against ml_dtypes' float8_e4m3fn:
//  - e4m3 -> f32 and the 16-code -> 2 x 8 bf16 vector path for all 256 codes (every finite code exactly;
//    the NaN codes 0x7f / 0xff read as +-480, which no store writes for a finite input);
//  - f32 / scale -> e4m3 (round to nearest even, saturating) for every midpoint between neighbouring codes
//    (ties), one f32 ulp either side of each, zeros, subnormals, values past 448 and scales 1, 0.05, 3.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "xinfer/backend/cuda/cuda_check.h"
#include "xinfer/backend/cuda/kernels/attention/kv_fp8.cuh"
#include "xinfer/core/dtype.h"

namespace xinfer::gpu_test {
namespace {

// out_f[c] = e4m3_to_float(c); out_v[16 * i .. + 15] = bf16 of the vector path for codes 16i .. 16i + 15.
__global__ void decode_codes_kernel(float* out_f, uint16_t* out_v) {
  const int c = threadIdx.x;  // 256 threads
  out_f[c] = cuda::e4m3_to_float(static_cast<uint8_t>(c));
  if (c < 16) {
    uint32_t w[4];
    for (int j = 0; j < 4; ++j)
      w[j] = static_cast<uint32_t>(16 * c + 4 * j) | static_cast<uint32_t>(16 * c + 4 * j + 1) << 8 |
             static_cast<uint32_t>(16 * c + 4 * j + 2) << 16 | static_cast<uint32_t>(16 * c + 4 * j + 3) << 24;
    const uint4 codes = make_uint4(w[0], w[1], w[2], w[3]);
    for (int h = 0; h < 2; ++h) {
      const uint4 b = cuda::e4m3x16_half_to_bf16x8(codes, h);
      std::memcpy(out_v + 16 * c + 8 * h, &b, 16);
    }
  }
}

__global__ void encode_kernel(const float* x, int n, float scale, uint8_t* out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = cuda::e4m3_from_float(x[i], scale);
}

// Per value its own scale: the quotient div_by_scale gives (its bits), the pair path's codes (pairs i, i ^
// 1).
__global__ void quotient_kernel(const float* x, const float* scale, int n, float* q, uint8_t* pair_codes) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  q[i] = cuda::div_by_scale(x[i], scale[i], __frcp_rn(scale[i]));
  if (i % 2 == 0 && i + 1 < n && scale[i] == scale[i + 1]) {
    const uint16_t c = cuda::e4m3x2_from_float(x[i], x[i + 1], scale[i], __frcp_rn(scale[i]));
    pair_codes[i] = static_cast<uint8_t>(c);
    pair_codes[i + 1] = static_cast<uint8_t>(c >> 8);
  }
}

TEST(KvFp8Conversion, AllCodesDecodeExactly) {
  float* d_f = nullptr;
  uint16_t* d_v = nullptr;
  XI_CUDA_CHECK(cudaMalloc(&d_f, 256 * sizeof(float)));
  XI_CUDA_CHECK(cudaMalloc(&d_v, 256 * sizeof(uint16_t)));
  decode_codes_kernel<<<1, 256>>>(d_f, d_v);
  XI_CUDA_CHECK_LAUNCH();
  std::vector<float> f(256);
  std::vector<uint16_t> v(256);
  XI_CUDA_CHECK(cudaMemcpy(f.data(), d_f, 256 * sizeof(float), cudaMemcpyDeviceToHost));
  XI_CUDA_CHECK(cudaMemcpy(v.data(), d_v, 256 * sizeof(uint16_t), cudaMemcpyDeviceToHost));
  XI_CUDA_CHECK(cudaFree(d_f));
  XI_CUDA_CHECK(cudaFree(d_v));
  for (int c = 0; c < 256; ++c) {
    const float want = (c & 0x7f) == 0x7f ? ((c & 0x80) ? -480.0f : 480.0f) : to_float(fp8_e4m3{static_cast<uint8_t>(c)});
    EXPECT_EQ(f[static_cast<size_t>(c)], want) << "code " << c;
    EXPECT_EQ(std::signbit(f[static_cast<size_t>(c)]), std::signbit(want)) << "code " << c;  // -0 for 0x80
    EXPECT_EQ(to_float(bf16{v[static_cast<size_t>(c)]}), want) << "vector path, code " << c;
  }
}

TEST(KvFp8Conversion, EncodeRoundsToNearestEvenAndSaturates) {
  std::vector<float> x = {0.0f, -0.0f, 1e-30f, -1e-30f, 448.0f, 449.0f, 463.9f, 464.0f, 1e6f, -1e6f, INFINITY,
                          -INFINITY, 240.0f, 0.001953125f, 0.0009765625f, 0.00146484375f};
  std::vector<float> codes;  // finite codes in increasing order
  for (int c = 0xfe; c >= 0x80; --c) codes.push_back(to_float(fp8_e4m3{static_cast<uint8_t>(c)}));
  for (int c = 0x00; c <= 0x7e; ++c) codes.push_back(to_float(fp8_e4m3{static_cast<uint8_t>(c)}));
  for (size_t i = 0; i + 1 < codes.size(); ++i) {
    if (codes[i] == codes[i + 1]) continue;  // -0, +0
    const float mid = 0.5f * (codes[i] + codes[i + 1]);  // exact: e4m3 values have 4 significant bits
    x.push_back(mid);
    x.push_back(std::nextafter(mid, -INFINITY));
    x.push_back(std::nextafter(mid, INFINITY));
    x.push_back(codes[i]);
  }
  const int n = static_cast<int>(x.size());
  float* d_x = nullptr;
  uint8_t* d_out = nullptr;
  XI_CUDA_CHECK(cudaMalloc(&d_x, x.size() * sizeof(float)));
  XI_CUDA_CHECK(cudaMalloc(&d_out, x.size()));
  for (const float scale : {1.0f, 0.05f, 3.0f}) {
    std::vector<float> xs(x.size());
    for (size_t i = 0; i < x.size(); ++i) xs[i] = x[i] * scale;  // x / scale lands near the tested values
    XI_CUDA_CHECK(cudaMemcpy(d_x, xs.data(), xs.size() * sizeof(float), cudaMemcpyHostToDevice));
    encode_kernel<<<(n + 255) / 256, 256>>>(d_x, n, scale, d_out);
    XI_CUDA_CHECK_LAUNCH();
    std::vector<uint8_t> got(x.size());
    XI_CUDA_CHECK(cudaMemcpy(got.data(), d_out, got.size(), cudaMemcpyDeviceToHost));
    int64_t bad = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const uint8_t want = to_fp8_e4m3(xs[i] / scale).bits;
      if (got[i] != want && bad++ < 10)
        ADD_FAILURE() << "scale " << scale << ": " << xs[i] << " / scale -> code " << int(got[i]) << ", host "
                      << int(want);
    }
    EXPECT_EQ(bad, 0) << "scale " << scale << ", " << n << " values";
  }
  XI_CUDA_CHECK(cudaFree(d_x));
  XI_CUDA_CHECK(cudaFree(d_out));
}

// The branch-free quotient (kv_fp8.cuh div_by_scale: a reciprocal, a product and one fma correction) against
// the host's IEEE division, bit for bit where |x| >= 2^-100, on 2^20 random values of every magnitude f32 has
// (normal and subnormal, both signs) and random positive scales from 2^-20 to 2^20, plus an overflowing
// quotient; the codes of the quotients and of the pair conversion against the host's codes everywhere.
TEST(KvFp8Conversion, QuotientEqualsTheIeeeDivision) {
  const int n = 1 << 20;
  std::vector<float> x(n), scale(n);
  uint64_t state = 0x9e3779b97f4a7c15ull;
  auto next = [&]() {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  for (int i = 0; i < n; i += 2) {
    const uint32_t bits = static_cast<uint32_t>(next());
    // Any finite f32 for x (exponent field 0..254), a scale 2^[-20, 20) with a random mantissa; the pair
    // shares it.
    const uint32_t xb = (bits & 0x807fffffu) | (static_cast<uint32_t>(next() % 255) << 23);
    const uint32_t sb =
        (static_cast<uint32_t>(next()) & 0x007fffffu) | (static_cast<uint32_t>(107 + next() % 40) << 23);
    std::memcpy(&x[i], &xb, 4);
    const uint32_t xb2 =
        (static_cast<uint32_t>(next()) & 0x807fffffu) | (static_cast<uint32_t>(100 + next() % 60) << 23);
    std::memcpy(&x[i + 1], &xb2, 4);
    std::memcpy(&scale[i], &sb, 4);
    scale[i + 1] = scale[i];
  }
  x[0] = 3.0e38f;  // overflows for scales below 1
  scale[0] = scale[1] = 0.01f;
  float *d_x = nullptr, *d_s = nullptr, *d_q = nullptr;
  uint8_t* d_c = nullptr;
  XI_CUDA_CHECK(cudaMalloc(&d_x, n * sizeof(float)));
  XI_CUDA_CHECK(cudaMalloc(&d_s, n * sizeof(float)));
  XI_CUDA_CHECK(cudaMalloc(&d_q, n * sizeof(float)));
  XI_CUDA_CHECK(cudaMalloc(&d_c, n));
  XI_CUDA_CHECK(cudaMemcpy(d_x, x.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  XI_CUDA_CHECK(cudaMemcpy(d_s, scale.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  quotient_kernel<<<n / 256, 256>>>(d_x, d_s, n, d_q, d_c);
  XI_CUDA_CHECK_LAUNCH();
  std::vector<float> q(n);
  std::vector<uint8_t> codes(n);
  XI_CUDA_CHECK(cudaMemcpy(q.data(), d_q, n * sizeof(float), cudaMemcpyDeviceToHost));
  XI_CUDA_CHECK(cudaMemcpy(codes.data(), d_c, n, cudaMemcpyDeviceToHost));
  for (float* p : {d_x, d_s, d_q}) XI_CUDA_CHECK(cudaFree(p));
  XI_CUDA_CHECK(cudaFree(d_c));
  int64_t bad_q = 0, bad_c = 0, checked = 0;
  for (int i = 0; i < n; ++i) {
    const float want = x[i] / scale[i];
    uint32_t wb = 0, gb = 0;
    std::memcpy(&wb, &want, 4);
    std::memcpy(&gb, &q[i], 4);
    // Below |x| = 2^-100 the remainder is subnormal and the quotient may differ in its last bits: such
    // quotients (< 2^-80 here) code to +-0 either way, which the code checks below hold.
    const bool tiny = std::fabs(x[i]) < 0x1p-100f || std::fabs(want) < 0x1p-126f;
    if (!tiny && !std::isinf(want)) {
      ++checked;
      if (wb != gb && bad_q++ < 10)
        ADD_FAILURE() << x[i] << " / " << scale[i] << ": device " << q[i] << ", host " << want;
    }
    const uint8_t want_code = to_fp8_e4m3(want).bits;
    if ((to_fp8_e4m3(q[i]).bits != want_code || codes[i] != want_code) && bad_c++ < 10)
      ADD_FAILURE() << x[i] << " / " << scale[i] << ": codes of the device quotient "
                    << int(to_fp8_e4m3(q[i]).bits) << ", of the pair " << int(codes[i]) << ", host "
                    << int(want_code);
  }
  EXPECT_EQ(bad_q, 0) << checked << " quotients checked bit for bit";
  EXPECT_EQ(bad_c, 0);
  EXPECT_GT(checked, n / 2);
}

}  // namespace
}  // namespace xinfer::gpu_test
