// `xinfer generate`: loads a model on the CPU backend and streams a completion of one prompt to stdout.
// A single-sequence loop (prefill, then one token per step) over the same ModelRunner and Sampler the
// serving engine uses; timing figures go to stderr.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "xinfer/cli/command.h"
#include "xinfer/cli/flags.h"
#include "xinfer/core/logging.h"
#include "xinfer/engine/backend_factory.h"
#include "xinfer/engine/model_runner.h"
#include "xinfer/engine/sampler.h"
#include "xinfer/engine/tensor_parallel.h"
#include "xinfer/model/gguf_tokenizer.h"
#include "xinfer/model/llama.h"
#include "xinfer/tokenizer/tokenizer.h"

namespace xinfer::cli {
namespace {

using Clock = std::chrono::steady_clock;

Result<std::vector<int32_t>> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t used = 0;
      long v = std::stol(item, &used);
      if (used != item.size() || v < 0 || v > INT32_MAX) throw std::invalid_argument(item);
      ids.push_back(static_cast<int32_t>(v));
    } catch (const std::exception&) {
      return invalid_argument("--prompt-ids: '" + item + "' is not a token id");
    }
  }
  return ids;
}

int run_generate(int argc, char** argv) {
  std::string model_dir, prompt, prompt_ids;
  int max_tokens = 128, threads = 0, block_size = 16, prefill_chunk = 512;
  bool ignore_eos = false, print_ids = false, add_bos = true;
  engine::SamplingParams sp;
  sp.temperature = 0.0f;
  std::optional<int64_t> seed;
  FlagSet flags("xinfer generate",
                "Generate a completion of one prompt on the CPU and stream it to stdout.\n"
                "Example: xinfer generate --model DIR --prompt \"Once upon a time\" --max-tokens 64");
  flags.add("--model", &model_dir, "Hugging Face model directory (config.json, *.safetensors, tokenizer.json; quantized checkpoints too) or a .gguf file");
  flags.add("--prompt", &prompt, "prompt text (tokenized with the model's tokenizer.json)");
  flags.add("--prompt-ids", &prompt_ids, "prompt as comma-separated token ids instead of text");
  flags.add("--add-bos", &add_bos, "let the tokenizer add its special tokens (BOS) to --prompt");
  flags.add("--max-tokens", &max_tokens, "tokens to generate");
  flags.add("--temperature", &sp.temperature, "sampling temperature; 0 = greedy");
  flags.add("--top-k", &sp.top_k, "keep the k most likely tokens; 0 = off");
  flags.add("--top-p", &sp.top_p, "nucleus sampling: smallest set with this probability mass");
  flags.add("--min-p", &sp.min_p, "drop tokens below min_p * max probability");
  flags.add("--repetition-penalty", &sp.repetition_penalty, "penalty on prompt and output tokens (1 = off)");
  flags.add("--presence-penalty", &sp.presence_penalty, "subtracted once from logits of tokens already output");
  flags.add("--frequency-penalty", &sp.frequency_penalty, "subtracted per occurrence in the output");
  flags.add("--seed", &seed, "random seed for reproducible sampling");
  flags.add("--ignore-eos", &ignore_eos, "keep generating past the end-of-sequence token");
  flags.add("--print-ids", &print_ids, "print generated token ids (one line, space separated) instead of text");
  flags.add("--threads", &threads, "CPU threads; 0 = all cores");
  int tensor_parallel_size = 1;
  flags.add("--tensor-parallel-size", &tensor_parallel_size,
            "split the model over this many CPU ranks (threads sharing --threads); must divide the attention "
            "heads and the FFN width");
  flags.add("--block-size", &block_size, "KV-cache block size in tokens");
  flags.add("--prefill-chunk", &prefill_chunk, "most prompt tokens per forward step");
  if (int rc = flags.parse_or_exit_code(argc, argv); rc >= 0) return rc;

  auto fail = [](const Status& s) {
    std::fprintf(stderr, "xinfer generate: %s\n", s.to_string().c_str());
    return 1;
  };
  if (model_dir.empty()) return fail(invalid_argument("--model is required"));
  if (!prompt.empty() && !prompt_ids.empty())
    return fail(invalid_argument("give either --prompt or --prompt-ids, not both"));
  if (max_tokens < 0 || block_size <= 0 || prefill_chunk <= 0)
    return fail(invalid_argument("--max-tokens, --block-size and --prefill-chunk must be positive"));
  sp.seed = seed;
  sp.ignore_eos = ignore_eos;

  if (tensor_parallel_size < 1) return fail(invalid_argument("--tensor-parallel-size must be >= 1"));
  // Tensor parallelism: the ranks share the threads.
  const int total_threads = threads > 0 ? threads : static_cast<int>(std::thread::hardware_concurrency());
  const int rank_threads = tensor_parallel_size > 1 ? std::max(1, total_threads / tensor_parallel_size) : threads;
  auto backend_or = engine::create_backend(engine::BackendKind::kCpu, rank_threads);
  if (!backend_or.ok()) return fail(backend_or.status());
  backend::Backend& backend = **backend_or;
  model::LoadOptions load_opts;
  load_opts.max_tokens = prefill_chunk;
  load_opts.max_logit_rows = 1;
  auto tp_model = engine::load_tensor_parallel(model_dir, backend, load_opts, tensor_parallel_size,
                                               engine::BackendKind::kCpu, [rank_threads](int) {
                                                 return engine::create_backend(engine::BackendKind::kCpu, rank_threads);
                                               });
  if (!tp_model.ok()) return fail(tp_model.status());
  std::unique_ptr<model::LlamaModel>* model = &tp_model->model;
  const model::ModelConfig& cfg = (*model)->config();
  XI_LOG(INFO) << "model: " << cfg.to_string();
  if (Status s = engine::validate(sp, cfg.vocab_size); !s.ok()) return fail(s);

  std::unique_ptr<tok::Tokenizer> tokenizer;
  std::vector<int32_t> ids;
  if (!prompt_ids.empty()) {
    auto r = parse_ids(prompt_ids);
    if (!r.ok()) return fail(r.status());
    ids = *r;
  }
  if (!print_ids || !prompt.empty()) {
    auto t = model::load_tokenizer(model_dir);
    if (!t.ok()) return fail(t.status());
    tokenizer = std::move(*t);
    if (!prompt.empty()) ids = tokenizer->encode(prompt, add_bos);
  }
  if (ids.empty()) {
    if (!cfg.bos_token_id) return fail(invalid_argument("empty prompt and the model has no BOS token"));
    ids.push_back(*cfg.bos_token_id);
  }
  for (int32_t id : ids)
    if (id < 0 || id >= cfg.vocab_size)
      return fail(invalid_argument("prompt token id " + std::to_string(id) + " outside the vocabulary"));
  const int total = static_cast<int>(ids.size()) + max_tokens;
  if (total > (*model)->max_model_len())
    return fail(out_of_range("prompt (" + std::to_string(ids.size()) + " tokens) + max_tokens (" +
                             std::to_string(max_tokens) + ") exceeds the context length " +
                             std::to_string((*model)->max_model_len())));

  backend::KvCacheSpec spec{cfg.num_layers, (total + block_size - 1) / block_size + 1, block_size,
                            (*model)->shard().num_kv_heads, cfg.head_dim, DType::kF32};
  engine::ModelRunner runner(**model, backend, spec);
  tp_model->attach(runner, spec);
  std::vector<int32_t> block_table;
  for (int b = 1; b < spec.num_blocks; ++b) block_table.push_back(b);  // block 0 is the null block

  engine::Sampler sampler(cfg.vocab_size, nullptr, cfg.eos_token_ids);  // one row: no pool needed
  engine::SequenceRng rng = engine::SequenceRng::for_request(sp);
  std::optional<tok::StreamingDetokenizer> detok;
  if (tokenizer && !print_ids) detok.emplace(*tokenizer, true, ids);

  std::vector<int32_t> output;
  const auto t0 = Clock::now();
  std::vector<float> logits;
  for (size_t pos = 0; pos < ids.size(); pos += static_cast<size_t>(prefill_chunk)) {  // chunked prefill
    const size_t n = std::min(ids.size() - pos, static_cast<size_t>(prefill_chunk));
    engine::SequenceChunk chunk{std::span(ids).subspan(pos, n), static_cast<int32_t>(pos), block_table,
                                pos + n == ids.size()};
    logits = runner.run(std::span(&chunk, 1));
  }
  const auto t1 = Clock::now();
  std::string ids_line;
  for (int step = 0; step < max_tokens; ++step) {
    engine::SampleInput in{logits.data(), &sp, &rng, ids, output};
    const int32_t token = sampler.sample(std::span(&in, 1))[0].token;
    output.push_back(token);
    if (print_ids) {
      if (!ids_line.empty()) ids_line += ' ';
      ids_line += std::to_string(token);
    } else if (detok) {
      std::string piece = detok->push(token);
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    }
    if (engine::is_stop_token(sp, token, cfg.eos_token_ids) || step + 1 == max_tokens) break;
    const int32_t pos = static_cast<int32_t>(ids.size() + output.size()) - 1;
    engine::SequenceChunk chunk{std::span(&output.back(), 1), pos, block_table, true};
    logits = runner.run(std::span(&chunk, 1));
  }
  const auto t2 = Clock::now();
  if (print_ids) std::printf("%s\n", ids_line.c_str());
  else if (detok) std::fputs(detok->flush().c_str(), stdout);
  std::printf("\n");
  const double prefill_s = std::chrono::duration<double>(t1 - t0).count();
  const double decode_s = std::chrono::duration<double>(t2 - t1).count();
  XI_LOG(INFO) << "prompt " << ids.size() << " tokens in " << prefill_s * 1e3 << " ms ("
               << static_cast<double>(ids.size()) / prefill_s << " tok/s); generated " << output.size()
               << " tokens in " << decode_s * 1e3 << " ms ("
               << (output.size() > 1 ? static_cast<double>(output.size() - 1) / decode_s : 0.0) << " tok/s)";
  return 0;
}

const CommandRegistration kRegistration{"generate", "generate text from a prompt on the CPU", &run_generate};

}  // namespace
}  // namespace xinfer::cli
