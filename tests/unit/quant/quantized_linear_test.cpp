// quantized_matmul == float matmul on dequantize_matrix's weights, per format, on awkward shapes, for the
// AVX2 and the portable paths. Tolerances (all relative to A = sum_k |x_k W_nk|, the abs dot product, or
// from the activation rounding each format does; a wrong nibble order or scale index gives errors of order
// A):
//   f32 summation in any order: (K * 2^-23 + 1e-6) * A
//   GGUF Q8_0 / Q4_0 / Q4_1: x rounded to 8 bits per block of 32, |error| <= max|x_b| / 254 per element, so
//     sum over blocks b of max|x_b| / 254 * sum_{k in b} |W_nk|
//   W8A8 int8: |error| <= s / 2 per element (s = max|x_t| / 127, or the static scale; inputs not clipped)
//   W8A8 fp8 e4m3: |error| <= |x| 2^-4 (3 mantissa bits) + s 2^-10 (half the smallest subnormal) per element
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "xinfer/quant/gguf_matmul.h"  // detail::quantize_rows_q8
#include "xinfer/quant/quantized_linear.h"

namespace xinfer::quant {
namespace {

struct Weights {
  QuantizedMatrix m;
  std::vector<uint8_t> weight, zeros;
  std::vector<float> scales, mins, input_scale;
  std::vector<int32_t> g_idx;
};

void put_half(uint8_t* p, float v) {
  const uint16_t bits = to_f16(v).bits;
  std::memcpy(p, &bits, 2);
}

// Offsets of the f16 scale fields in a block of each GGUF type (ggml-common.h): random bytes elsewhere are
// valid quants.
std::vector<int> gguf_scale_offsets(GgufType t) {
  switch (t) {
    case GgufType::kQ4_0:
    case GgufType::kQ5_0:
    case GgufType::kQ8_0:
      return {0};
    case GgufType::kQ4_1:
    case GgufType::kQ5_1:
      return {0, 2};
    case GgufType::kQ2_K:
      return {80, 82};
    case GgufType::kQ3_K:
      return {108};
    case GgufType::kQ4_K:
    case GgufType::kQ5_K:
      return {0, 2};
    case GgufType::kQ6_K:
      return {208};
    default:
      return {};
  }
}

int64_t block_k(const WeightFormat& f) {
  if (const auto* g = std::get_if<GgufFormat>(&f)) return std::max<int64_t>(gguf_block_elems(g->type), 32);
  if (const auto* g = std::get_if<IntGroupFormat>(&f)) return g->group_size;
  return 32;
}

Weights make_weights(const WeightFormat& f, int64_t n, int64_t k, bool use_g_idx, std::mt19937& rng) {
  Weights w;
  w.m.format = f;
  w.m.n = n;
  w.m.k = k;
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.002f, 0.02f);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, DenseFormat>) {
          std::vector<float> fw(static_cast<size_t>(n * k));
          for (float& x : fw) x = 0.05f * normal(rng);
          w.weight.resize(dtype_bytes(v.dtype, fw.size()));
          convert_from_f32(v.dtype, fw.data(), w.weight.data(), fw.size());
        } else if constexpr (std::is_same_v<T, GgufFormat>) {
          const int64_t be = gguf_block_elems(v.type), bb = gguf_block_bytes(v.type);
          w.weight.resize(static_cast<size_t>(n * (k / be) * bb));
          for (uint8_t& b : w.weight) b = static_cast<uint8_t>(byte(rng));
          for (size_t off = 0; off < w.weight.size(); off += static_cast<size_t>(bb)) {
            for (int s : gguf_scale_offsets(v.type))
              put_half(&w.weight[off + static_cast<size_t>(s)], scale(rng));
          }
        } else if constexpr (std::is_same_v<T, IntGroupFormat>) {
          const int64_t groups = (k + v.group_size - 1) / v.group_size;  // the last may be partial
          w.weight.resize(static_cast<size_t>(n * k * v.bits / 8));
          for (uint8_t& b : w.weight) b = static_cast<uint8_t>(byte(rng));
          w.scales.resize(static_cast<size_t>(n * groups));
          for (float& s : w.scales) s = scale(rng);
          if (v.zero_point) {
            w.zeros.resize(static_cast<size_t>(n * groups));
            for (uint8_t& z : w.zeros) z = static_cast<uint8_t>(byte(rng) % (1 << v.bits));
          }
          if (v.min_offset) {  // about -8 scales, as GGUF's Q4_1 / Q4_K quantizers make them
            w.mins.resize(static_cast<size_t>(n * groups));
            for (size_t i = 0; i < w.mins.size(); ++i)
              w.mins[i] = -8.0f * w.scales[i] * (0.5f + scale(rng) * 50.0f);
          }
          if (use_g_idx) {
            w.g_idx.resize(static_cast<size_t>(k));
            for (int32_t& g : w.g_idx) g = static_cast<int32_t>(byte(rng) % groups);
          }
        } else {  // i8 or fp8 bytes with per-channel (or one) scales
          w.weight.resize(static_cast<size_t>(n * k));
          for (uint8_t& b : w.weight) {
            b = static_cast<uint8_t>(byte(rng));
            if constexpr (std::is_same_v<T, W8A8Fp8Format>) {
              if ((b & 0x7f) == 0x7f) b = 0;  // NaN
            } else if (b == 0x80) {
              b = 0x81;  // -128: symmetric int8 uses -127..127
            }
          }
          bool per_channel = true;
          if constexpr (std::is_same_v<T, W8A8Fp8Format>) per_channel = v.per_channel;
          w.scales.resize(per_channel ? static_cast<size_t>(n) : 1);
          for (float& s : w.scales) s = 0.01f * scale(rng);
        }
      },
      f);
  w.m.weight = w.weight.data();
  w.m.scales = w.scales.empty() ? nullptr : w.scales.data();
  w.m.zeros = w.zeros.empty() ? nullptr : w.zeros.data();
  w.m.mins = w.mins.empty() ? nullptr : w.mins.data();
  w.m.g_idx = w.g_idx.empty() ? nullptr : w.g_idx.data();
  return w;
}

