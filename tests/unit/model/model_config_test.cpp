// config.json parsing against the published configs of real checkpoints (copied from their Hugging Face
// repositories; only keys that transformers reads for these classes matter), plus one test per bad input.
#include "xinfer/model/model_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "temp_dir.h"

namespace xinfer::model {
namespace {

using json = nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::TempDir;
using testing::write_bytes;

// meta-llama/Llama-2-7b-hf
const char* kLlama2 = R"({
  "architectures": ["LlamaForCausalLM"], "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
  "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 11008, "max_position_embeddings": 4096,
  "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
  "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": null, "tie_word_embeddings": false,
  "torch_dtype": "float16", "transformers_version": "4.31.0.dev0", "use_cache": true, "vocab_size": 32000})";

// meta-llama/Llama-3.1-8B-Instruct
const char* kLlama31 = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "hidden_act": "silu", "hidden_size": 4096,
  "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 131072, "mlp_bias": false,
  "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
  "pretraining_tp": 1, "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "transformers_version": "4.42.3", "use_cache": true, "vocab_size": 128256})";

// meta-llama/Llama-3.2-1B
const char* kLlama32 = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 128000, "eos_token_id": 128001, "head_dim": 64, "hidden_act": "silu", "hidden_size": 2048,
  "initializer_range": 0.02, "intermediate_size": 8192, "max_position_embeddings": 131072, "mlp_bias": false,
  "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8,
  "pretraining_tp": 1, "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
  "transformers_version": "4.45.0.dev0", "use_cache": true, "vocab_size": 128256})";

// mistralai/Mistral-7B-v0.1
const char* kMistral01 = R"({
  "architectures": ["MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
  "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 32768,
  "model_type": "mistral", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
  "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096, "tie_word_embeddings": false,
  "torch_dtype": "bfloat16", "transformers_version": "4.34.0.dev0", "use_cache": true, "vocab_size": 32000})";

// mistralai/Mistral-7B-Instruct-v0.2
const char* kMistral02 = R"({
  "architectures": ["MistralForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2,
  "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
  "max_position_embeddings": 32768, "model_type": "mistral", "num_attention_heads": 32, "num_hidden_layers": 32,
  "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "sliding_window": null,
  "tie_word_embeddings": false, "torch_dtype": "bfloat16", "transformers_version": "4.36.0", "use_cache": true,
  "vocab_size": 32000})";

// Qwen/Qwen2.5-0.5B-Instruct (its generation_config.json: eos [151645, 151643], bos 151643)
const char* kQwen25 = R"({
  "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
  "eos_token_id": 151645, "hidden_act": "silu", "hidden_size": 896, "initializer_range": 0.02,
  "intermediate_size": 4864, "max_position_embeddings": 32768, "max_window_layers": 21, "model_type": "qwen2",
  "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2, "rms_norm_eps": 1e-06,
  "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
  "transformers_version": "4.43.1", "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})";
const char* kQwen25Generation = R"({
  "bos_token_id": 151643, "pad_token_id": 151643, "do_sample": true, "eos_token_id": [151645, 151643],
  "repetition_penalty": 1.1, "temperature": 0.7, "top_p": 0.8, "top_k": 20, "transformers_version": "4.37.0"})";

// Qwen/Qwen3-0.6B: head_dim 128 while hidden_size / num_attention_heads = 64.
const char* kQwen3 = R"({
  "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 1024,
  "initializer_range": 0.02, "intermediate_size": 3072, "max_position_embeddings": 40960, "max_window_layers": 28,
  "model_type": "qwen3", "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8,
  "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null,
  "tie_word_embeddings": true, "torch_dtype": "bfloat16", "transformers_version": "4.51.0", "use_cache": true,
  "use_sliding_window": false, "vocab_size": 151936})";

// A tiny config like the ones tools/make_golden.py writes.
json tiny_llama() {
  return json::parse(R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "vocab_size": 256, "max_position_embeddings": 128, "rms_norm_eps": 1e-5, "torch_dtype": "float32"})");
}

