// `xinfer logits`: runs given token ids through a model on the CPU or CUDA backend and writes what a
// numerical comparison against another implementation needs into one safetensors file. No tokenizer: the
// model directory needs only config.json and the weights. Per request i (names as in
// tests/golden/*/golden.safetensors):
//   prompt_<i>         i32 [n]      the prompt ids
//   positions_<i>      i32 [r]      prompt positions whose logits follow (the last --last-positions, or all)
//   logits_<i>         f32 [r, V]   their logits, from prefill steps of --prefill-chunk tokens that ask for
//                                   every wanted row (the prefill path: prefill attention, chunked prefix)
//   greedy_<i>         i32 [k]      --greedy-steps greedy tokens (argmax, ties -> lowest id, EOS ignored)
//   greedy_logits_<i>  f32 [k, V]   the logits each greedy token was taken from: row 0 from the prompt's
//                                   last position, row j > 0 from a one-token decode step
//   forced_logits_<i>  f32 [m, V]   only with forced ids f[0..m): row j = logits after feeding f[j] at
//                                   position n + j, one decode step per token (teacher forcing)
// Greedy and forced steps go through engine::ModelRunner, as serving does (decode steps replay CUDA graphs
// unless --enforce-eager; GEMM choices measured by engine::prepare_backend_for_model); the prompt logits come from LlamaModel::forward on plans that ask for every
// row. Each request starts from an empty KV cache (blocks are reused, every read slot is written first).
// --tensor-parallel-size N splits the model over N ranks (CPU: threads sharing --threads; CUDA: GPUs 0..N-1)
// through engine::load_tensor_parallel: rank 0 runs here, the others follow every step (the prompt-logits
// forwards too), and the logits are the all-gathered, whole-vocabulary rows.
// Used by tests/gpu/check_8b_vs_transformers.py; also carried in the portable `xinfer-bench` binary.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <fstream>
#include <memory>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "xinfer/cli/command.h"
#include "xinfer/cli/flags.h"
#include "xinfer/core/check.h"
#include "xinfer/core/logging.h"
#include "xinfer/engine/backend_factory.h"
#include "xinfer/engine/engine.h"
#include "xinfer/engine/engine_config.h"
#include "xinfer/engine/model_runner.h"
#include "xinfer/engine/tensor_parallel.h"
#include "xinfer/model/llama.h"
#include "xinfer/model/safetensors.h"

namespace xinfer::cli {
namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

struct LogitsRequest {
  std::vector<int32_t> prompt;
  std::vector<int32_t> forced;
};

Result<std::vector<int32_t>> parse_id_list(const std::string& flag, const std::string& text) {
  std::vector<int32_t> ids;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t used = 0;
      const long v = std::stol(item, &used);
      if (used != item.size() || v < 0 || v > INT32_MAX) throw std::invalid_argument(item);
      ids.push_back(static_cast<int32_t>(v));
    } catch (const std::exception&) {
      return invalid_argument(flag + ": '" + item + "' is not a token id");
    }
  }
  return ids;
}

Result<std::vector<int32_t>> json_ids(const json& j, const char* key, size_t index) {
  std::vector<int32_t> ids;
  if (!j.contains(key)) return ids;
  const std::string where = "request " + std::to_string(index) + " '" + key + "'";
  if (!j.at(key).is_array()) return invalid_argument(where + ": expected a list of token ids");
  for (const json& v : j.at(key)) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX)
      return invalid_argument(where + ": '" + v.dump() + "' is not a token id");
    ids.push_back(v.get<int32_t>());
  }
  return ids;
}

// FILE: [{"prompt_ids": [...], "forced_ids": [...]}, ...] (forced_ids optional).
Result<std::vector<LogitsRequest>> read_requests(const std::string& path) {
  std::ifstream in(path);
  if (!in) return not_found("cannot open --input " + path);
  json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_array()) return invalid_argument("--input " + path + ": expected a JSON list");
  std::vector<LogitsRequest> reqs;
  for (size_t i = 0; i < j.size(); ++i) {
    if (!j[i].is_object()) return invalid_argument("--input: request " + std::to_string(i) + " is not an object");
    LogitsRequest r;
    XI_ASSIGN_OR_RETURN(r.prompt, json_ids(j[i], "prompt_ids", i));
    XI_ASSIGN_OR_RETURN(r.forced, json_ids(j[i], "forced_ids", i));
    reqs.push_back(std::move(r));
  }
  return reqs;
}

int32_t argmax(const float* row, int vocab) {  // ties -> lowest id, like the Sampler's greedy
  int32_t best = 0;
  for (int32_t v = 1; v < vocab; ++v)
    if (row[v] > row[best]) best = v;
  return best;
}

