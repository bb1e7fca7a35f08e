// The EngineClient contract of Engine (engine_client.h): submit() validation and error codes, queue limit,
// stop rules (EOS, stop ids, min_tokens, max_tokens, context length), abort in every state (final output
// once, every block freed), drain() and stop(), and the Prometheus text of render_metrics().
// Runs the tiny golden llama_tied model: a step takes well under a millisecond.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <future>
#include <sstream>
#include <string>
#include <vector>

#include "engine_test_util.h"

namespace xinfer::engine::testing {
namespace {

constexpr int32_t kEos = 2;  // tests/golden/*: eos 2

// "q3" (snprintf: g++ 12 at -O3 warns falsely (-Wrestrict) on "literal" + std::string).
std::string req_id(const char* prefix, int i) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%s%d", prefix, i);
  return buf;
}

EngineConfig tied_config() {
  EngineConfig c;
  c.model_dir = golden_dir("llama_tied");
  c.threads = 1;
  c.kv_cache_memory = 4 << 20;
  return c;
}

std::vector<int32_t> prompt_of(int n, int32_t first = 5) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back(first + (i * 37) % 200);
  return p;
}

TEST(EngineCreate, ConfigErrorsAndInfo) {
  EngineConfig c = tied_config();
  c.backend = BackendKind::kCuda;
  {
    // Built without CUDA: UNIMPLEMENTED; with CUDA but no device (CI): UNAVAILABLE; on a GPU it works.
    auto cuda = Engine::create(c);
    if (!cuda.ok()) {
      EXPECT_TRUE(cuda.status().code() == StatusCode::kUnimplemented ||
                  cuda.status().code() == StatusCode::kUnavailable)
          << cuda.status().to_string();
    }
  }
  c = tied_config();
  c.kv_cache_memory = 100;  // not even two blocks
  EXPECT_EQ(Engine::create(c).status().code(), StatusCode::kInvalidArgument);
  c = tied_config();
  c.kv_cache_memory = 24576 * 4;  // 3 usable blocks of 16 tokens (24 KiB each for this model)
  c.max_model_len = 100;
  auto r = Engine::create(c);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("raise kv_cache_memory"), std::string::npos) << r.status().to_string();
  c.max_model_len = 0;  // derived: what the KV cache holds (3 * 16 + 1), below max_position_embeddings 256
  auto small = make_engine(c);
  EXPECT_EQ(small->info().max_model_len, 49);
  c = tied_config();
  c.model_dir = "/nonexistent/model";
  EXPECT_EQ(Engine::create(c).status().code(), StatusCode::kNotFound);
  c = tied_config();
  c.scheduler.max_num_seqs = 0;
  EXPECT_EQ(Engine::create(c).status().code(), StatusCode::kInvalidArgument);
  // Swap space: negative, or more than 70% of the host's RAM, is refused with the reason.
  c = tied_config();
  c.swap_space_gib = -1;
  r = Engine::create(c);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("swap_space_gib"), std::string::npos) << r.status().to_string();
  c.swap_space_gib = 1 << 20;  // a PiB
  r = Engine::create(c);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("of this host's"), std::string::npos) << r.status().to_string();
  c.swap_space_gib = 0.001;  // 1.07 MB: 43 blocks of 24 KiB
  auto swapping = make_engine(c);
  EXPECT_EQ(swapping->stats().num_swap_blocks, 43);
  EXPECT_NE(swapping->config().to_string().find("num_swap_blocks=43"), std::string::npos);

  auto e = make_engine(tied_config());
  EXPECT_EQ(e->info().model_name, "llama_tied");
  EXPECT_EQ(e->info().max_model_len, 256);
  EXPECT_EQ(e->info().vocab_size, 256);
  EXPECT_EQ(e->info().eos_token_ids, std::vector<int32_t>{kEos});
  EXPECT_NE(e->config().to_string().find("num_blocks="), std::string::npos);
}

