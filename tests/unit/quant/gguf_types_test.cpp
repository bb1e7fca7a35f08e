// GGUF type tables vs ggml's (the sizes gguf.GGML_QUANT_SIZES lists), row sizes and errors.
#include <gtest/gtest.h>

#include "xinfer/quant/quantized_linear.h"

namespace xinfer::quant {
namespace {

TEST(GgufTypes, BlockSizesMatchGgml) {
  struct Want {
    uint32_t id;
    const char* name;
    int64_t elems, bytes;
  };
  // From gguf.GGML_QUANT_SIZES (gguf 0.19.0) and the type ids of gguf.GGMLQuantizationType.
  const Want want[] = {{0, "F32", 1, 4},       {1, "F16", 1, 2},       {2, "Q4_0", 32, 18},
                       {3, "Q4_1", 32, 20},    {6, "Q5_0", 32, 22},    {7, "Q5_1", 32, 24},
                       {8, "Q8_0", 32, 34},    {9, "Q8_1", 32, 36},    {10, "Q2_K", 256, 84},
                       {11, "Q3_K", 256, 110}, {12, "Q4_K", 256, 144}, {13, "Q5_K", 256, 176},
                       {14, "Q6_K", 256, 210}, {15, "Q8_K", 256, 292}, {30, "BF16", 1, 2}};
  for (const Want& w : want) {
    const auto t = gguf_type_from_id(w.id);
    ASSERT_TRUE(t.has_value()) << w.id;
    EXPECT_STREQ(gguf_type_name(*t), w.name);
    EXPECT_EQ(gguf_block_elems(*t), w.elems) << w.name;
    EXPECT_EQ(gguf_block_bytes(*t), w.bytes) << w.name;
  }
  EXPECT_FALSE(gguf_type_from_id(4).has_value());   // removed Q4_2
  EXPECT_FALSE(gguf_type_from_id(16).has_value());  // IQ2_XXS: not supported
  EXPECT_FALSE(gguf_type_from_id(1000).has_value());
}

TEST(GgufTypes, RowBytes) {
  EXPECT_EQ(gguf_row_bytes(GgufType::kQ4_1, 576).value(), 360u);
  EXPECT_EQ(gguf_row_bytes(GgufType::kQ8_0, 576).value(), 612u);
  EXPECT_EQ(gguf_row_bytes(GgufType::kQ4_K, 512).value(), 288u);
  EXPECT_EQ(gguf_row_bytes(GgufType::kF32, 3).value(), 12u);
  const Result<size_t> bad = gguf_row_bytes(GgufType::kQ4_K, 576);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("Q4_K"), std::string::npos) << bad.status().message();
  std::vector<float> dst(40);
  std::vector<uint8_t> src(100);
  EXPECT_FALSE(dequantize_gguf(GgufType::kQ8_0, src.data(), 40, dst.data()).ok());
}

TEST(WeightFormat, NamesAndBytes) {
  EXPECT_EQ(format_name(DenseFormat{DType::kBF16}), "dense(bf16)");
  EXPECT_EQ(format_name(GgufFormat{GgufType::kQ4_1}), "gguf(Q4_1)");
  EXPECT_EQ(format_name(IntGroupFormat{4, 128, true}), "int4-g128-zp");
  EXPECT_EQ(format_name(IntGroupFormat{8, 32, false}), "int8-g32");
  EXPECT_EQ(format_name(Int8ChannelFormat{}), "int8-channel");
  EXPECT_EQ(format_name(IntGroupFormat{4, 32, false, true}), "int4-g32-min");  // GGUF Q4_1 repacked
  EXPECT_EQ(format_weight_bytes(DenseFormat{DType::kBF16}, 3, 8), 48u);
  EXPECT_EQ(format_weight_bytes(GgufFormat{GgufType::kQ4_1}, 576, 576), 576u * 360u);
  EXPECT_EQ(format_weight_bytes(IntGroupFormat{4, 128, true}, 2, 256), 2u * 128u + 2u * 2u * 5u);
  EXPECT_EQ(format_weight_bytes(W8A8Fp8Format{false, ActScaleMode::kStaticPerTensor}, 2, 16), 36u);
  // Q4_1's 20-byte blocks of 32 repacked: 16 bytes of codes, an f32 scale and an f32 min
  EXPECT_EQ(format_weight_bytes(IntGroupFormat{4, 32, false, true}, 576, 576), 576u * 18u * 24u);
  EXPECT_FALSE(cpu_supports(IntGroupFormat{8, 32, false, true}));  // mins are int4's only
  for (const WeightFormat& f : {WeightFormat{DenseFormat{}}, WeightFormat{Int8ChannelFormat{}},
                                WeightFormat{IntGroupFormat{}}, WeightFormat{W8A8Int8Format{}},
                                WeightFormat{W8A8Fp8Format{}}, WeightFormat{GgufFormat{GgufType::kQ6_K}}}) {
    EXPECT_TRUE(cpu_supports(f)) << format_name(f);
  }
}

}  // namespace
}  // namespace xinfer::quant
