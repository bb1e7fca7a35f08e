#include "xinfer/server/openai_server.h"

#include <chrono>
#include <cmath>
#include <ctime>
#include <random>
#include <sstream>

#include "xinfer/core/logging.h"
#include "xinfer/server/generation_context.h"
#include "xinfer/server/openai_protocol.h"

namespace xinfer::server {

using json = nlohmann::ordered_json;

namespace {

constexpr const char* kJson = "application/json";

bool constant_time_equal(const std::string& a, const std::string& b) {
  // Runs over the longer length whatever the contents; only the length difference is visible.
  const size_t n = std::max(a.size(), b.size());
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

ApiError make_error(int status, std::string message, std::string type, std::string code = "") {
  ApiError e;
  e.status = status;
  e.message = std::move(message);
  e.type = std::move(type);
  e.code = std::move(code);
  return e;
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace

OpenAIServer::OpenAIServer(OpenAIServerOptions options) : options_(std::move(options)) {
  std::random_device rd;
  id_salt_ = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  created_ = static_cast<int64_t>(std::time(nullptr));
}

OpenAIServer::~OpenAIServer() = default;

void OpenAIServer::set_model(ServedModel model) {
  if (model.name.empty()) model.name = model.engine->info().model_name;
  model_storage_ = std::make_unique<ServedModel>(std::move(model));
  model_.store(model_storage_.get());
  State expected = State::kLoading;
  state_.compare_exchange_strong(expected, State::kReady);
}

void OpenAIServer::begin_drain() { state_.store(State::kDraining); }

std::string OpenAIServer::next_id(const char* prefix) {
  std::ostringstream os;
  os << prefix << std::hex << id_salt_ << '-' << id_counter_.fetch_add(1);
  return os.str();
}

void OpenAIServer::send_error(HttpExchange& ex, const ApiError& error) {
  counters_.responses[static_cast<size_t>(error.status) % 600].fetch_add(1);
  std::vector<std::pair<std::string, std::string>> headers;
  if (error.status == 401) headers.emplace_back("WWW-Authenticate", "Bearer");
  ex.respond(error.status, kJson, error.body(), std::move(headers));
}

void OpenAIServer::send_json(HttpExchange& ex, int status, const std::string& body) {
  counters_.responses[static_cast<size_t>(status) % 600].fetch_add(1);
  ex.respond(status, kJson, body);
}

bool OpenAIServer::authorized(const HttpRequest& req) const {
  if (options_.api_key.empty()) return true;
  return constant_time_equal(req.header("authorization"), "Bearer " + options_.api_key);
}

void OpenAIServer::handle(HttpRequest req, std::shared_ptr<HttpExchange> ex) {
  struct RouteEntry {
    const char* path;
    const char* method;
  };
  static const RouteEntry kRoutes[] = {
      {"/v1/completions", "POST"}, {"/v1/chat/completions", "POST"}, {"/v1/models", "GET"},
      {"/tokenize", "POST"},       {"/detokenize", "POST"},          {"/health", "GET"},
      {"/metrics", "GET"},
  };
  std::string path = req.path;
  const bool model_path = path.rfind("/v1/models/", 0) == 0 && path.size() > 11;
  const char* method = nullptr;
  for (const RouteEntry& r : kRoutes)
    if (path == r.path) method = r.method;
  if (model_path) method = "GET";
  if (!method) return send_error(*ex, make_error(404, "Not Found: " + path, "not_found_error", "not_found"));
  if (req.method != method && !(req.method == "HEAD" && std::string(method) == "GET")) {
    ApiError e = make_error(405, "Method Not Allowed: " + req.method + " " + path + " (use " + method + ")",
                            "invalid_request_error", "method_not_allowed");
    counters_.responses[405].fetch_add(1);
    ex->respond(405, kJson, e.body(), {{"Allow", method}});
    return;
  }
  const bool guarded = path.rfind("/v1/", 0) == 0 || path == "/tokenize" || path == "/detokenize";
  if (guarded && !authorized(req)) {
    return send_error(*ex, make_error(401, "Incorrect API key provided.", "invalid_request_error", "invalid_api_key"));
  }
  if (path == "/health") return handle_health(*ex);
  if (path == "/metrics") return handle_metrics(*ex);
  const State state = state_.load();
  const ServedModel* model = model_.load();
  if (model == nullptr) {
    return send_error(*ex, make_error(503, "the model is still loading", "server_error", "model_loading"));
  }
  if (path == "/v1/models" || model_path) return handle_models(req, *ex);
  if (path == "/tokenize") return handle_tokenize(req, *ex);
  if (path == "/detokenize") return handle_detokenize(req, *ex);
  if (state == State::kDraining) {
    return send_error(*ex, make_error(503, "the server is shutting down", "server_error", "draining"));
  }
  handle_completions(req, std::move(ex), path == "/v1/chat/completions");
}

void OpenAIServer::handle_health(HttpExchange& ex) {
  const State s = state_.load();
  if (s == State::kReady) {
    counters_.responses[200].fetch_add(1);
    ex.respond(200, "", "");
    return;
  }
  send_error(ex, make_error(503, s == State::kLoading ? "the model is still loading" : "the server is shutting down",
                            "server_error", s == State::kLoading ? "model_loading" : "draining"));
}

void OpenAIServer::handle_metrics(HttpExchange& ex) {
  std::string out;
  const ServedModel* model = model_.load();
  if (model) model->engine->render_metrics(&out);
  std::ostringstream os;
  auto metric = [&](const char* name, const char* type, const char* help) {
    os << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n';
  };
  if (model) {
    const engine::EngineStats st = model->engine->stats();
    metric("xinfer:num_free_kv_cache_blocks", "gauge", "KV-cache blocks not held by any request.");
    os << "xinfer:num_free_kv_cache_blocks " << st.num_free_blocks << '\n';
  }
  metric("xinfer:server_ready", "gauge", "1 when the model is loaded and the server is not draining.");
  os << "xinfer:server_ready " << (state_.load() == State::kReady ? 1 : 0) << '\n';
  metric("xinfer:server_active_requests", "gauge", "Generation requests with engine work in flight.");
  os << "xinfer:server_active_requests " << active_.load() << '\n';
  if (http_) {
    metric("xinfer:server_open_connections", "gauge", "Open HTTP connections.");
    os << "xinfer:server_open_connections " << http_->open_connections() << '\n';
    metric("xinfer:server_rejected_connections_total", "counter", "Connections refused past --max-connections.");
    os << "xinfer:server_rejected_connections_total " << http_->rejected_connections() << '\n';
  }
  metric("xinfer:server_http_responses_total", "counter", "HTTP responses by status code.");
  for (size_t code = 100; code < counters_.responses.size(); ++code) {
    const int64_t v = counters_.responses[code].load();
    if (v) os << "xinfer:server_http_responses_total{code=\"" << code << "\"} " << v << '\n';
  }
  metric("xinfer:server_choices_finished_total", "counter",
         "Choices returned to clients by finish reason (stop strings and filters included).");
  const std::pair<const char*, const std::atomic<int64_t>*> reasons[] = {
      {"stop", &counters_.finished_stop},   {"length", &counters_.finished_length},
      {"abort", &counters_.finished_abort}, {"content_filter", &counters_.finished_content_filter},
      {"error", &counters_.finished_error}};
  for (const auto& [name, v] : reasons)
    os << "xinfer:server_choices_finished_total{finished_reason=\"" << name << "\"} " << v->load() << '\n';
  metric("xinfer:server_client_disconnects_total", "counter", "Requests aborted because the client went away.");
  os << "xinfer:server_client_disconnects_total " << counters_.client_disconnects.load() << '\n';
  out += os.str();
  counters_.responses[200].fetch_add(1);
  ex.respond(200, "text/plain; version=0.0.4; charset=utf-8",
             apply_metrics_prefix(out, options_.metrics_prefix));
}

void OpenAIServer::handle_models(const HttpRequest& req, HttpExchange& ex) {
  const ServedModel& m = *model_.load();
  json card = json::object();
  card["id"] = m.name;
  card["object"] = "model";
  card["created"] = created_;
  card["owned_by"] = "xinfer";
  card["root"] = m.name;
  card["parent"] = nullptr;
  card["max_model_len"] = m.engine->info().max_model_len;
  if (req.path != "/v1/models") {
    const std::string id = req.path.substr(11);
    if (id != m.name) {
      return send_error(ex, make_error(404, "The model '" + id + "' does not exist.", "invalid_request_error",
                                       "model_not_found"));
    }
    return send_json(ex, 200, dump(card));
  }
  json list = json::object();
  list["object"] = "list";
  list["data"] = json::array({card});
  send_json(ex, 200, dump(list));
}

void OpenAIServer::handle_tokenize(const HttpRequest& req, HttpExchange& ex) {
  const ServedModel& m = *model_.load();
  auto parsed = parse_json_body(req.body, options_.json_limits);
  if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(ex, *e);
  const json& body = std::get<json>(parsed);
  if (auto it = body.find("model"); it != body.end() && !it->is_null() && (!it->is_string() || *it != m.name)) {
    return send_error(ex, make_error(404, "The model '" + (it->is_string() ? it->get<std::string>() : it->dump()) +
                                              "' does not exist.",
                                     "invalid_request_error", "model_not_found"));
  }
  auto get_bool = [&](const char* key, bool dflt, std::optional<ApiError>* err) {
    auto it = body.find(key);
    if (it == body.end() || it->is_null()) return dflt;
    if (!it->is_boolean()) *err = bad_request(std::string("'") + key + "' must be a boolean", key);
    return it->is_boolean() ? it->get<bool>() : dflt;
  };
  std::optional<ApiError> err;
  std::vector<int32_t> ids;
  const bool has_messages = body.contains("messages") && !body["messages"].is_null();
  if (has_messages) {
    json messages;
    if (auto e = normalize_messages(body["messages"], &messages)) return send_error(ex, *e);
    const bool add_gen = get_bool("add_generation_prompt", true, &err);
    const bool add_special = get_bool("add_special_tokens", false, &err);
    if (err) return send_error(ex, *err);
    if (!m.chat_template) return send_error(ex, bad_request("this model has no chat template", "messages"));
    jinja::ChatTemplateInputs in;
    in.messages = std::move(messages);
    in.add_generation_prompt = add_gen;
    in.bos_token = m.tokenizer->bos_token();
    in.eos_token = m.tokenizer->eos_token();
    auto text = m.chat_template->apply(in);
    if (!text.ok()) return send_error(ex, bad_request("chat template: " + text.status().message(), "messages"));
    ids = m.tokenizer->encode(*text, add_special);
  } else {
    auto it = body.find("prompt");
    if (it == body.end() || !it->is_string())
      return send_error(ex, bad_request("'prompt' (a string) or 'messages' is required", "prompt"));
    const bool add_special = get_bool("add_special_tokens", true, &err);
    if (err) return send_error(ex, *err);
    ids = m.tokenizer->encode(it->get<std::string>(), add_special);
  }
  const bool strs = get_bool("return_token_strs", false, &err);
  if (err) return send_error(ex, *err);
  json out = json::object();
  out["count"] = ids.size();
  out["max_model_len"] = m.engine->info().max_model_len;
  out["tokens"] = ids;
  if (strs) {
    json s = json::array();
    for (int32_t id : ids) s.push_back(m.tokenizer->id_to_token(id));
    out["token_strs"] = std::move(s);
  } else {
    out["token_strs"] = nullptr;
  }
  send_json(ex, 200, dump(out));
}

void OpenAIServer::handle_detokenize(const HttpRequest& req, HttpExchange& ex) {
  const ServedModel& m = *model_.load();
  auto parsed = parse_json_body(req.body, options_.json_limits);
  if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(ex, *e);
  const json& body = std::get<json>(parsed);
  if (auto it = body.find("model"); it != body.end() && !it->is_null() && (!it->is_string() || *it != m.name)) {
    return send_error(ex, make_error(404, "The model does not exist.", "invalid_request_error", "model_not_found"));
  }
  auto it = body.find("tokens");
  const int vocab = m.engine->info().vocab_size;
  if (it == body.end() || !it->is_array())
    return send_error(ex, bad_request("'tokens' (a list of token ids) is required", "tokens"));
  std::vector<int32_t> ids;
  for (const json& t : *it) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= vocab)
      return send_error(ex, bad_request("'tokens' must hold token ids in [0, " + std::to_string(vocab) + ")", "tokens"));
    ids.push_back(t.get<int32_t>());
  }
  json out = json::object();
  out["prompt"] = m.tokenizer->decode(ids, /*skip_special_tokens=*/false);
  send_json(ex, 200, dump(out));
}

std::optional<ApiError> OpenAIServer::check_cost(const GenerationOptions& o, size_t num_prompts,
                                                 int64_t cost_tokens, int64_t prompt_entries, bool chat) const {
  const char* max_key = chat ? "max_completion_tokens" : "max_tokens";
  std::ostringstream choices;
  choices << num_prompts * static_cast<size_t>(o.n) << " choices";
  if (cost_tokens > options_.max_request_tokens) {
    std::ostringstream os;
    os << "this request may generate up to " << cost_tokens << " tokens (" << choices.str() << " x '"
       << max_key << "', unset = up to the context length); the server's limit is "
       << options_.max_request_tokens << " per request (--max-request-tokens): lower 'n' or '" << max_key
       << "'";
    ApiError e = bad_request(os.str(), "n");
    e.code = "request_too_costly";
    return e;
  }
  if (o.logprobs != LogprobsFormat::kNone || prompt_entries > 0) {
    const int64_t top = o.logprobs != LogprobsFormat::kNone ? o.sampling.logprobs.value_or(0) : 0;
    const int64_t generated = o.logprobs != LogprobsFormat::kNone ? cost_tokens * (1 + top) : 0;
    const int64_t entries = generated + prompt_entries;
    if (entries > options_.max_request_logprobs) {
      std::ostringstream os;
      os << "this request may return up to " << entries << " logprob entries (" << generated
         << " for generated tokens: " << (o.logprobs != LogprobsFormat::kNone ? cost_tokens : 0) << " x (1 + "
         << top << " top logprobs); " << prompt_entries
         << " for prompt tokens: choices x prompt tokens x (1 + top prompt logprobs)); the server's limit is "
         << options_.max_request_logprobs << " per request (--max-request-logprobs): lower 'n', '" << max_key
         << "', the prompt or the number of top logprobs";
      const char* param = prompt_entries > generated ? (o.prompt_logprobs ? "prompt_logprobs" : "logprobs")
                                                     : (chat ? "top_logprobs" : "logprobs");
      ApiError e = bad_request(os.str(), param);
      e.code = "request_too_costly";
      return e;
    }
  }
  return std::nullopt;
}

void OpenAIServer::handle_completions(const HttpRequest& req, std::shared_ptr<HttpExchange> ex, bool chat) {
  const ServedModel& m = *model_.load();
  const engine::EngineInfo& info = m.engine->info();
  auto parsed = parse_json_body(req.body, options_.json_limits);
  if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(*ex, *e);
  const json& body = std::get<json>(parsed);

  GenerationSetup setup;
  setup.chat = chat;
  std::string model_name;
  if (chat) {
    auto r = parse_chat_request(body, info.vocab_size);
    if (auto* e = std::get_if<ApiError>(&r)) return send_error(*ex, *e);
    ChatRequest& c = std::get<ChatRequest>(r);
    model_name = c.model;
    setup.options = std::move(c.options);
    if (!m.chat_template) {
      return send_error(*ex, bad_request("this model has no chat template; use /v1/completions", "messages"));
    }
    jinja::ChatTemplateInputs in;
    in.messages = std::move(c.messages);
    in.add_generation_prompt = c.add_generation_prompt;
    in.bos_token = m.tokenizer->bos_token();
    in.eos_token = m.tokenizer->eos_token();
    in.extra = std::move(c.chat_template_kwargs);
    auto text = m.chat_template->apply(in);
    if (!text.ok()) return send_error(*ex, bad_request("chat template: " + text.status().message(), "messages"));
    setup.prompts.push_back(PromptInput{m.tokenizer->encode(*text, /*add_special_tokens=*/false), *text});
  } else {
    auto r = parse_completion_request(body, info.vocab_size);
    if (auto* e = std::get_if<ApiError>(&r)) return send_error(*ex, *e);
    CompletionRequest& c = std::get<CompletionRequest>(r);
    model_name = c.model;
    setup.options = std::move(c.options);
    setup.echo = c.echo;
    setup.prompt_only = c.prompt_only;
    for (Prompt& p : c.prompts) {
      if (auto* text = std::get_if<std::string>(&p)) {
        setup.prompts.push_back(PromptInput{m.tokenizer->encode(*text, /*add_special_tokens=*/true), *text});
      } else {
        auto& ids = std::get<std::vector<int32_t>>(p);
        std::string echo_text = c.echo ? m.tokenizer->decode(ids, /*skip_special_tokens=*/false) : std::string();
        setup.prompts.push_back(PromptInput{std::move(ids), std::move(echo_text)});
      }
    }
  }
  if (!model_name.empty() && model_name != m.name) {
    return send_error(*ex, make_error(404, "The model '" + model_name + "' does not exist.", "invalid_request_error",
                                      "model_not_found"));
  }
  const char* prompt_word = chat ? "messages" : "prompt";
  int64_t cost_tokens = 0;  // generated tokens the request may cost, over every choice
  for (PromptInput& p : setup.prompts) {
    const int prompt_len = static_cast<int>(p.ids.size());
    if (prompt_len == 0) return send_error(*ex, bad_request("the prompt is empty (no tokens)", prompt_word));
    const std::optional<int32_t> requested = setup.options.sampling.max_tokens;
    const int64_t total = static_cast<int64_t>(prompt_len) + requested.value_or(1);
    if (total > info.max_model_len) {
      std::ostringstream os;
      os << "This model's maximum context length is " << info.max_model_len << " tokens. However, you requested "
         << total << " tokens (" << prompt_len << " in the " << prompt_word << ", " << requested.value_or(1)
         << " in the completion). Please reduce the length of the " << prompt_word << " or completion.";
      ApiError e = bad_request(os.str(), prompt_word);
      e.code = "context_length_exceeded";
      return send_error(*ex, e);
    }
    cost_tokens +=
        static_cast<int64_t>(setup.options.n) * requested.value_or(info.max_model_len - prompt_len);
  }
  // Prompt log-probabilities: echo with logprobs (completions) and/or prompt_logprobs; the engine computes the
  // larger top count once per choice.
  const bool echo_logprobs = !chat && setup.echo && setup.options.logprobs == LogprobsFormat::kCompletion;
  if (echo_logprobs) setup.prompt_top = setup.options.sampling.logprobs.value_or(0);
  if (setup.options.prompt_logprobs)
    setup.prompt_top = std::max(setup.prompt_top.value_or(0), *setup.options.prompt_logprobs);
  int64_t prompt_entries = 0;
  if (setup.prompt_top) {
    for (const PromptInput& p : setup.prompts)
      prompt_entries += static_cast<int64_t>(setup.options.n) * static_cast<int64_t>(p.ids.size()) *
                        (1 + *setup.prompt_top);
  }
  if (setup.prompt_only) cost_tokens = 0;  // the one token computed is dropped
  if (auto e = check_cost(setup.options, setup.prompts.size(), cost_tokens, prompt_entries, chat))
    return send_error(*ex, *e);
  setup.id = next_id(chat ? "chatcmpl-" : "cmpl-");
  setup.created = static_cast<int64_t>(std::time(nullptr));
  setup.model_name = m.name;
  setup.filter_rules = options_.filter_rules;
  setup.max_choices_in_flight = options_.max_choices_in_flight;

  active_.fetch_add(1);
  auto ctx = std::make_shared<GenerationContext>(this, &m, std::move(ex), std::move(setup));
  ctx->start();
}

}  // namespace xinfer::server
