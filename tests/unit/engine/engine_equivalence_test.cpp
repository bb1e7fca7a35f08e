// Equivalence on the CPU backend: many concurrent requests through the Engine, with chunked prefill
// (a token budget far below the prompt lengths), forced preemption (a KV budget far below what the batch
// needs) and shared prefixes (prefix-cache hits), produce exactly the tokens of
//   - transformers' greedy decoding (tests/golden/<model>/golden.safetensors greedy_i, and stories260K's
//     200-token greedy story): every greedy request's prompt is a golden prompt plus the first k golden
//     tokens, so its expected continuation is the rest of the golden path (top-2 gaps > 1e-3 there);
//   - the same request run alone through the engine (seeded sampling: batch-invariant).
// The runs that claim preemption and prefix hits assert that they happened, and that every block is free
// once all requests are done.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "engine_test_util.h"
#include "xinfer/model/model_config.h"

namespace xinfer::engine::testing {
namespace {

EngineConfig base_config(const std::string& dir) {
  EngineConfig c;
  c.model_dir = dir;
  c.threads = 2;
  c.kv_cache_memory = kv_bytes(dir, 16, 256);
  return c;
}

void expect_streams(const std::vector<Case>& cases, const std::map<std::string, Collector::Stream>& got,
                    const std::map<std::string, Collector::Stream>* solo, const std::string& what) {
  for (const Case& k : cases) {
    SCOPED_TRACE(what + " " + k.id);
    auto it = got.find(k.id);
    ASSERT_NE(it, got.end());
    const Collector::Stream& s = it->second;
    EXPECT_EQ(s.num_final, 1);
    ASSERT_FALSE(s.outputs.empty());
    EXPECT_TRUE(s.outputs.back().finished) << "the final output must be the last";
    EXPECT_EQ(s.final_output.finish_reason, FinishReason::kLength);
    EXPECT_EQ(s.final_output.num_output_tokens, static_cast<int>(s.tokens.size()));
    EXPECT_EQ(s.final_output.num_prompt_tokens, static_cast<int>(k.prompt.size()));
    const RequestTimings& t = s.final_output.timings;
    EXPECT_GE(t.queue_time_s, 0);
    EXPECT_GE(t.ttft_s, t.queue_time_s);
    EXPECT_GE(t.e2e_s, t.ttft_s);
    EXPECT_EQ(t.itl_s.size(), s.tokens.size() - 1);
    if (!k.expected.empty()) {
      EXPECT_EQ(s.tokens, k.expected);
    }
    if (solo != nullptr) {
      EXPECT_EQ(s.tokens, solo->at(k.id).tokens) << "differs from the request run alone";
    }
  }
}

void expect_all_blocks_free(const Engine& engine) {
  const EngineStats st = engine.stats();
  EXPECT_EQ(st.num_running, 0);
  EXPECT_EQ(st.num_waiting, 0);
  EXPECT_EQ(st.num_free_blocks, st.num_total_blocks);
  EXPECT_EQ(st.kv_usage, 0.0);
}

SamplingParams seeded(int max_tokens, int64_t seed, int variant) {
  SamplingParams p;
  p.temperature = 0.8f + 0.1f * static_cast<float>(variant % 3);
  p.top_p = variant % 2 == 0 ? 0.9f : 1.0f;
  p.top_k = variant % 4 == 1 ? 20 : 0;
  p.min_p = variant % 5 == 2 ? 0.05f : 0.0f;
  p.repetition_penalty = variant % 3 == 1 ? 1.2f : 1.0f;
  p.seed = seed;
  p.ignore_eos = true;
  p.max_tokens = max_tokens;
  return p;
}

// ---------------------------------------------------------------------------------------------------------
// Golden tiny models (every supported architecture).

class EngineGoldenEquivalence : public ::testing::TestWithParam<std::string> {};

std::vector<Case> golden_cases(const GoldenPaths& g) {
  std::vector<Case> cases;
  for (size_t i = 0; i < g.prompts.size(); ++i) {
    const std::vector<int32_t>& path = g.greedy[i];
    const int n = static_cast<int>(path.size());
    for (int k : {0, 2, 5, 9, 14, 19}) {
      Case c;
      c.id = case_id("g", i, k);
      c.prompt = g.prompts[i];
      c.prompt.insert(c.prompt.end(), path.begin(), path.begin() + k);
      c.params = greedy_params(n - k);
      c.expected.assign(path.begin() + k, path.end());
      cases.push_back(c);
      if (k == 9) {  // an identical twin: same blocks computed twice in one batch, or a full prefix hit
        c.id += "_twin";
        cases.push_back(c);
      }
    }
    for (int v = 0; v < 2; ++v) {  // seeded sampling from the golden prompts: compared with the solo run
      Case c;
      c.id = case_id("s", i, v);
      c.prompt = g.prompts[i];
      c.params = seeded(12 + 3 * v, 100 + static_cast<int64_t>(i), v);
      cases.push_back(c);
    }
  }
  return cases;
}

TEST_P(EngineGoldenEquivalence, ConcurrentChunkedPreemptedPrefixCachedEqualsTransformersAndSolo) {
  const std::string dir = golden_dir(GetParam());
  const GoldenPaths g = read_golden_paths(dir);
  ASSERT_EQ(g.prompts.size(), 3u);
  const std::vector<Case> cases = golden_cases(g);

  std::map<std::string, Collector::Stream> solo;
  {
    auto engine = make_engine(base_config(dir));
    solo = run_cases(*engine, cases, /*solo=*/true);
    expect_streams(cases, solo, nullptr, "solo");
  }
  // Longest request: 33 + 19 prompt + 1 = 53 tokens (14 blocks of 4); 21 usable blocks for 8 sequences. Once
  // recomputing what preemption drops, once with a swap space (swap-to-host preemption: victims' KV goes to
  // host blocks and comes back).
  for (const bool swap : {false, true}) {
    EngineConfig c = base_config(dir);
    c.scheduler.block_size = 4;
    c.scheduler.max_num_batched_tokens = 8;  // prompts of 7..52 tokens: chunked prefill
    c.scheduler.max_num_seqs = 8;
    c.kv_cache_memory = kv_bytes(dir, 4, 22);
    if (swap) c.swap_space_gib = static_cast<double>(kv_bytes(dir, 4, 64)) / (1 << 30);
    c.max_model_len = 64;
    auto engine = make_engine(c);
    auto got = run_cases(*engine, cases, /*solo=*/false);
    expect_streams(cases, got, &solo, swap ? "preempted to a swap space, prefix cache" : "preempted, prefix cache");
    const EngineStats st = engine->stats();
    EXPECT_GT(st.num_preemptions, 0) << "the KV budget was meant to force preemption";
    EXPECT_GT(st.prefix_hit_tokens, 0) << "shared prefixes were meant to hit the prefix cache";
    if (swap) {
      EXPECT_GT(st.num_swap_outs, 0) << "preemptions were meant to swap";
      EXPECT_GT(st.num_swap_ins, 0);
      EXPECT_EQ(st.num_free_swap_blocks, st.num_swap_blocks) << "swap blocks leaked";
    } else {
      EXPECT_EQ(st.num_swap_outs, 0);
    }
    expect_all_blocks_free(*engine);
  }
  {
    // Other policy knobs: no prefix cache, FIFO, admission every step, block size 1 (a block per token).
    EngineConfig c = base_config(dir);
    c.scheduler.block_size = 1;
    c.scheduler.enable_prefix_caching = false;
    c.scheduler.max_num_batched_tokens = 5;
    c.scheduler.max_num_seqs = 3;
    c.scheduler.decode_interval = 1;
    c.scheduler.reorder_window = 1;
    c.kv_cache_memory = kv_bytes(dir, 1, 120);
    c.max_model_len = 64;
    auto engine = make_engine(c);
    auto got = run_cases(*engine, cases, /*solo=*/false);
    expect_streams(cases, got, &solo, "block size 1, no prefix cache");
    EXPECT_EQ(engine->stats().prefix_hit_tokens, 0);
    expect_all_blocks_free(*engine);
  }
  {
    // Greedy steps through the host Sampler instead of the backend's argmax_rows (EngineConfig::device_greedy).
    EngineConfig c = base_config(dir);
    c.device_greedy = false;
    auto engine = make_engine(c);
    auto got = run_cases(*engine, cases, /*solo=*/false);
    expect_streams(cases, got, &solo, "host sampling");
  }
}

INSTANTIATE_TEST_SUITE_P(Models, EngineGoldenEquivalence,
                         ::testing::Values("llama_gqa", "mistral", "qwen2", "qwen3", "llama_tied"));

// ---------------------------------------------------------------------------------------------------------
// stories260K: a trained model, 200-token greedy story from BOS (transformers).

TEST(EngineStoriesEquivalence, ManyConcurrentRequestsEqualTransformersAndSolo) {
  const std::string dir = stories_dir();
  if (dir.empty()) GTEST_SKIP() << "../shared/models/stories260K not present";
  const GoldenPaths g = read_golden_paths(golden_dir("stories260K"));
  ASSERT_EQ(g.greedy.at(0).size(), 200u);
  const std::vector<int32_t>& story = g.greedy[0];

  std::vector<Case> cases;
  int v = 0;
  for (int k : {0, 1, 3, 8, 17, 30, 41, 64, 77, 90, 111, 128, 150, 163, 170, 185}) {
    const int n = std::min(200 - k, 8 + (k * 7) % 29);  // 8..36 tokens, different per request
    Case c;
    c.id = "story_" + std::to_string(k);
    c.prompt = g.prompts[0];
    c.prompt.insert(c.prompt.end(), story.begin(), story.begin() + k);
    c.params = greedy_params(n);
    c.expected.assign(story.begin() + k, story.begin() + k + n);
    if (k == 64) c.params.logprobs = 3;
    cases.push_back(c);
    if (k % 2 == 1) {  // seeded sampling continuing the same prefix
      Case s;
      s.id = "sample_" + std::to_string(k);
      s.prompt = c.prompt;
      s.params = seeded(20, 7 + k, v++);
      cases.push_back(s);
    }
  }
  // Identical seeded requests (same seed, same stream): identical tokens, batched or not.
  for (int stream = 0; stream < 2; ++stream) {
    Case s;
    s.id = "n_" + std::to_string(stream);
    s.prompt = g.prompts[0];
    s.params = seeded(24, 1234, 0);
    cases.push_back(s);
  }

  EngineConfig base = base_config(dir);
  std::map<std::string, Collector::Stream> solo;
  {
    auto engine = make_engine(base);
    solo = run_cases(*engine, cases, /*solo=*/true);
    expect_streams(cases, solo, nullptr, "solo");
  }
  EngineConfig concurrent = base;
  concurrent.scheduler.block_size = 8;
  concurrent.scheduler.max_num_batched_tokens = 16;
  concurrent.scheduler.max_num_seqs = 12;
  concurrent.kv_cache_memory = kv_bytes(dir, 8, 40);  // 39 usable blocks = 312 tokens for ~30 requests
  concurrent.max_model_len = 240;
  {
    auto engine = make_engine(concurrent);
    auto got = run_cases(*engine, cases, /*solo=*/false);
    expect_streams(cases, got, &solo, "concurrent");
    const EngineStats st = engine->stats();
    EXPECT_GT(st.num_preemptions, 0);
    EXPECT_GT(st.prefix_hit_tokens, 0);
    expect_all_blocks_free(*engine);

    // Logprobs ride along: one per token; greedy picks the most likely token.
    const Collector::Stream& lp = got.at("story_64");
    size_t n = 0;
    for (const RequestOutput& o : lp.outputs) {
      ASSERT_EQ(o.new_logprobs.size(), o.new_token_ids.size());
      for (size_t i = 0; i < o.new_logprobs.size(); ++i, ++n) {
        const TokenLogprob& t = o.new_logprobs[i];
        EXPECT_EQ(t.token, o.new_token_ids[i]);
        ASSERT_EQ(t.top.size(), 3u);
        EXPECT_EQ(t.top[0].first, t.token);
        EXPECT_FLOAT_EQ(t.top[0].second, t.logprob);
        EXPECT_LT(t.logprob, 0.0f);
        EXPECT_GE(t.top[0].second, t.top[1].second);
      }
    }
    EXPECT_EQ(n, lp.tokens.size());
    EXPECT_TRUE(got.at("story_0").outputs[0].new_logprobs.empty()) << "no logprobs unless asked";
  }
  {
    // Swap-to-host preemption under asynchronous scheduling (two steps in flight): preemptions swap while
    // the step before is still computing; the swap space holds a few victims, the rest recompute.
    EngineConfig c = concurrent;
    c.swap_space_gib = static_cast<double>(kv_bytes(dir, 8, 24)) / (1 << 30);
    c.async_scheduling = true;
    auto engine = make_engine(c);
    auto got = run_cases(*engine, cases, /*solo=*/false);
    expect_streams(cases, got, &solo, "concurrent, async, swap space");
    const EngineStats st = engine->stats();
    EXPECT_GT(st.num_swap_outs, 0);
    EXPECT_GT(st.num_swap_ins, 0);
    EXPECT_EQ(st.num_free_swap_blocks, st.num_swap_blocks);
    expect_all_blocks_free(*engine);
  }
}

TEST(EngineStoriesEquivalence, SeedStreamsDiffer) {
  // The rng_stream of a request separates its n choices (same seed and prompt, different tokens).
  const std::string dir = stories_dir();
  if (dir.empty()) GTEST_SKIP() << "../shared/models/stories260K not present";
  auto engine = make_engine(base_config(dir));
  Collector c;
  for (uint64_t stream = 0; stream < 2; ++stream) {
    GenerationRequest r = make_request("n" + std::to_string(stream), {1}, seeded(24, 1234, 0));
    r.rng_stream = stream;
    ASSERT_TRUE(engine->submit(r, c.callback()).ok());
  }
  c.wait_finished(2);
  auto s = c.streams();
  EXPECT_NE(s.at("n0").tokens, s.at("n1").tokens);
}

}  // namespace
}  // namespace xinfer::engine::testing
