// Built-in configs (preset_configs.h) and `--load-format dummy` (random weights in the real shapes):
// parameter counts against the published sizes of the models, the counter-based normal generator
// against the moments of N(0, sigma^2), and dummy-weight models/engines on the CPU backend.
#include <gtest/gtest.h>

#include <cmath>
#include <condition_variable>
#include <mutex>
#include <span>
#include <cstdlib>
#include <vector>

#include "xinfer/backend/counter_rng.h"
#include "xinfer/backend/cpu/cpu_backend.h"
#include "xinfer/engine/engine.h"
#include "xinfer/engine/model_runner.h"
#include "xinfer/model/llama.h"
#include "xinfer/model/preset_configs.h"

namespace xinfer::model {
namespace {

std::string golden_dir(const std::string& name) {
  const char* src = std::getenv("XINFER_SOURCE_DIR");
  return std::string(src ? src : ".") + "/tests/golden/" + name;
}

// Published parameter counts (Hugging Face model cards / safetensors metadata).
TEST(PresetConfigs, ParameterCountsMatchPublishedModels) {
  struct Case { const char* name; int64_t params; };
  for (const Case& c : {Case{"llama-3.1-8b", 8030261248}, Case{"qwen2.5-7b", 7615616512},
                        Case{"llama-3.1-70b", 70553706496}}) {
    auto cfg = resolve_model_config(c.name);
    ASSERT_TRUE(cfg.ok()) << c.name << ": " << cfg.status().to_string();
    EXPECT_EQ(LlamaModel::parameter_count(*cfg), c.params) << c.name;
    EXPECT_TRUE(is_preset(c.name));
  }
  auto llama = resolve_model_config("llama-3.1-8b");
  EXPECT_EQ(llama->rope_scaling.type, RopeScalingType::kLlama3);
  EXPECT_EQ(llama->head_dim, 128);
  EXPECT_TRUE(resolve_model_config("qwen2.5-7b")->attention_bias);
}

TEST(PresetConfigs, UnknownNameIsNotFoundAndDirectoriesWin) {
  auto r = resolve_model_config("llama-9z");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("llama-3.1-8b"), std::string::npos) << r.status().message();
  EXPECT_FALSE(is_preset(golden_dir("llama_gqa")));
  EXPECT_TRUE(resolve_model_config(golden_dir("llama_gqa")).ok());
}

TEST(CounterNormal, MomentsOfNormal) {
  constexpr int kN = 1 << 20;
  const float sigma = 0.02f;
  double sum = 0, sum2 = 0, sum4 = 0;
  int within1 = 0;
  for (int i = 0; i < kN; ++i) {
    const double x = backend::counter_normal(7, static_cast<uint64_t>(i), sigma);
    sum += x;
    sum2 += x * x;
    sum4 += x * x * x * x;
    within1 += std::abs(x) < sigma;
  }
  const double mean = sum / kN, var = sum2 / kN - mean * mean;
  EXPECT_NEAR(mean, 0.0, 5 * sigma / std::sqrt(kN));
  EXPECT_NEAR(std::sqrt(var), sigma, 0.005 * sigma);
  EXPECT_NEAR(sum4 / kN / (var * var), 3.0, 0.03);            // kurtosis of a normal
  EXPECT_NEAR(static_cast<double>(within1) / kN, 0.6827, 0.003);  // P(|x| < sigma)
  EXPECT_NE(backend::counter_normal(7, 0, 1.0f), backend::counter_normal(8, 0, 1.0f));
}

std::vector<float> first_logits(const std::string& dir, LoadFormat fmt, uint64_t seed) {
  cpu::CpuBackend be(cpu::CpuBackendOptions{1});
  LoadOptions opt;
  opt.max_tokens = 8;
  opt.max_logit_rows = 1;
  opt.show_progress = false;
  opt.load_format = fmt;
  opt.seed = seed;
  auto m = LlamaModel::load(dir, be, opt);
  XI_CHECK(m.ok()) << m.status().to_string();
  const ModelConfig& c = (*m)->config();
  backend::KvCacheSpec spec{c.num_layers, 4, 16, c.num_kv_heads, c.head_dim, DType::kF32};
  engine::ModelRunner runner(**m, be, spec);
  const std::vector<int32_t> ids = {1, 2, 3, 4, 5};
  const std::vector<int32_t> blocks = {1};
  engine::SequenceChunk chunk{ids, 0, blocks, true};
  std::vector<float> logits = runner.run(std::span(&chunk, 1));
  return logits;
}

TEST(DummyWeights, DeterministicPerSeedAndFinite) {
  const std::string dir = golden_dir("llama_gqa");
  const auto a = first_logits(dir, LoadFormat::kDummy, 1);
  const auto b = first_logits(dir, LoadFormat::kDummy, 1);
  const auto c = first_logits(dir, LoadFormat::kDummy, 2);
  const auto real = first_logits(dir, LoadFormat::kAuto, 0);
  ASSERT_EQ(a.size(), real.size());
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_NE(a, real);
  for (float v : a) ASSERT_TRUE(std::isfinite(v));
}

TEST(DummyWeights, PresetWithoutWeightsNeedsDummy) {
  cpu::CpuBackend be(cpu::CpuBackendOptions{1});
  LoadOptions opt;
  opt.show_progress = false;
  auto m = LlamaModel::load("llama-3.1-8b", be, opt);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("--load-format dummy"), std::string::npos) << m.status().message();
}

TEST(DummyWeights, EngineGeneratesWithDummyWeights) {
  engine::EngineConfig ec;
  ec.model_dir = golden_dir("qwen2");
  ec.load_format = LoadFormat::kDummy;
  ec.threads = 1;
  ec.kv_cache_memory = 4 << 20;
  auto eng = engine::Engine::create(ec);
  ASSERT_TRUE(eng.ok()) << eng.status().to_string();
  EXPECT_GT((*eng)->memory_plan().weight_bytes, 0u);
  EXPECT_GT((*eng)->memory_plan().kv_tokens, 0);
  std::mutex mu;
  std::condition_variable cv;
  int tokens = -1;
  engine::GenerationRequest req;
  req.request_id = "r";
  req.prompt_ids = {1, 2, 3};
  req.sampling.temperature = 0;
  req.sampling.ignore_eos = true;
  req.sampling.max_tokens = 7;
  ASSERT_TRUE((*eng)->submit(req, [&](engine::RequestOutput o) {
                      if (!o.finished) return;
                      std::lock_guard<std::mutex> l(mu);
                      tokens = o.num_output_tokens;
                      cv.notify_all();
                    }).ok());
  std::unique_lock<std::mutex> l(mu);
  cv.wait(l, [&] { return tokens >= 0; });
  EXPECT_EQ(tokens, 7);
}

}  // namespace
}  // namespace xinfer::model
