// Helpers for the Engine tests: model directories (golden tiny models, stories260K converted at test
// time), golden greedy paths, and a thread-safe collector of the outputs the engine streams back.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <unistd.h>
#include <string>
#include <vector>

#include "xinfer/core/check.h"
#include "xinfer/engine/engine.h"
#include "xinfer/model/model_config.h"
#include "xinfer/model/safetensors.h"

namespace xinfer::engine::testing {

inline std::string source_dir() {
  const char* src = std::getenv("XINFER_SOURCE_DIR");
  return src ? src : ".";
}

inline std::string golden_dir(const std::string& name) { return source_dir() + "/tests/golden/" + name; }

inline std::vector<int32_t> read_ids(const model::WeightFiles& f, const std::string& name) {
  TensorView v = *f.get(name);
  XI_CHECK(v.dtype == DType::kI32) << name;
  return std::vector<int32_t>(v.as<int32_t>(), v.as<int32_t>() + v.numel());
}

// prompt_i and greedy_i of tests/golden/<name>/golden.safetensors (transformers' greedy tokens).
struct GoldenPaths {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::vector<int32_t>> greedy;
};

inline GoldenPaths read_golden_paths(const std::string& dir) {
  auto f = model::WeightFiles::open_file(dir + "/golden.safetensors");
  XI_CHECK(f.ok()) << f.status().to_string();
  GoldenPaths g;
  if (f->contains("prompt")) {  // stories260K: one path from BOS
    g.prompts.push_back(read_ids(*f, "prompt"));
    g.greedy.push_back(read_ids(*f, "greedy"));
    return g;
  }
  for (int i = 0; f->contains("prompt_" + std::to_string(i)); ++i) {
    g.prompts.push_back(read_ids(*f, "prompt_" + std::to_string(i)));
    g.greedy.push_back(read_ids(*f, "greedy_" + std::to_string(i)));
  }
  return g;
}

// ../shared/models/stories260K converted with tools/convert_llama2c.py into a temporary directory, once per
// process. Empty when the checkpoint is absent (the caller skips).
inline std::string stories_dir() {
  // Converted on first use; removed at process exit.
  struct Converted {
    std::string dir;
    ~Converted() {
      std::error_code ec;
      if (!dir.empty()) std::filesystem::remove_all(dir, ec);
    }
  };
  static const Converted converted = [] {
    const std::string src = source_dir() + "/../shared/models/stories260K";
    if (!std::filesystem::exists(src + "/stories260K.bin")) return Converted{};
    const std::string out = (std::filesystem::temp_directory_path() /
                             ("xinfer_engine_stories_" + std::to_string(::getpid()))).string();
    const std::string cmd = "python3 " + source_dir() + "/tools/convert_llama2c.py --checkpoint " + src +
                            "/stories260K.bin --tokenizer " + src + "/tok512.bin --out " + out + " > /dev/null";
    XI_CHECK_EQ(std::system(cmd.c_str()), 0) << cmd;
    return Converted{out};
  }();
  return converted.dir;
}

// Everything the engine sent for each request id.
class Collector {
 public:
  struct Stream {
    std::vector<int32_t> tokens;
    std::vector<RequestOutput> outputs;
    int num_final = 0;
    RequestOutput final_output;
  };

  OutputCallback callback() {
    return [this](RequestOutput out) {
      std::lock_guard<std::mutex> lock(mu_);
      Stream& s = streams_[out.request_id];
      s.tokens.insert(s.tokens.end(), out.new_token_ids.begin(), out.new_token_ids.end());
      if (out.finished) {
        ++s.num_final;
        s.final_output = out;
        ++num_finished_;
      }
      s.outputs.push_back(std::move(out));
      cv_.notify_all();
    };
  }

  // Waits until `n` final outputs have arrived (fails the test after 60 s).
  void wait_finished(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    const bool ok = cv_.wait_for(lock, std::chrono::seconds(60), [&] { return num_finished_ >= n; });
    ASSERT_TRUE(ok) << "only " << num_finished_ << " of " << n << " requests finished";
  }
  // Waits until request `id` has at least `n` tokens.
  void wait_tokens(const std::string& id, size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    const bool ok = cv_.wait_for(lock, std::chrono::seconds(60), [&] { return streams_[id].tokens.size() >= n; });
    ASSERT_TRUE(ok) << id << " produced fewer than " << n << " tokens";
  }
  std::map<std::string, Stream> streams() const {
    std::lock_guard<std::mutex> lock(mu_);
    return streams_;
  }
  int num_finished() const {
    std::lock_guard<std::mutex> lock(mu_);
    return num_finished_;
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Stream> streams_;
  int num_finished_ = 0;
};

inline SamplingParams greedy_params(int max_tokens) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.ignore_eos = true;
  p.max_tokens = max_tokens;
  return p;
}

inline GenerationRequest make_request(std::string id, std::vector<int32_t> prompt, SamplingParams params) {
  GenerationRequest r;
  r.request_id = std::move(id);
  r.prompt_ids = std::move(prompt);
  r.sampling = std::move(params);
  return r;
}

inline std::unique_ptr<Engine> make_engine(EngineConfig config) {
  auto e = Engine::create(std::move(config));
  XI_CHECK(e.ok()) << e.status().to_string();
  return std::move(*e);
}

// Bytes for `num_blocks` KV blocks (null block included) of the model in `dir` on the CPU (f32).
inline size_t kv_bytes(const std::string& dir, int block_size, int num_blocks) {
  auto mc = model::load_model_config(dir);
  XI_CHECK(mc.ok()) << mc.status().to_string();
  backend::KvCacheSpec spec{mc->num_layers, num_blocks, block_size, mc->num_kv_heads, mc->head_dim, DType::kF32};
  return spec.bytes_per_block() * static_cast<size_t>(num_blocks);
}

// "g1_5" (snprintf: g++ 12 at -O3 warns falsely (-Wrestrict) on "literal" + std::string chains).
inline std::string case_id(const char* prefix, size_t i, int k) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%s%zu_%d", prefix, i, k);
  return buf;
}

// One request of an equivalence test: its prompt and sampling, and the tokens it must produce (from
// transformers), or empty: compare with the same case run alone.
struct Case {
  std::string id;
  std::vector<int32_t> prompt;
  SamplingParams params;
  std::vector<int32_t> expected;
};

// Submits every case at once (concurrent) or one after the other (solo) and returns the streams.
inline std::map<std::string, Collector::Stream> run_cases(Engine& engine, const std::vector<Case>& cases, bool solo) {
  Collector c;
  int submitted = 0;
  for (const Case& k : cases) {
    Status s = engine.submit(make_request(k.id, k.prompt, k.params), c.callback());
    EXPECT_TRUE(s.ok()) << k.id << ": " << s.to_string();
    ++submitted;
    if (solo) c.wait_finished(submitted);
  }
  c.wait_finished(submitted);
  return c.streams();
}

}  // namespace xinfer::engine::testing
