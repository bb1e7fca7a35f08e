// `xinfer eval ppl`: perplexity of a model on a text file, tokens scored once with sliding windows as
// transformers' perplexity guide does (engine/perplexity.h has the exact rule), and with --reference the
// mean KL divergence KL(p_ref || p) and top-1 agreement of the model against a second model with the same
// tokenizer, on the same positions.
//
//   xinfer eval ppl --model DIR --text wiki.test.raw --ctx 1024 --stride 512 [--reference DIR2] [--json]
//
// The text is tokenized once with the model's tokenizer (tokenizer.json, or a GGUF file's metadata), as
// `tokenizers`' encode(text) does: its post-processor's special tokens (a Llama BOS) are added unless
// --no-add-special-tokens. Windows run one at a time from an empty KV cache in prefill chunks that ask for
// the logits of every scored row. stdout: a human summary, or one JSON object with --json; progress and
// logs on stderr.
//
// `xinfer eval loglik`: lm-evaluation-harness's loglikelihood requests, (context, continuation) pairs from a
// JSONL file, each scored in one window from an empty KV cache: the sum over continuation tokens of
// log p(token | everything before it), and is_greedy (every continuation token is the argmax there). One
// JSON line per request on stdout, with the token ids used and the per-token log-probabilities.
//
//   xinfer eval loglik --model DIR --requests pairs.jsonl
//
// Both take --tensor-parallel-size N (CPU: N threads sharing --threads; CUDA: GPUs 0..N-1): each model (and the
// --reference) is split over N ranks (engine::load_tensor_parallel); the other ranks run every window chunk.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "xinfer/cli/command.h"
#include "xinfer/cli/flags.h"
#include "xinfer/core/logging.h"
#include "xinfer/engine/backend_factory.h"
#include "xinfer/engine/engine.h"
#include "xinfer/engine/perplexity.h"
#include "xinfer/engine/tensor_parallel.h"
#include "xinfer/model/gguf_tokenizer.h"
#include "xinfer/model/llama.h"
#include "xinfer/model/model_config.h"
#include "xinfer/tokenizer/tokenizer.h"

namespace xinfer::cli {
namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

Result<std::string> read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot open --text " + path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return data_loss("error reading --text " + path);
  if (text.empty()) return invalid_argument("--text " + path + " is empty");
  return text;
}

// OK when both tokenizers have the same vocabulary (every id the same token) and give the same ids for
// the text; INVALID_ARGUMENT naming the first difference otherwise.
Status check_same_tokenizer(const tok::Tokenizer& a, const tok::Tokenizer& b,
                            const std::vector<int32_t>& ids_a, const std::vector<int32_t>& ids_b) {
  const std::string what = "--reference must use the same tokenizer as --model: ";
  if (a.vocab_size() != b.vocab_size())
    return invalid_argument(what + "vocabulary sizes differ (" + std::to_string(a.vocab_size()) + " vs " +
                            std::to_string(b.vocab_size()) + ")");
  for (int32_t id = 0; id < a.vocab_size(); ++id)
    if (a.id_to_token(id) != b.id_to_token(id))
      return invalid_argument(what + "token " + std::to_string(id) + " is '" + a.id_to_token(id) + "' vs '" +
                              b.id_to_token(id) + "'");
  if (ids_a != ids_b) return invalid_argument(what + "they tokenize the text differently");
  return Status();
}

struct LoadedModel {
  engine::TensorParallelModel tp;  // the model (rank 0) and, for tp > 1, its other ranks
  std::unique_ptr<engine::WindowLogits> windows;
};

// Checks every size of `tp_size` ranks for the models at `paths` (and, on CUDA, the GPU count) before any
// backend or weight.
Status validate_tp(const std::vector<model::ModelConfig>& configs, int tp_size, engine::BackendKind kind) {
  if (tp_size < 1) return invalid_argument("--tensor-parallel-size must be >= 1");
  for (const model::ModelConfig& c : configs) XI_RETURN_IF_ERROR(engine::validate_tensor_parallel(c, tp_size, kind));
  return Status();
}