ModelConfig parse_ok(const char* text) {
  Result<ModelConfig> r = parse_model_config(json::parse(text));
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? *r : ModelConfig{};
}

Status parse_error(const json& config) {
  Result<ModelConfig> r = parse_model_config(config);
  EXPECT_FALSE(r.ok()) << "parsed " << (r.ok() ? r->to_string() : "");
  return r.status();
}

TEST(ModelConfig, Llama2) {
  ModelConfig c = parse_ok(kLlama2);
  EXPECT_EQ(c.architecture, "LlamaForCausalLM");
  EXPECT_EQ(c.model_type, "llama");
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.intermediate_size, 11008);
  EXPECT_EQ(c.num_layers, 32);
  EXPECT_EQ(c.num_heads, 32);
  EXPECT_EQ(c.num_kv_heads, 32);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.vocab_size, 32000);
  EXPECT_EQ(c.max_position_embeddings, 4096);
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-5f);
  EXPECT_FLOAT_EQ(c.rope_theta, 10000.0f);  // absent: LlamaConfig's default
  EXPECT_EQ(c.rope_scaling.type, RopeScalingType::kNone);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_FALSE(c.o_bias);
  EXPECT_FALSE(c.mlp_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.torch_dtype, DType::kF16);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_THAT(c.eos_token_ids, ElementsAre(2));
  EXPECT_FALSE(c.sliding_window.has_value());
}

TEST(ModelConfig, Llama31WithLlama3RopeScaling) {
  ModelConfig c = parse_ok(kLlama31);
  EXPECT_EQ(c.num_kv_heads, 8);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.max_position_embeddings, 131072);
  EXPECT_FLOAT_EQ(c.rope_theta, 500000.0f);
  EXPECT_EQ(c.rope_scaling.type, RopeScalingType::kLlama3);
  EXPECT_FLOAT_EQ(c.rope_scaling.factor, 8.0f);
  EXPECT_FLOAT_EQ(c.rope_scaling.low_freq_factor, 1.0f);
  EXPECT_FLOAT_EQ(c.rope_scaling.high_freq_factor, 4.0f);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_EQ(c.torch_dtype, DType::kBF16);
  EXPECT_EQ(c.bos_token_id, 128000);
  EXPECT_THAT(c.eos_token_ids, ElementsAre(128001, 128008, 128009));
  EXPECT_THAT(c.to_string(), HasSubstr("heads 32/8 x 128"));
  EXPECT_THAT(c.to_string(), HasSubstr("llama3 x8"));
}

TEST(ModelConfig, Llama32Tied) {
  ModelConfig c = parse_ok(kLlama32);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.num_layers, 16);
  EXPECT_FLOAT_EQ(c.rope_scaling.factor, 32.0f);
  EXPECT_THAT(c.eos_token_ids, ElementsAre(128001));
  EXPECT_THAT(c.to_string(), HasSubstr("tied embeddings"));
}

TEST(ModelConfig, MistralSlidingWindow) {
  ModelConfig v01 = parse_ok(kMistral01);
  EXPECT_EQ(v01.model_type, "mistral");
  EXPECT_EQ(v01.sliding_window, 4096);
  EXPECT_EQ(v01.head_dim, 128);
  EXPECT_EQ(v01.num_kv_heads, 8);
  EXPECT_FALSE(v01.attention_bias);
  ModelConfig v02 = parse_ok(kMistral02);
  EXPECT_FALSE(v02.sliding_window.has_value());
  EXPECT_FLOAT_EQ(v02.rope_theta, 1e6f);
  // MistralConfig's default when the key is absent.
  json no_key = json::parse(kMistral02);
  no_key.erase("sliding_window");
  EXPECT_EQ(parse_model_config(no_key)->sliding_window, 4096);
}

