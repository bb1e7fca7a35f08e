#include "xinfer/core/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace xinfer {
namespace {

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(to_bf16(1.0f).bits, 0x3f80);
  // 1 + 2^-8 is exactly halfway between two bf16 values: ties to even (1.0).
  EXPECT_EQ(to_bf16(1.00390625f).bits, 0x3f80);
  // 1 + 3*2^-8 is halfway: ties to even (1 + 2^-6 -> mantissa 0x02).
  EXPECT_EQ(to_bf16(1.01171875f).bits, 0x3f82);
  EXPECT_TRUE(std::isnan(to_float(to_bf16(std::nanf("")))));
  EXPECT_EQ(to_float(to_bf16(-2.5f)), -2.5f);
}

TEST(DType, F16RoundTripsAllFiniteValues) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    f16 h{static_cast<uint16_t>(b)};
    float f = to_float(h);
    if (std::isnan(f)) continue;
    EXPECT_EQ(to_f16(f).bits, h.bits) << std::hex << b;
  }
  EXPECT_EQ(to_float(f16{0x3c00}), 1.0f);
  EXPECT_EQ(to_float(f16{0x0001}), std::ldexp(1.0f, -24));
  EXPECT_EQ(to_f16(65520.0f).bits, 0x7c00);  // rounds to inf
}

TEST(DType, Fp8E4M3RoundTripsAllValues) {
  for (uint32_t b = 0; b < 0x100; ++b) {
    fp8_e4m3 v{static_cast<uint8_t>(b)};
    float f = to_float(v);
    if (std::isnan(f)) continue;
    if (f == 0.0f) continue;  // +-0 both fine
    EXPECT_EQ(to_fp8_e4m3(f).bits, v.bits) << std::hex << b << " " << f;
  }
  EXPECT_EQ(to_float(fp8_e4m3{0x7e}), 448.0f);
  EXPECT_EQ(to_fp8_e4m3(1000.0f).bits, 0x7e);   // saturates
  EXPECT_EQ(to_fp8_e4m3(-1000.0f).bits, 0xfe);
  EXPECT_EQ(to_float(fp8_e4m3{0x01}), std::ldexp(1.0f, -9));
}

TEST(DType, Fp8RoundingIsNearest) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> d(-400, 400);
  for (int i = 0; i < 10000; ++i) {
    float x = d(rng);
    float y = to_float(to_fp8_e4m3(x));
    // Neighbours of y must not be closer to x.
    fp8_e4m3 q = to_fp8_e4m3(x);
    for (int delta : {-1, 1}) {
      int nb = (q.bits & 0x7f) + delta;
      if (nb < 0 || nb > 0x7e) continue;
      float n = to_float(fp8_e4m3{static_cast<uint8_t>((q.bits & 0x80) | nb)});
      EXPECT_LE(std::fabs(y - x), std::fabs(n - x) + 1e-6f) << x;
    }
  }
}

TEST(DType, Int4PackingIsTwoPerByteLowNibbleFirst) {
  uint8_t packed[3] = {0, 0, 0xAA};
  const int8_t values[5] = {-8, 7, -1, 0, 3};
  for (size_t i = 0; i < 5; ++i) set_i4(packed, i, values[i]);
  EXPECT_EQ(packed[0], 0x78);  // -8 -> 0x8 low, 7 -> 0x7 high
  EXPECT_EQ(packed[1], 0x0F);  // -1 -> 0xF low, 0 high
  EXPECT_EQ(packed[2], 0xA3);  // 3 low; the high nibble (element 5) is untouched
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(get_i4(packed, i), values[i]) << i;
}

TEST(DType, SizesAndNames) {
  EXPECT_EQ(dtype_bytes(DType::kI4, 3), 2u);
  EXPECT_EQ(dtype_bytes(DType::kBF16, 3), 6u);
  EXPECT_EQ(*dtype_from_safetensors("BF16"), DType::kBF16);
  EXPECT_FALSE(dtype_from_safetensors("F64").has_value());
  EXPECT_STREQ(dtype_name(DType::kFP8E4M3), "fp8_e4m3");
}

}  // namespace
}  // namespace xinfer
