// `xinfer bench`: offline throughput and latency of the real Engine at fixed input/output lengths.
//
//   throughput (default): submit --num-prompts requests of random prompt ids at once (ignore_eos, exactly
//     --output-len tokens each), wait for all; output tok/s, total tok/s, requests/s. --all-shapes runs
//     128/128, 128/2048, 2048/128 and 2048/2048 on one engine.
//   latency (--latency): one request at a time (batch 1), --num-iters after one warm-up; TTFT and
//     inter-token latency p50/p99.
//
// Roofline figures divide by ceilings measured on the same device at start (backend measure_ceilings():
// d2d copy bandwidth, bf16 GEMM 8192^3), never by datasheet numbers:
//   decode MBU = (weights read per step + KV read at the mean context) / ITL p50 / copy bandwidth, where
//     weights read per step = weight bytes minus the embedding table (one row of it is read);
//   prefill MFU = (2 * non-embedding params * tokens + causal attention 2 * layers * Hq * D * tokens^2) / TTFT / peak,
//     peak = the bf16 GEMM's, twice it for W8A8 (FP8 / INT8 tensor cores);
//   throughput "effective bandwidth" = (steps * weights per step + all KV reads) / elapsed / copy bandwidth.
// Sampling: greedy by default; --temperature / --top-p / --top-k / --min-p make every request sample, each
// with its own seed (request_seed(): from --seed and the request's index in its batch; in latency mode
// the batch seed also moves with the iteration), so a sampled run is reproducible. The JSON records the
// settings and an FNV-1a digest of every request's output ids in request order (equal digests: the same
// tokens); the default name gets "_sampled" so sampled results never overwrite greedy ones.
// Results go to <--output-dir>/<name>.json (default bench/results/, created when missing).
#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <limits>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "xinfer/cli/command.h"
#include "xinfer/cli/engine_flags.h"
#include "xinfer/cli/flags.h"
#include "xinfer/core/logging.h"
#include "xinfer/core/progress_bar.h"
#include "xinfer/engine/backend_factory.h"
#include "xinfer/engine/engine.h"
#include "xinfer/engine/sampling_params.h"
#include "xinfer/model/dummy_quantized.h"
#include "xinfer/model/preset_configs.h"

namespace xinfer::cli {
namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

struct Shape2 {
  int input_len;
  int output_len;
};

struct RunResult {
  int num_requests = 0;
  int64_t output_tokens = 0;
  int64_t prompt_tokens = 0;
  double elapsed_s = 0;
  int64_t steps = 0;
  engine::EngineStats before, after;  // engine counters around the run (step-time breakdown)
  std::vector<double> ttft_s;
  std::vector<double> itl_s;
  int errors = 0;
  std::string first_error;
  uint64_t output_digest = 0;  // fnv1a over the requests' output ids, in request order
};

constexpr uint64_t kFnvOffset = 1469598103934665603ull, kFnvPrime = 1099511628211ull;

uint64_t fnv1a(uint64_t h, uint64_t v) {
  for (int i = 0; i < 8; ++i) {
    h ^= (v >> (8 * i)) & 0xff;
    h *= kFnvPrime;
  }
  return h;
}

// The sampling seed of request `index` of a batch whose prompts come from `batch_seed` (splitmix64 of
// the pair; non-negative so it is a valid int64 seed).
int64_t request_seed(uint64_t batch_seed, int index) {
  uint64_t z = batch_seed + (static_cast<uint64_t>(index) + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<int64_t>(z >> 1);
}

// A float flag as the number the user typed (0.9, not 0.8999999761581421).
double short_float(float v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.7g", static_cast<double>(v));
  return std::strtod(buf, nullptr);
}

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016" PRIx64, v);
  return buf;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double idx = p / 100.0 * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(idx)), hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (idx - static_cast<double>(lo));
}