bool static_act(const WeightFormat& f) {
  if (const auto* v = std::get_if<W8A8Int8Format>(&f)) return v->act == ActScaleMode::kStaticPerTensor;
  if (const auto* v = std::get_if<W8A8Fp8Format>(&f)) return v->act == ActScaleMode::kStaticPerTensor;
  return false;
}

// The activation-rounding error bound of the format for row x against weight row wr (see the top comment).
double activation_bound(const WeightFormat& f, const float* x, const float* wr, int64_t k, double s_static) {
  double bound = 0.0;
  if (const auto* g = std::get_if<GgufFormat>(&f)) {
    if (g->type != GgufType::kQ8_0 && g->type != GgufType::kQ4_0 && g->type != GgufType::kQ4_1) return 0.0;
    for (int64_t b = 0; b < k; b += 32) {
      double amax = 0.0, wsum = 0.0;
      for (int64_t i = b; i < b + 32; ++i) {
        amax = std::max(amax, std::fabs(static_cast<double>(x[i])));
        wsum += std::fabs(wr[i]);
      }
      bound += amax / 254.0 * wsum;
    }
    return bound;
  }
  const bool int8 = std::holds_alternative<W8A8Int8Format>(f), fp8 = std::holds_alternative<W8A8Fp8Format>(f);
  if (!int8 && !fp8) return 0.0;
  double amax = 0.0;
  for (int64_t i = 0; i < k; ++i) amax = std::max(amax, std::fabs(static_cast<double>(x[i])));
  const double s = static_act(f) ? s_static : amax / (int8 ? 127.0 : 448.0);
  for (int64_t i = 0; i < k; ++i) {
    bound += std::fabs(wr[i]) * (int8 ? s / 2 : std::fabs(x[i]) / 16.0 + s / 1024.0);
  }
  return bound;
}

