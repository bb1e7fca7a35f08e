// Dummy weights in quantized formats (model/dummy_quantized.h, `xinfer bench --quantization`): the names,
// the dequantized values' moments (mean ~0, std ~0.02 like the dense dummy weights; no NaN, e4m3 NaN codes
// never produced), determinism per seed, and a dummy quantized model on the CPU backend (finite logits,
// its linears in the format, different from the dense dummy model).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "xinfer/backend/cpu/cpu_backend.h"
#include "xinfer/engine/model_runner.h"
#include "xinfer/model/dummy_quantized.h"
#include "xinfer/model/llama.h"
#include "xinfer/quant/quantized_linear.h"

namespace xinfer::model {
namespace {

TEST(DummyQuantized, ParsesNames) {
  for (const char* n : {"w4a16", "w4a16-zp", "w8a16", "fp8", "w8a8-int8"}) EXPECT_TRUE(parse_dummy_quantization(n).ok()) << n;
  EXPECT_EQ(quant::format_name(*parse_dummy_quantization("w4a16")), "int4-g128");
  EXPECT_EQ(quant::format_name(*parse_dummy_quantization("w4a16-zp")), "int4-g128-zp");
  EXPECT_EQ(quant::format_name(*parse_dummy_quantization("w8a16")), "int8-channel");
  const auto bad = parse_dummy_quantization("int3");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("w4a16, w4a16-zp, w8a16, fp8, w8a8-int8"), std::string::npos);
}

TEST(DummyQuantized, ValuesHaveTheDenseDummyMoments) {
  for (const char* name : {"w4a16", "w4a16-zp", "w8a16", "fp8", "w8a8-int8"}) {
    const quant::WeightFormat f = *parse_dummy_quantization(name);
    auto h = make_dummy_quantized_linear(f, 96, 384, 7);
    ASSERT_TRUE(h.ok()) << name << ": " << h.status().to_string();
    std::vector<float> w(static_cast<size_t>(96 * 384));
    quant::dequantize_matrix(h->matrix(), w.data());
    double sum = 0, sq = 0;
    for (float v : w) {
      ASSERT_TRUE(std::isfinite(v)) << name;
      sum += v;
      sq += static_cast<double>(v) * v;
    }
    const double mean = sum / static_cast<double>(w.size()), sd = std::sqrt(sq / static_cast<double>(w.size()) - mean * mean);
    EXPECT_NEAR(sd, 0.02, 0.004) << name;
    EXPECT_LT(std::abs(mean), 0.002) << name;
    auto again = make_dummy_quantized_linear(f, 96, 384, 7);
    auto other = make_dummy_quantized_linear(f, 96, 384, 8);
    EXPECT_EQ(std::memcmp(again->weight.view().data, h->weight.view().data, h->weight.view().bytes()), 0) << name;
    EXPECT_NE(std::memcmp(other->weight.view().data, h->weight.view().data, h->weight.view().bytes()), 0) << name;
  }
  EXPECT_FALSE(make_dummy_quantized_linear(quant::IntGroupFormat{8, 128, false}, 4, 128, 1).ok());
}

std::string golden_dir(const std::string& name) {
  const char* src = std::getenv("XINFER_SOURCE_DIR");
  return std::string(src ? src : ".") + "/tests/golden/" + name;
}

std::vector<float> prefill_logits(cpu::CpuBackend& be, const char* quantization, std::string* qkv_format) {
  LoadOptions opt;
  opt.max_tokens = 64;
  opt.max_logit_rows = 1;
  opt.show_progress = false;
  opt.load_format = LoadFormat::kDummy;
  opt.seed = 3;
  if (quantization) opt.dummy_quantization = *parse_dummy_quantization(quantization);
  auto m = LlamaModel::load(golden_dir("llama_gqa"), be, opt);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  if (!m.ok()) return {};
  *qkv_format = quant::format_name((*m)->layer(0).qkv.format);
  const ModelConfig& c = (*m)->config();
  backend::KvCacheSpec spec{c.num_layers, 8, 16, c.num_kv_heads, c.head_dim, DType::kF32};
  engine::ModelRunner runner(**m, be, spec);
  std::vector<int32_t> ids(40);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 37 + 11) % c.vocab_size);
  const std::vector<int32_t> blocks = {1, 2, 3};
  engine::SequenceChunk chunk{ids, 0, blocks, true};
  return runner.run(std::span(&chunk, 1));
}

TEST(DummyQuantized, ModelRunsOnCpu) {
  cpu::CpuBackend be;
  std::string fmt;
  const std::vector<float> dense = prefill_logits(be, nullptr, &fmt);
  EXPECT_EQ(fmt, "dense(f32)");
  for (const char* q : {"w4a16", "w8a16", "fp8"}) {
    const std::vector<float> got = prefill_logits(be, q, &fmt);
    EXPECT_EQ(fmt, quant::format_name(*parse_dummy_quantization(q))) << q;
    ASSERT_EQ(got.size(), dense.size()) << q;
    double diff = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_TRUE(std::isfinite(got[i])) << q;
      diff += std::abs(got[i] - dense[i]);
    }
    EXPECT_GT(diff, 0) << q << ": the quantized dummy model should differ from the dense one";
  }
}

}  // namespace
}  // namespace xinfer::model
