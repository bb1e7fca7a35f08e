// Whole-model checks: LlamaModel on CudaBackend (bf16) against the transformers goldens (tests/golden/,
// f32) and against LlamaModel on CpuBackend (f32): prefill logits, teacher-forced decode logits,
// 32 free-running greedy steps, and a mixed step (decodes + a prefill chunk in one forward).
// The golden tiny models have head_dim 16 / 32 (generic attention kernel); a synthetic random model with
// head_dim 128 and GQA 4 (written to a temp dir) runs the fast decode and prefill kernels end to end.

#include <algorithm>

#include "gpu_test_util.h"
#include "synthetic_model.h"
#include "xinfer/model/llama.h"
#include "xinfer/model/safetensors.h"

namespace xinfer::gpu_test {
namespace {

// Drives one model on one backend through hand-made steps (one block table per sequence, block size 16).
class Runner {
 public:
  Runner(backend::Backend& b, const std::string& dir, DType kv_dtype) : b_(b) {
    model::LoadOptions opt;
    opt.max_tokens = 512;
    opt.max_logit_rows = 512;
    opt.show_progress = false;
    auto m = model::LlamaModel::load(dir, b, opt);
    XI_CHECK(m.ok()) << m.status().to_string();
    model_ = std::move(m).value();
    const auto& c = model_->config();
    kv_ = b.allocate_kv_cache({c.num_layers, kNumBlocks, kBlockSize, c.num_kv_heads, c.head_dim, kv_dtype});
  }
  const model::ModelConfig& config() const { return model_->config(); }
  int add_seq() {
    seqs_.emplace_back();
    return static_cast<int>(seqs_.size()) - 1;
  }
  // Appends tokens to sequences in one forward; returns logits [rows, V]: every new token's row when
  // all_rows, else the last new token of each entry.
  std::vector<float> step(const std::vector<std::pair<int, std::vector<int32_t>>>& work, bool all_rows) {
    backend::StepPlan p;
    p.query_start_loc.push_back(0);
    int max_blocks = 1;
    for (auto& [s, toks] : work) {
      const int len = seqs_[static_cast<size_t>(s)].len + static_cast<int>(toks.size());
      max_blocks = std::max(max_blocks, (len + kBlockSize - 1) / kBlockSize);
    }
    p.max_blocks_per_seq = max_blocks;
    for (auto& [s, toks] : work) {
      Seq& q = seqs_[static_cast<size_t>(s)];
      for (int32_t tok : toks) {
        if (q.len % kBlockSize == 0) {
          XI_CHECK_LT(next_block_, kNumBlocks);
          q.blocks.push_back(next_block_++);
        }
        if (all_rows) p.logit_rows.push_back(p.num_tokens());
        p.token_ids.push_back(tok);
        p.positions.push_back(q.len);
        p.slot_mapping.push_back(q.blocks.back() * kBlockSize + q.len % kBlockSize);
        ++q.len;
      }
      if (!all_rows) p.logit_rows.push_back(p.num_tokens() - 1);
      p.query_start_loc.push_back(p.num_tokens());
      p.seq_lens.push_back(q.len);
      p.max_seq_len = std::max(p.max_seq_len, q.len);
      std::vector<int32_t> table(static_cast<size_t>(max_blocks), 0);
      std::copy(q.blocks.begin(), q.blocks.end(), table.begin());
      p.block_tables.insert(p.block_tables.end(), table.begin(), table.end());
    }
    const backend::StepMeta meta = b_.upload_step(p);
    const TensorView logits = model_->forward(meta, kv_);
    return download(b_, logits);
  }

