// OpenAIServer: the OpenAI-compatible API over an EngineClient. It is the HttpServer's handler:
//
//   POST /v1/completions, /v1/chat/completions   generation (stream or not; n choices = n engine requests)
//   GET  /v1/models[/<id>]                        the served model
//   POST /tokenize, /detokenize                   vLLM's shapes
//   GET  /health                                  200 ready; 503 loading or draining
//   GET  /metrics                                 engine metrics + server counters (Prometheus text)
//
// States: loading (no model yet: 503 for generation) -> ready (set_model) -> draining (begin_drain: new
// generation 503, in-flight requests run to the end).
// Every rejected request gets an OpenAI-shaped error body ({"error": {message, type, param, code}}).
//
// Threading: handle() runs on a connection's strand. Engine callbacks run on the engine thread and only
// post the output to that strand; detokenization, the OutputFilter and JSON happen there. A request's
// state (GenerationContext, in the .cpp) is touched only on its strand; it lives until the engine has sent
// every choice's final output. A client that goes away gets its engine requests aborted at once.
#pragma once

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "xinfer/engine/engine_client.h"
#include "xinfer/server/http_server.h"
#include "xinfer/server/json_body_parser.h"
#include "xinfer/server/metrics_prefix.h"
#include "xinfer/server/openai_protocol.h"
#include "xinfer/server/output_filter.h"
#include "xinfer/tokenizer/jinja/chat_template.h"
#include "xinfer/tokenizer/tokenizer.h"

namespace xinfer::server {

struct ServedModel {
  engine::EngineClient* engine = nullptr;   // not owned; outlives the server's use of it
  const tok::Tokenizer* tokenizer = nullptr;  // not owned
  std::optional<jinja::ChatTemplate> chat_template;  // none: /v1/chat/completions answers 400
  std::string name;                         // served model name ("" -> engine->info().model_name)
};

struct OpenAIServerOptions {
  // "" -> no auth; else /v1/*, /tokenize and /detokenize need "Bearer <key>" (checked before the body is
  // parsed); /health and /metrics stay open.
  std::string api_key;
  std::shared_ptr<const FilterRules> filter_rules;  // may be null
  JsonLimits json_limits;                           // request bodies
  // Cost bounds of one request (400 past them): generated tokens over all choices (choices x max_tokens,
  // max_tokens unset = up to the context length), and logprob entries (those tokens x (1 + top logprobs),
  // plus, for prompt logprobs, choices x prompt tokens x (1 + top prompt logprobs)).
  int64_t max_request_tokens = 32768;
  int64_t max_request_logprobs = 65536;
  // Per request: choices past this wait for earlier ones to finish. Default kMaxN (off): measured on the
  // CPU backend, a cap of 8 made other clients' 2-token requests slower (1-3 s instead of 0.1 s) behind an
  // n = 32 request, since each later choice waits for an admission step (docs/server.md).
  int max_choices_in_flight = kMaxN;
  MetricsPrefix metrics_prefix = MetricsPrefix::kXinfer;
};

class OpenAIServer {
 public:
  explicit OpenAIServer(OpenAIServerOptions options);
  ~OpenAIServer();

  void set_model(ServedModel model);  // loading -> ready
  void begin_drain();                 // -> draining
  bool ready() const { return state_.load() == State::kReady; }
  // Generation requests whose engine work is not finished yet.
  int64_t active_requests() const { return active_.load(); }
  // For the connection gauges in /metrics (optional).
  void set_http_server(const HttpServer* http) { http_ = http; }

  void handle(HttpRequest request, std::shared_ptr<HttpExchange> exchange);

  // Server-side counters (internal; public for the .cpp's request state).
  struct Counters {
    std::array<std::atomic<int64_t>, 600> responses{};  // by HTTP status
    std::atomic<int64_t> finished_stop{0}, finished_length{0}, finished_abort{0}, finished_content_filter{0},
        finished_error{0};
    std::atomic<int64_t> client_disconnects{0};
  };
  Counters& counters() { return counters_; }
  void request_done() { active_.fetch_sub(1); }

 private:
  enum class State { kLoading, kReady, kDraining };
  struct Route;

  void send_error(HttpExchange& ex, const struct ApiError& error);
  void send_json(HttpExchange& ex, int status, const std::string& body);
  bool authorized(const HttpRequest& req) const;

  // The cost bounds of OpenAIServerOptions; cost_tokens = generated tokens over every choice, prompt_entries =
  // prompt logprob entries over every choice (choices x prompt tokens x (1 + top)).
  std::optional<ApiError> check_cost(const struct GenerationOptions& o, size_t num_prompts,
                                     int64_t cost_tokens, int64_t prompt_entries, bool chat) const;
  void handle_completions(const HttpRequest& req, std::shared_ptr<HttpExchange> ex, bool chat);
  void handle_models(const HttpRequest& req, HttpExchange& ex);
  void handle_tokenize(const HttpRequest& req, HttpExchange& ex);
  void handle_detokenize(const HttpRequest& req, HttpExchange& ex);
  void handle_health(HttpExchange& ex);
  void handle_metrics(HttpExchange& ex);

  std::string next_id(const char* prefix);

  OpenAIServerOptions options_;
  std::atomic<State> state_{State::kLoading};
  std::unique_ptr<ServedModel> model_storage_;
  std::atomic<const ServedModel*> model_{nullptr};  // set once by set_model
  const HttpServer* http_ = nullptr;
  std::atomic<int64_t> active_{0};
  std::atomic<uint64_t> id_counter_{0};
  uint64_t id_salt_ = 0;
  int64_t created_ = 0;
  Counters counters_;
};

}  // namespace xinfer::server