// `path` on `backend` as rank 0 of tp_size ranks (the others: backends of `kind` with `rank_threads` threads,
// device r), prepared as the Engine does, with windows of ctx tokens in chunks of `chunk`.
Result<LoadedModel> load_windows(const std::string& path, const model::ModelConfig& mc, backend::Backend& backend,
                                 engine::BackendKind kind, int tp_size, int rank_threads, int ctx, int chunk,
                                 int block_size, bool progress, const engine::KvCacheSettings* kv = nullptr) {
  model::LoadOptions opts;
  opts.max_tokens = chunk;
  opts.max_logit_rows = chunk;  // every row of a chunk may be scored
  opts.max_model_len = ctx;
  opts.show_progress = progress;
  auto prepare = [=](backend::Backend& b, int rank) -> Status {
    XI_ASSIGN_OR_RETURN(const model::ModelShard shard, model::ModelShard::make(mc, tp_size, rank));
    engine::prepare_backend_for_model(b, mc, shard, chunk, chunk, 1, ctx, progress && rank == 0);
    return Status();
  };
  XI_RETURN_IF_ERROR(prepare(backend, 0));
  LoadedModel lm;
  XI_ASSIGN_OR_RETURN(lm.tp, engine::load_tensor_parallel(
                                 path, backend, opts, tp_size, kind,
                                 [=](int rank) -> Result<std::unique_ptr<backend::Backend>> {
                                   XI_ASSIGN_OR_RETURN(std::unique_ptr<backend::Backend> b,
                                                       engine::create_backend(kind, rank_threads, rank));
                                   XI_RETURN_IF_ERROR(prepare(*b, rank));
                                   return b;
                                 }));
  lm.windows =
      std::make_unique<engine::WindowLogits>(*lm.tp.model, backend, ctx, chunk, block_size, lm.tp.group.get(), kv);
  if (lm.tp.group) lm.tp.group->allocate_kv(lm.windows->kv_spec());
  return lm;
}

