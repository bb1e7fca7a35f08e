// `xinfer serve`: the OpenAI-compatible HTTP server over the engine.
//
// Start-up: parse flags -> load filter rules -> listen (GET /health answers 503 while loading) -> load the
// engine (model, KV cache) and tokenizer -> ready. SIGTERM / SIGINT drain: close the listener (new
// connections are refused), close idle keep-alive connections (busy ones after their response), let
// in-flight requests finish (up to --drain-timeout, then abort them), exit 0.
// Signals are blocked in every thread and taken with sigwait() by main, so no handler runs async code.
#include <csignal>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "xinfer/cli/command.h"
#include "xinfer/cli/engine_flags.h"
#include "xinfer/cli/flags.h"
#include "xinfer/core/logging.h"
#include "xinfer/engine/engine.h"
#include "xinfer/model/gguf_config.h"
#include "xinfer/model/gguf_tokenizer.h"
#include "xinfer/model/llama.h"
#include "xinfer/model/preset_configs.h"
#include "xinfer/server/http_server.h"
#include "xinfer/server/openai_server.h"
#include "xinfer/server/output_filter.h"
#include "xinfer/tokenizer/jinja/chat_template.h"
#include "xinfer/tokenizer/tokenizer.h"

namespace xinfer::cli {
namespace {

namespace fs = std::filesystem;

// The bundled default model, relative to the repository root (tools/train_tiny.py makes it).
constexpr const char* kDefaultModel = "models/xinfer-tiny-shakespeare";

// kDefaultModel under the working directory or under any ancestor of the executable (the binary lives in
// <repo>/build/<preset>/src/xinfer/cli/). "" if none has it.
std::string find_default_model() {
  std::error_code ec;
  if (fs::exists(fs::path(kDefaultModel) / "config.json", ec)) return kDefaultModel;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  for (fs::path dir = exe.parent_path(); !dir.empty() && dir != dir.root_path(); dir = dir.parent_path()) {
    if (fs::exists(dir / kDefaultModel / "config.json", ec)) return (dir / kDefaultModel).string();
  }
  return "";
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Waits up to timeout_s for `done`, returning early (false) if SIGINT/SIGTERM arrives meanwhile.
template <typename Pred>
bool wait_until(Pred done, double timeout_s, const sigset_t& signals) {
  const double deadline = now_s() + timeout_s;
  while (!done()) {
    if (now_s() >= deadline) return false;
    timespec ts{0, 20 * 1000 * 1000};
    if (sigtimedwait(&signals, nullptr, &ts) > 0) return false;
  }
  return true;
}

int run_serve(int argc, char** argv) {
  std::string model_dir, served_name, host = "127.0.0.1", api_key, filter_rules_path;
  std::string load_format = "auto", tokenizer_dir;
  int port = 8000, max_connections = 1024, server_threads = 4;
  int64_t max_body_bytes = 8 << 20;
  int64_t low_priority_body_bytes = 64 * 1024;
  std::string metrics_prefix = "xinfer";
  server::OpenAIServerOptions so;
  double keep_alive_timeout = 30, drain_timeout = 30;
  EngineFlags engine_flags;
  engine::EngineConfig& ec = engine_flags.config;

  FlagSet flags(
      "xinfer serve",
      "Serve a model over an OpenAI-compatible HTTP API (/v1/completions, /v1/chat/completions,\n"
      "/v1/models, /tokenize, /detokenize, /health, /metrics).\n"
      "Example: xinfer serve --model DIR --port 8000\n"
      "Without --model it serves the bundled model " +
          std::string(kDefaultModel) +
          ".\nSIGTERM or Ctrl-C drains: the listener closes (new connections are refused), idle keep-alive\n"
          "connections close, running requests finish (up to --drain-timeout), then exit 0.");
  flags.add("--model", &model_dir,
            std::string("Hugging Face model directory (config.json, *.safetensors, tokenizer files; quantized checkpoints too) or a .gguf file; default: ") +
                kDefaultModel + " of this checkout");
  flags.add("--load-format", &load_format,
            "auto (the model directory's safetensors) or dummy (random weights in the model's shapes, for "
            "benchmarks; --model may then be a built-in config such as llama-3.1-8b, with --tokenizer)");
  flags.add("--tokenizer", &tokenizer_dir,
            "directory holding tokenizer.json (+ tokenizer_config.json); default: the model directory");
  flags.add("--served-model-name", &served_name, "model name clients must send (default: the directory's name)");
  flags.add("--host", &host, "address to bind (IP); 0.0.0.0 exposes the server to the network");
  flags.add("--port", &port, "TCP port; 0 picks a free one (printed in the log)");
  flags.add("--api-key", &api_key,
            "require 'Authorization: Bearer KEY' on /v1/*, /tokenize and /detokenize (/health and /metrics "
            "stay open; default: $XINFER_API_KEY, else no auth)");
  flags.add("--filter-rules", &filter_rules_path,
            "JSON file of output rules: [{\"pattern\", \"type\": literal|regex, \"action\": mask|stop|content_filter, "
            "\"replacement\"}]");
  flags.add("--max-waiting", &ec.max_waiting, "queued requests beyond this are refused with 429");
  flags.add("--max-body-bytes", &max_body_bytes, "largest request body accepted (413 beyond)");
  flags.add("--max-connections", &max_connections, "open HTTP connections beyond this are refused with 503");
  flags.add("--keep-alive-timeout", &keep_alive_timeout,
            "seconds an idle keep-alive connection (or slow request headers) may wait before it is closed");
  flags.add("--drain-timeout", &drain_timeout, "seconds in-flight requests may run after SIGTERM before abort");
  flags.add("--server-threads", &server_threads,
            "HTTP I/O threads (request parsing and tokenization run on them; one slow request holds one)");
  flags.add("--low-priority-body-bytes", &low_priority_body_bytes,
            "requests with a body of at least this many bytes (and chunked ones) are read on a background "
            "thread at nice +10 and parsed and tokenized there one at a time, so multi-megabyte bodies take "
            "CPU the engine leaves (0: on the I/O threads)");
  flags.add(
      "--max-request-tokens", &so.max_request_tokens,
      "most tokens one request may generate over all its choices (choices x max_tokens; unset max_tokens "
      "counts as the rest of the context); 400 beyond");
  flags.add("--max-request-logprobs", &so.max_request_logprobs,
            "most logprob entries one request may return (its tokens x (1 + top logprobs)); 400 beyond");
  flags.add("--max-choices-in-flight", &so.max_choices_in_flight,
            "engine requests one request may have running or queued at once (its n x prompts choices run in "
            "turns beyond this; default 128 = all at once, which measured fairer than turns)");
  flags.add("--metrics-prefix", &metrics_prefix,
            "metric names of /metrics: xinfer (xinfer:*), vllm (vllm:*, what vLLM dashboards read) or both");
  engine_flags.add_to(flags);
  if (int rc = flags.parse_or_exit_code(argc, argv); rc >= 0) return rc;

  auto fail = [](const std::string& msg) {
    std::fprintf(stderr, "xinfer serve: %s\n", msg.c_str());
    return 1;
  };
  if (api_key.empty()) {
    if (const char* env = std::getenv("XINFER_API_KEY")) api_key = env;
  }
  if (port < 0 || port > 65535) return fail("--port must be in [0, 65535]");
  if (max_body_bytes <= 0 || max_connections <= 0 || server_threads <= 0)
    return fail("--max-body-bytes, --max-connections and --server-threads must be positive");
  if (low_priority_body_bytes < 0) return fail("--low-priority-body-bytes must be >= 0");
  if (so.max_request_tokens <= 0 || so.max_request_logprobs <= 0 || so.max_choices_in_flight <= 0)
    return fail("--max-request-tokens, --max-request-logprobs and --max-choices-in-flight must be positive");
  if (auto p = server::parse_metrics_prefix(metrics_prefix)) {
    so.metrics_prefix = *p;
  } else {
    return fail("--metrics-prefix must be xinfer, vllm or both, got '" + metrics_prefix + "'");
  }
  if (model_dir.empty()) {
    model_dir = find_default_model();
    if (model_dir.empty()) {
      return fail(std::string("no --model given and the bundled model ") + kDefaultModel +
                  " is missing (looked under the working directory and the checkout holding this binary); "
                  "make it with tools/train_tiny.py or pass --model DIR");
    }
  }
  auto fmt = model::parse_load_format(load_format);
  if (!fmt.ok()) return fail(fmt.status().message());
  const bool preset = *fmt == model::LoadFormat::kDummy && model::is_preset(model_dir);
  if (preset && tokenizer_dir.empty())
    return fail("--model " + model_dir +
                " is a built-in config without tokenizer files: add --tokenizer DIR");
  if (!preset && !model::is_gguf_path(model_dir) && !fs::exists(fs::path(model_dir) / "config.json"))
    return fail(model_dir + ": no config.json (not a model directory)");
  if (tokenizer_dir.empty()) tokenizer_dir = model_dir;

  std::shared_ptr<const server::FilterRules> rules;
  if (!filter_rules_path.empty()) {
    auto r = server::FilterRules::load(filter_rules_path);
    if (!r.ok()) return fail(r.status().to_string());
    rules = *r;
  }
  if (Status s = engine_flags.finish(); !s.ok()) return fail(s.message());
  ec.model_dir = model_dir;
  ec.load_format = *fmt;
  ec.served_model_name = served_name;
  if (Status s = ec.validate(); !s.ok()) return fail(s.message());

  // Block the signals before any thread starts, so every thread inherits the mask and main takes them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  so.api_key = api_key;
  so.filter_rules = rules;
  server::OpenAIServer api(so);
  server::HttpServerOptions ho;
  ho.host = host;
  ho.port = port;
  ho.max_body_bytes = static_cast<size_t>(max_body_bytes);
  ho.max_connections = max_connections;
  ho.keep_alive_timeout_s = keep_alive_timeout;
  ho.threads = server_threads;
  ho.low_priority_body_bytes = static_cast<size_t>(low_priority_body_bytes);
  server::HttpServer http(ho, [&api](server::HttpRequest req, std::shared_ptr<server::HttpExchange> ex) {
    api.handle(std::move(req), std::move(ex));
  });
  api.set_http_server(&http);
  if (Status s = http.start(); !s.ok()) return fail(s.message());
  XI_LOG(INFO) << "listening on http://" << host << ":" << http.port() << " (loading the model; /health is 503 until ready)";

  const double t0 = now_s();
  auto engine = engine::Engine::create(ec);
  if (!engine.ok()) {
    http.stop();
    return fail("loading " + model_dir + ": " + engine.status().to_string());
  }
  auto tokenizer = model::load_tokenizer(tokenizer_dir);
  if (!tokenizer.ok()) {
    http.stop();
    return fail("loading the tokenizer of " + tokenizer_dir + ": " + tokenizer.status().to_string());
  }
  server::ServedModel served;
  served.engine = engine->get();
  served.tokenizer = tokenizer->get();
  served.name = (*engine)->info().model_name;
  std::string chat_note = "none (chat completions answer 400)";
  if (!(*tokenizer)->chat_template().empty()) {
    auto tmpl = jinja::ChatTemplate::parse((*tokenizer)->chat_template());
    if (tmpl.ok()) {
      served.chat_template.emplace(std::move(*tmpl));
      chat_note = "from tokenizer_config.json";
    } else {
      XI_LOG(WARN) << "chat template does not parse, chat completions disabled: " << tmpl.status().to_string();
    }
  }
  const engine::EngineConfig& cfg = (*engine)->config();
  const engine::EngineStats st = (*engine)->stats();
  const engine::EngineInfo& info = (*engine)->info();
  XI_LOG(INFO) << "model " << info.model_name << " from " << model_dir << " on " << engine::backend_kind_name(cfg.backend)
               << ", vocab " << info.vocab_size << ", max_model_len " << info.max_model_len << ", chat template: "
               << chat_note;
  const engine::MemoryPlan& plan = (*engine)->memory_plan();
  XI_LOG(INFO) << "memory plan: weights " << format_byte_size(plan.weight_bytes) << ", KV cache "
               << format_byte_size(plan.kv_bytes) << " = " << st.num_total_blocks << " blocks x "
               << cfg.scheduler.block_size << " tokens (" << plan.kv_tokens << " tokens); max_num_seqs " << cfg.scheduler.max_num_seqs
               << ", max_num_batched_tokens " << cfg.scheduler.max_num_batched_tokens << ", max_waiting "
               << cfg.max_waiting;
  XI_LOG(INFO) << "limits: body " << max_body_bytes << " bytes, JSON depth " << so.json_limits.max_depth
               << ", " << so.json_limits.max_object_keys << " keys per object; per request "
               << so.max_request_tokens << " generated tokens, " << so.max_request_logprobs
               << " logprob entries, " << so.max_choices_in_flight << " choices in flight; "
               << max_connections << " connections, " << server_threads << " I/O threads (bodies from "
               << low_priority_body_bytes << " bytes on the low-priority thread), keep-alive "
               << keep_alive_timeout << " s; api key " << (api_key.empty() ? "off" : "on")
               << "; filter rules " << (rules ? std::to_string(rules->size()) : std::string("none"));
  api.set_model(std::move(served));
  XI_LOG(INFO) << "ready in " << static_cast<int>((now_s() - t0) * 1000) << " ms: serving " << info.model_name
               << " on http://" << host << ":" << http.port();

  int sig = 0;
  sigwait(&signals, &sig);
  XI_LOG(INFO) << "signal " << sig << ": draining (" << api.active_requests() << " requests in flight)";
  api.begin_drain();
  http.stop_accepting();
  if (!wait_until([&] { return api.active_requests() == 0; }, drain_timeout, signals)) {
    XI_LOG(WARN) << "drain: aborting " << api.active_requests() << " requests still running";
    (*engine)->stop();  // every request gets its final (abort) output
    wait_until([&] { return api.active_requests() == 0; }, 5, signals);
  }
  // Let the last responses reach their clients (connections close once written).
  wait_until([&] { return http.open_connections() == 0; }, 5, signals);
  (*engine)->stop();
  http.stop();
  XI_LOG(INFO) << "drained; exiting";
  return 0;
}

const CommandRegistration kReg{"serve", "serve a model over an OpenAI-compatible HTTP API", &run_serve};

}  // namespace
}  // namespace xinfer::cli
