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

}  // namespace
}  // namespace xinfer::gpu_test