// Where the engine thread's time went between two stats snapshots: per step kind, the count, tokens per
// step, milliseconds per step in the model runner ("device": upload, forward, sampling, wait) and per
// pipelined launch on the host, and the host-only time (scheduling, bookkeeping, callbacks) per step; and the
// preemptions with the tokens whose KV they dropped (recomputed later: the cost of running out of KV blocks).
nlohmann::json step_breakdown(const engine::EngineStats& a, const engine::EngineStats& b) {
  using S = engine::EngineStats;
  auto per = [](double s, int64_t n) { return n > 0 ? s / static_cast<double>(n) * 1e3 : 0.0; };
  auto diff = [&](auto member) { return b.*member - a.*member; };
  // One step kind's figures: each field is the decode-only or the mixed member of the pair.
  auto kind = [&](bool d) {
    auto pick = [d](auto decode_only, auto mixed) { return d ? decode_only : mixed; };
    const int64_t steps = diff(pick(&S::decode_only_steps, &S::mixed_steps));
    const int64_t tokens = diff(pick(&S::decode_only_tokens, &S::mixed_tokens));
    const double device_s = diff(pick(&S::decode_only_device_s, &S::mixed_device_s));
    const int64_t launches = diff(pick(&S::decode_only_launches, &S::mixed_launches));
    const int64_t timed = diff(pick(&S::decode_only_timed_steps, &S::mixed_timed_steps));
    return nlohmann::json{
        {"steps", steps},
        {"tokens_per_step", steps > 0 ? static_cast<double>(tokens) / static_cast<double>(steps) : 0.0},
        {"device_ms_per_step", per(device_s, steps)},
        {"device_s", device_s},
        {"host_ms_per_step", per(diff(pick(&S::decode_only_host_s, &S::mixed_host_s)), steps)},
        {"launches", launches},
        {"launch_ms_per_launch", per(diff(pick(&S::decode_only_launch_s, &S::mixed_launch_s)), launches)},
        {"timed_steps", timed},
        {"busy_ms_per_step", per(diff(pick(&S::decode_only_busy_s, &S::mixed_busy_s)), timed)},
        {"copies_ms_per_step", per(diff(pick(&S::decode_only_copies_s, &S::mixed_copies_s)), timed)},
        {"idle_ms_per_step", per(diff(pick(&S::decode_only_idle_s, &S::mixed_idle_s)),
                                 diff(pick(&S::decode_only_idle_steps, &S::mixed_idle_steps)))}};
  };
  const int64_t steps = b.num_steps - a.num_steps;
  return {
      {"decode_only", kind(true)},
      {"mixed", kind(false)},
      {"host_s", b.host_s - a.host_s},
      {"host_ms_per_step", steps > 0 ? (b.host_s - a.host_s) / static_cast<double>(steps) * 1e3 : 0.0},
      {"launch_ms_per_step", steps > 0 ? (b.launch_s - a.launch_s) / static_cast<double>(steps) * 1e3 : 0.0},
      {"async_steps", b.async_steps - a.async_steps},
      {"preemptions", b.num_preemptions - a.num_preemptions},
      {"preempted_tokens", b.num_preempted_tokens - a.num_preempted_tokens},
      {"graph_captures", b.graph_captures - a.graph_captures},
      {"graph_replays", b.graph_replays - a.graph_replays},
      {"graph_capture_s", b.graph_capture_s - a.graph_capture_s},
      {"swap_outs", b.num_swap_outs - a.num_swap_outs},
      {"swapped_out_tokens", b.num_swapped_out_tokens - a.num_swapped_out_tokens}};
}