// Host tensors kept alive until the file is written (a deque: views stay valid as it grows).
class Outputs {
 public:
  void add_i32(const std::string& name, std::vector<int32_t> v) {
    i32_.push_back(std::move(v));
    auto& s = i32_.back();
    views_.emplace_back(name, TensorView{s.data(), DType::kI32, Shape{static_cast<int64_t>(s.size())}, Device::kCpu});
  }
  void add_f32(const std::string& name, std::vector<float> v, int64_t cols) {
    f32_.push_back(std::move(v));
    auto& s = f32_.back();
    views_.emplace_back(name, TensorView{s.data(), DType::kF32,
                                         Shape{static_cast<int64_t>(s.size()) / cols, cols}, Device::kCpu});
  }
  Status write(const std::string& path, const json& metadata) const {
    return model::write_safetensors(path, views_, metadata);
  }

 private:
  std::deque<std::vector<int32_t>> i32_;
  std::deque<std::vector<float>> f32_;
  std::vector<std::pair<std::string, TensorView>> views_;
};

int run_logits(int argc, char** argv) {
  std::string model_dir, backend_name = "cuda", prompt_ids, forced_ids, input, output = "logits.safetensors";
  int greedy_steps = 32, last_positions = 0, prefill_chunk = 512, block_size = 16, threads = 0;
  int tensor_parallel_size = 1;
  bool enforce_eager = false, progress = true, dequantize = false;
  FlagSet flags("xinfer logits",
                "Run token ids through a model; write prompt logits, a greedy continuation with its logits and\n"
                "teacher-forced decode logits to a safetensors file (for comparisons against a reference).\n"
                "Example: xinfer logits --model DIR --backend cuda --prompt-ids 1,2,3 --output out.safetensors");
  flags.add("--model", &model_dir,
            "Hugging Face model directory (config.json, *.safetensors) or a .gguf file");
  flags.add("--backend", &backend_name, "cpu or cuda");
  flags.add("--prompt-ids", &prompt_ids, "one request: comma-separated prompt token ids");
  flags.add("--forced-ids", &forced_ids, "with --prompt-ids: comma-separated ids fed one decode step each");
  flags.add("--input", &input, "JSON list of requests: [{\"prompt_ids\": [...], \"forced_ids\": [...]}, ...]");
  flags.add("--output", &output, "safetensors file to write");
  flags.add("--greedy-steps", &greedy_steps, "greedy tokens generated per request (0: none)");
  flags.add("--last-positions", &last_positions, "logits of the last N prompt positions; 0 = all of them");
  flags.add("--prefill-chunk", &prefill_chunk, "most prompt tokens per forward step");
  flags.add("--block-size", &block_size, "KV-cache block size in tokens");
  flags.add("--enforce-eager", &enforce_eager, "run decode steps eagerly (no CUDA graphs)");
  flags.add("--threads", &threads, "CPU backend threads; 0 = all cores");
  flags.add("--tensor-parallel-size", &tensor_parallel_size,
            "split the model over this many ranks (cpu: threads sharing --threads; cuda: GPUs 0..N-1); must "
            "divide the attention heads and the FFN width");
  flags.add("--progress", &progress, "progress bar while converting weights");
  flags.add("--dequantize", &dequantize,
            "GGUF: dequantize block-format weights at load (float reference of the quantized kernels)");
  if (int rc = flags.parse_or_exit_code(argc, argv); rc >= 0) return rc;
  auto fail = [](const Status& s) {
    std::fprintf(stderr, "xinfer logits: %s\n", s.to_string().c_str());
    return 1;
  };

  if (model_dir.empty()) return fail(invalid_argument("--model is required"));
  if (tensor_parallel_size < 1) return fail(invalid_argument("--tensor-parallel-size must be >= 1"));
  if (greedy_steps < 0 || last_positions < 0 || prefill_chunk <= 0 || block_size <= 0)
    return fail(invalid_argument("--greedy-steps and --last-positions must be >= 0, --prefill-chunk and "
                                 "--block-size > 0"));
  std::vector<LogitsRequest> reqs;
  if (!input.empty()) {
    if (!prompt_ids.empty() || !forced_ids.empty())
      return fail(invalid_argument("give either --input or --prompt-ids/--forced-ids, not both"));
    auto r = read_requests(input);
    if (!r.ok()) return fail(r.status());
    reqs = std::move(*r);
  } else {
    LogitsRequest r;
    auto p = parse_id_list("--prompt-ids", prompt_ids);
    if (!p.ok()) return fail(p.status());
    auto f = parse_id_list("--forced-ids", forced_ids);
    if (!f.ok()) return fail(f.status());
    r.prompt = std::move(*p);
    r.forced = std::move(*f);
    reqs.push_back(std::move(r));
  }
  if (reqs.empty()) return fail(invalid_argument("no requests"));
  int longest = 0;  // tokens one request puts in the KV cache
  for (size_t i = 0; i < reqs.size(); ++i) {
    if (reqs[i].prompt.empty()) return fail(invalid_argument("request " + std::to_string(i) + ": empty prompt"));
    const int n = static_cast<int>(reqs[i].prompt.size());
    longest = std::max({longest, n + greedy_steps, n + static_cast<int>(reqs[i].forced.size())});
  }
  auto kind = engine::parse_backend_kind(backend_name);
  if (!kind.ok()) return fail(kind.status());
  auto cfg_or = model::load_model_config(model_dir);
  if (!cfg_or.ok()) return fail(cfg_or.status());
  // Every size (and, on CUDA, the GPU count) checked before any backend or weight.
  if (Status s = engine::validate_tensor_parallel(*cfg_or, tensor_parallel_size, *kind); !s.ok()) return fail(s);
  const int rank_threads = engine::threads_per_rank(threads, tensor_parallel_size);
  auto backend_or = engine::create_backend(*kind, rank_threads);
  if (!backend_or.ok()) return fail(backend_or.status());
  backend::Backend& backend = **backend_or;

  const auto t_load = Clock::now();
  model::LoadOptions load_opts;
  load_opts.dequantize_gguf = dequantize;
  load_opts.max_tokens = prefill_chunk;
  load_opts.max_logit_rows = prefill_chunk;  // every row of a prefill chunk may be asked for
  load_opts.max_model_len = (longest + block_size - 1) / block_size * block_size;
  load_opts.show_progress = progress;
  load_opts.max_model_len = std::min(load_opts.max_model_len, cfg_or->max_position_embeddings);
  if (longest > load_opts.max_model_len)
    return fail(out_of_range("a request needs " + std::to_string(longest) + " positions; the model has " +
                             std::to_string(cfg_or->max_position_embeddings)));
  // As the Engine does (decode workspace, measured GEMM choices: each rank its own shapes), before any graph
  // records.
  auto prepare = [&, mc = *cfg_or](backend::Backend& b, int rank) -> Status {
    XI_ASSIGN_OR_RETURN(const model::ModelShard shard, model::ModelShard::make(mc, tensor_parallel_size, rank));
    engine::prepare_backend_for_model(b, mc, shard, prefill_chunk, prefill_chunk, 1, load_opts.max_model_len,
                                      progress && rank == 0);
    return Status();
  };
  if (Status s = prepare(backend, 0); !s.ok()) return fail(s);
  auto tp_or = engine::load_tensor_parallel(
      model_dir, backend, load_opts, tensor_parallel_size, *kind,
      [&](int rank) -> Result<std::unique_ptr<backend::Backend>> {
        XI_ASSIGN_OR_RETURN(std::unique_ptr<backend::Backend> b, engine::create_backend(*kind, rank_threads, rank));
        XI_RETURN_IF_ERROR(prepare(*b, rank));
        return b;
      });
  if (!tp_or.ok()) return fail(tp_or.status());
  model::LlamaModel& model = *tp_or->model;
  const model::ModelConfig& cfg = model.config();
  const int V = cfg.vocab_size;
  for (size_t i = 0; i < reqs.size(); ++i)
    for (const auto* ids : {&reqs[i].prompt, &reqs[i].forced})
      for (int32_t id : *ids)
        if (id >= V)
          return fail(invalid_argument("request " + std::to_string(i) + ": token id " + std::to_string(id) +
                                       " outside the vocabulary (" + std::to_string(V) + ")"));
  XI_LOG(INFO) << "model: " << cfg.to_string() << " on " << backend.info().name << ", loaded in "
               << std::chrono::duration<double>(Clock::now() - t_load).count() << " s";

  const int table_blocks = (longest + block_size - 1) / block_size;
  const backend::KvCacheSpec spec{cfg.num_layers, table_blocks + 1, block_size, model.shard().num_kv_heads,
                                  cfg.head_dim, backend.info().activation_dtype};
  const backend::KvCache prefill_kv = backend.allocate_kv_cache(spec);
  engine::ModelRunner runner(model, backend, spec, enforce_eager ? engine::GraphMode::kOff : engine::GraphMode::kOn);
  // Followers: one KV cache each serves both rank 0's prefill_kv and the runner's (every request writes each
  // slot it reads first, in the same step order on every rank).
  tp_or->attach(runner, spec);
  std::vector<int32_t> block_table;
  for (int b = 1; b <= table_blocks; ++b) block_table.push_back(b);  // block 0 is the null block

  Outputs out;
  const auto t_run = Clock::now();
  std::vector<float> row_buf;
  for (size_t r = 0; r < reqs.size(); ++r) {
    const std::string tag = "_" + std::to_string(r);
    const std::vector<int32_t>& prompt = reqs[r].prompt;
    const int n = static_cast<int>(prompt.size());
    const int first_wanted = last_positions > 0 ? std::max(0, n - last_positions) : 0;

    // Prompt logits: whole-prompt prefill chunks asking for every wanted row.
    std::vector<int32_t> positions;
    std::vector<float> logits;
    for (int pos = 0; pos < n; pos += prefill_chunk) {
      const int len = std::min(n - pos, prefill_chunk);
      const engine::SequenceChunk chunk{std::span(prompt).subspan(static_cast<size_t>(pos), static_cast<size_t>(len)),
                                        pos, block_table, false};
      backend::StepPlan plan = engine::ModelRunner::plan(std::span(&chunk, 1), block_size);
      for (int i = std::max(0, first_wanted - pos); i < len; ++i) {
        plan.logit_rows.push_back(i);
        positions.push_back(pos + i);
      }
      if (tp_or->group) tp_or->group->launch(plan);
      const backend::StepMeta meta = backend.upload_step(plan);
      const TensorView dev = model.forward(meta, prefill_kv);
      if (plan.logit_rows.empty()) continue;
      const size_t old = logits.size();
      logits.resize(old + static_cast<size_t>(dev.numel()));
      backend.to_host_f32(dev, logits.data() + old);
    }
    out.add_i32("prompt" + tag, prompt);
    out.add_i32("positions" + tag, std::move(positions));
    out.add_f32("logits" + tag, std::move(logits), V);

    // Through the runner: chunked prefill (last row's logits), then one decode step per token: either the
    // greedy choice (forced == nullptr) or the forced ids. Returns one logits row per step.
    auto run_steps = [&](const std::vector<int32_t>* forced, int steps, std::vector<int32_t>* chosen) {
      std::vector<float> rows;
      for (int pos = 0; pos < n; pos += prefill_chunk) {
        const int len = std::min(n - pos, prefill_chunk);
        const engine::SequenceChunk chunk{
            std::span(prompt).subspan(static_cast<size_t>(pos), static_cast<size_t>(len)), pos, block_table,
            pos + len == n};
        row_buf = runner.run(std::span(&chunk, 1));
      }
      for (int s = 0; s < steps; ++s) {
        if (s > 0) {
          const int32_t tok = forced ? (*forced)[static_cast<size_t>(s - 1)] : chosen->back();
          const engine::SequenceChunk chunk{std::span(&tok, 1), n + s - 1, block_table, true};
          row_buf = runner.run(std::span(&chunk, 1));
        }
        XI_CHECK_EQ(row_buf.size(), static_cast<size_t>(V));
        if (chosen) chosen->push_back(argmax(row_buf.data(), V));
        rows.insert(rows.end(), row_buf.begin(), row_buf.end());
      }
      return rows;
    };
    if (greedy_steps > 0) {
      std::vector<int32_t> greedy;
      std::vector<float> rows = run_steps(nullptr, greedy_steps, &greedy);
      out.add_i32("greedy" + tag, std::move(greedy));
      out.add_f32("greedy_logits" + tag, std::move(rows), V);
    }
    if (!reqs[r].forced.empty()) {
      // Row j after feeding forced[j]: steps 1..m of a run whose step s feeds forced[s - 1].
      const int m = static_cast<int>(reqs[r].forced.size());
      std::vector<float> rows = run_steps(&reqs[r].forced, m + 1, nullptr);
      rows.erase(rows.begin(), rows.begin() + V);  // step 0: the prompt's last position
      out.add_f32("forced_logits" + tag, std::move(rows), V);
    }
  }
  const double run_s = std::chrono::duration<double>(Clock::now() - t_run).count();
  const json meta = {{"backend", backend.info().name}, {"model", model_dir}, {"config", cfg.to_string()},
                     {"tensor_parallel_size", std::to_string(tensor_parallel_size)},
                     {"graphs", std::to_string(runner.graph_replays()) + " replays"}};
  if (Status s = out.write(output, meta); !s.ok()) return fail(s);
  XI_LOG(INFO) << reqs.size() << " requests in " << run_s << " s (" << runner.graph_captures() << " graph captures, "
               << runner.graph_replays() << " replays); wrote " << output;
  return 0;
}

const CommandRegistration kRegistration{"logits", "token ids -> logits and greedy ids in a safetensors file (cpu/cuda)",
                                        &run_logits};

}  // namespace
}  // namespace xinfer::cli
