// The CPU engine against Hugging Face transformers: tiny random-weight models of every supported
// architecture, with float32 logits and greedy tokens recorded by tools/make_golden.py (see
// tests/golden/README.md). Logits must match to 1e-4 and greedy tokens exactly; chunked prefill and
// batching must not change either.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

#include "xinfer/backend/cpu/cpu_backend.h"
#include "xinfer/engine/model_runner.h"
#include "xinfer/model/llama.h"
#include "xinfer/model/safetensors.h"

namespace xinfer {
namespace {

constexpr float kLogitTolerance = 1e-4f;
constexpr int kBlockSize = 4;  // small, so prompts span several blocks

std::string golden_root() {
  const char* src = std::getenv("XINFER_SOURCE_DIR");
  return std::string(src ? src : ".") + "/tests/golden";
}

struct Golden {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::vector<float>> logits;  // [len * vocab] per prompt
  std::vector<std::vector<int32_t>> greedy;
};

Golden read_golden(const std::string& dir) {
  auto files = model::WeightFiles::open_file(dir + "/golden.safetensors");
  Golden g;
  XI_CHECK(files.ok()) << files.status().to_string();
  for (int i = 0;; ++i) {
    const std::string idx = std::to_string(i);
    if (!files->contains("prompt_" + idx)) break;
    auto copy_ids = [&](const std::string& name) {
      TensorView v = *files->get(name);
      XI_CHECK(v.dtype == DType::kI32) << name;
      return std::vector<int32_t>(v.as<int32_t>(), v.as<int32_t>() + v.numel());
    };
    g.prompts.push_back(copy_ids("prompt_" + idx));
    g.greedy.push_back(copy_ids("greedy_" + idx));
    TensorView l = *files->get("logits_" + idx);
    g.logits.emplace_back(l.as<float>(), l.as<float>() + l.numel());
  }
  return g;
}

std::vector<std::string> golden_models() {
  std::vector<std::string> names;
  const std::string root = golden_root();
  if (!std::filesystem::exists(root)) return names;
  for (const auto& e : std::filesystem::directory_iterator(root))
    if (std::filesystem::exists(e.path() / "golden.safetensors") &&
        std::filesystem::exists(e.path() / "config.json"))
      names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

int argmax(const float* x, int n) { return static_cast<int>(std::max_element(x, x + n) - x); }

class GoldenTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = golden_root() + "/" + GetParam();
    golden_ = read_golden(dir_);
    ASSERT_FALSE(golden_.prompts.empty());
    model::LoadOptions opts;
    opts.max_tokens = 256;
    opts.max_logit_rows = 256;
    opts.show_progress = false;
    auto m = model::LlamaModel::load(dir_, backend_, opts);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    model_ = std::move(*m);
    vocab_ = model_->config().vocab_size;
    const auto& c = model_->config();
    spec_ = backend::KvCacheSpec{c.num_layers, 512, kBlockSize, c.num_kv_heads, c.head_dim, DType::kF32};
    runner_ = std::make_unique<engine::ModelRunner>(*model_, backend_, spec_);
  }

  // Blocks [first, first + n) as a table: disjoint ranges per sequence.
  static std::vector<int32_t> blocks(int first, int n) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    std::iota(t.begin(), t.end(), first);
    return t;
  }

  // Greedy generation of `count` tokens for several prompts in lockstep (batched decode), prefilling in
  // chunks of `chunk` tokens, all sequences in the same steps.
  std::vector<std::vector<int32_t>> greedy_batch(const std::vector<std::vector<int32_t>>& prompts, int count,
                                                 int chunk) {
    const size_t n = prompts.size();
    std::vector<std::vector<int32_t>> tables, seqs = prompts, out(n);
    for (size_t s = 0; s < n; ++s) tables.push_back(blocks(1 + static_cast<int>(s) * 30, 30));
    std::vector<size_t> done(n, 0);  // tokens already in the cache
    while (true) {
      std::vector<engine::SequenceChunk> chunks;
      std::vector<size_t> which;
      for (size_t s = 0; s < n; ++s) {
        if (static_cast<int>(out[s].size()) >= count) continue;
        const size_t len = std::min(seqs[s].size() - done[s], static_cast<size_t>(chunk));
        chunks.push_back({std::span(seqs[s]).subspan(done[s], len), static_cast<int32_t>(done[s]), tables[s],
                          done[s] + len == seqs[s].size()});
        which.push_back(s);
        done[s] += len;
      }
      if (chunks.empty()) break;
      const std::vector<float>& logits = runner_->run(chunks);
      int row = 0;
      for (size_t i = 0; i < chunks.size(); ++i) {
        if (!chunks[i].want_logits) continue;
        const int32_t tok = argmax(logits.data() + static_cast<size_t>(row++) * vocab_, vocab_);
        out[which[i]].push_back(tok);
        seqs[which[i]].push_back(tok);
      }
    }
    return out;
  }