struct FormatCase {
  WeightFormat format;
  bool g_idx = false;
};

std::vector<FormatCase> all_formats() {
  std::vector<FormatCase> c = {
      {DenseFormat{DType::kF32}},
      {DenseFormat{DType::kBF16}},
      {DenseFormat{DType::kF16}},
      {Int8ChannelFormat{}},
      {IntGroupFormat{4, 32, false}},
      {IntGroupFormat{4, 128, true}},
      {IntGroupFormat{4, 64, true}, true},
      {IntGroupFormat{4, 32, false, true}},  // mins (GGUF Q4_1 / Q4_K repacked)
      {IntGroupFormat{8, 16, false}},        // groups of 16 (GGUF Q6_K repacked)
      {IntGroupFormat{8, 16, true}},
      {IntGroupFormat{8, 32, false}},
      {IntGroupFormat{8, 128, true}, true},
      {IntGroupFormat{8, 128, true}},
      {W8A8Int8Format{ActScaleMode::kDynamicPerToken}},
      {W8A8Int8Format{ActScaleMode::kStaticPerTensor}},
      {W8A8Fp8Format{true, ActScaleMode::kDynamicPerToken}},
      {W8A8Fp8Format{false, ActScaleMode::kStaticPerTensor}},
  };
  for (GgufType t : {GgufType::kQ8_0, GgufType::kQ4_0, GgufType::kQ4_1, GgufType::kQ5_0, GgufType::kQ5_1,
                     GgufType::kQ2_K, GgufType::kQ3_K, GgufType::kQ4_K, GgufType::kQ5_K, GgufType::kQ6_K}) {
    c.push_back({GgufFormat{t}});
  }
  return c;
}

class QuantizedMatmul : public ::testing::TestWithParam<bool> {  // param: portable path forced
 protected:
  void SetUp() override { set_force_portable(GetParam()); }
  void TearDown() override { set_force_portable(false); }
};

TEST_P(QuantizedMatmul, MatchesFloatMatmulOnDequantizedWeights) {
  std::mt19937 rng(1234);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  ThreadPool pool(2);
  for (const FormatCase& fc : all_formats()) {
    for (int64_t n : {1, 7, 33, 576}) {
      for (int64_t k : {block_k(fc.format), int64_t{1536}, int64_t{576}}) {
        if (const auto* g = std::get_if<GgufFormat>(&fc.format); g && k % gguf_block_elems(g->type) != 0)
          continue;
        Weights w = make_weights(fc.format, n, k, fc.g_idx, rng);
        std::vector<float> wf(static_cast<size_t>(n * k));
        dequantize_matrix(w.m, wf.data());
        for (int64_t rows : {1, 3, 8, 17}) {
          SCOPED_TRACE(format_name(fc.format) + (fc.g_idx ? " g_idx" : "") + " n=" + std::to_string(n) +
                       " k=" + std::to_string(k) + " rows=" + std::to_string(rows));
          std::vector<float> x(static_cast<size_t>(rows * k));
          for (float& v : x) v = normal(rng);
          x[0] = 3.5f;  // outliers: one large element per block stresses the block scales
          double amax = 0.0;
          for (float v : x) amax = std::max(amax, std::fabs(static_cast<double>(v)));
          const double s_static = amax / (std::holds_alternative<W8A8Int8Format>(fc.format) ? 120.0 : 400.0);
          w.input_scale = {static_cast<float>(s_static)};
          w.m.input_scale = static_act(fc.format) ? w.input_scale.data() : nullptr;
          std::vector<float> y(static_cast<size_t>(rows * n), NAN), y1(y.size(), NAN);
          quantized_matmul(w.m, x.data(), rows, y.data(), &pool);
          quantized_matmul(w.m, x.data(), rows, y1.data(), nullptr);
          int bad = 0;
          for (int64_t t = 0; t < rows; ++t) {
            for (int64_t j = 0; j < n; ++j) {
              const float* xr = &x[static_cast<size_t>(t * k)];
              const float* wr = &wf[static_cast<size_t>(j * k)];
              double ref = 0.0, abs_sum = 0.0;
              for (int64_t i = 0; i < k; ++i) {
                ref += static_cast<double>(xr[i]) * wr[i];
                abs_sum += std::fabs(static_cast<double>(xr[i]) * wr[i]);
              }
              const double tol = (static_cast<double>(k) * 0x1p-23 + 1e-6) * abs_sum +
                                 1.001 * activation_bound(fc.format, xr, wr, k, s_static) + 1e-30;
              const float got = y[static_cast<size_t>(t * n + j)];
              if (!(std::fabs(got - ref) <= tol) && bad++ < 3) {
                ADD_FAILURE() << "y[" << t << "," << j << "] = " << got << ", reference " << ref << ", tol "
                              << tol;
              }
              // Threads split output rows only: each output is computed the same way.
              EXPECT_EQ(got, y1[static_cast<size_t>(t * n + j)]);
            }
          }
          ASSERT_EQ(bad, 0);
        }
      }
    }
  }
}

