// A random Llama (f32 safetensors + config.json) written into a new temp dir, for GPU tests that need the
// fast kernels (head_dim 128, GQA) end to end without a golden. Weights ~ N(mean, std) per tensor, drawn
// from one std::mt19937 seeded with `seed` in a fixed order, so a given spec always gives the same model.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "xinfer/core/check.h"
#include "xinfer/core/tensor.h"
#include "xinfer/model/safetensors.h"

namespace xinfer::gpu_test {

struct SyntheticLlama {
  std::string dir_prefix;  // temp dir name before the random suffix
  int hidden = 256, head_dim = 128, num_heads = 8, num_kv_heads = 2, intermediate = 512, vocab = 512, layers = 2;
  unsigned seed = 1234;
  float o_proj_std = 0.03f;
};

// Returns the new directory (the caller owns it).
inline std::string write_synthetic_llama(const SyntheticLlama& m) {
  std::string templ = (std::filesystem::temp_directory_path() / (m.dir_prefix + "_XXXXXX")).string();
  XI_CHECK(::mkdtemp(templ.data()) != nullptr) << templ;
  const int H = m.hidden, D = m.head_dim, Hq = m.num_heads, Hkv = m.num_kv_heads, I = m.intermediate, V = m.vocab;
  nlohmann::json cfg = {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"hidden_size", H},
                        {"intermediate_size", I}, {"num_hidden_layers", m.layers}, {"num_attention_heads", Hq},
                        {"num_key_value_heads", Hkv}, {"head_dim", D}, {"vocab_size", V},
                        {"max_position_embeddings", 1024}, {"rms_norm_eps", 1e-5}, {"hidden_act", "silu"},
                        {"rope_parameters", {{"rope_theta", 10000.0}, {"rope_type", "default"}}},
                        {"tie_word_embeddings", false}, {"dtype", "float32"}, {"bos_token_id", 1},
                        {"eos_token_id", 2}};
  std::ofstream(templ + "/config.json") << cfg.dump(2);
  std::mt19937 rng(m.seed);
  std::vector<std::unique_ptr<HostTensor>> store;
  std::vector<std::pair<std::string, TensorView>> tensors;
  auto add = [&](const std::string& name, Shape s, float stdev, float mean) {
    auto t = std::make_unique<HostTensor>(DType::kF32, s);
    std::normal_distribution<float> d(mean, stdev);
    for (int64_t i = 0; i < t->numel(); ++i) t->data<float>()[i] = d(rng);
    tensors.emplace_back(name, t->view());
    store.push_back(std::move(t));
  };
  add("model.embed_tokens.weight", Shape{V, H}, 1.0f, 0.0f);
  for (int l = 0; l < m.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", Shape{H}, 0.1f, 1.0f);
    add(p + "post_attention_layernorm.weight", Shape{H}, 0.1f, 1.0f);
    add(p + "self_attn.q_proj.weight", Shape{Hq * D, H}, 0.08f, 0.0f);
    add(p + "self_attn.k_proj.weight", Shape{Hkv * D, H}, 0.08f, 0.0f);
    add(p + "self_attn.v_proj.weight", Shape{Hkv * D, H}, 0.08f, 0.0f);
    add(p + "self_attn.o_proj.weight", Shape{H, Hq * D}, m.o_proj_std, 0.0f);
    add(p + "mlp.gate_proj.weight", Shape{I, H}, 0.06f, 0.0f);
    add(p + "mlp.up_proj.weight", Shape{I, H}, 0.06f, 0.0f);
    add(p + "mlp.down_proj.weight", Shape{H, I}, 0.04f, 0.0f);
  }
  add("model.norm.weight", Shape{H}, 0.1f, 1.0f);
  add("lm_head.weight", Shape{V, H}, 0.1f, 0.0f);
  XI_CHECK_OK(model::write_safetensors(templ + "/model.safetensors", tensors, nullptr));
  return templ;
}

}  // namespace xinfer::gpu_test