int run_ppl(int argc, char** argv) {
  std::string model_path, text_path, reference_path, backend_name = "cpu";
  int ctx = 1024, prefill_chunk = 512, block_size = 16, threads = 0, scoring_threads = -1, tensor_parallel_size = 1;
  int64_t max_tokens = 0;
  std::optional<int64_t> stride_flag;  // unset: ctx
  bool as_json = false, progress = true, add_special = true;
  std::string kv_cache_dtype = "auto", kv_cache_rotation = "auto";
  float kv_cache_scale = 0.0f;
  FlagSet flags(
      "xinfer eval ppl",
      "Perplexity of a model on a text: windows of --ctx tokens advancing by --stride, each run from an\n"
      "empty cache; in each window only tokens no earlier window scored are scored (the others are\n"
      "context), as transformers' perplexity guide does. Token 0 is never scored; with stride == ctx\n"
      "neither is each window's first token. The text is tokenized as the model's tokenizer does by\n"
      "default: its post-processor's special tokens are added, so a BOS is prepended for tokenizers\n"
      "that add one (Llama 2/3, the bundled model), none for those that do not (Qwen2, SmolLM2).\n"
      "--reference M2: also the mean KL(p_M2 || p_M) and top-1 agreement over the scored positions\n"
      "(same tokenizer required).\n"
      "Example: xinfer eval ppl --model DIR --text wiki.test.raw --ctx 1024 --stride 512 --json");
  flags.add("--model", &model_path,
            "Hugging Face model directory (config.json, *.safetensors, tokenizer) or .gguf");
  flags.add("--text", &text_path, "text file to score (UTF-8)");
  flags.add("--ctx", &ctx, "window length in tokens; when not given, capped at the model's limit");
  flags.add("--stride", &stride_flag,
            "tokens each window advances, 1..ctx; unset: ctx (non-overlapping windows)");
  flags.add("--reference", &reference_path,
            "second model (same tokenizer): KL divergence and top-1 agreement");
  flags.add("--max-tokens", &max_tokens, "score only the text's first N tokens; 0 = all");
  flags.add(
      "--add-special-tokens", &add_special,
      "add the tokenizer's special tokens (BOS) as its post-processor says; --no-add-special-tokens: none");
  flags.add("--backend", &backend_name, "cpu or cuda");
  flags.add("--json", &as_json, "print one JSON object on stdout instead of the summary");
  flags.add("--prefill-chunk", &prefill_chunk, "most tokens per forward step (a window runs in such chunks)");
  flags.add("--block-size", &block_size, "KV-cache block size in tokens");
  flags.add("--kv-cache-dtype", &kv_cache_dtype,
            "--model's KV cache: auto (the activation dtype) or fp8 (e4m3; --reference keeps auto), as serve");
  flags.add("--kv-cache-scale", &kv_cache_scale,
            "fp8 KV cache scale of K and V (0 = the checkpoint's k_scale / v_scale, else 1.0), as serve");
  flags.add("--kv-cache-rotation", &kv_cache_rotation,
            "fp8 KV cache: keys stored Hadamard-rotated (auto: where head_dim allows it; hadamard; none), as serve");
  flags.add("--threads", &threads, "CPU backend threads, and the threads scoring the logits; 0 = all cores");
  flags.add("--scoring-threads", &scoring_threads,
            "threads scoring the logits (log-softmax, KL, top-1) if not --threads; the figures do not depend on it");
  flags.add("--tensor-parallel-size", &tensor_parallel_size,
            "split each model over this many ranks (cpu: threads sharing --threads; cuda: GPUs 0..N-1); must "
            "divide the attention heads and the FFN width");
  flags.add("--progress", &progress, "progress bars while loading and scoring (stderr)");
  if (int rc = flags.parse_or_exit_code(argc, argv); rc >= 0) return rc;
  auto fail = [](const Status& s) {
    std::fprintf(stderr, "xinfer eval ppl: %s\n", s.to_string().c_str());
    return 1;
  };

  if (model_path.empty()) return fail(invalid_argument("--model is required"));
  if (text_path.empty()) return fail(invalid_argument("--text is required"));
  if (max_tokens < 0) return fail(invalid_argument("--max-tokens must be >= 0"));
  if (prefill_chunk <= 0 || block_size <= 0)
    return fail(invalid_argument("--prefill-chunk and --block-size must be positive"));
  auto text = read_text(text_path);
  if (!text.ok()) return fail(text.status());

  // Configs first: the context limit decides --ctx before any weight is read.
  std::vector<std::string> paths{model_path};
  if (!reference_path.empty()) paths.push_back(reference_path);
  std::vector<model::ModelConfig> configs;
  for (const std::string& p : paths) {
    auto c = model::load_model_config(p);
    if (!c.ok()) return fail(c.status());
    configs.push_back(std::move(*c));
  }
  int limit = configs[0].context_limit();
  std::string limit_reason = configs[0].context_limit_reason();
  if (configs.size() > 1) {
    if (configs[1].vocab_size != configs[0].vocab_size)
      return fail(invalid_argument(
          "--reference must use the same tokenizer as --model: their vocab sizes differ (" +
          std::to_string(configs[0].vocab_size) + " vs " + std::to_string(configs[1].vocab_size) + ")"));
    if (configs[1].context_limit() < limit) {
      limit = configs[1].context_limit();
      limit_reason = "--reference: " + configs[1].context_limit_reason();
    }
  }
  if (!flags.was_set("--ctx")) ctx = std::min(ctx, limit);
  if (ctx > limit)
    return fail(out_of_range("--ctx " + std::to_string(ctx) + " exceeds the context limit " +
                             std::to_string(limit) + " (" + limit_reason + ")"));
  if (ctx < 2) return fail(invalid_argument("--ctx must be at least 2, got " + std::to_string(ctx)));
  const int64_t stride64 = stride_flag.value_or(ctx);
  if (stride64 <= 0 || stride64 > ctx)
    return fail(invalid_argument("--stride must be in [1, ctx = " + std::to_string(ctx) + "], got " +
                                 std::to_string(stride64)));
  const int stride = static_cast<int>(stride64);

  // Tokens, and the tokenizer check against the reference's.
  std::vector<std::unique_ptr<tok::Tokenizer>> tokenizers;
  std::vector<std::vector<int32_t>> ids;
  for (const std::string& p : paths) {
    auto t = model::load_tokenizer(p);
    if (!t.ok()) return fail(t.status());
    ids.push_back((*t)->encode(*text, add_special));
    tokenizers.push_back(std::move(*t));
  }
  if (tokenizers.size() > 1)
    if (Status s = check_same_tokenizer(*tokenizers[0], *tokenizers[1], ids[0], ids[1]); !s.ok())
      return fail(s);
  std::vector<int32_t>& tokens = ids[0];
  const int64_t text_tokens = static_cast<int64_t>(tokens.size());
  if (max_tokens > 0 && text_tokens > max_tokens) tokens.resize(static_cast<size_t>(max_tokens));
  for (int32_t id : tokens)
    if (id < 0 || id >= configs[0].vocab_size)
      return fail(invalid_argument("the tokenizer gave id " + std::to_string(id) +
                                   ", outside the model's vocab (" + std::to_string(configs[0].vocab_size) +
                                   ")"));
  const std::optional<int32_t> bos = tokenizers[0]->bos_id();
  const bool bos_prepended = add_special && bos && !tokens.empty() && tokens[0] == *bos;
  // Validates the windows before the weights load (text too short, ...).
  auto windows = engine::plan_score_windows(static_cast<int64_t>(tokens.size()), ctx, stride);
  if (!windows.ok()) return fail(windows.status());

  auto kind = engine::parse_backend_kind(backend_name);
  if (!kind.ok()) return fail(kind.status());
  if (Status s = validate_tp(configs, tensor_parallel_size, *kind); !s.ok()) return fail(s);
  const int rank_threads = engine::threads_per_rank(threads, tensor_parallel_size);
  auto backend_or = engine::create_backend(*kind, rank_threads);
  if (!backend_or.ok()) return fail(backend_or.status());
  backend::Backend& backend = **backend_or;
  auto kv_dtype = engine::parse_kv_cache_dtype(kv_cache_dtype);
  if (!kv_dtype.ok()) return fail(kv_dtype.status());
  auto kv_rotation = engine::parse_kv_cache_rotation(kv_cache_rotation);
  if (!kv_rotation.ok()) return fail(kv_rotation.status());
  auto kv = engine::resolve_kv_cache({*kv_dtype, kv_cache_scale, *kv_rotation}, model_path, configs[0], true, backend);
  if (!kv.ok()) return fail(kv.status());
  if (*kv_dtype != engine::KvCacheDtype::kAuto) XI_LOG(INFO) << "model: KV cache " << kv->to_string();

  const int chunk = std::min(prefill_chunk, ctx);
  const auto t_load = Clock::now();
  std::vector<LoadedModel> models;
  for (size_t i = 0; i < paths.size(); ++i) {
    auto lm = load_windows(paths[i], configs[i], backend, *kind, tensor_parallel_size, rank_threads, ctx, chunk,
                           block_size, progress, i == 0 ? &*kv : nullptr);
    if (!lm.ok()) return fail(lm.status());
    XI_LOG(INFO) << (i == 0 ? "model: " : "reference: ") << lm->tp.model->config().to_string() << " on "
                 << backend.info().name << (tensor_parallel_size > 1 ? ", tensor_parallel_size " +
                                                                          std::to_string(tensor_parallel_size)
                                                                    : std::string());
    models.push_back(std::move(*lm));
  }
  const double load_s = std::chrono::duration<double>(Clock::now() - t_load).count();

  const auto t_run = Clock::now();
  engine::PerplexityOptions popts;
  popts.ctx = ctx;
  popts.stride = stride;
  popts.show_progress = progress;
  popts.threads = scoring_threads >= 0 ? scoring_threads : threads;
  auto res = engine::evaluate_perplexity(
      *models[0].windows, models.size() > 1 ? models[1].windows.get() : nullptr, tokens, popts);
  if (!res.ok()) return fail(res.status());
  const double run_s = std::chrono::duration<double>(Clock::now() - t_run).count();
  std::optional<engine::PplIncrease> increase;  // over the reference, paired over windows
  if (res->has_reference) {
    auto inc = engine::paired_ppl_increase(res->window_mean_nll(), res->window_ref_mean_nll());
    if (!inc.ok()) return fail(inc.status());
    increase = std::move(*inc);
  }

  if (as_json) {
    json j = {{"model", model_path},
              {"text", text_path},
              {"backend", backend.info().name},
              {"tensor_parallel_size", tensor_parallel_size},
              {"ppl", res->ppl()},
              {"nll_sum", res->nll_sum},
              {"mean_nll", res->mean_nll()},
              {"tokens", static_cast<int64_t>(tokens.size())},
              {"text_tokens", text_tokens},
              {"tokens_scored", res->tokens_scored},
              {"windows", res->windows},
              {"ctx", ctx},
              {"stride", stride},
              {"add_special_tokens", add_special},
              {"bos_prepended", bos_prepended},
              {"load_seconds", load_s},
              {"seconds", run_s}};
    if (res->has_reference) {
      j["reference"] = reference_path;
      j["kl"] = res->mean_kl();
      j["top1"] = res->top1();
      j["reference_ppl"] = res->reference_ppl();
      j["ppl_increase_percent"] = 100.0 * (res->ppl() / res->reference_ppl() - 1.0);
      j["ppl_increase_se_percent"] = increase->se_percent;
      j["window_ref_mean_nll"] = res->window_ref_mean_nll();
    }
    j["window_mean_nll"] = res->window_mean_nll();
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("model %s on %s (%s)\n", model_path.c_str(), text_path.c_str(), backend.info().name.c_str());
    std::printf("tokens %lld of %lld (%s), ctx %d, stride %d: %lld windows, %lld tokens scored\n",
                static_cast<long long>(tokens.size()), static_cast<long long>(text_tokens),
                bos_prepended ? "BOS prepended" : "no BOS prepended", ctx, stride,
                static_cast<long long>(res->windows), static_cast<long long>(res->tokens_scored));
    std::printf("ppl %.6f  (mean nll %.6f nats, nll sum %.4f)\n", res->ppl(), res->mean_nll(), res->nll_sum);
    if (res->has_reference)
      std::printf("vs reference %s: mean KL(ref || model) %.6g nats, top-1 agreement %.4f%%, reference ppl %.6f\n",
                  reference_path.c_str(), res->mean_kl(), 100.0 * res->top1(), res->reference_ppl());
    if (res->has_reference)
      std::printf("ppl increase over the reference %+.3f%% (standard error %.3f%%, paired over %lld windows)\n",
                  100.0 * (res->ppl() / res->reference_ppl() - 1.0), increase->se_percent,
                  static_cast<long long>(res->windows));
    std::printf("%.2f s (%.1f scored tokens/s), load %.2f s\n", run_s,
                run_s > 0 ? static_cast<double>(res->tokens_scored) / run_s : 0.0, load_s);
  }
  return 0;
}

