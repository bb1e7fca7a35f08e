// Engine-level GPU checks: the counter-based random kernel against the host generator (dummy weights are
// the same on every backend), dummy-weight models on CUDA vs CPU, and the serving Engine on the CUDA
// backend (memory plan, batched greedy generation) against the Engine on the CPU backend, and the
// Engine's first chunked step (a short prompt prefilled beside another prompt and a chunk of a third) as
// one forward on both backends.
//
// Greedy comparisons tolerate flips only at near-ties: where a CUDA token differs, its CPU logit (CPU
// model teacher-forced on the common prefix) must be within gap_margin() of the CPU top logit
// (gpu_test_util.h). Prompt 0 below is such a near-tie: its f32 top-2 gap after the prompt is 1e-4
// (token 257 at 2.2302, 491 at 2.2301; numpy f32 forward), and bf16 rounding alone (numpy emulation)
// already picks 491, as CUDA does.
#include <algorithm>
#include <condition_variable>
#include <map>
#include <mutex>
#include <span>

#include <cuda_runtime.h>

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

// The six prompts of the engine test: lengths 5, 28, 51, 74, 97, 120.
std::vector<std::vector<int32_t>> engine_prompts() {
  std::vector<std::vector<int32_t>> prompts;
  for (int p = 0; p < 6; ++p) {
    std::vector<int32_t> ids;
    for (int i = 0; i < 5 + 23 * p; ++i) ids.push_back((p * 31 + i * 7 + 3) % 200 + 1);
    prompts.push_back(ids);
  }
  return prompts;
}

// llama_gqa on one backend with a ModelRunner (block size 16, blocks handed out in order).
struct StepRunner {
  StepRunner(backend::Backend& be, DType kv_dtype) {
    model::LoadOptions opt;
    opt.max_tokens = 256;
    opt.max_logit_rows = 8;
    opt.show_progress = false;
    auto m = model::LlamaModel::load(golden_dir("llama_gqa"), be, opt);
    XI_CHECK(m.ok()) << m.status().to_string();
    model = std::move(m).value();
    const model::ModelConfig& c = model->config();
    runner = std::make_unique<engine::ModelRunner>(
        *model, be, backend::KvCacheSpec{c.num_layers, 64, 16, c.num_kv_heads, c.head_dim, kv_dtype});
  }
  int vocab() const { return model->config().vocab_size; }
  // One forward of chunks (tokens, start 0, fresh blocks); logits of those with want_logits.
  std::vector<float> step(const std::vector<std::pair<std::vector<int32_t>, bool>>& chunks) {
    std::vector<std::vector<int32_t>> tables;
    int next = 1;
    for (const auto& [toks, want] : chunks) {
      std::vector<int32_t> t;
      for (size_t b = 0; b < (toks.size() + 15) / 16; ++b) t.push_back(next++);
      tables.push_back(t);
    }
    std::vector<engine::SequenceChunk> sc;
    for (size_t i = 0; i < chunks.size(); ++i) sc.push_back({chunks[i].first, 0, tables[i], chunks[i].second});
    return greedy ? to_floats(runner->run_greedy(sc)) : runner->run(sc);
  }
  static std::vector<float> to_floats(const std::vector<int32_t>& ids) { return {ids.begin(), ids.end()}; }
  bool greedy = false;  // step() returns run_greedy()'s ids (as floats) instead of logits
  std::unique_ptr<model::LlamaModel> model;
  std::unique_ptr<engine::ModelRunner> runner;
};