TEST(ModelConfig, Qwen25BiasTiedAndGenerationConfigEos) {
  ModelConfig c = parse_ok(kQwen25);
  EXPECT_TRUE(c.attention_bias);  // Qwen2 always has q/k/v bias, though config.json does not say so
  EXPECT_FALSE(c.o_bias);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-6f);
  EXPECT_FALSE(c.sliding_window.has_value());  // use_sliding_window: false

  TempDir dir;
  write_bytes(dir.file("config.json"), kQwen25);
  write_bytes(dir.file("generation_config.json"), kQwen25Generation);
  Result<ModelConfig> loaded = load_model_config(dir.path());
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  EXPECT_THAT(loaded->eos_token_ids, ElementsAre(151645, 151643));
  EXPECT_EQ(loaded->bos_token_id, 151643);
}

TEST(ModelConfig, Qwen3QkNormAndHeadDim) {
  ModelConfig c = parse_ok(kQwen3);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_NE(c.head_dim, c.hidden_size / c.num_heads);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_FALSE(c.o_bias);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_FLOAT_EQ(c.rope_theta, 1e6f);  // an integer in the JSON
  // Qwen3Config defaults head_dim to 128 when the key is absent.
  json no_head_dim = json::parse(kQwen3);
  no_head_dim["head_dim"] = nullptr;
  EXPECT_EQ(parse_model_config(no_head_dim)->head_dim, 64);
  no_head_dim.erase("head_dim");
  EXPECT_EQ(parse_model_config(no_head_dim)->head_dim, 128);
}

TEST(ModelConfig, MqaAndLlamaBiasKeys) {
  json j = tiny_llama();
  j["num_key_value_heads"] = 1;
  j["attention_bias"] = true;
  j["mlp_bias"] = true;
  ModelConfig c = *parse_model_config(j);
  EXPECT_EQ(c.num_kv_heads, 1);
  EXPECT_TRUE(c.attention_bias);
  EXPECT_TRUE(c.o_bias);
  EXPECT_TRUE(c.mlp_bias);
  // Absent num_key_value_heads means multi-head attention.
  j.erase("num_key_value_heads");
  EXPECT_EQ(parse_model_config(j)->num_kv_heads, 4);
}

TEST(ModelConfig, TransformersV5Keys) {
  // transformers >= 4.56 writes "dtype"; v5 moves rope settings into "rope_parameters".
  json j = tiny_llama();
  j.erase("torch_dtype");
  j["dtype"] = "bfloat16";
  j["rope_parameters"] = {{"rope_type", "llama3"}, {"rope_theta", 500000.0}, {"factor", 8.0},
                          {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                          {"original_max_position_embeddings", 8192}};
  ModelConfig c = *parse_model_config(j);
  EXPECT_EQ(c.torch_dtype, DType::kBF16);
  EXPECT_FLOAT_EQ(c.rope_theta, 500000.0f);
  EXPECT_EQ(c.rope_scaling.type, RopeScalingType::kLlama3);
}

TEST(ModelConfig, LegacyRopeScalingTypeKeyAndYarnDefaults) {
  json j = tiny_llama();
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  EXPECT_EQ(parse_model_config(j)->rope_scaling.type, RopeScalingType::kLinear);
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  ModelConfig c = *parse_model_config(j);
  EXPECT_EQ(c.rope_scaling.type, RopeScalingType::kYarn);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 128);  // max_position_embeddings
  EXPECT_FLOAT_EQ(c.rope_scaling.beta_fast, 32.0f);
  EXPECT_FLOAT_EQ(c.rope_scaling.beta_slow, 1.0f);
  j["rope_scaling"] = {{"rope_type", "default"}};
  EXPECT_EQ(parse_model_config(j)->rope_scaling.type, RopeScalingType::kNone);
}

// ---- bad input: one test per failure mode, checking the message ----