// One loglikelihood request: the token ids of its context and continuation.
struct LoglikRequest {
  std::vector<int32_t> context;
  std::vector<int32_t> continuation;
};

// lm-evaluation-harness's pair encoding: trailing whitespace of the context moves to the continuation; the
// continuation's ids are those of encode(context + continuation) past encode(context)'s length.
LoglikRequest encode_pair(const tok::Tokenizer& t, std::string context, std::string continuation, bool add_special) {
  size_t keep = context.size();
  while (keep > 0 && std::isspace(static_cast<unsigned char>(context[keep - 1]))) --keep;
  continuation = context.substr(keep) + continuation;
  context.resize(keep);
  const std::vector<int32_t> whole = t.encode(context + continuation, add_special);
  LoglikRequest r;
  r.context = t.encode(context, add_special);
  const size_t n = std::min(r.context.size(), whole.size());
  r.continuation.assign(whole.begin() + static_cast<ptrdiff_t>(n), whole.end());
  return r;
}

// Line `line_no` of --requests: {"context": str, "continuation": str} or {"context_ids": [...],
// "continuation_ids": [...]}.
Result<LoglikRequest> parse_loglik_line(const std::string& line, int64_t line_no, const tok::Tokenizer& t,
                                        bool add_special, int vocab_size) {
  const std::string where = "--requests line " + std::to_string(line_no) + ": ";
  json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return invalid_argument(where + "not a JSON object");
  auto ids_of = [&](const char* key, std::vector<int32_t>* out) -> Status {
    const json& v = j[key];
    if (!v.is_array()) return invalid_argument(where + "'" + key + "' must be a list of token ids");
    for (const json& x : v) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= vocab_size)
        return invalid_argument(where + "'" + key + "' holds " + x.dump() + ", not a token id in [0, " +
                                std::to_string(vocab_size) + ")");
      out->push_back(x.get<int32_t>());
    }
    return Status();
  };
  LoglikRequest r;
  if (j.contains("context_ids") || j.contains("continuation_ids")) {
    XI_RETURN_IF_ERROR(ids_of("context_ids", &r.context));
    XI_RETURN_IF_ERROR(ids_of("continuation_ids", &r.continuation));
  } else {
    if (!j.contains("context") || !j["context"].is_string() || !j.contains("continuation") ||
        !j["continuation"].is_string())
      return invalid_argument(where + "needs string 'context' and 'continuation' (or 'context_ids' and "
                              "'continuation_ids')");
    r = encode_pair(t, j["context"].get<std::string>(), j["continuation"].get<std::string>(), add_special);
  }
  if (r.context.empty())
    return invalid_argument(where + "the context has no tokens (nothing predicts the continuation's first; "
                            "lm-eval uses the EOS token as the context of an empty one)");
  if (r.continuation.empty()) return invalid_argument(where + "the continuation has no tokens");
  return r;
}