// The Engine's first step for engine_prompts() with max_num_batched_tokens 64: prompt 0 (5 tokens) and
// prompt 1 (28) whole, the first 31 tokens of prompt 2; then prompt 0 alone. CUDA vs CPU logits, and on
// CUDA prompt 0's row must not depend on what shares its step.
TEST(EngineOnCuda, FirstChunkedStepMatchesCpu) {
  const auto prompts = engine_prompts();
  const std::vector<int32_t> p2(prompts[2].begin(), prompts[2].begin() + 31);
  const std::vector<std::pair<std::vector<int32_t>, bool>> mixed = {{prompts[0], true}, {prompts[1], true}, {p2, false}};
  StepRunner g(gpu(), DType::kBF16), c(cpu(), DType::kF32);
  const int V = g.vocab();
  const auto lg = g.step(mixed), lc = c.step(mixed);
  ASSERT_EQ(lg.size(), 2u * V);
  const Compare cm = compare(lg, lc);
  EXPECT_EQ(cm.nans, 0);
  EXPECT_LT(cm.rel_l2, logit_tol("llama_gqa")) << "max abs " << cm.max_abs;
  for (int r = 0; r < 2; ++r) {
    const float* rg = lg.data() + static_cast<size_t>(r) * V;
    const float* rc = lc.data() + static_cast<size_t>(r) * V;
    const auto [tg, gap_g] = top1_gap(rg, V);
    const auto [tc, gap_c] = top1_gap(rc, V);
    const float lead = rc[tc] - rc[tg];
    EXPECT_LT(lead, gap_margin("llama_gqa")) << "prompt " << r << ": cuda " << tg << " vs cpu " << tc;
    std::printf("[ model ] engine step 1 (5+28+31 tokens) prompt %d: cuda top %d (gap %.4f), cpu top %d (gap %.4f), "
                "cpu lead over the cuda token %.4f\n", r, tg, gap_g, tc, gap_c, lead);
  }
  // Prompt 0 alone: same logits on CUDA as in the shared step (only GEMM row counts differ).
  const auto alone_g = g.step({{prompts[0], true}}), alone_c = c.step({{prompts[0], true}});
  const std::vector<float> row0_g(lg.begin(), lg.begin() + V), row0_c(lc.begin(), lc.begin() + V);
  const Compare ag = compare(row0_g, alone_g), ac = compare(row0_c, alone_c), gc = compare(alone_g, alone_c);
  EXPECT_LT(ag.rel_l2, 5e-3) << "cuda: prompt 0 logits depend on the step layout";
  EXPECT_LT(ac.rel_l2, 1e-5) << "cpu: prompt 0 logits depend on the step layout";
  EXPECT_LT(gc.rel_l2, logit_tol("llama_gqa"));
  std::printf("[ model ] prompt 0 mixed vs alone: cuda rel_l2 %.2e, cpu %.2e; alone cuda vs cpu %.2e; logits 257/491: "
              "cuda %.4f/%.4f, cpu %.4f/%.4f\n", ag.rel_l2, ac.rel_l2, gc.rel_l2, alone_g[257], alone_g[491],
              alone_c[257], alone_c[491]);
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
  const auto prompts = engine_prompts();
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
  size_t free_b = 0,
         total_b = 0;  // the plan sizes itself from the whole card (an H100's 79 GiB, an H200's 140)
  XI_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  EXPECT_EQ(plan.total_bytes, total_b);
  EXPECT_EQ(plan.weight_bytes, (*gpu_engine)->model().weight_bytes());
  EXPECT_GT(plan.kv_tokens, 100000);
  const auto got = generate(**gpu_engine, prompts, 24);
  // Where a path first differs, the CPU model teacher-forced on the common prefix must (a) pick the CPU
  // engine's token (the batched CPU engine equals one plain forward) and (b) rate the CUDA token within
  // the greedy-flip margin of it (a near-tie bf16 may flip, gpu_test_util.h).
  StepRunner cpu_check(cpu(), DType::kF32);
  const int V = cpu_check.vocab();
  int total_prefix = 0;
  std::vector<size_t> lens;
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_EQ(got[i].size(), 24u);
    ASSERT_EQ(ref[i].size(), 24u);
    size_t k = 0;
    while (k < 24 && got[i][k] == ref[i][k]) ++k;
    total_prefix += static_cast<int>(k);
    lens.push_back(k);
    if (k == 24) continue;
    std::vector<int32_t> seq = prompts[i];
    seq.insert(seq.end(), ref[i].begin(), ref[i].begin() + static_cast<std::ptrdiff_t>(k));
    const auto row = cpu_check.step({{seq, true}});
    const auto [tc, gap_c] = top1_gap(row.data(), V);
    EXPECT_EQ(tc, ref[i][k]) << "prompt " << i << " token " << k << ": cpu engine vs one cpu forward";
    const float lead = row[static_cast<size_t>(ref[i][k])] - row[static_cast<size_t>(got[i][k])];
    EXPECT_LT(lead, gap_margin("llama_gqa")) << "prompt " << i << " token " << k << ": cuda " << got[i][k] << " vs cpu "
                                            << ref[i][k] << " is no near-tie";
    std::printf("[ model ] engine prompt %zu: paths part at token %zu (cuda %d, cpu %d), cpu lead %.5f (margin %.2f)\n",
                i, k, got[i][k], ref[i][k], lead, gap_margin("llama_gqa"));
  }
  std::printf("[ model ] engine cuda vs cpu (llama_gqa, 6 prompts, chunked, 24 greedy tokens): equal prefix");
  for (size_t k : lens) std::printf(" %zu", k);
  std::printf("; KV %.1f GiB = %lld tokens\n", static_cast<double>(plan.kv_bytes) / (1 << 30), static_cast<long long>(plan.kv_tokens));
  EXPECT_GE(total_prefix, 6 * 12) << "greedy paths diverge early on average";
}