TEST(EngineSubmit, ValidationErrors) {
  auto e = make_engine(tied_config());
  Collector c;
  auto code = [&](GenerationRequest r) { return e->submit(std::move(r), c.callback()).code(); };
  EXPECT_EQ(code(make_request("a", {}, greedy_params(4))), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(make_request("", {5}, greedy_params(4))), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(make_request("a", {5, 256}, greedy_params(4))), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(make_request("a", {-1}, greedy_params(4))), StatusCode::kInvalidArgument);
  SamplingParams bad = greedy_params(4);
  bad.top_p = 1.5f;
  EXPECT_EQ(code(make_request("a", {5}, bad)), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(make_request("a", prompt_of(250), greedy_params(7))), StatusCode::kOutOfRange);
  EXPECT_EQ(code(make_request("a", prompt_of(256), SamplingParams{})), StatusCode::kOutOfRange);
  SamplingParams too_many = greedy_params(4);
  too_many.max_tokens.reset();
  too_many.min_tokens = 10;
  EXPECT_EQ(code(make_request("a", prompt_of(250), too_many)), StatusCode::kOutOfRange);
  EXPECT_EQ(e->submit(make_request("a", {5}, greedy_params(4)), nullptr).code(), StatusCode::kInvalidArgument);

  // Duplicate of a live id; the id is free again once its final output has been delivered. The first
  // request's callback holds the engine's loop until the duplicate was tried: on a loaded machine its 200
  // tokens could otherwise all be generated (and the id freed) before the second submit.
  std::promise<void> tried;
  std::shared_future<void> gate = tried.get_future().share();
  OutputCallback held = [gate, cb = c.callback()](RequestOutput out) {
    gate.wait();
    cb(std::move(out));
  };
  ASSERT_TRUE(e->submit(make_request("dup", {5}, greedy_params(200)), held).ok());
  EXPECT_EQ(code(make_request("dup", {6}, greedy_params(4))), StatusCode::kInvalidArgument);
  tried.set_value();
  e->abort("dup");
  c.wait_finished(1);
  EXPECT_TRUE(e->submit(make_request("dup", {6}, greedy_params(4)), c.callback()).ok());
  c.wait_finished(2);
  EXPECT_EQ(c.num_finished(), 2) << "rejected submissions never call back";
}

TEST(EngineSubmit, QueueLimitIsResourceExhausted) {
  EngineConfig cfg = tied_config();
  cfg.max_waiting = 2;
  cfg.scheduler.max_num_seqs = 1;
  auto e = make_engine(cfg);
  Collector c;
  int accepted = 0;
  Status last;
  for (int i = 0; i < 10 && last.ok(); ++i) {
    last = e->submit(make_request(req_id("q", i), {5, 6}, greedy_params(240)), c.callback());
    if (last.ok()) ++accepted;
  }
  EXPECT_EQ(last.code(), StatusCode::kResourceExhausted) << last.to_string();
  EXPECT_GE(accepted, 2);
  EXPECT_LE(accepted, 3);  // one running + max_waiting queued
  e->stop();
  EXPECT_EQ(c.num_finished(), accepted);
}