int run_loglik(int argc, char** argv) {
  std::string model_path, requests_path, backend_name = "cpu";
  int prefill_chunk = 512, block_size = 16, threads = 0, tensor_parallel_size = 1;
  bool progress = true, add_special = true, token_logprobs = true;
  FlagSet flags(
      "xinfer eval loglik",
      "lm-evaluation-harness loglikelihood: for each (context, continuation) pair of a JSONL file, the sum of\n"
      "the continuation tokens' log-probabilities given what precedes them, and is_greedy (each is the\n"
      "argmax). Lines: {\"context\": str, \"continuation\": str} (tokenized as lm-eval does: the context's\n"
      "trailing spaces move to the continuation, whose ids are encode(context + continuation) past\n"
      "encode(context)) or {\"context_ids\": [...], \"continuation_ids\": [...]}. stdout: one JSON line per\n"
      "request: index, logprob, is_greedy, context_ids, continuation_ids, token_logprobs.\n"
      "Example: xinfer eval loglik --model DIR --requests pairs.jsonl");
  flags.add("--model", &model_path, "Hugging Face model directory (config.json, *.safetensors, tokenizer) or .gguf");
  flags.add("--requests", &requests_path, "JSONL file of (context, continuation) pairs");
  flags.add("--add-special-tokens", &add_special,
            "text pairs: add the tokenizer's special tokens (BOS) to the context, as a string prompt of the server");
  flags.add("--token-logprobs", &token_logprobs, "print each continuation token's log-probability");
  flags.add("--backend", &backend_name, "cpu or cuda");
  flags.add("--prefill-chunk", &prefill_chunk, "most tokens per forward step");
  flags.add("--block-size", &block_size, "KV-cache block size in tokens");
  flags.add("--threads", &threads, "CPU backend threads; 0 = all cores");
  flags.add("--tensor-parallel-size", &tensor_parallel_size,
            "split the model over this many ranks (cpu: threads sharing --threads; cuda: GPUs 0..N-1); must "
            "divide the attention heads and the FFN width");
  flags.add("--progress", &progress, "progress bar while loading (stderr)");
  if (int rc = flags.parse_or_exit_code(argc, argv); rc >= 0) return rc;
  auto fail = [](const Status& s) {
    std::fprintf(stderr, "xinfer eval loglik: %s\n", s.to_string().c_str());
    return 1;
  };
  if (model_path.empty()) return fail(invalid_argument("--model is required"));
  if (requests_path.empty()) return fail(invalid_argument("--requests is required"));
  if (prefill_chunk <= 0 || block_size <= 0)
    return fail(invalid_argument("--prefill-chunk and --block-size must be positive"));
  auto config = model::load_model_config(model_path);
  if (!config.ok()) return fail(config.status());
  auto tokenizer = model::load_tokenizer(model_path);
  if (!tokenizer.ok()) return fail(tokenizer.status());
  std::ifstream in(requests_path);
  if (!in) return fail(not_found("cannot open --requests " + requests_path));
  std::vector<LoglikRequest> requests;
  std::string line;
  int64_t line_no = 0, longest = 0;
  const int limit = config->context_limit();
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto r = parse_loglik_line(line, line_no, **tokenizer, add_special, config->vocab_size);
    if (!r.ok()) return fail(r.status());
    // The last continuation token is never fed: the window holds everything but it.
    const int64_t fed = static_cast<int64_t>(r->context.size() + r->continuation.size()) - 1;
    if (limit > 0 && fed + 1 > limit)
      return fail(out_of_range("--requests line " + std::to_string(line_no) + ": context + continuation = " +
                               std::to_string(fed + 1) + " tokens exceed the context limit " +
                               std::to_string(limit) + " (" + config->context_limit_reason() + ")"));
    longest = std::max(longest, fed + 1);
    requests.push_back(std::move(*r));
  }
  if (requests.empty()) return fail(invalid_argument("--requests " + requests_path + " holds no requests"));

  auto kind = engine::parse_backend_kind(backend_name);
  if (!kind.ok()) return fail(kind.status());
  if (Status s = validate_tp({*config}, tensor_parallel_size, *kind); !s.ok()) return fail(s);
  const int rank_threads = engine::threads_per_rank(threads, tensor_parallel_size);
  auto backend_or = engine::create_backend(*kind, rank_threads);
  if (!backend_or.ok()) return fail(backend_or.status());
  backend::Backend& backend = **backend_or;
  const int ctx = static_cast<int>(std::max<int64_t>(longest, 2));
  const int chunk = std::min(prefill_chunk, ctx);
  auto lm = load_windows(model_path, *config, backend, *kind, tensor_parallel_size, rank_threads, ctx, chunk,
                         block_size, progress);
  if (!lm.ok()) return fail(lm.status());
  engine::WindowLogits& windows = *lm->windows;
  const int V = windows.vocab_size();

  for (size_t i = 0; i < requests.size(); ++i) {
    const LoglikRequest& r = requests[i];
    std::vector<int32_t> tokens = r.context;
    tokens.insert(tokens.end(), r.continuation.begin(), r.continuation.end());
    const int fed = static_cast<int>(tokens.size()) - 1;
    const int first_row = static_cast<int>(r.context.size()) - 1;  // predicts the continuation's first token
    double sum = 0;
    bool greedy = true;
    json lps = json::array();
    for (int pos = 0; pos < fed; pos += chunk) {
      const int len = std::min(chunk, fed - pos);
      const int row0 = std::clamp(first_row - pos, 0, len);
      const std::vector<float>& rows =
          windows.run(std::span(tokens).subspan(static_cast<size_t>(pos), static_cast<size_t>(len)), pos, row0);
      for (int row = row0; row < len; ++row) {
        const auto logits = std::span(rows).subspan(static_cast<size_t>(row - row0) * V, static_cast<size_t>(V));
        const int32_t target = tokens[static_cast<size_t>(pos + row + 1)];
        const double lp = engine::token_logprob(logits, target);
        sum += lp;
        greedy = greedy && engine::argmax_first(logits) == target;
        lps.push_back(lp);
      }
    }
    json out = {{"index", i},         {"logprob", sum},         {"is_greedy", greedy},
                {"context_ids", r.context}, {"continuation_ids", r.continuation}};
    if (token_logprobs) out["token_logprobs"] = std::move(lps);
    std::printf("%s\n", out.dump().c_str());
  }
  return 0;
}