TEST(ModelConfigErrors, UnsupportedArchitecture) {
  json j = tiny_llama();
  j["architectures"] = {"GPT2LMHeadModel"};
  j["model_type"] = "gpt2";
  Status s = parse_error(j);
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_EQ(s.message(),
            "unsupported architecture 'GPT2LMHeadModel' (supported: LlamaForCausalLM, MistralForCausalLM, "
            "Qwen2ForCausalLM, Qwen3ForCausalLM)");
}

TEST(ModelConfigErrors, MissingKey) {
  json j = tiny_llama();
  j.erase("hidden_size");
  Status s = parse_error(j);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "missing key 'hidden_size' (expected an integer)");
}

TEST(ModelConfigErrors, WrongType) {
  json j = tiny_llama();
  j["num_hidden_layers"] = "two";
  EXPECT_EQ(parse_error(j).message(), "key 'num_hidden_layers': expected an integer, found string \"two\"");
  j = tiny_llama();
  j["vocab_size"] = 0;
  EXPECT_EQ(parse_error(j).message(), "key 'vocab_size': expected a positive integer, found 0");
}

TEST(ModelConfigErrors, HeadsDoNotDivideHidden) {
  json j = tiny_llama();
  j["num_attention_heads"] = 6;
  j["num_key_value_heads"] = 6;
  EXPECT_EQ(parse_error(j).message(),
            "num_attention_heads (6) does not divide hidden_size (64) and config has no head_dim");
}

TEST(ModelConfigErrors, KvHeadsDoNotDivideHeads) {
  json j = tiny_llama();
  j["num_key_value_heads"] = 3;
  EXPECT_EQ(parse_error(j).message(), "num_key_value_heads (3) does not divide num_attention_heads (4)");
}

TEST(ModelConfigErrors, UnsupportedRopeScalingType) {
  json j = tiny_llama();
  j["rope_scaling"] = {{"rope_type", "longrope"}, {"factor", 4.0}};
  Status s = parse_error(j);
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_EQ(s.message(), "unsupported rope_scaling type 'longrope' (supported: default, linear, dynamic, llama3, yarn)");
}

TEST(ModelConfigErrors, IncompleteLlama3RopeScaling) {
  json j = tiny_llama();
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192}};
  EXPECT_EQ(parse_error(j).message(), "rope_scaling (llama3): missing key 'low_freq_factor' (expected a number)");
}

TEST(ModelConfigErrors, UnsupportedDtype) {
  json j = tiny_llama();
  j["torch_dtype"] = "float64";
  Status s = parse_error(j);
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_EQ(s.message(), "unsupported torch_dtype 'float64' (supported: float32, bfloat16, float16)");
}

TEST(ModelConfigErrors, UnsupportedActivation) {
  json j = tiny_llama();
  j["hidden_act"] = "gelu";
  Status s = parse_error(j);
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_EQ(s.message(), "unsupported hidden_act 'gelu' (supported: silu)");
}

TEST(ModelConfigErrors, MissingConfigJson) {
  TempDir dir;
  Result<ModelConfig> r = load_model_config(dir.path());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(r.status().message(), "no config.json in " + dir.path());
  r = load_model_config(dir.file("nope"));
  EXPECT_EQ(r.status().message(), "model directory " + dir.file("nope") + " does not exist");
}

TEST(ModelConfigErrors, InvalidJsonAndBadKeyNameTheFile) {
  TempDir dir;
  write_bytes(dir.file("config.json"), "{\"architectures\": [\"LlamaForCausalLM\"],");
  Result<ModelConfig> r = load_model_config(dir.path());
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr(dir.file("config.json") + ": invalid JSON: "));
  json j = tiny_llama();
  j["torch_dtype"] = "int8";
  write_bytes(dir.file("config.json"), j.dump());
  r = load_model_config(dir.path());
  EXPECT_EQ(r.status().message(), dir.file("config.json") + ": unsupported torch_dtype 'int8' (supported: float32, "
                                                            "bfloat16, float16)");
}

}  // namespace
}  // namespace xinfer::model