TEST(EngineStopRules, EosStopIdsMinTokensLengthContext) {
  EngineConfig cfg = tied_config();
  cfg.max_model_len = 16;
  auto e = make_engine(cfg);
  Collector c;
  SamplingParams eos;  // a +100 bias makes EOS the argmax at every step
  eos.temperature = 0;
  eos.logit_bias[kEos] = 100;
  eos.max_tokens = 6;
  ASSERT_TRUE(e->submit(make_request("eos", {5}, eos), c.callback()).ok());
  SamplingParams ignore = eos;
  ignore.ignore_eos = true;
  ASSERT_TRUE(e->submit(make_request("ignore", {5}, ignore), c.callback()).ok());
  SamplingParams min = eos;
  min.min_tokens = 3;
  ASSERT_TRUE(e->submit(make_request("min", {5}, min), c.callback()).ok());
  SamplingParams stop = ignore;
  stop.logit_bias = {{77, 100}};
  stop.stop_token_ids = {77};
  ASSERT_TRUE(e->submit(make_request("stop_id", {5}, stop), c.callback()).ok());
  SamplingParams ctx = greedy_params(1);
  ctx.max_tokens.reset();  // up to max_model_len
  ASSERT_TRUE(e->submit(make_request("ctx", prompt_of(7), ctx), c.callback()).ok());
  c.wait_finished(5);
  auto s = c.streams();
  EXPECT_EQ(s["eos"].tokens, std::vector<int32_t>{kEos});
  EXPECT_EQ(s["eos"].final_output.finish_reason, FinishReason::kStop);
  EXPECT_EQ(s["ignore"].tokens, std::vector<int32_t>(6, kEos));
  EXPECT_EQ(s["ignore"].final_output.finish_reason, FinishReason::kLength);
  ASSERT_EQ(s["min"].tokens.size(), 4u);  // EOS masked for the first 3
  EXPECT_EQ(std::count(s["min"].tokens.begin(), s["min"].tokens.end(), kEos), 1);
  EXPECT_EQ(s["min"].tokens.back(), kEos);
  EXPECT_EQ(s["min"].final_output.finish_reason, FinishReason::kStop);
  EXPECT_EQ(s["stop_id"].tokens, std::vector<int32_t>{77});
  EXPECT_EQ(s["stop_id"].final_output.finish_reason, FinishReason::kStop);
  EXPECT_EQ(s["ctx"].tokens.size(), 9u);  // 7 + 9 = max_model_len 16
  EXPECT_EQ(s["ctx"].final_output.finish_reason, FinishReason::kLength);
  for (auto& [id, st] : s) {
    EXPECT_EQ(st.num_final, 1) << id;
    EXPECT_EQ(st.final_output.num_output_tokens, static_cast<int>(st.tokens.size())) << id;
    int cumulative = 0;
    for (const RequestOutput& o : st.outputs) {
      cumulative += static_cast<int>(o.new_token_ids.size());
      EXPECT_EQ(o.num_output_tokens, cumulative) << id;
      EXPECT_EQ(o.request_id, id);
    }
  }
}

TEST(EngineAbort, InEveryStateFreesEveryBlock) {
  EngineConfig cfg = tied_config();
  cfg.scheduler.max_num_seqs = 2;
  cfg.scheduler.block_size = 4;
  auto e = make_engine(cfg);
  Collector c;
  Engine* engine = e.get();
  // Running requests abort themselves from their callback after 3 tokens (callbacks may call abort()).
  for (int i = 0; i < 2; ++i) {
    const std::string id = req_id("run", i);
    auto inner = c.callback();
    auto n = std::make_shared<int>(0);
    ASSERT_TRUE(engine->submit(make_request(id, prompt_of(9 + i), greedy_params(240)),
                               [engine, inner, n, id](RequestOutput o) {
                                 *n += static_cast<int>(o.new_token_ids.size());
                                 if (*n == 3) engine->abort(id);
                                 inner(std::move(o));
                               })
                    .ok());
  }
  // Queued behind them (2 sequence slots): aborted while waiting.
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(engine->submit(make_request(req_id("wait", i), prompt_of(5), greedy_params(240)),
                               c.callback())
                    .ok());
  for (int i = 0; i < 3; ++i) engine->abort(req_id("wait", i));
  engine->abort("wait0");    // twice: no effect
  engine->abort("unknown");  // no effect
  c.wait_finished(5);
  for (auto& [id, st] : c.streams()) {
    EXPECT_EQ(st.num_final, 1) << id;
    EXPECT_EQ(st.final_output.finish_reason, FinishReason::kAbort) << id;
    EXPECT_TRUE(st.outputs.back().finished) << id;
    if (id.rfind("run", 0) == 0) {
      // Nothing after the callback that aborted: outputs still queued for delivery are dropped (engine.cpp).
      EXPECT_EQ(st.tokens.size(), 3u) << id;
    }
  }
  const EngineStats st = engine->stats();
  EXPECT_EQ(st.requests_aborted, 5);
  EXPECT_EQ(st.num_running, 0);
  EXPECT_EQ(st.num_waiting, 0);
  EXPECT_EQ(st.num_free_blocks, st.num_total_blocks);
  EXPECT_EQ(st.kv_usage, 0.0);
}

