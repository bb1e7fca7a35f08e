// Engine-level GPU checks: the counter-based random kernel against the host generator (dummy weights are
// the same on every backend), dummy-weight models on CUDA vs CPU, and the serving Engine on the CUDA
// backend (memory plan, batched greedy generation) against the Engine on the CPU backend.
#include <condition_variable>
#include <map>
#include <mutex>
#include <span>

#include "gpu_test_util.h"
#include "xinfer/engine/engine.h"
#include "xinfer/engine/model_runner.h"
#include "xinfer/model/llama.h"

namespace xinfer::gpu_test {
namespace {

std::string golden_dir(const std::string& name) { return "tests/golden/" + name; }

TEST(RandomNormal, MatchesHostGenerator) {
  const int64_t n = 1000003;
  auto g16 = gpu().random_normal(DType::kBF16, Shape{n}, 5, 0.02f);
  auto g32 = gpu().random_normal(DType::kF32, Shape{n}, 5, 0.02f);
  const auto a16 = download(gpu(), g16.view), a32 = download(gpu(), g32.view);
  int64_t off16 = 0;
  double max_rel32 = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float ref = backend::counter_normal(5, static_cast<uint64_t>(i), 0.02f);
    // Device and host transcendental functions may differ in the last bits; bf16 rounding may then
    // round the other way (1 ulp = 2^-8 relative).
    if (std::abs(a16[static_cast<size_t>(i)] - to_float(to_bf16(ref))) > std::abs(ref) * (1.0f / 128)) ++off16;
    if (ref != 0) max_rel32 = std::max(max_rel32, std::abs(static_cast<double>(a32[static_cast<size_t>(i)]) - ref) / std::abs(ref));
  }
  EXPECT_EQ(off16, 0);
  EXPECT_LT(max_rel32, 1e-4);
}

std::vector<float> dummy_prefill_logits(backend::Backend& be, DType kv_dtype) {
  model::LoadOptions opt;
  opt.max_tokens = 64;
  opt.max_logit_rows = 1;
  opt.show_progress = false;
  opt.load_format = model::LoadFormat::kDummy;
  opt.seed = 3;
  auto m = model::LlamaModel::load(golden_dir("llama_gqa"), be, opt);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  const model::ModelConfig& c = (*m)->config();
  backend::KvCacheSpec spec{c.num_layers, 8, 16, c.num_kv_heads, c.head_dim, kv_dtype};
  engine::ModelRunner runner(**m, be, spec);
  std::vector<int32_t> ids(40);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 37 + 11) % c.vocab_size);
  const std::vector<int32_t> blocks = {1, 2, 3};
  engine::SequenceChunk chunk{ids, 0, blocks, true};
  return runner.run(std::span(&chunk, 1));
}

TEST(DummyWeights, SameModelOnCudaAndCpu) {
  const auto g = dummy_prefill_logits(gpu(), DType::kBF16);
  const auto c = dummy_prefill_logits(cpu(), DType::kF32);
  const Compare cmp = compare(g, c);
  std::printf("[ model ] dummy llama_gqa prefill logits cuda vs cpu: rel L2 %.4f, max abs %.4f\n", cmp.rel_l2, cmp.max_abs);
  EXPECT_EQ(cmp.nans, 0);
  EXPECT_LT(cmp.rel_l2, 0.05);
}

// Runs `prompts` concurrently through an Engine; returns each one's greedy tokens.
std::vector<std::vector<int32_t>> generate(engine::Engine& eng, const std::vector<std::vector<int32_t>>& prompts,
                                           int max_tokens) {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::vector<int32_t>> out(prompts.size());
  size_t done = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    engine::GenerationRequest req;
    req.request_id = std::to_string(i);
    req.prompt_ids = prompts[i];
    req.sampling.temperature = 0;
    req.sampling.ignore_eos = true;
    req.sampling.max_tokens = max_tokens;
    EXPECT_TRUE(eng.submit(req, [&, i](engine::RequestOutput o) {
                     std::lock_guard<std::mutex> l(mu);
                     out[i].insert(out[i].end(), o.new_token_ids.begin(), o.new_token_ids.end());
                     if (o.finished && ++done == prompts.size()) cv.notify_all();
                   }).ok());
  }
  std::unique_lock<std::mutex> l(mu);
  cv.wait(l, [&] { return done == prompts.size(); });
  return out;
}

TEST(EngineOnCuda, MemoryPlanAndGreedyMatchesCpuEngine) {
  engine::EngineConfig ec;
  ec.model_dir = golden_dir("llama_gqa");
  ec.threads = 4;
  ec.kv_cache_memory = 16 << 20;
  ec.scheduler.max_num_batched_tokens = 64;  // prompts are chunked
  std::vector<std::vector<int32_t>> prompts;
  for (int p = 0; p < 6; ++p) {
    std::vector<int32_t> ids;
    for (int i = 0; i < 5 + 23 * p; ++i) ids.push_back((p * 31 + i * 7 + 3) % 200 + 1);
    prompts.push_back(ids);
  }
  std::vector<std::vector<int32_t>> ref;
  {
    auto cpu_engine = engine::Engine::create(ec);
    ASSERT_TRUE(cpu_engine.ok()) << cpu_engine.status().to_string();
    ref = generate(**cpu_engine, prompts, 24);
  }

  ec.backend = engine::BackendKind::kCuda;
  ec.gpu_memory_utilization = 0.05;  // the test binary shares the GPU with its other backends
  auto gpu_engine = engine::Engine::create(ec);
  ASSERT_TRUE(gpu_engine.ok()) << gpu_engine.status().to_string();
  const engine::MemoryPlan& plan = (*gpu_engine)->memory_plan();
  EXPECT_GT(plan.total_bytes, size_t{100} << 30);
  EXPECT_EQ(plan.weight_bytes, (*gpu_engine)->model().weight_bytes());
  EXPECT_GT(plan.kv_tokens, 100000);
  const auto got = generate(**gpu_engine, prompts, 24);
  int total_prefix = 0;
  std::vector<size_t> lens;
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_EQ(got[i].size(), 24u);
    size_t k = 0;
    while (k < 24 && got[i][k] == ref[i][k]) ++k;
    total_prefix += static_cast<int>(k);
    lens.push_back(k);
    EXPECT_EQ(got[i][0], ref[i][0]) << "prompt " << i << ": first greedy token (prefill) differs";
  }
  std::printf("[ model ] engine cuda vs cpu (llama_gqa, 6 prompts, chunked, 24 greedy tokens): equal prefix");
  for (size_t k : lens) std::printf(" %zu", k);
  std::printf("; KV %.1f GiB = %lld tokens\n", static_cast<double>(plan.kv_bytes) / (1 << 30), static_cast<long long>(plan.kv_tokens));
  EXPECT_GE(total_prefix, 6 * 12) << "greedy paths diverge early on average";
}

}  // namespace
}  // namespace xinfer::gpu_test