int run_eval(int argc, char** argv) {
  const char* usage =
      "Usage: xinfer eval <task> [flags]   (xinfer eval <task> --help for its flags)\n\nTasks:\n"
      "  ppl          perplexity of a model on a text (sliding windows), KL / top-1 against a reference "
      "model\n"
      "  loglik       lm-eval loglikelihood of (context, continuation) pairs: sum of continuation logprobs, "
      "is_greedy\n";
  if (argc < 2) {
    std::fputs(usage, stderr);
    return 2;
  }
  const std::string task = argv[1];
  if (task == "--help" || task == "-h" || task == "help") {
    std::fputs(usage, stdout);
    return 0;
  }
  if (task == "ppl") {
    std::string prog = std::string(argv[0]) + " ppl";
    argv[1] = prog.data();
    return run_ppl(argc - 1, argv + 1);
  }
  if (task == "loglik") {
    std::string prog = std::string(argv[0]) + " loglik";
    argv[1] = prog.data();
    return run_loglik(argc - 1, argv + 1);
  }
  std::fprintf(stderr, "xinfer eval: unknown task '%s'\n\n%s", task.c_str(), usage);
  return 2;
}

const CommandRegistration kRegistration{
    "eval", "perplexity of a model on a text, KL / top-1 vs a reference; lm-eval loglikelihood pairs (cpu/cuda)", &run_eval};

}  // namespace
}  // namespace xinfer::cli