TEST(EngineShutdown, DrainFinishesInFlightThenRefuses) {
  auto e = make_engine(tied_config());
  Collector c;
  for (int i = 0; i < 5; ++i)
    ASSERT_TRUE(e->submit(make_request(req_id("d", i), prompt_of(3 + i), greedy_params(8 + i)),
                          c.callback())
                    .ok());
  e->drain();
  EXPECT_EQ(c.num_finished(), 5);
  for (auto& [id, st] : c.streams()) EXPECT_EQ(st.final_output.finish_reason, FinishReason::kLength) << id;
  EXPECT_EQ(e->submit(make_request("late", {5}, greedy_params(4)), c.callback()).code(), StatusCode::kUnavailable);
}

TEST(EngineShutdown, DestructorAbortsInFlight) {
  auto e = make_engine(tied_config());
  Collector c;
  for (int i = 0; i < 4; ++i)
    ASSERT_TRUE(e->submit(make_request(req_id("s", i), prompt_of(4), greedy_params(240)), c.callback()).ok());
  c.wait_tokens("s0", 1);
  e.reset();
  EXPECT_EQ(c.num_finished(), 4);
  for (auto& [id, st] : c.streams()) {
    EXPECT_EQ(st.num_final, 1) << id;
    EXPECT_EQ(st.final_output.finish_reason, FinishReason::kAbort) << id;
  }
}

// Value of `name{labels}` in Prometheus text, or -1.
double metric_value(const std::string& text, const std::string& series) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(series + " ", 0) == 0) return std::stod(line.substr(series.size() + 1));
  return -1;
}

