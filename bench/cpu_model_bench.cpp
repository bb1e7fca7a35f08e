// CPU model benchmark: prefill and batch-1 decode tokens/s of a model directory on the CPU backend,
// against the roofline of this machine.
//   decode floor  = weight bytes (f32 on CPU) / measured read bandwidth   (every weight read per token)
//   prefill floor = 2 * params * tokens / measured sgemm FLOP/s          (attention FLOPs excluded)
// Usage: cpu_model_bench --model DIR [--prompt-len 128] [--decode-tokens 64] [--threads 0]
#include <chrono>
#include <cstdio>
#include <numeric>
#include <random>

#include "roofline.h"
#include "xinfer/backend/cpu/cpu_backend.h"
#include "xinfer/cli/flags.h"
#include "xinfer/engine/model_runner.h"
#include "xinfer/model/llama.h"

using namespace xinfer;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  std::string model_dir;
  int prompt_len = 128, decode_tokens = 64, threads = 0, reps = 3;
  cli::FlagSet flags("cpu_model_bench", "Prefill and decode speed of a model on the CPU backend vs the roofline.");
  flags.add("--model", &model_dir, "Hugging Face model directory");
  flags.add("--prompt-len", &prompt_len, "prompt tokens for the prefill measurement");
  flags.add("--decode-tokens", &decode_tokens, "decode steps to time (batch 1)");
  flags.add("--threads", &threads, "CPU threads; 0 = all");
  flags.add("--reps", &reps, "repetitions; the best is reported");
  if (int rc = flags.parse_or_exit_code(argc, argv); rc >= 0) return rc;

  const bench::HostCeilings ceil = bench::measure_host_ceilings(threads);
  cpu::CpuBackend backend(cpu::CpuBackendOptions{threads});
  model::LoadOptions opts;
  opts.max_tokens = prompt_len;
  opts.max_logit_rows = 1;
  opts.max_model_len = prompt_len + decode_tokens + 1;
  auto model = model::LlamaModel::load(model_dir, backend, opts);
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", model.status().to_string().c_str());
    return 1;
  }
  const auto& cfg = (*model)->config();
  const double weight_bytes = static_cast<double>((*model)->weight_bytes());
  const double params = weight_bytes / 4.0;
  const int block = 16;
  backend::KvCacheSpec spec{cfg.num_layers, (prompt_len + decode_tokens) / block + 2, block, cfg.num_kv_heads,
                            cfg.head_dim, DType::kF32};
  engine::ModelRunner runner(**model, backend, spec);
  std::vector<int32_t> table(static_cast<size_t>(spec.num_blocks - 1));
  std::iota(table.begin(), table.end(), 1);
  std::mt19937 rng(0);
  std::vector<int32_t> prompt(static_cast<size_t>(prompt_len));
  for (auto& t : prompt) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(cfg.vocab_size));

  double best_prefill = 1e30, best_decode = 1e30;
  for (int r = 0; r < reps; ++r) {
    engine::SequenceChunk pre{prompt, 0, table, true};
    auto t0 = Clock::now();
    runner.run(std::span(&pre, 1));
    auto t1 = Clock::now();
    int32_t tok = prompt.back();
    for (int i = 0; i < decode_tokens; ++i) {
      engine::SequenceChunk d{std::span(&tok, 1), prompt_len + i, table, true};
      runner.run(std::span(&d, 1));
    }
    auto t2 = Clock::now();
    best_prefill = std::min(best_prefill, std::chrono::duration<double>(t1 - t0).count());
    best_decode = std::min(best_decode, std::chrono::duration<double>(t2 - t1).count() / decode_tokens);
  }
  const double decode_floor = weight_bytes / ceil.read_bandwidth_bytes_per_s;
  const double prefill_floor = 2.0 * params * prompt_len / ceil.sgemm_flops_per_s;
  std::printf("model %s: %.1fM params (%.1f MB f32), %d threads\n", model_dir.c_str(), params / 1e6,
              weight_bytes / 1e6, backend.pool().size());
  std::printf("ceilings: read bandwidth %.1f GB/s, copy bandwidth %.1f GB/s, sgemm %.1f GFLOP/s\n",
              ceil.read_bandwidth_bytes_per_s / 1e9, ceil.bandwidth_bytes_per_s / 1e9, ceil.sgemm_flops_per_s / 1e9);
  std::printf("prefill %d tokens: %.2f ms = %.0f tok/s; roofline %.2f ms (%.0f tok/s); ratio %.2f\n", prompt_len,
              best_prefill * 1e3, prompt_len / best_prefill, prefill_floor * 1e3, prompt_len / prefill_floor,
              prefill_floor / best_prefill);
  std::printf("decode batch 1: %.3f ms/token = %.0f tok/s; roofline %.3f ms (%.0f tok/s); ratio %.2f\n",
              best_decode * 1e3, 1.0 / best_decode, decode_floor * 1e3, 1.0 / decode_floor, decode_floor / best_decode);
  return 0;
}