void print_step_breakdown(const nlohmann::json& b) {
  for (const char* k : {"decode_only", "mixed"}) {
    const nlohmann::json& x = b[k];
    std::printf("  %-11s steps %6lld, %7.1f tokens/step, %7.2f ms/step in the runner (%.2f s)", k,
                static_cast<long long>(x["steps"].get<int64_t>()), x["tokens_per_step"].get<double>(),
                x["device_ms_per_step"].get<double>(), x["device_s"].get<double>());
    const int64_t launches = x["launches"].get<int64_t>();
    if (launches > 0)
      std::printf("; %lld pipelined, launching one took %.3f ms of the host time", static_cast<long long>(launches),
                  x["launch_ms_per_launch"].get<double>());
    std::printf("; host %.3f ms/step\n", x["host_ms_per_step"].get<double>());
    if (const int64_t timed = x["timed_steps"].get<int64_t>(); timed > 0)
      std::printf(
          "  %-11s on the device (events, %lld steps): busy %.2f ms/step, of which KV block copies %.3f; "
          "idle before a step %.3f ms\n",
          "", static_cast<long long>(timed), x["busy_ms_per_step"].get<double>(),
          x["copies_ms_per_step"].get<double>(), x["idle_ms_per_step"].get<double>());
  }
  const int64_t async_steps = b["async_steps"].get<int64_t>();
  std::printf("  host (schedule + bookkeeping): %.3f ms/step (%.2f s)%s\n",
              b["host_ms_per_step"].get<double>(), b["host_s"].get<double>(),
              async_steps > 0 ? ", overlapping the device" : "");
  if (async_steps > 0)
    std::printf(
        "  async scheduling: %lld steps launched behind the step in flight (their runner time is the step "
        "period); launching one took %.3f ms of the host time\n",
        static_cast<long long>(async_steps), b["launch_ms_per_step"].get<double>());
  if (const int64_t captures = b["graph_captures"].get<int64_t>(); captures > 0)
    std::printf("  CUDA graphs: %lld recorded during the run (%.3f s of host time), %lld steps replayed\n",
                static_cast<long long>(captures), b["graph_capture_s"].get<double>(),
                static_cast<long long>(b["graph_replays"].get<int64_t>()));
  if (const int64_t preemptions = b["preemptions"].get<int64_t>(); preemptions > 0)
    std::printf(
        "  preemptions: %lld, dropping the KV of %lld tokens (recomputed on re-admission); %lld swapped "
        "the KV of %lld tokens to host memory instead\n",
        static_cast<long long>(preemptions), static_cast<long long>(b["preempted_tokens"].get<int64_t>()),
        static_cast<long long>(b["swap_outs"].get<int64_t>()),
        static_cast<long long>(b["swapped_out_tokens"].get<int64_t>()));
}

// Submits `n` random prompts of `shape` at once, sampling with `sampling` (max_tokens and ignore_eos set
// here; a non-greedy request gets request_seed(seed, its index)), and waits for all of them.
RunResult run_batch(engine::Engine& eng, Shape2 shape, int n, uint64_t seed, const engine::SamplingParams& sampling,
                    bool progress, const std::string& tag) {
  RunResult r;
  r.num_requests = n;
  const int vocab = eng.info().vocab_size;
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> token(0, vocab - 1);
  std::mutex mu;
  std::condition_variable cv;
  int remaining = n;
  ProgressBar bar(tag, static_cast<int64_t>(n) * shape.output_len, "tokens", progress);
  r.before = eng.stats();
  static std::atomic<uint64_t> next_id{0};

  std::vector<engine::GenerationRequest> reqs(static_cast<size_t>(n));
  for (size_t i = 0; i < reqs.size(); ++i) {
    engine::GenerationRequest& req = reqs[i];
    req.request_id = "bench-" + std::to_string(next_id++);
    req.prompt_ids.resize(static_cast<size_t>(shape.input_len));
    for (auto& t : req.prompt_ids) t = token(rng);
    req.sampling = sampling;
    req.sampling.ignore_eos = true;
    req.sampling.max_tokens = shape.output_len;
    if (!sampling.is_greedy()) req.sampling.seed = request_seed(seed, static_cast<int>(i));
  }
  std::vector<uint64_t> digests(static_cast<size_t>(n), kFnvOffset);  // per request: its callbacks run in order
  const auto t0 = Clock::now();
  for (size_t i = 0; i < reqs.size(); ++i) {
    Status s = eng.submit(std::move(reqs[i]), [&, i](engine::RequestOutput out) {
      bar.advance(static_cast<int64_t>(out.new_token_ids.size()));  // engine thread only
      for (int32_t t : out.new_token_ids) digests[i] = fnv1a(digests[i], static_cast<uint32_t>(t));
      if (!out.finished) return;
      std::lock_guard<std::mutex> lock(mu);
      if (out.finish_reason == engine::FinishReason::kError || out.finish_reason == engine::FinishReason::kAbort) {
        if (r.errors++ == 0) r.first_error = out.error.empty() ? engine::finish_reason_name(out.finish_reason) : out.error;
      }
      r.output_tokens += out.num_output_tokens;
      r.prompt_tokens += out.num_prompt_tokens;
      r.ttft_s.push_back(out.timings.ttft_s);
      r.itl_s.insert(r.itl_s.end(), out.timings.itl_s.begin(), out.timings.itl_s.end());
      if (--remaining == 0) cv.notify_all();
    });
    if (!s.ok()) {
      std::lock_guard<std::mutex> lock(mu);
      if (r.errors++ == 0) r.first_error = s.to_string();
      --remaining;
    }
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return remaining == 0; });
  }
  r.elapsed_s = std::chrono::duration<double>(Clock::now() - t0).count();
  bar.finish();
  r.after = eng.stats();
  r.steps = r.after.num_steps - r.before.num_steps;
  r.output_digest = kFnvOffset;
  for (uint64_t d : digests) r.output_digest = fnv1a(r.output_digest, d);
  return r;
}