// The register-tiled GEMM (rows >= 8 for Q8_0 / Q4_0 / Q4_1) on shapes that exercise its edges: column
// groups of 8 with 1..7 columns left over, row tiles of 4 with 1..3 left, K in more than one panel chunk
// (64 blocks: k = 4160 is 2 chunks + 2 blocks), against the float matmul on the dequantized weights and
// against the GEMV path on the same input (same integer block sums: float summation order only).
TEST_P(QuantizedMatmul, GgufGemmEdgesMatchFloatAndGemvExactly) {
  std::mt19937 rng(4321);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  ThreadPool pool(2);
  for (GgufType t : {GgufType::kQ8_0, GgufType::kQ4_0, GgufType::kQ4_1}) {
    for (int64_t n : {1, 8, 13, 41}) {
      for (int64_t k : {int64_t{32}, int64_t{96}, int64_t{4160}}) {
        Weights w = make_weights(GgufFormat{t}, n, k, false, rng);
        std::vector<float> wf(static_cast<size_t>(n * k));
        dequantize_matrix(w.m, wf.data());
        for (int64_t rows : {8, 9, 14, 35}) {
          SCOPED_TRACE(std::string(gguf_type_name(t)) + " n=" + std::to_string(n) + " k=" + std::to_string(k) +
                       " rows=" + std::to_string(rows));
          std::vector<float> x(static_cast<size_t>(rows * k));
          for (float& v : x) v = normal(rng);
          x[static_cast<size_t>(k)] = -4.0f;
          std::vector<float> y(static_cast<size_t>(rows * n), NAN), y1(y.size(), NAN);
          quantized_matmul(w.m, x.data(), rows, y.data(), &pool);
          quantized_matmul(w.m, x.data(), rows, y1.data(), nullptr);
          int bad = 0;
          for (int64_t r = 0; r < rows; ++r) {
            const float* xr = &x[static_cast<size_t>(r * k)];
            // From 2 rows the GEMV performs the GEMM's float operations in its order: bit-identical, so a row's
            // result does not depend on how many rows share its call (chunked prefill == one shot).
            std::vector<float> yv(static_cast<size_t>(n));
            quantized_matmul(w.m, xr, 1, yv.data(), nullptr);
            std::vector<float> y3(static_cast<size_t>(3 * n));  // rows r.. in a 3-row (GEMV) call
            if (r + 3 <= rows) quantized_matmul(w.m, xr, 3, y3.data(), &pool);
            for (int64_t j = 0; j < n; ++j) {
              const float* wr = &wf[static_cast<size_t>(j * k)];
              double ref = 0.0, abs_sum = 0.0;
              for (int64_t i = 0; i < k; ++i) {
                ref += static_cast<double>(xr[i]) * wr[i];
                abs_sum += std::fabs(static_cast<double>(xr[i]) * wr[i]);
              }
              const double tol = (static_cast<double>(k) * 0x1p-23 + 1e-6) * abs_sum +
                                 1.001 * activation_bound(GgufFormat{t}, xr, wr, k, 0.0) + 1e-30;
              const float got = y[static_cast<size_t>(r * n + j)];
              if (!(std::fabs(got - ref) <= tol) && bad++ < 3) {
                ADD_FAILURE() << "y[" << r << "," << j << "] = " << got << ", reference " << ref << ", tol " << tol;
              }
              EXPECT_EQ(got, y1[static_cast<size_t>(r * n + j)]);
              if (GetParam() || !simd_enabled()) {  // portable: one kernel for every row count
                EXPECT_EQ(got, yv[static_cast<size_t>(j)]);
              } else {  // AVX2 single row: the per-weight-row kernel, same integers, its own float order
                EXPECT_NEAR(got, yv[static_cast<size_t>(j)], (static_cast<double>(k) * 0x1p-23 + 1e-6) * abs_sum + 1e-30);
              }
              if (r + 3 <= rows) {
                EXPECT_EQ(got, y3[static_cast<size_t>(j)]);
              }
            }
          }
          ASSERT_EQ(bad, 0);
        }
      }
    }
  }
}