// run_greedy() returns exactly the argmax (ties -> lowest id) of run()'s logits, for a mixed step (rows
// that want no logits, chunked prefill) on both backends.
TEST(EngineOnCuda, RunGreedyIsArgmaxOfRun) {
  const auto prompts = engine_prompts();
  const std::vector<int32_t> p2(prompts[2].begin(), prompts[2].begin() + 31);
  const std::vector<std::pair<std::vector<int32_t>, bool>> mixed = {
      {prompts[0], true}, {p2, false}, {prompts[1], true}, {prompts[3], true}};
  for (backend::Backend* be : {static_cast<backend::Backend*>(&gpu()), static_cast<backend::Backend*>(&cpu())}) {
    StepRunner r(*be, be == &gpu() ? DType::kBF16 : DType::kF32);
    const int V = r.vocab();
    const auto logits = r.step(mixed);
    r.greedy = true;
    const auto ids = r.step(mixed);
    ASSERT_EQ(ids.size(), 3u);
    ASSERT_EQ(logits.size(), 3u * V);
    for (size_t i = 0; i < 3; ++i) {
      const float* row = logits.data() + i * static_cast<size_t>(V);
      EXPECT_EQ(static_cast<int32_t>(ids[i]), std::max_element(row, row + V) - row) << be->info().name << " row " << i;
    }
  }
}

// The Engine's device-side greedy path (argmax on the GPU, ids back) gives exactly the host Sampler's tokens on
// the same CUDA engine configuration: graph decode steps (padded buckets), chunked prefill, 6 concurrent prompts.
TEST(EngineOnCuda, DeviceGreedyEqualsHostSampler) {
  engine::EngineConfig ec;
  ec.model_dir = golden_dir("llama_gqa");
  ec.threads = 4;
  ec.kv_cache_memory = 16 << 20;
  ec.scheduler.max_num_batched_tokens = 64;
  ec.backend = engine::BackendKind::kCuda;
  ec.gpu_memory_utilization = 0.05;
  const auto prompts = engine_prompts();
  for (const bool graphs : {true, false}) {
    ec.enable_cuda_graphs = graphs;
    std::vector<std::vector<int32_t>> host, device;
    {
      ec.device_greedy = false;
      auto eng = engine::Engine::create(ec);
      ASSERT_TRUE(eng.ok()) << eng.status().to_string();
      host = generate(**eng, prompts, 24);
    }
    {
      ec.device_greedy = true;
      auto eng = engine::Engine::create(ec);
      ASSERT_TRUE(eng.ok()) << eng.status().to_string();
      device = generate(**eng, prompts, 24);
    }
    for (size_t i = 0; i < prompts.size(); ++i) {
      ASSERT_EQ(device[i].size(), 24u);
      EXPECT_EQ(device[i], host[i]) << "prompt " << i << (graphs ? " (graphs)" : " (eager)");
    }
  }
}

}  // namespace
}  // namespace xinfer::gpu_test
