// Mistral's sliding_window (issue 19 item 6): attention here is always full, which matches Hugging Face's
// windowed attention only for sequences within the window. The engine must cap max_model_len at the window
// and refuse a longer one with a message naming the field; a config without a window (v0.2+: null) keeps
// max_position_embeddings. A tiny Mistral config in a temp dir, random (--load-format dummy) weights, CPU.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "temp_dir.h"
#include "xinfer/engine/engine.h"
#include "xinfer/model/model_config.h"

namespace xinfer::model {
namespace {

// Fields as in mistralai/Mistral-7B-v0.1's config.json, at a tiny size.
std::string tiny_mistral(const std::string& sliding_window) {
  return R"({"architectures": ["MistralForCausalLM"], "model_type": "mistral", "bos_token_id": 1,
    "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 64, "intermediate_size": 128,
    "max_position_embeddings": 512, "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2,
    "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": )" +
         sliding_window + R"(, "tie_word_embeddings": false, "torch_dtype": "float32", "vocab_size": 256})";
}

Result<std::unique_ptr<engine::Engine>> create(const std::string& dir, int max_model_len) {
  engine::EngineConfig ec;
  ec.model_dir = dir;
  ec.load_format = LoadFormat::kDummy;
  ec.threads = 1;
  ec.kv_cache_memory = 4 << 20;
  ec.max_model_len = max_model_len;
  ec.show_progress = false;
  return engine::Engine::create(ec);
}

TEST(SlidingWindow, ContextLimitIsTheShorterOfWindowAndPositions) {
  auto with = parse_model_config(nlohmann::json::parse(tiny_mistral("64")));
  ASSERT_TRUE(with.ok()) << with.status().to_string();
  EXPECT_EQ(with->context_limit(), 64);
  EXPECT_NE(with->context_limit_reason().find("sliding_window 64"), std::string::npos);
  auto without = parse_model_config(nlohmann::json::parse(tiny_mistral("null")));
  ASSERT_TRUE(without.ok());
  EXPECT_EQ(without->context_limit(), 512);
  auto wide = parse_model_config(nlohmann::json::parse(tiny_mistral("4096")));  // window past the positions
  ASSERT_TRUE(wide.ok());
  EXPECT_EQ(wide->context_limit(), 512);
}

TEST(SlidingWindow, EngineRefusesMaxModelLenPastTheWindow) {
  testing::TempDir dir;
  testing::write_bytes(dir.file("config.json"), tiny_mistral("64"));
  auto too_long = create(dir.path(), 65);
  ASSERT_FALSE(too_long.ok());
  EXPECT_EQ(too_long.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(too_long.status().message().find("sliding_window 64"), std::string::npos)
      << too_long.status().message();
  auto at_window = create(dir.path(), 64);
  ASSERT_TRUE(at_window.ok()) << at_window.status().to_string();
  EXPECT_EQ((*at_window)->config().max_model_len, 64);
}

TEST(SlidingWindow, DefaultMaxModelLenIsCappedAtTheWindow) {
  testing::TempDir dir;
  testing::write_bytes(dir.file("config.json"), tiny_mistral("64"));
  auto eng = create(dir.path(), 0);
  ASSERT_TRUE(eng.ok()) << eng.status().to_string();
  EXPECT_EQ((*eng)->config().max_model_len, 64);
  // A prompt past the window can then never be scheduled: the request is refused, not silently wrong.
  engine::GenerationRequest req;
  req.request_id = "long";
  req.prompt_ids.assign(70, 5);
  req.sampling.max_tokens = 1;
  EXPECT_FALSE((*eng)->submit(req, [](engine::RequestOutput) {}).ok());
}

TEST(SlidingWindow, NoWindowKeepsMaxPositionEmbeddings) {
  testing::TempDir dir;
  testing::write_bytes(dir.file("config.json"), tiny_mistral("null"));
  auto eng = create(dir.path(), 0);
  ASSERT_TRUE(eng.ok()) << eng.status().to_string();
  EXPECT_EQ((*eng)->config().max_model_len, 512);
  EXPECT_TRUE(create(dir.path(), 128).ok());
}

}  // namespace
}  // namespace xinfer::model
