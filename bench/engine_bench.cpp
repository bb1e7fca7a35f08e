// Engine throughput on the CPU backend: a closed loop keeps C requests in flight (each final output
// submits the next request from the callback) until 4 * C requests (at least 8) have finished, for each C in
// --concurrency. Prompts are random token ids (no prefix-cache hits), greedy decoding with ignore_eos, so
// every request generates exactly --max-tokens tokens.
// Prints per level: output tok/s, total (prompt + output) tok/s, mean TTFT, mean ITL, mean e2e, steps.
// Usage: engine_bench --model DIR [--concurrency 1,8,32] [--prompt-len 64] [--max-tokens 128] [--threads 0]
// (stories260K: python3 tools/convert_llama2c.py ... --out DIR first; see docs/engine.md.)
#include <algorithm>
#include <cstdlib>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "xinfer/cli/flags.h"
#include "xinfer/engine/engine.h"

using namespace xinfer;
using namespace xinfer::engine;

namespace {

struct LevelResult {
  double wall_s = 0;
  int64_t prompt_tokens = 0, output_tokens = 0;
  double sum_ttft = 0, sum_itl = 0, sum_e2e = 0;
  int64_t num_itl = 0, num_requests = 0, steps = 0;
};

class ClosedLoop {
 public:
  ClosedLoop(Engine& engine, int total, int prompt_len, int max_tokens, uint32_t seed)
      : engine_(engine), total_(total), prompt_len_(prompt_len), max_tokens_(max_tokens), rng_(seed) {}

  LevelResult run(int concurrency) {
    const int64_t steps0 = engine_.stats().num_steps;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < concurrency; ++i) submit_next();
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return result_.num_requests == total_; });
    }
    result_.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    result_.steps = engine_.stats().num_steps - steps0;
    return result_;
  }

 private:
  void submit_next() {
    GenerationRequest r;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (submitted_ == total_) return;
      r.request_id = std::to_string(submitted_++);
      std::uniform_int_distribution<int32_t> tok(3, engine_.info().vocab_size - 1);
      for (int i = 0; i < prompt_len_; ++i) r.prompt_ids.push_back(tok(rng_));
    }
    r.sampling.temperature = 0;
    r.sampling.ignore_eos = true;
    r.sampling.max_tokens = max_tokens_;
    Status s = engine_.submit(std::move(r), [this](RequestOutput o) { on_output(std::move(o)); });
    if (!s.ok()) {
      std::fprintf(stderr, "submit: %s\n", s.to_string().c_str());
      std::abort();
    }
  }

  void on_output(RequestOutput o) {
    if (!o.finished) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      LevelResult& r = result_;
      r.prompt_tokens += o.num_prompt_tokens;
      r.output_tokens += o.num_output_tokens;
      r.sum_ttft += o.timings.ttft_s;
      r.sum_e2e += o.timings.e2e_s;
      for (double itl : o.timings.itl_s) r.sum_itl += itl;
      r.num_itl += static_cast<int64_t>(o.timings.itl_s.size());
      ++r.num_requests;
    }
    cv_.notify_all();
    submit_next();  // from the engine thread: callbacks may submit
  }

  Engine& engine_;
  int total_, prompt_len_, max_tokens_;
  std::mt19937 rng_;
  std::mutex mu_;
  std::condition_variable cv_;
  int submitted_ = 0;
  LevelResult result_;
};

std::vector<int> parse_list(const std::string& s) {
  std::vector<int> v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) v.push_back(std::stoi(item));
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_dir, levels = "1,8,32";
  int prompt_len = 64, max_tokens = 128, threads = 0, block_size = 16, max_num_batched_tokens = 2048;
  cli::ByteSize kv_cache_memory{uint64_t{256} << 20};
  cli::FlagSet flags("engine_bench", "Closed-loop CPU engine throughput at several concurrency levels.");
  flags.add("--model", &model_dir, "Hugging Face model directory");
  flags.add("--concurrency", &levels, "comma-separated numbers of requests kept in flight");
  flags.add("--prompt-len", &prompt_len, "prompt tokens per request (random ids)");
  flags.add("--max-tokens", &max_tokens, "generated tokens per request (greedy, ignore_eos)");
  flags.add("--threads", &threads, "CPU threads; 0 = all");
  flags.add("--block-size", &block_size, "KV block size");
  flags.add("--max-num-batched-tokens", &max_num_batched_tokens, "token budget per step");
  flags.add("--kv-cache-memory", &kv_cache_memory, "KV cache budget, e.g. 256MiB");
  if (int rc = flags.parse_or_exit_code(argc, argv); rc >= 0) return rc;

  EngineConfig cfg;
  cfg.model_dir = model_dir;
  cfg.threads = threads;
  cfg.kv_cache_memory = kv_cache_memory.bytes;
  cfg.scheduler.block_size = block_size;
  cfg.scheduler.max_num_batched_tokens = max_num_batched_tokens;
  auto engine = Engine::create(cfg);
  if (!engine.ok()) {
    std::fprintf(stderr, "%s\n", engine.status().to_string().c_str());
    return 1;
  }
  std::printf("engine_bench: %s, prompt %d, output %d tokens per request, greedy\n",
              (*engine)->info().model_name.c_str(), prompt_len, max_tokens);
  std::printf("%6s %9s %8s %12s %12s %10s %10s %10s %8s\n", "conc", "requests", "wall_s", "out_tok/s",
              "total_tok/s", "ttft_ms", "itl_ms", "e2e_ms", "steps");
  uint32_t seed = 1;
  for (int c : parse_list(levels)) {
    const int total = std::max(8, 4 * c);
    ClosedLoop loop(**engine, total, prompt_len, max_tokens, seed++);
    const LevelResult r = loop.run(c);
    std::printf("%6d %9lld %8.3f %12.0f %12.0f %10.2f %10.3f %10.1f %8lld\n", c,
                static_cast<long long>(r.num_requests), r.wall_s, r.output_tokens / r.wall_s,
                (r.prompt_tokens + r.output_tokens) / r.wall_s, 1e3 * r.sum_ttft / r.num_requests,
                r.num_itl ? 1e3 * r.sum_itl / r.num_itl : 0.0, 1e3 * r.sum_e2e / r.num_requests,
                static_cast<long long>(r.steps));
  }
  return 0;
}