int run_bench(int argc, char** argv) {
  std::string model = "llama-3.1-8b", load_format, name, output_dir = "bench/results", quantization;
  int input_len = 128, output_len = 128, num_prompts = 0, num_iters = 5;
  bool all_shapes = false, latency = false, progress = true, ceilings = true;
  int64_t seed = 0;
  engine::SamplingParams sampling;
  sampling.temperature = 0.0f;  // greedy unless asked
  EngineFlags engine_flags;
  engine_flags.backend = "cuda";
  engine::EngineConfig& ec = engine_flags.config;
  sched::SchedulerConfig& sc = ec.scheduler;
  // Offline throughput wants the largest batch that still pays off: engine::offline_batch_limits, vLLM's
  // offline defaults by device, resolved after the flags (on an H200, Llama-3.1-8B FP8 128/128: 30.0-30.4k
  // output tok/s at 1024 / 16384 against 28.6k at 512 / 8192, docs/PERF.md session 22). Without a GPU: 512 /
  // 8192.
  const engine::BatchLimits small = engine::kOfflineBatchLimits, large = engine::kLargeGpuOfflineBatchLimits;
  sc.max_num_batched_tokens = small.max_num_batched_tokens;
  sc.max_num_seqs = small.max_num_seqs;
  sc.enable_prefix_caching = false;  // random prompts never share blocks; keep the figure about compute
  FlagSet flags("xinfer bench",
                "Offline throughput or batch-1 latency of the engine at fixed input/output lengths, with MBU/MFU\n"
                "against ceilings measured on the same device. Writes <output-dir>/<name>.json. Greedy unless\n"
                "--temperature > 0 (then every request samples with its own seed from --seed: reproducible).\n"
                "Example: xinfer bench --model llama-3.1-8b --load-format dummy --input-len 128 --output-len 128");
  flags.add("--model", &model, "model directory, or a built-in config (llama-3.1-8b, qwen2.5-7b, llama-3.1-70b)");
  flags.add("--load-format", &load_format, "auto (safetensors) or dummy (random weights); default: dummy for a "
                                           "built-in config, auto for a directory");
  flags.add("--quantization", &quantization,
            "with --load-format dummy: the decoder linears random in w4a16 (int4 g128), w4a16-zp, w8a16 (int8 per "
            "channel), fp8 or w8a8-int8 (dynamic per-token activations) instead of bf16; a format the backend has "
            "no kernel for is dequantized at load");
  flags.add("--input-len", &input_len, "prompt tokens per request (random ids)");
  flags.add("--output-len", &output_len, "generated tokens per request (ignore_eos)");
  flags.add("--all-shapes", &all_shapes, "run 128/128, 128/2048, 2048/128 and 2048/2048 (throughput mode)");
  flags.add("--num-prompts", &num_prompts,
            "requests per shape; 0: enough to fill the KV cache twice, at most 1000");
  flags.add("--latency", &latency, "latency mode: one request at a time; TTFT and inter-token latency");
  flags.add("--num-iters", &num_iters, "latency mode: measured requests (after one warm-up)");
  engine_flags.add_to(flags);
  const std::string large_gpu =
      " in throughput mode on a GPU of >= " + std::to_string(engine::kLargeGpuBytes >> 30) +
      " GiB other than an A100, else ";
  flags.set_default_text("--max-num-seqs",
                         std::to_string(large.max_num_seqs) + large_gpu + std::to_string(small.max_num_seqs));
  flags.set_default_text("--max-num-batched-tokens", std::to_string(large.max_num_batched_tokens) +
                                                         large_gpu +
                                                         std::to_string(small.max_num_batched_tokens));
  flags.add("--temperature", &sampling.temperature,
            "sampling temperature of every request; 0: greedy (argmax); > 0 samples, each request with its own "
            "seed derived from --seed and its index (reproducible)");
  flags.add("--top-p", &sampling.top_p, "nucleus sampling: keep the most likely tokens up to this mass (1: off)");
  flags.add("--top-k", &sampling.top_k, "keep the k most likely tokens (0 or -1: off)");
  flags.add("--min-p", &sampling.min_p, "keep tokens with probability >= min-p * the largest (0: off)");
  flags.add("--seed", &seed, "seed of the random prompts, the dummy weights and the per-request sampling seeds");
  flags.add("--name", &name,
            "result name; default <model>_<backend>_<mode>, plus _sampled when --temperature > 0");
  flags.add("--output-dir", &output_dir, "folder for <name>.json (created when missing)");
  flags.add("--progress", &progress, "progress bar while generating");
  flags.add("--ceilings", &ceilings, "measure copy bandwidth and GEMM peak first (MBU / MFU)");
  if (int rc = flags.parse_or_exit_code(argc, argv); rc >= 0) return rc;
  auto fail = [](const std::string& msg) {
    std::fprintf(stderr, "xinfer bench: %s\n", msg.c_str());
    return 1;
  };

  std::vector<Shape2> shapes;
  if (all_shapes && !latency) shapes = {{128, 128}, {128, 2048}, {2048, 128}, {2048, 2048}};
  else shapes = {{input_len, output_len}};
  for (const auto& s : shapes)
    if (s.input_len < 1 || s.output_len < 1) return fail("--input-len and --output-len must be >= 1");
  if (num_prompts < 0 || num_iters < 1) return fail("--num-prompts must be >= 0 and --num-iters >= 1");
  // Range checks before the model loads (the vocab only bounds logit_bias and stop ids: none here).
  if (Status st = engine::validate(sampling, std::numeric_limits<int>::max()); !st.ok()) return fail(st.to_string());
  const bool sampled = !sampling.is_greedy();
  if (!sampled && (sampling.top_p != 1.0f || sampling.top_k > 0 || sampling.min_p != 0.0f))
    std::printf("note: --top-p / --top-k / --min-p have no effect with --temperature 0 (greedy)\n");

  if (Status st = engine_flags.finish(); !st.ok()) return fail(st.to_string());
  if (load_format.empty()) load_format = model::is_preset(model) ? "dummy" : "auto";
  auto fmt = model::parse_load_format(load_format);
  if (!fmt.ok()) return fail(fmt.status().to_string());

  int longest = 0;
  for (const auto& s : shapes) longest = std::max(longest, s.input_len + s.output_len);
  ec.model_dir = model;
  ec.load_format = *fmt;
  ec.dummy_seed = static_cast<uint64_t>(seed);
  if (!quantization.empty()) {
    if (*fmt != model::LoadFormat::kDummy) return fail("--quantization needs --load-format dummy");
    auto q = model::parse_dummy_quantization(quantization);
    if (!q.ok()) return fail(q.status().to_string());
    ec.dummy_quantization = *q;
  }
  if (ec.max_model_len == 0) ec.max_model_len = longest;  // 0: the longest input + output benchmarked
  ec.max_waiting = 1 << 20;
  ec.show_progress = progress;
  if (latency) sc.max_num_seqs = std::max(sc.max_num_seqs, 1);
  if (!latency && ec.backend == engine::BackendKind::kCuda) {
    if (auto dev = engine::cuda_device_summary(0); dev.ok()) {
      const engine::BatchLimits limits = engine::offline_batch_limits(dev->name, dev->total_memory);
      if (!flags.was_set("--max-num-seqs")) sc.max_num_seqs = limits.max_num_seqs;
      if (!flags.was_set("--max-num-batched-tokens"))
        sc.max_num_batched_tokens = limits.max_num_batched_tokens;
    }
  }

  auto created = engine::Engine::create(ec);
  if (!created.ok()) return fail(created.status().to_string());
  engine::Engine& eng = **created;
  const model::ModelConfig& mc = eng.model().config();
  const engine::MemoryPlan& plan = eng.memory_plan();
  const std::string device = eng.backend().info().name;

  backend::DeviceCeilings ceil;
  bool have_ceilings = false;
  if (ceilings) {
    auto c = eng.backend().measure_ceilings();
    if (c.ok()) {
      ceil = *c;
      have_ceilings = true;
      std::printf("ceilings on %s: d2d copy %.0f GB/s, bf16 GEMM %.0f TFLOP/s\n", device.c_str(), ceil.copy_gbs,
                  ceil.bf16_gemm_tflops);
    } else {
      std::printf("ceilings: %s (MBU/MFU not reported)\n", c.status().message().c_str());
    }
  }

  // Bytes and flops of the model.
  const int64_t params = model::LlamaModel::parameter_count(mc);
  const int64_t embed_params = static_cast<int64_t>(mc.vocab_size) * mc.hidden_size;
  // Bytes per element of the dense tensors (the embedding table): the average over the weights
  // unless the linears are quantized (--quantization), where the activation dtype's.
  const double dtype_b = quantization.empty()
                             ? static_cast<double>(plan.weight_bytes) / static_cast<double>(params)
                             : static_cast<double>(dtype_bytes(eng.backend().info().activation_dtype, 1));
  const double step_weight_bytes = static_cast<double>(plan.weight_bytes) -
                                   (mc.tie_word_embeddings ? 0.0 : static_cast<double>(embed_params) * dtype_b);
  // K and V bytes per token over the layers at the cache's own element size (an FP8 cache: 1 byte), from the
  // memory plan where it has one.
  const double kv_bytes_per_token =
      plan.kv_bytes > 0 && plan.num_blocks > 0
          ? static_cast<double>(plan.kv_bytes) / plan.num_blocks / sc.block_size
          : 2.0 * mc.num_layers * mc.num_kv_heads * mc.head_dim * dtype_b;
  const double matmul_params = static_cast<double>(params - (mc.tie_word_embeddings ? 0 : embed_params));
  auto prefill_flops = [&](double tokens) {
    return 2.0 * matmul_params * tokens + 2.0 * mc.num_layers * mc.num_heads * mc.head_dim * tokens * tokens;
  };

  if (name.empty()) {
    name = std::filesystem::path(model).lexically_normal().filename().string();
    if (name.empty()) name = "model";
    name += "_" + engine_flags.backend + (latency ? "_latency" : "_throughput");
    if (!quantization.empty()) name += "_" + quantization;
    if (sampled) name += "_sampled";
  }
  json out;
  out["name"] = name;
  out["model"] = model;
  out["model_config"] = mc.to_string();
  out["load_format"] = load_format;
  if (!quantization.empty()) out["quantization"] = quantization;
  out["device"] = device;
  out["parameters"] = params;
  {
    const std::time_t now = std::time(nullptr);
    char buf[32];
    std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    out["date"] = buf;
  }
  out["engine_config"] = eng.config().to_string();
  out["memory_plan"] = {{"total_gib", static_cast<double>(plan.total_bytes) / (1 << 30)},
                        {"weights_gib", static_cast<double>(plan.weight_bytes) / (1 << 30)},
                        {"other_gib", static_cast<double>(plan.other_bytes) / (1 << 30)},
                        {"graph_reserve_gib", static_cast<double>(plan.graph_reserve_bytes) / (1 << 30)},
                        {"kv_gib", static_cast<double>(plan.kv_bytes) / (1 << 30)},
                        {"kv_blocks", plan.num_blocks - 1},
                        {"kv_tokens", plan.kv_tokens},
                        {"swap_gib", static_cast<double>(plan.swap_bytes) / (1 << 30)},
                        {"swap_blocks", plan.num_swap_blocks}};
  if (have_ceilings) out["ceilings"] = {{"copy_gbs", ceil.copy_gbs}, {"bf16_gemm_tflops", ceil.bf16_gemm_tflops}};
  out["sampling"] = {{"greedy", !sampled},
                     {"temperature", short_float(sampling.temperature)},
                     {"top_p", short_float(sampling.top_p)},
                     {"top_k", sampling.top_k},
                     {"min_p", short_float(sampling.min_p)},
                     {"seed", seed},
                     {"request_seeds", sampled ? "splitmix64 of (batch seed, request index)" : "none (greedy)"},
                     {"device_sampling", ec.device_sampling}};
  if (sampled)
    std::printf("sampling: temperature %g, top-p %g, top-k %d, min-p %g; per-request seeds from --seed %lld (%s)\n",
                static_cast<double>(sampling.temperature), static_cast<double>(sampling.top_p), sampling.top_k,
                static_cast<double>(sampling.min_p), static_cast<long long>(seed),
                ec.device_sampling ? "on the device where the backend can" : "on the host");
  out["results"] = json::array();

  // Warm-up: cuBLASLt algorithm choices and first-touch costs stay out of the measured runs.
  {
    const int warm = latency ? 1 : std::min(sc.max_num_seqs, 32);
    RunResult w = run_batch(eng, {std::min(shapes[0].input_len, 64), 4}, warm, static_cast<uint64_t>(seed) + 99,
                            sampling, false, "warm-up");
    if (w.errors > 0) return fail("warm-up failed: " + w.first_error);
  }

  if (!latency)
    std::printf("\n%-10s %8s %12s %12s %9s %10s %9s\n", "shape", "requests", "output tok/s", "total tok/s", "req/s",
              "ms/step", "eff. BW %");
  for (const Shape2& shape : shapes) {
    json row = {{"input_len", shape.input_len}, {"output_len", shape.output_len}};
    const double mean_ctx = shape.input_len + shape.output_len / 2.0;
    if (latency) {
      RunResult all;
      all.output_digest = kFnvOffset;
      for (int i = 0; i < num_iters; ++i) {
        RunResult one = run_batch(eng, shape, 1, static_cast<uint64_t>(seed) + static_cast<uint64_t>(i), sampling, false,
                                  "latency");
        if (one.errors > 0) return fail("request failed: " + one.first_error);
        all.output_tokens += one.output_tokens;
        all.output_digest = fnv1a(all.output_digest, one.output_digest);
        all.ttft_s.insert(all.ttft_s.end(), one.ttft_s.begin(), one.ttft_s.end());
        all.itl_s.insert(all.itl_s.end(), one.itl_s.begin(), one.itl_s.end());
        all.elapsed_s += one.elapsed_s;
      }
      const double ttft50 = percentile(all.ttft_s, 50), ttft99 = percentile(all.ttft_s, 99);
      const double itl50 = percentile(all.itl_s, 50), itl99 = percentile(all.itl_s, 99);
      row["mode"] = "latency";
      row["iterations"] = num_iters;
      row["output_tokens"] = all.output_tokens;
      row["output_digest"] = hex64(all.output_digest);
      row["ttft_ms"] = {{"p50", ttft50 * 1e3}, {"p99", ttft99 * 1e3}};
      row["itl_ms"] = {{"p50", itl50 * 1e3}, {"p99", itl99 * 1e3}};
      row["decode_tok_s"] = itl50 > 0 ? 1.0 / itl50 : 0.0;
      std::printf("latency %d/%d (batch 1, %d requests): TTFT p50 %.2f ms p99 %.2f ms; ITL p50 %.3f ms p99 %.3f ms "
                  "(%.1f tok/s)\n",
                  shape.input_len, shape.output_len, num_iters, ttft50 * 1e3, ttft99 * 1e3, itl50 * 1e3, itl99 * 1e3,
                  itl50 > 0 ? 1.0 / itl50 : 0.0);
      if (have_ceilings && itl50 > 0 && ttft50 > 0) {
        const double bytes = step_weight_bytes + kv_bytes_per_token * mean_ctx;
        const double mbu = bytes / itl50 / (ceil.copy_gbs * 1e9);
        // W8A8 prefill GEMMs run on the FP8 / INT8 tensor cores, whose dense peak is twice bf16's.
        const bool w8a8 = quantization == "fp8" || quantization == "w8a8-int8";
        const double peak = (w8a8 ? 2 : 1) * ceil.bf16_gemm_tflops;
        const double mfu = prefill_flops(shape.input_len) / ttft50 / (peak * 1e12);
        row["decode_bytes_per_step"] = bytes;
        row["decode_mbu"] = mbu;
        row["decode_roofline_ms"] = bytes / (ceil.copy_gbs * 1e9) * 1e3;
        row["prefill_mfu"] = mfu;
        std::printf("  decode: %.2f GB per step / ITL p50 = %.0f GB/s = %.1f%% MBU (roofline %.3f ms/token; target "
                    ">= 85%%)\n",
                    bytes / 1e9, bytes / itl50 / 1e9, 100 * mbu, bytes / (ceil.copy_gbs * 1e9) * 1e3);
        std::printf("  prefill: %.2f TFLOP / TTFT p50 = %.1f TFLOP/s = %.1f%% MFU (peak %.0f TFLOP/s%s)\n",
                    prefill_flops(shape.input_len) / 1e12, prefill_flops(shape.input_len) / ttft50 / 1e12, 100 * mfu, peak,
                    w8a8 ? ": 2x the measured bf16 GEMM, the FP8 / INT8 dense rate" : "");
      }
    } else {
      int n = num_prompts;
      if (n == 0)
        n = static_cast<int>(std::clamp<int64_t>(2 * plan.kv_tokens / (shape.input_len + shape.output_len), 1, 1000));
      const std::string tag = "bench " + std::to_string(shape.input_len) + "/" + std::to_string(shape.output_len);
      RunResult r = run_batch(eng, shape, n, static_cast<uint64_t>(seed), sampling, progress, tag);
      if (r.errors > 0) return fail(std::to_string(r.errors) + " requests failed, first: " + r.first_error);
      const double out_tps = static_cast<double>(r.output_tokens) / r.elapsed_s;
      const double total_tps = static_cast<double>(r.output_tokens + r.prompt_tokens) / r.elapsed_s;
      row["mode"] = "throughput";
      row["num_prompts"] = n;
      row["elapsed_s"] = r.elapsed_s;
      row["steps"] = r.steps;
      row["output_tokens"] = r.output_tokens;
      row["output_digest"] = hex64(r.output_digest);
      row["output_tok_s"] = out_tps;
      row["total_tok_s"] = total_tps;
      row["requests_s"] = n / r.elapsed_s;
      row["ttft_ms"] = {{"p50", percentile(r.ttft_s, 50) * 1e3}, {"p99", percentile(r.ttft_s, 99) * 1e3}};
      row["itl_ms"] = {{"p50", percentile(r.itl_s, 50) * 1e3}, {"p99", percentile(r.itl_s, 99) * 1e3}};
      row["step_breakdown"] = step_breakdown(r.before, r.after);
      double eff_bw = 0;
      if (have_ceilings && r.steps > 0) {
        // KV read by decode steps: each output token after the first attends to its whole context.
        const double kv_reads = static_cast<double>(n) * kv_bytes_per_token *
                                (static_cast<double>(shape.input_len) * shape.output_len +
                                 0.5 * static_cast<double>(shape.output_len) * shape.output_len);
        eff_bw = (static_cast<double>(r.steps) * step_weight_bytes + kv_reads) / r.elapsed_s / (ceil.copy_gbs * 1e9);
        const double mfu = (prefill_flops(shape.input_len) * n + 2.0 * matmul_params * static_cast<double>(r.output_tokens)) /
                           r.elapsed_s / (ceil.bf16_gemm_tflops * 1e12);
        row["effective_bandwidth_fraction"] = eff_bw;
        row["mfu"] = mfu;
      }
      std::printf("%4d/%-5d %8d %12.0f %12.0f %9.2f %10.2f %9.1f\n", shape.input_len, shape.output_len, n, out_tps,
                  total_tps, n / r.elapsed_s, r.steps > 0 ? r.elapsed_s / static_cast<double>(r.steps) * 1e3 : 0.0,
                  100 * eff_bw);
      print_step_breakdown(row["step_breakdown"]);
      std::printf("  outputs: %lld tokens, digest %s\n", static_cast<long long>(r.output_tokens),
                  hex64(r.output_digest).c_str());
    }
    out["results"].push_back(row);
  }

  std::error_code err;
  std::filesystem::create_directories(output_dir, err);
  const std::string path = (std::filesystem::path(output_dir) / (name + ".json")).string();
  std::ofstream f(path);
  if (!f) return fail("cannot write " + path);
  f << out.dump(2) << "\n";
  std::printf("wrote %s\n", path.c_str());
  return 0;
}

const CommandRegistration kRegistration{"bench", "offline throughput / latency benchmark (MBU, MFU vs measured ceilings)",
                                        &run_bench};

}  // namespace
}  // namespace xinfer::cli