TEST(EngineMetricsText, PrometheusFormatAndCounts) {
  auto e = make_engine(tied_config());
  Collector c;
  int total_tokens = 0, total_prompt = 0;
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(e->submit(make_request(req_id("m", i), prompt_of(5 + i), greedy_params(6 + i)),
                          c.callback())
                    .ok());
    total_tokens += 6 + i;
    total_prompt += 5 + i;
  }
  c.wait_finished(4);
  std::string text;
  e->render_metrics(&text);
  const std::string l = "{model_name=\"llama_tied\"}";
  for (const char* name :
       {"xinfer:time_to_first_token_seconds", "xinfer:inter_token_latency_seconds",
        "xinfer:time_per_output_token_seconds", "xinfer:e2e_request_latency_seconds",
        "xinfer:request_queue_time_seconds", "xinfer:iteration_tokens_total"}) {
    EXPECT_NE(text.find(std::string("# TYPE ") + name + " histogram\n"), std::string::npos) << name;
    EXPECT_NE(text.find(std::string("# HELP ") + name + " "), std::string::npos) << name;
  }
  for (const char* name : {"xinfer:num_requests_running", "xinfer:num_requests_waiting",
                           "xinfer:kv_cache_usage_perc", "xinfer:kv_swap_space_usage_perc"})
    EXPECT_NE(text.find(std::string("# TYPE ") + name + " gauge\n"), std::string::npos) << name;
  for (const char* name :
       {"xinfer:num_preemptions_total", "xinfer:prompt_tokens_total", "xinfer:generation_tokens_total",
        "xinfer:prefix_cache_queries_total", "xinfer:prefix_cache_hits_total",
        "xinfer:num_preempted_tokens_total", "xinfer:kv_swap_outs_total",
        "xinfer:kv_swapped_out_tokens_total", "xinfer:kv_swap_ins_total", "xinfer:device_busy_seconds_total",
        "xinfer:device_idle_seconds_total", "xinfer:device_kv_copy_seconds_total",
        "xinfer:cuda_graph_captures_total", "xinfer:cuda_graph_capture_seconds_total"})
    EXPECT_NE(text.find(std::string("# TYPE ") + name + " counter\n"), std::string::npos) << name;
  // The CPU backend has no device timeline and no graphs: the counters exist at zero.
  EXPECT_EQ(
      metric_value(text, "xinfer:device_busy_seconds_total{model_name=\"llama_tied\",step=\"decode_only\"}"),
      0);
  EXPECT_EQ(metric_value(text, std::string("xinfer:cuda_graph_captures_total") + l), 0);

  EXPECT_EQ(metric_value(text, std::string("xinfer:generation_tokens_total") + l), total_tokens);
  EXPECT_EQ(metric_value(text, std::string("xinfer:prompt_tokens_total") + l), total_prompt);
  EXPECT_EQ(metric_value(text, std::string("xinfer:num_requests_running") + l), 0);
  EXPECT_EQ(metric_value(text, std::string("xinfer:time_to_first_token_seconds_count") + l), 4);
  EXPECT_EQ(metric_value(text, std::string("xinfer:e2e_request_latency_seconds_count") + l), 4);
  EXPECT_EQ(metric_value(text, std::string("xinfer:inter_token_latency_seconds_count") + l), total_tokens - 4);
  EXPECT_EQ(metric_value(text, "xinfer:request_success_total{model_name=\"llama_tied\",finished_reason=\"length\"}"), 4);
  EXPECT_EQ(metric_value(text, "xinfer:time_to_first_token_seconds_bucket{model_name=\"llama_tied\",le=\"+Inf\"}"), 4);
  const EngineStats st = e->stats();
  EXPECT_EQ(st.generation_tokens, total_tokens);
  EXPECT_EQ(st.prompt_tokens, total_prompt);
  EXPECT_EQ(st.requests_finished, 4);
  EXPECT_EQ(metric_value(text, std::string("xinfer:num_engine_steps_total") + l), st.num_steps);

  // Buckets are cumulative and end at the count.
  std::istringstream in(text);
  std::string line;
  double prev = -1;
  int buckets = 0;
  while (std::getline(in, line)) {
    if (line.rfind("xinfer:iteration_tokens_total_bucket", 0) != 0) continue;
    const double v = std::stod(line.substr(line.rfind(' ') + 1));
    EXPECT_GE(v, prev) << line;
    prev = v;
    ++buckets;
  }
  EXPECT_GT(buckets, 3);
  EXPECT_EQ(prev, metric_value(text, std::string("xinfer:iteration_tokens_total_count") + l));
  EXPECT_EQ(prev, static_cast<double>(st.num_steps));
}

TEST(EngineMetricsText, HistogramBuckets) {
  Histogram h({0.1, 1, 10});
  for (double v : {0.05, 0.1, 0.5, 5.0, 50.0}) h.observe(v);
  std::string out;
  h.render("x", "a=\"b\"", &out);
  EXPECT_EQ(out,
            "x_bucket{a=\"b\",le=\"0.1\"} 2\n"
            "x_bucket{a=\"b\",le=\"1\"} 3\n"
            "x_bucket{a=\"b\",le=\"10\"} 4\n"
            "x_bucket{a=\"b\",le=\"+Inf\"} 5\n"
            "x_sum{a=\"b\"} 55.65\n"
            "x_count{a=\"b\"} 5\n");
  EXPECT_EQ(escape_label_value("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
}

}  // namespace
}  // namespace xinfer::engine::testing
