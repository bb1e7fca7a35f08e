// GGUF Q4_0 / Q4_1 / Q5_0 / Q8_0 / Q4_K / Q6_K rows repacked into int4 / int8 per group
// (model/gguf_repack.h): the repacked matrix dequantizes (quant::dequantize_matrix) to exactly what
// quant::dequantize_gguf (the gguf package's arithmetic, tests/python/test_gguf_quant.py) gives for the
// original blocks, on random blocks with f16 scales (and mins) across the normal range and random sub-block
// scales (Q4_K, Q6_K), and the CPU's matmul of it agrees with the GGUF kernels; other types have no repack;
// bad k is refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "xinfer/core/dtype.h"
#include "xinfer/model/gguf_repack.h"
#include "xinfer/quant/quantized_linear.h"

namespace xinfer::model {
namespace {

TEST(GgufRepack, DequantizesExactlyAsGguf) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> mag(-12.0f, 2.0f);
  for (quant::GgufType type : {quant::GgufType::kQ4_0, quant::GgufType::kQ4_1, quant::GgufType::kQ5_0,
                               quant::GgufType::kQ8_0, quant::GgufType::kQ4_K, quant::GgufType::kQ6_K}) {
    const bool k_quant = type == quant::GgufType::kQ4_K || type == quant::GgufType::kQ6_K;
    const int64_t n = 7, k = k_quant ? 768 : 96;
    const size_t row_bytes = *quant::gguf_row_bytes(type, k);
    std::vector<uint8_t> rows(n * row_bytes);
    for (auto& b : rows) b = static_cast<uint8_t>(byte(rng));
    const auto block = static_cast<size_t>(quant::gguf_block_bytes(type));
    // d (and Q4_1's m, Q4_K's dmin): finite f16, both signs; Q6_K's d is its last field
    std::vector<size_t> halves = {0};
    if (type == quant::GgufType::kQ4_1 || type == quant::GgufType::kQ4_K) halves = {0, 2};
    if (type == quant::GgufType::kQ6_K) halves = {208};
    for (size_t off = 0; off < rows.size(); off += block)
      for (size_t h : halves) {
        const f16 d = to_f16((byte(rng) % 2 ? -1.0f : 1.0f) * std::exp2(mag(rng)));
        std::memcpy(rows.data() + off + h, &d.bits, 2);
      }
    auto h = repack_gguf_rows(type, rows.data(), n, k);
    ASSERT_TRUE(h.ok()) << h.status().to_string();
    const bool mins = type == quant::GgufType::kQ4_1 || type == quant::GgufType::kQ4_K;
    EXPECT_EQ(quant::format_name(h->format), type == quant::GgufType::kQ4_0   ? "int4-g32"
                                             : mins                           ? "int4-g32-min"
                                             : type == quant::GgufType::kQ6_K ? "int8-g16"
                                                                              : "int8-g32");
    std::vector<float> got(static_cast<size_t>(n * k)), want(static_cast<size_t>(n * k));
    quant::dequantize_matrix(h->matrix(), got.data());
    for (int64_t r = 0; r < n; ++r) ASSERT_TRUE(quant::dequantize_gguf(type, rows.data() + r * row_bytes, k, want.data() + r * k).ok());
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want[i]) << quant::gguf_type_name(type) << " element " << i;
    // The CPU's matmul of the repacked matrix against the GGUF kernels' on the original blocks (which
    // quantize x to 8 bits: 1e-2).
    const int64_t m = 3;
    std::vector<float> x(static_cast<size_t>(m * k)), y_int(static_cast<size_t>(m * n)), y_gguf(y_int.size());
    for (auto& v : x) v = std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng);
    quant::quantized_matmul(h->matrix(), x.data(), m, y_int.data(), nullptr);
    quant::QuantizedMatrix g;
    g.format = quant::GgufFormat{type};
    g.n = n;
    g.k = k;
    g.weight = rows.data();
    quant::quantized_matmul(g, x.data(), m, y_gguf.data(), nullptr);
    double num = 0, den = 0;
    for (size_t i = 0; i < y_int.size(); ++i) {
      num += (y_int[i] - y_gguf[i]) * static_cast<double>(y_int[i] - y_gguf[i]);
      den += static_cast<double>(y_gguf[i]) * y_gguf[i];
    }
    EXPECT_LT(std::sqrt(num / den), 1e-2) << quant::gguf_type_name(type);
  }
  EXPECT_FALSE(gguf_repack_format(quant::GgufType::kQ5_1).has_value());
  // Per tensor: the linears of an unsharded model, never the embedding table.
  EXPECT_TRUE(gguf_repack_format(quant::GgufType::kQ4_1, "blk.0.attn_q.weight", false).has_value());
  EXPECT_FALSE(gguf_repack_format(quant::GgufType::kQ4_1, "blk.0.attn_q.weight", true).has_value());
  EXPECT_FALSE(gguf_repack_format(quant::GgufType::kQ8_0, "token_embd.weight", false).has_value());
  EXPECT_FALSE(gguf_repack_format(quant::GgufType::kQ5_K).has_value());  // 5-bit codes with mins
  std::vector<uint8_t> some(64);
  EXPECT_FALSE(repack_gguf_rows(quant::GgufType::kQ5_1, some.data(), 1, 32).ok());
  EXPECT_FALSE(repack_gguf_rows(quant::GgufType::kQ8_0, some.data(), 1, 48).ok());
  const auto k4 = repack_gguf_rows(quant::GgufType::kQ4_K, some.data(), 1, 96);
  ASSERT_FALSE(k4.ok());
  EXPECT_NE(k4.status().message().find("block of 256"), std::string::npos) << k4.status().to_string();
}

}  // namespace
}  // namespace xinfer::model
