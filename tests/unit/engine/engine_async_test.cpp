// Asynchronous scheduling on the CPU backend (EngineConfig::async_scheduling forced on; the CPU default is
// off): a mix of requests - greedy ones running to max_tokens (transformers' golden paths), greedy ones
// hitting a stop token mid-way (their next step is already launched: the discarded token must never reach the
// client), requests aborted from their own callback, seeded sampling and logprobs rows (not pipelinable:
// the engine drains the step in flight and runs them synchronously) - under chunked prefill, preemption and
// prefix caching, produce exactly what the synchronous engine produces with the same config: tokens, finish
// reasons, output counts, one final output each, every block free at the end. The runs assert that steps
// were in fact launched behind a step in flight (EngineStats::async_steps).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine_test_util.h"
#include "pipelined_greedy_check.h"
#include "xinfer/backend/cpu/cpu_backend.h"
#include "xinfer/model/model_config.h"

namespace xinfer::engine::testing {
namespace {

struct Case {
  std::string id;
  std::vector<int32_t> prompt;
  SamplingParams params;
  std::vector<int32_t> expected;  // transformers' tokens (greedy cases); empty: compared with the sync run
  FinishReason reason = FinishReason::kLength;
  int abort_after = 0;  // > 0: the request aborts itself from the callback of this token
};

// Runs every case concurrently; returns the streams.
std::map<std::string, Collector::Stream> run_cases(Engine& engine, const std::vector<Case>& cases) {
  Collector c;
  for (const Case& k : cases) {
    OutputCallback cb = c.callback();
    if (k.abort_after > 0) {
      auto n = std::make_shared<int>(0);
      Engine* e = &engine;
      cb = [e, inner = c.callback(), n, id = k.id, after = k.abort_after](RequestOutput o) {
        *n += static_cast<int>(o.new_token_ids.size());
        if (*n == after && !o.finished) e->abort(id);
        inner(std::move(o));
      };
    }
    Status s = engine.submit(make_request(k.id, k.prompt, k.params), std::move(cb));
    EXPECT_TRUE(s.ok()) << k.id << ": " << s.to_string();
  }
  c.wait_finished(static_cast<int>(cases.size()));
  return c.streams();
}

// Greedy cases continuing each golden path, stop-token cases, self-aborting cases, a seeded and a logprobs
// case.
std::vector<Case> make_cases(const GoldenPaths& g) {
  std::vector<Case> cases;
  for (size_t i = 0; i < g.prompts.size(); ++i) {
    const std::vector<int32_t>& path = g.greedy[i];
    const int n = static_cast<int>(path.size());
    for (int k : {0, 3, 7, 12}) {
      Case c;
      c.id = case_id("g", i, k);
      c.prompt = g.prompts[i];
      c.prompt.insert(c.prompt.end(), path.begin(), path.begin() + k);
      c.params = greedy_params(n - k);
      c.expected.assign(path.begin() + k, path.end());
      cases.push_back(c);
      // Stop at the first occurrence of the token 4 steps in (plain greedy: still pipelined).
      Case s = c;
      s.id = case_id("stop", i, k);
      const int32_t stop = path[static_cast<size_t>(k + 4)];
      s.params.stop_token_ids = {stop};
      const auto first = std::find(c.expected.begin(), c.expected.end(), stop);
      s.expected.assign(c.expected.begin(), first + 1);
      s.reason = FinishReason::kStop;
      cases.push_back(s);
    }
    Case a;
    a.id = case_id("abort", i, 0);
    a.prompt = g.prompts[i];
    a.params = greedy_params(n);
    a.abort_after = 3;
    a.expected.assign(path.begin(), path.begin() + 3);
    a.reason = FinishReason::kAbort;
    cases.push_back(a);
    Case r;
    r.id = case_id("seeded", i, 0);
    r.prompt = g.prompts[i];
    r.params.temperature = 0.9f;
    r.params.top_p = 0.9f;
    r.params.seed = 100 + static_cast<int64_t>(i);
    r.params.ignore_eos = true;
    r.params.max_tokens = 6;  // short: steps without non-greedy rows follow (pipelined)
    cases.push_back(r);
  }
  Case lp;
  lp.id = "logprobs";
  lp.prompt = g.prompts[0];
  lp.params = greedy_params(5);
  lp.params.logprobs = 2;
  lp.expected.assign(g.greedy[0].begin(), g.greedy[0].begin() + 5);
  cases.push_back(lp);
  return cases;
}

void expect_same(const std::vector<Case>& cases, const std::map<std::string, Collector::Stream>& got,
                 const std::map<std::string, Collector::Stream>& sync, const std::string& what) {
  for (const Case& k : cases) {
    SCOPED_TRACE(what + " " + k.id);
    const Collector::Stream& s = got.at(k.id);
    const Collector::Stream& ref = sync.at(k.id);
    EXPECT_EQ(s.num_final, 1);
    ASSERT_FALSE(s.outputs.empty());
    EXPECT_TRUE(s.outputs.back().finished) << "the final output must be the last";
    EXPECT_EQ(s.final_output.finish_reason, k.reason);
    // (An abort's final output counts the tokens computed, one of which may have been dropped undelivered:
    // engine.cpp drops outputs queued for a request its client aborted. The same as the synchronous engine.)
    if (k.reason != FinishReason::kAbort) {
      EXPECT_EQ(s.final_output.num_output_tokens, static_cast<int>(s.tokens.size()));
    }
    if (!k.expected.empty()) {
      EXPECT_EQ(s.tokens, k.expected);
    }
    EXPECT_EQ(s.tokens, ref.tokens) << "differs from the synchronous engine";
    EXPECT_EQ(s.final_output.finish_reason, ref.final_output.finish_reason);
    if (k.reason != FinishReason::kAbort) {
      EXPECT_EQ(s.final_output.num_output_tokens, ref.final_output.num_output_tokens);
    } else {  // computed when the abort arrived: timing-dependent, at least what was delivered
      EXPECT_GE(s.final_output.num_output_tokens, static_cast<int>(s.tokens.size()));
    }
    int cumulative = 0;
    for (const RequestOutput& o : s.outputs) {
      cumulative += static_cast<int>(o.new_token_ids.size());
      if (!o.finished || k.reason != FinishReason::kAbort) {
        EXPECT_EQ(o.num_output_tokens, cumulative);
      }
      if (k.params.logprobs) {
        EXPECT_EQ(o.new_logprobs.size(), o.new_token_ids.size());
      }
    }
  }
}

void expect_all_blocks_free(const Engine& engine) {
  const EngineStats st = engine.stats();
  EXPECT_EQ(st.num_running, 0);
  EXPECT_EQ(st.num_waiting, 0);
  EXPECT_EQ(st.num_free_blocks, st.num_total_blocks);
}

class EngineAsyncScheduling : public ::testing::TestWithParam<std::string> {};

TEST_P(EngineAsyncScheduling, SameOutputsAsTheSynchronousEngine) {
  const std::string dir = golden_dir(GetParam());
  const GoldenPaths g = read_golden_paths(dir);
  ASSERT_EQ(g.prompts.size(), 3u);
  const std::vector<Case> cases = make_cases(g);

  std::vector<EngineConfig> configs;
  {
    EngineConfig c;  // roomy: long stretches of pure decode
    c.model_dir = dir;
    c.threads = 2;
    c.kv_cache_memory = kv_bytes(dir, 16, 256);
    configs.push_back(c);
  }
  {
    EngineConfig c = configs[0];  // chunked prefill, preemption, prefix hits (as engine_equivalence_test)
    c.scheduler.block_size = 4;
    c.scheduler.max_num_batched_tokens = 8;
    c.scheduler.max_num_seqs = 8;
    c.kv_cache_memory = kv_bytes(dir, 4, 22);
    c.max_model_len = 64;
    configs.push_back(c);
  }
  {
    EngineConfig c = configs[0];  // a block per token, no prefix cache, admission every step
    c.scheduler.block_size = 1;
    c.scheduler.enable_prefix_caching = false;
    c.scheduler.max_num_batched_tokens = 5;
    c.scheduler.max_num_seqs = 3;
    c.scheduler.decode_interval = 1;
    c.kv_cache_memory = kv_bytes(dir, 1, 120);
    c.max_model_len = 64;
    configs.push_back(c);
  }
  for (size_t i = 0; i < configs.size(); ++i) {
    SCOPED_TRACE("config " + std::to_string(i));
    EngineConfig sync_config = configs[i];
    sync_config.async_scheduling = false;
    std::map<std::string, Collector::Stream> sync;
    {
      auto engine = make_engine(sync_config);
      sync = run_cases(*engine, cases);
      EXPECT_EQ(engine->stats().async_steps, 0);
    }
    EngineConfig async_config = configs[i];
    async_config.async_scheduling = true;
    auto engine = make_engine(async_config);
    EXPECT_NE(engine->config().to_string().find("async_scheduling=1"), std::string::npos);
    auto got = run_cases(*engine, cases);
    expect_same(cases, got, sync, "config " + std::to_string(i));
    const EngineStats st = engine->stats();
    EXPECT_GT(st.async_steps, 0) << "no step was launched behind a step in flight";
    if (i == 1) {
      EXPECT_GT(st.num_preemptions, 0) << "the KV budget was meant to force preemption";
      EXPECT_GT(st.prefix_hit_tokens, 0);
    }
    expect_all_blocks_free(*engine);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, EngineAsyncScheduling,
                         ::testing::Values("llama_gqa", "qwen3", "llama_tied"));

TEST(EngineAsyncSchedulingDefaults, OffOnCpuAndStopWithStepsInFlight) {
  EngineConfig c;
  c.model_dir = golden_dir("llama_tied");
  c.threads = 1;
  c.kv_cache_memory = 4 << 20;
  {
    auto e = make_engine(c);
    ASSERT_TRUE(e->config().async_scheduling.has_value());
    EXPECT_FALSE(*e->config().async_scheduling)
        << "the CPU backend runs synchronously: async is off by default";
  }
  // The destructor (stop()) with a step in flight: every request gets exactly one final output.
  c.async_scheduling = true;
  auto e = make_engine(c);
  Collector col;
  for (int i = 0; i < 4; ++i)
    ASSERT_TRUE(
        e->submit(make_request("s" + std::to_string(i), {5, 6, 7}, greedy_params(240)), col.callback()).ok());
  col.wait_tokens("s0", 3);
  e.reset();
  EXPECT_EQ(col.num_finished(), 4);
  for (auto& [id, st] : col.streams()) {
    EXPECT_EQ(st.num_final, 1) << id;
    EXPECT_EQ(st.final_output.finish_reason, FinishReason::kAbort) << id;
    EXPECT_EQ(st.final_output.num_output_tokens, static_cast<int>(st.tokens.size())) << id;
  }
}

TEST(EngineAsyncSchedulingStories, ManyGreedyRequestsEqualTransformers) {
  const std::string dir = stories_dir();
  if (dir.empty()) GTEST_SKIP() << "../shared/models/stories260K not present";
  const GoldenPaths g = read_golden_paths(golden_dir("stories260K"));
  const std::vector<int32_t>& story = g.greedy.at(0);
  ASSERT_EQ(story.size(), 200u);
  std::vector<Case> cases;
  for (int k : {0, 1, 3, 8, 17, 30, 41, 64, 77, 90, 111, 128, 150, 163, 170, 185}) {
    const int n = std::min(200 - k, 8 + (k * 7) % 29);
    Case c;
    c.id = "story_" + std::to_string(k);
    c.prompt = g.prompts[0];
    c.prompt.insert(c.prompt.end(), story.begin(), story.begin() + k);
    c.params = greedy_params(n);
    c.expected.assign(story.begin() + k, story.begin() + k + n);
    if (k % 3 == 1) {  // stop at the first occurrence of the token 5 steps in
      const int32_t stop = c.expected.at(5);
      c.params.stop_token_ids = {stop};
      c.expected.erase(std::find(c.expected.begin(), c.expected.end(), stop) + 1, c.expected.end());
      c.reason = FinishReason::kStop;
    }
    cases.push_back(c);
  }
  EngineConfig c;
  c.model_dir = dir;
  c.threads = 2;
  c.scheduler.block_size = 8;
  c.scheduler.max_num_batched_tokens = 16;
  c.scheduler.max_num_seqs = 12;
  c.kv_cache_memory = kv_bytes(dir, 8, 40);
  c.max_model_len = 240;
  EngineConfig sync_config = c;
  sync_config.async_scheduling = false;
  std::map<std::string, Collector::Stream> sync;
  {
    auto engine = make_engine(sync_config);
    sync = run_cases(*engine, cases);
  }
  c.async_scheduling = true;
  auto engine = make_engine(c);
  auto got = run_cases(*engine, cases);
  expect_same(cases, got, sync, "stories");
  const EngineStats st = engine->stats();
  EXPECT_GT(st.async_steps, 0);
  EXPECT_GT(st.num_preemptions, 0);
  expect_all_blocks_free(*engine);
}

// The llama_gqa golden model on `backend` for runner-level tests.
Result<std::unique_ptr<model::LlamaModel>> load_gqa(backend::Backend& backend, int max_tokens,
                                                    int max_logit_rows) {
  model::LoadOptions opt;
  opt.max_tokens = max_tokens;
  opt.max_logit_rows = max_logit_rows;
  opt.show_progress = false;
  return model::LlamaModel::load(golden_dir("llama_gqa"), backend, opt);
}

TEST(ModelRunnerPipelined, FedTokensGiveTheSequentialIds) {
  cpu::CpuBackend backend(cpu::CpuBackendOptions{2});
  auto m = load_gqa(backend, 512, 32);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const model::ModelConfig& c = (*m)->config();
  const backend::KvCacheSpec spec{c.num_layers, 200, 4, c.num_kv_heads, c.head_dim, DType::kF32};
  for (const GraphMode mode :
       {GraphMode::kOff, GraphMode::kPaddedEager}) {  // padded: the plans graphs replay
    ModelRunner sequential(**m, backend, spec, mode);
    ModelRunner pipelined(**m, backend, spec, mode);
    EXPECT_GT(check_pipelined_greedy(sequential, pipelined, c.vocab_size, 4, 7, 9), 0);
  }
}

// The runner's side of the device step timeline (Backend::mark_step_begin / step_device_time), on a CPU
// backend that answers each fence with its own id as the "busy" time: every upload marks a step and voids the
// runner's last step time, and finish_greedy() reads the time of the step it returns (its own fence), also
// with a second step launched behind it. The CUDA events themselves are checked by tests/gpu
// (EngineEquivalenceOnCuda).
class FenceEchoBackend : public cpu::CpuBackend {
 public:
  using CpuBackend::CpuBackend;
  uint64_t fence_host_copies() override { return ++fences; }
  void wait_host_copies(uint64_t fence) override { (void)fence; }
  void mark_step_begin() override { ++marks; }
  StepDeviceTime step_device_time(uint64_t fence) override {
    StepDeviceTime t;
    t.valid = true;
    t.busy_s = static_cast<double>(fence);
    return t;
  }
  uint64_t fences = 0;
  int marks = 0;
};

TEST(ModelRunnerStepTime, EachFinishReadsItsOwnStepsFence) {
  FenceEchoBackend backend(cpu::CpuBackendOptions{2});
  auto m = load_gqa(backend, 64, 8);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const model::ModelConfig& c = (*m)->config();
  ModelRunner runner(**m, backend,
                     backend::KvCacheSpec{c.num_layers, 16, 4, c.num_kv_heads, c.head_dim, DType::kF32});
  const std::vector<int32_t> prompt{5, 6, 7}, table{1, 2, 3};
  const std::vector<int32_t> pending{sched::kPendingToken};
  SequenceChunk prefill{prompt, 0, table, true};
  runner.start_greedy(std::span<const SequenceChunk>(&prefill, 1));
  EXPECT_FALSE(runner.last_step_device_time().valid) << "voided by the step's upload";
  const int32_t first = runner.finish_greedy()[0];
  EXPECT_TRUE(runner.last_step_device_time().valid);
  EXPECT_EQ(runner.last_step_device_time().busy_s, 1.0) << "the first step's fence";
  // Two decode steps, the second launched behind the first (its token fed from the first's row).
  const std::vector<int32_t> known{first};
  SequenceChunk d1{known, 3, table, true};
  runner.start_greedy(std::span<const SequenceChunk>(&d1, 1));
  SequenceChunk d2{pending, 4, table, true};
  d2.token_source = 0;
  runner.start_greedy(std::span<const SequenceChunk>(&d2, 1));
  EXPECT_FALSE(runner.last_step_device_time().valid);
  runner.finish_greedy();
  EXPECT_EQ(runner.last_step_device_time().busy_s, 2.0) << "the older step in flight: its own fence";
  runner.finish_greedy();
  EXPECT_EQ(runner.last_step_device_time().busy_s, 3.0);
  EXPECT_EQ(backend.marks, 3);
  EXPECT_EQ(backend.fences, 3u);
}

// record_decode_graphs() on a backend without graphs (the CPU): nothing to record, no progress, and the
// runner still runs its steps (eagerly).
TEST(ModelRunnerStepTime, RecordingGraphsAtStartIsANoOpWithoutGraphs) {
  cpu::CpuBackend backend(cpu::CpuBackendOptions{2});
  auto m = load_gqa(backend, 64, 8);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const model::ModelConfig& c = (*m)->config();
  ModelRunner runner(**m, backend,
                     backend::KvCacheSpec{c.num_layers, 16, 4, c.num_kv_heads, c.head_dim, DType::kF32},
                     GraphMode::kOn);
  int calls = 0;
  EXPECT_EQ(runner.record_decode_graphs(8, 8, 256, [&](int, int) { ++calls; }), 0);
  EXPECT_EQ(calls, 0);
  const std::vector<int32_t> prompt{5, 6, 7}, table{1, 2, 3};
  SequenceChunk chunk{prompt, 0, table, true};
  EXPECT_EQ(runner.run_greedy(std::span<const SequenceChunk>(&chunk, 1)).size(), 1u);
  EXPECT_EQ(runner.graph_captures(), 0);
}

// The keys recorded at start-up are graph_shape()'s: buckets of 1..max_rows within max_tokens /
// max_logit_rows, widths min(16 * 2^k, the model's blocks) up to the first reaching the context's blocks; and
// the step-buffer bound covers a mixed step and the largest padded decode plan.
TEST(ModelRunnerStepTime, DecodeGraphKeysAreGraphShapes) {
  using K = ModelRunner::DecodeGraphKeys;
  const K a = ModelRunner::decode_graph_keys(300, 16384, 320, 136, 136);  // 128/2048's context, 300 sequences
  EXPECT_EQ(a.buckets, (std::vector<int>{320, 256, 192, 128, 64, 32, 16, 8, 4, 2, 1}));
  EXPECT_EQ(ModelRunner::decode_graph_keys(300, 16384, 300, 136, 136).buckets.front(), 256)
      << "bucket 320 holds more logit rows than the model's 300: graph_shape() runs such steps eagerly";
  EXPECT_EQ(a.widths, (std::vector<int>{16, 32, 64, 128, 136}));
  const K b =
      ModelRunner::decode_graph_keys(1024, 16384, 1000, 8192, 300);  // a long model, 300-block context
  EXPECT_EQ(b.buckets.front(), 960) << "1024 > max_logit_rows";
  EXPECT_EQ(b.widths, (std::vector<int>{16, 32, 64, 128, 256, 512}));
  const K c = ModelRunner::decode_graph_keys(4, 2, 4, 8, 8);  // a tiny model: one width below 16 blocks
  EXPECT_EQ(c.buckets, (std::vector<int>{2, 1}));
  EXPECT_EQ(c.widths, (std::vector<int>{8}));
  // A 16,384-token step over 1024 sequences with 136-block tables; a 1024-row decode plan is smaller.
  const size_t mixed = ModelRunner::step_upload_bound(16384, 1024, 1024, 1024, 136);
  EXPECT_GE(mixed, 4u * (5 * 16384 + 5 * 1025 + 1024 + 2 * (128 + 1024) + 1024 * 136));
  EXPECT_LT(mixed, 2 * 4u * (5 * 16384 + 5 * 1025 + 1024 + 2 * (128 + 1024) + 1024 * 136));
}

}  // namespace
}  // namespace xinfer::engine::testing