  cpu::CpuBackend backend_{cpu::CpuBackendOptions{2}};
  std::string dir_;
  Golden golden_;
  std::unique_ptr<model::LlamaModel> model_;
  std::unique_ptr<engine::ModelRunner> runner_;
  backend::KvCacheSpec spec_;
  int vocab_ = 0;
};

TEST_P(GoldenTest, LogitsMatchTransformers) {
  for (size_t p = 0; p < golden_.prompts.size(); ++p) {
    const auto& prompt = golden_.prompts[p];
    auto table = blocks(1, 40);
    backend::StepPlan plan = engine::ModelRunner::plan(
        std::vector<engine::SequenceChunk>{{prompt, 0, table, true}}, kBlockSize);
    plan.logit_rows.resize(prompt.size());
    std::iota(plan.logit_rows.begin(), plan.logit_rows.end(), 0);
    backend::KvCache kv = backend_.allocate_kv_cache(spec_);
    TensorView logits = model_->forward(backend_.upload_step(plan), kv);
    ASSERT_EQ(static_cast<size_t>(logits.numel()), golden_.logits[p].size());
    float max_err = 0;
    for (size_t i = 0; i < golden_.logits[p].size(); ++i)
      max_err = std::max(max_err, std::fabs(logits.as<float>()[i] - golden_.logits[p][i]));
    std::printf("%s prompt %zu (%zu tokens): max abs logit error vs transformers %.2e\n", GetParam().c_str(), p,
                prompt.size(), static_cast<double>(max_err));
    EXPECT_LE(max_err, kLogitTolerance) << GetParam() << " prompt " << p << " (" << prompt.size() << " tokens)";
  }
}

TEST_P(GoldenTest, GreedyTokensMatchTransformers) {
  for (size_t p = 0; p < golden_.prompts.size(); ++p) {
    auto out = greedy_batch({golden_.prompts[p]}, static_cast<int>(golden_.greedy[p].size()), 1 << 20);
    EXPECT_EQ(out[0], golden_.greedy[p]) << GetParam() << " prompt " << p;
  }
}

TEST_P(GoldenTest, ChunkedPrefillAndBatchingGiveTheSameTokens) {
  for (int chunk : {1, 3, 5}) {
    auto out = greedy_batch(golden_.prompts, static_cast<int>(golden_.greedy[0].size()), chunk);
    for (size_t p = 0; p < golden_.prompts.size(); ++p)
      EXPECT_EQ(out[p], golden_.greedy[p]) << GetParam() << " prompt " << p << " chunk " << chunk;
  }
}

// Decode-only steps padded as CUDA graphs pad them (ModelRunner GraphMode::kPaddedEager: bucket rows with
// slot -1 and a null block-table row, a power-of-two block-table width) give the transformers tokens: the
// padded rows neither write KV nor disturb the live ones. Chunk 1 pads every step, whole prompts only the
// decode steps.
TEST_P(GoldenTest, PaddedDecodeStepsGiveTheSameTokens) {
  runner_->set_graph_mode(engine::GraphMode::kPaddedEager);
  for (int chunk : {1, 1 << 20}) {
    auto out = greedy_batch(golden_.prompts, static_cast<int>(golden_.greedy[0].size()), chunk);
    for (size_t p = 0; p < golden_.prompts.size(); ++p)
      EXPECT_EQ(out[p], golden_.greedy[p]) << GetParam() << " prompt " << p << " chunk " << chunk;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, GoldenTest, ::testing::ValuesIn(golden_models()),
                         [](const auto& param_info) { return param_info.param; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(GoldenTest);

TEST(GoldenSet, AllArchitecturesPresent) {
  const auto names = golden_models();
  for (const char* want : {"llama_gqa", "mistral", "qwen2", "qwen3", "llama_tied"})
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << "missing golden model " << want;
}

}  // namespace
}  // namespace xinfer