// The AVX2 activation quantizer is bit-identical to the portable one (the GEMV, the GEMM and llama.cpp's
// reference all round x / d to nearest even), including ties and all-zero blocks.
TEST(QuantizeRowsQ8, SimdBitIdenticalToPortable) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t rows = 3, k = 96;
  std::vector<float> x(static_cast<size_t>(rows * k));
  for (float& v : x) v = normal(rng);
  for (int j = 0; j < 32; ++j) x[static_cast<size_t>(j)] = 127.0f - 0.5f * static_cast<float>(j);  // ties: d = 1
  for (int j = 32; j < 64; ++j) x[static_cast<size_t>(j)] = 0.0f;
  detail::Q8Rows simd, portable;
  set_force_portable(false);
  detail::quantize_rows_q8(x.data(), rows, k, &simd);
  set_force_portable(true);
  detail::quantize_rows_q8(x.data(), rows, k, &portable);
  set_force_portable(false);
  EXPECT_EQ(simd.qs, portable.qs);
  EXPECT_EQ(simd.ds, portable.ds);
  EXPECT_EQ(portable.qs[1], 126);  // 126.5 -> 126 (even)
  EXPECT_EQ(portable.qs[3], 126);  // 125.5 -> 126
}

INSTANTIATE_TEST_SUITE_P(Paths, QuantizedMatmul, ::testing::Values(false, true),
                         [](const auto& p) { return p.param ? "Portable" : "Simd"; });

// The SIMD and the portable kernels compute the same integer block sums; only the float summation order
// differs.
TEST(QuantizedMatmulPaths, SimdAgreesWithPortable) {
  std::mt19937 rng(99);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const FormatCase& fc : all_formats()) {
    const int64_t n = 40, k = 1536, rows = 5;
    Weights w = make_weights(fc.format, n, k, fc.g_idx, rng);
    std::vector<float> x(static_cast<size_t>(rows * k));
    for (float& v : x) v = normal(rng);
    w.input_scale = {0.05f};
    w.m.input_scale = w.input_scale.data();
    std::vector<float> ys(static_cast<size_t>(rows * n)), yp(ys.size());
    set_force_portable(false);
    quantized_matmul(w.m, x.data(), rows, ys.data(), nullptr);
    set_force_portable(true);
    EXPECT_FALSE(simd_enabled());
    quantized_matmul(w.m, x.data(), rows, yp.data(), nullptr);
    set_force_portable(false);
    double max_abs = 0.0;
    for (float v : yp) max_abs = std::max(max_abs, std::fabs(static_cast<double>(v)));
    for (size_t i = 0; i < ys.size(); ++i) {
      ASSERT_NEAR(ys[i], yp[i], 1e-5 * max_abs + 1e-30) << format_name(fc.format) << " i=" << i;
    }
  }
}

}  // namespace
}  // namespace xinfer::quant