 private:
  static constexpr int kBlockSize = 16, kNumBlocks = 128;
  struct Seq {
    std::vector<int32_t> blocks;
    int len = 0;
  };
  backend::Backend& b_;
  std::unique_ptr<model::LlamaModel> model_;
  backend::KvCache kv_;
  std::vector<Seq> seqs_;
  int next_block_ = 1;
};

std::vector<float> slice(const TensorView& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  convert_to_f32(t.dtype, t.data, v.data(), v.size());
  return v;
}
std::vector<int32_t> slice_i32(const TensorView& t) {
  const auto* p = t.as<int32_t>();
  return std::vector<int32_t>(p, p + t.numel());
}

// Synthetic Llama with head_dim 128, GQA 4 (8 q heads, 2 kv heads), written once into a temp dir.
std::string synthetic_d128_dir() {
  static const std::string dir = write_synthetic_llama({.dir_prefix = "xinfer_gpu_model"});
  return dir;
}

std::string model_dir(const std::string& name) {
  return name == "synthetic_d128" ? synthetic_d128_dir() : "tests/golden/" + name;
}

class ModelTest : public ::testing::TestWithParam<std::string> {};

// CUDA logits vs the transformers goldens: every prompt position, then 19 teacher-forced decode steps.
TEST_P(ModelTest, MatchesTransformersGolden) {
  if (GetParam() == "synthetic_d128") GTEST_SKIP() << "no golden for the synthetic model";
  auto golden = model::WeightFiles::open_file(model_dir(GetParam()) + "/golden.safetensors");
  ASSERT_TRUE(golden.ok()) << golden.status().to_string();
  Runner r(gpu(), model_dir(GetParam()), DType::kBF16);
  const int V = r.config().vocab_size;
  double worst_rel = 0, worst_abs = 0;
  int checked = 0, equal = 0;
  for (int i = 0; i < 3; ++i) {
    const std::string n = std::to_string(i);
    const auto prompt = slice_i32(golden->get("prompt_" + n).value());
    const auto greedy = slice_i32(golden->get("greedy_" + n).value());
    const auto ref_logits = slice(golden->get("logits_" + n).value());
    const auto ref_greedy = slice(golden->get("greedy_logits_" + n).value());
    const int s = r.add_seq();
    const auto logits = r.step({{s, prompt}}, true);
    Compare c = compare(logits, ref_logits);
    EXPECT_EQ(c.nans, 0);
    EXPECT_LT(c.rel_l2, logit_tol(GetParam())) << "prompt " << i << " logits (max abs " << c.max_abs << ")";
    worst_rel = std::max(worst_rel, c.rel_l2);
    worst_abs = std::max(worst_abs, c.max_abs);
    for (size_t k = 0; k < greedy.size(); ++k) {
      const float* ref_row = ref_greedy.data() + k * static_cast<size_t>(V);
      std::vector<float> row;
      if (k == 0) {
        row.assign(logits.end() - V, logits.end());
      } else {
        row = r.step({{s, {greedy[k - 1]}}}, false);
      }
      c = compare(row, std::vector<float>(ref_row, ref_row + V));
      EXPECT_EQ(c.nans, 0);
      EXPECT_LT(c.rel_l2, logit_tol(GetParam())) << "prompt " << i << " decode step " << k;
      worst_rel = std::max(worst_rel, c.rel_l2);
      worst_abs = std::max(worst_abs, c.max_abs);
      const auto [ref_tok, ref_gap] = top1_gap(ref_row, V);
      EXPECT_EQ(ref_tok, greedy[k]);
      if (ref_gap > gap_margin(GetParam())) {
        ++checked;
        const int32_t tok = top1_gap(row.data(), V).first;
        equal += tok == greedy[k];
        EXPECT_EQ(tok, greedy[k]) << "prompt " << i << " step " << k << " (golden top-2 gap " << ref_gap << ")";
      }
    }
  }
  std::printf("[ model ] %-14s vs transformers: worst rel_l2 %.2e, max abs %.3f, greedy %d/%d equal (gap > %.2f)\n",
              GetParam().c_str(), worst_rel, worst_abs, equal, checked, gap_margin(GetParam()));
}

std::vector<int32_t> long_prompt(int vocab, int n) {
  std::mt19937 rng(42);
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (auto& t : p) t = 3 + static_cast<int32_t>(rng() % static_cast<unsigned>(vocab - 3));
  return p;
}

// 32 greedy steps on each backend from the same prompt: tokens equal until a step where bf16 may flip
// the choice: the CUDA token's CPU logit must be within the model's gap margin (gpu_test_util.h) of the
// CPU top logit (then the comparison stops).
TEST_P(ModelTest, GreedyMatchesCpu) {
  Runner g(gpu(), model_dir(GetParam()), DType::kBF16);
  Runner c(cpu(), model_dir(GetParam()), DType::kF32);
  const int V = g.config().vocab_size;
  const auto prompt = long_prompt(V, GetParam() == "synthetic_d128" ? 150 : 33);
  const int sg = g.add_seq(), sc = c.add_seq();
  auto lg = g.step({{sg, prompt}}, true);
  auto lc = c.step({{sc, prompt}}, true);
  const Compare pc = compare(lg, lc);
  EXPECT_EQ(pc.nans, 0);
  EXPECT_LT(pc.rel_l2, logit_tol(GetParam())) << "prefill logits vs cpu (max abs " << pc.max_abs << ")";
  std::vector<float> rg(lg.end() - V, lg.end()), rc(lc.end() - V, lc.end());
  int same = 0;
  double worst = pc.rel_l2;
  for (int k = 0; k < 32; ++k) {
    const auto [tg, gap_g] = top1_gap(rg.data(), V);
    const auto [tc, gap_c] = top1_gap(rc.data(), V);
    if (tg != tc) {
      const float lead = rc[static_cast<size_t>(tc)] - rc[static_cast<size_t>(tg)];  // >= gap_c
      EXPECT_LT(lead, gap_margin(GetParam()))
          << "step " << k << ": cuda " << tg << " vs cpu " << tc << ": cpu logit lead " << lead << " (top-2 gap "
          << gap_c << ", margin " << gap_margin(GetParam()) << ")";
      std::printf("[ model ] %-14s greedy flip at step %d: cpu lead of its token %.4f (margin %.2f)\n",
                  GetParam().c_str(), k, lead, gap_margin(GetParam()));
      break;
    }
    ++same;
    rg = g.step({{sg, {tg}}}, false);
    rc = c.step({{sc, {tc}}}, false);
    const Compare dc = compare(rg, rc);
    EXPECT_EQ(dc.nans, 0);
    EXPECT_LT(dc.rel_l2, logit_tol(GetParam())) << "decode step " << k;
    worst = std::max(worst, dc.rel_l2);
  }
  std::printf("[ model ] %-14s vs cpu: %d/32 greedy tokens equal, worst logits rel_l2 %.2e\n", GetParam().c_str(),
              same, worst);
}

// The fused decode path forced on (CudaBackend LinearFusion::kAlways: every (projection ->) norm -> linear
// (-> SwiGLU) of a decode step runs as the fused GEMVs, whatever the tuner chose) against the CPU,
// teacher-forced with the CPU's greedy tokens: every decode step's logits within the model's tolerance.
TEST_P(ModelTest, FusedDecodeMatchesCpu) {
  const cuda::LinearFusion old = gpu().linear_fusion();
  gpu().set_linear_fusion(cuda::LinearFusion::kAlways);
  Runner g(gpu(), model_dir(GetParam()), DType::kBF16);
  Runner c(cpu(), model_dir(GetParam()), DType::kF32);
  const int V = g.config().vocab_size, L = g.config().num_layers;
  const auto prompt = long_prompt(V, 33);
  const int sg = g.add_seq(), sc = c.add_seq();
  g.step({{sg, prompt}}, false);
  std::vector<float> rc = c.step({{sc, prompt}}, false);
  double worst = 0;
  for (int k = 0; k < 16; ++k) {
    const int32_t tok = top1_gap(rc.data(), V).first;
    const int64_t before = gpu().fused_linears();
    const auto rg = g.step({{sg, {tok}}}, false);
    EXPECT_EQ(gpu().fused_linears() - before, 2 * L) << "decode step " << k << ": qkv and gate_up of every layer fused";
    rc = c.step({{sc, {tok}}}, false);
    const Compare dc = compare(rg, rc);
    EXPECT_EQ(dc.nans, 0);
    EXPECT_LT(dc.rel_l2, logit_tol(GetParam())) << "fused decode step " << k;
    worst = std::max(worst, dc.rel_l2);
  }
  gpu().set_linear_fusion(old);
  std::printf("[ model ] %-14s fused decode vs cpu: worst logits rel_l2 %.2e\n", GetParam().c_str(), worst);
}

// Step 1 prefills A and B; step 2 mixes decodes of A and B with C's prefill and a chunk of B-prefix-like
// new sequence D; logits of the last row of each must match the CPU running the same plans.
TEST_P(ModelTest, MixedStepMatchesCpu) {
  Runner g(gpu(), model_dir(GetParam()), DType::kBF16);
  Runner c(cpu(), model_dir(GetParam()), DType::kF32);
  const int V = g.config().vocab_size;
  const auto p = long_prompt(V, 120);
  const std::vector<int32_t> a(p.begin(), p.begin() + 7), b(p.begin() + 7, p.begin() + 8),
      cc(p.begin() + 8, p.begin() + 41), d1(p.begin() + 41, p.begin() + 100), d2(p.begin() + 100, p.end());
  for (Runner* r : {&g, &c})
    for (int i = 0; i < 4; ++i) r->add_seq();
  const std::vector<std::pair<int, std::vector<int32_t>>> step1 = {{0, a}, {1, b}, {3, d1}};
  const std::vector<std::pair<int, std::vector<int32_t>>> step2 = {{0, {5}}, {2, cc}, {1, {9}}, {3, d2}};
  for (const auto* s : {&step1, &step2}) {
    const auto lg = g.step(*s, false), lc = c.step(*s, false);
    ASSERT_EQ(lg.size(), s->size() * static_cast<size_t>(V));
    const Compare cm = compare(lg, lc);
    EXPECT_EQ(cm.nans, 0);
    EXPECT_LT(cm.rel_l2, logit_tol(GetParam())) << "mixed step logits vs cpu (max abs " << cm.max_abs << ")";
    std::printf("[ model ] %-14s mixed step (%zu seqs) vs cpu: rel_l2 %.2e\n", GetParam().c_str(), s->size(), cm.rel_l2);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, ModelTest,
                         ::testing::Values("llama_gqa", "llama_tied", "mistral", "qwen2", "qwen3", "synthetic_d128"),
                         [](const auto& param_info) { return param_info.param; });

}  // namespace
}  // namespace xinfer::gpu_test
