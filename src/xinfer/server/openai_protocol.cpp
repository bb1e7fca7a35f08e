#include "xinfer/server/openai_protocol.h"

#include <cmath>
#include <limits>

#include "xinfer/tokenizer/utf8.h"

namespace xinfer::server {

using json = nlohmann::ordered_json;

std::string ApiError::body() const {
  json e = json::object();
  e["message"] = message;
  e["type"] = type;
  e["param"] = param.empty() ? json(nullptr) : json(param);
  e["code"] = code.empty() ? json(nullptr) : json(code);
  json j = json::object();
  j["error"] = std::move(e);
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

ApiError bad_request(std::string message, std::string param) {
  ApiError e;
  e.status = 400;
  e.message = std::move(message);
  e.param = std::move(param);
  return e;
}

namespace {

const char* type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "boolean";
    case json::value_t::string: return "string";
    case json::value_t::array: return "array";
    case json::value_t::object: return "object";
    case json::value_t::number_float: return "number";
    default: return "integer";
  }
}

// Reads typed optional fields; the first error sticks.
class Reader {
 public:
  explicit Reader(const json& j) : j_(j) {}
  std::optional<ApiError> error;

  const json* find(const char* key) const {
    auto it = j_.find(key);
    if (it == j_.end() || it->is_null()) return nullptr;
    return &*it;
  }
  bool has(const char* key) const { return find(key) != nullptr; }

  void fail(std::string message, const char* param) {
    if (!error) error = bad_request(std::move(message), param);
  }
  void wrong_type(const char* key, const char* expected, const json& v) {
    fail(std::string("'") + key + "' must be " + expected + ", got " + type_name(v), key);
  }

  std::optional<double> number(const char* key) {
    const json* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_number()) return wrong_type(key, "a number", *v), std::nullopt;
    const double d = v->get<double>();
    if (!std::isfinite(d)) return fail(std::string("'") + key + "' must be finite", key), std::nullopt;
    return d;
  }
  std::optional<int64_t> integer(const char* key) {
    const json* v = find(key);
    if (!v) return std::nullopt;
    if (v->is_number_integer()) {
      if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
        return fail(std::string("'") + key + "' is out of range", key), std::nullopt;
      return v->get<int64_t>();
    }
    return wrong_type(key, "an integer", *v), std::nullopt;
  }
  std::optional<bool> boolean(const char* key) {
    const json* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_boolean()) return wrong_type(key, "a boolean", *v), std::nullopt;
    return v->get<bool>();
  }
  std::optional<std::string> string(const char* key) {
    const json* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_string()) return wrong_type(key, "a string", *v), std::nullopt;
    return v->get<std::string>();
  }

  // Range checks: fail with "'key' must be in [lo, hi], got v".
  template <typename T>
  void in_range(const char* key, std::optional<T> v, double lo, double hi, bool lo_open = false) {
    if (!v) return;
    const double d = static_cast<double>(*v);
    if ((lo_open ? d <= lo : d < lo) || d > hi) {
      std::ostringstream os;
      os << "'" << key << "' must be in " << (lo_open ? "(" : "[") << lo << ", " << hi << "], got " << *v;
      fail(os.str(), key);
    }
  }

 private:
  const json& j_;
};

bool is_token_id(const json& v, int vocab_size) {
  return v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() < vocab_size;
}

// Fields common to both endpoints. max_tokens_key: "max_tokens" (completions) or, for chat,
// max_completion_tokens with max_tokens as the deprecated fallback.
// zero_max_tokens: non-null (completions with echo) allows max_tokens 0, reported there (max_tokens is then 1).
void read_common(Reader& r, bool chat, int vocab_size, GenerationOptions* o, bool* zero_max_tokens = nullptr) {
  engine::SamplingParams& sp = o->sampling;
  if (auto v = r.number("temperature")) {
    r.in_range("temperature", v, 0, engine::kMaxTemperature);
    sp.temperature = static_cast<float>(*v);
  }
  if (auto v = r.number("top_p")) {
    r.in_range("top_p", v, 0, 1, /*lo_open=*/true);
    sp.top_p = static_cast<float>(*v);
  }
  if (auto v = r.integer("top_k")) {
    r.in_range("top_k", v, -1, std::numeric_limits<int32_t>::max());
    sp.top_k = static_cast<int32_t>(std::max<int64_t>(-1, std::min<int64_t>(*v, INT32_MAX)));
  }
  if (auto v = r.number("min_p")) {
    r.in_range("min_p", v, 0, 1);
    sp.min_p = static_cast<float>(*v);
  }
  if (auto v = r.number("presence_penalty")) {
    r.in_range("presence_penalty", v, -engine::kMaxAbsPresenceFrequency, engine::kMaxAbsPresenceFrequency);
    sp.presence_penalty = static_cast<float>(*v);
  }
  if (auto v = r.number("frequency_penalty")) {
    r.in_range("frequency_penalty", v, -engine::kMaxAbsPresenceFrequency, engine::kMaxAbsPresenceFrequency);
    sp.frequency_penalty = static_cast<float>(*v);
  }
  if (auto v = r.number("repetition_penalty")) {
    r.in_range("repetition_penalty", v, 0, 2, /*lo_open=*/true);
    sp.repetition_penalty = static_cast<float>(*v);
  }
  if (auto v = r.integer("seed")) sp.seed = *v;
  if (auto v = r.boolean("ignore_eos")) sp.ignore_eos = *v;
  if (auto v = r.integer("min_tokens")) {
    r.in_range("min_tokens", v, 0, 1 << 30);
    sp.min_tokens = static_cast<int32_t>(std::clamp<int64_t>(*v, 0, 1 << 30));
  }
  const char* max_key = chat && r.has("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  if (auto v = r.integer(max_key)) {
    if (*v == 0 && zero_max_tokens != nullptr) {
      *zero_max_tokens = true;
      v = 1;
    } else if (*v == 0 && !chat) {
      r.fail("'max_tokens' must be in [1, 1073741824], got 0 (0 only with 'echo': the prompt alone is returned)",
             max_key);
    }
    r.in_range(max_key, v, 1, 1 << 30);
    sp.max_tokens = static_cast<int32_t>(std::clamp<int64_t>(*v, 1, 1 << 30));
  }
  if (sp.max_tokens && sp.min_tokens > *sp.max_tokens)
    r.fail("'min_tokens' (" + std::to_string(sp.min_tokens) + ") must not exceed '" + max_key + "' (" +
               std::to_string(*sp.max_tokens) + ")",
           "min_tokens");
  if (auto v = r.integer("n")) {
    r.in_range("n", v, 1, kMaxN);
    o->n = static_cast<int>(std::clamp<int64_t>(*v, 1, kMaxN));
  }
  if (auto v = r.integer("priority")) {
    r.in_range("priority", v, INT32_MIN, INT32_MAX);
    o->priority = static_cast<int>(std::clamp<int64_t>(*v, INT32_MIN, INT32_MAX));
  }
  if (auto v = r.boolean("stream")) o->stream = *v;
  if (const json* so = r.find("stream_options")) {
    if (!so->is_object()) {
      r.wrong_type("stream_options", "an object", *so);
    } else if (!o->stream) {
      r.fail("'stream_options' is only allowed when 'stream' is true", "stream_options");
    } else if (auto it = so->find("include_usage"); it != so->end() && !it->is_null()) {
      if (!it->is_boolean()) r.fail("'stream_options.include_usage' must be a boolean", "stream_options");
      else o->include_usage = it->get<bool>();
    }
  }
  if (auto v = r.boolean("include_stop_str_in_output")) o->include_stop_str = *v;
  if (auto v = r.boolean("skip_special_tokens")) o->skip_special_tokens = *v;
  if (const json* stop = r.find("stop")) {
    if (stop->is_string()) {
      o->stop.push_back(stop->get<std::string>());
    } else if (stop->is_array() && stop->size() > static_cast<size_t>(kMaxStopStrings)) {
      r.fail("'stop' may hold at most " + std::to_string(kMaxStopStrings) + " strings", "stop");
    } else if (stop->is_array()) {
      for (const json& s : *stop) {
        if (!s.is_string()) {
          r.fail("'stop' must be a string or a list of strings", "stop");
          break;
        }
        o->stop.push_back(s.get<std::string>());
      }
    } else {
      r.wrong_type("stop", "a string or a list of strings", *stop);
    }
    if (o->stop.size() > static_cast<size_t>(kMaxStopStrings))
      r.fail("'stop' may hold at most " + std::to_string(kMaxStopStrings) + " strings", "stop");
    for (const std::string& s : o->stop)
      if (s.empty()) r.fail("'stop' strings must not be empty", "stop");
  }
  if (const json* ids = r.find("stop_token_ids")) {
    if (!ids->is_array()) {
      r.wrong_type("stop_token_ids", "a list of token ids", *ids);
    } else if (ids->size() > kMaxStopTokenIds) {
      r.fail("'stop_token_ids' may hold at most " + std::to_string(kMaxStopTokenIds) + " ids",
             "stop_token_ids");
    } else {
      for (const json& t : *ids) {
        if (!is_token_id(t, vocab_size)) {
          r.fail("'stop_token_ids' must hold token ids in [0, " + std::to_string(vocab_size) + ")", "stop_token_ids");
          break;
        }
        sp.stop_token_ids.push_back(t.get<int32_t>());
      }
    }
  }
  if (const json* bias = r.find("logit_bias")) {
    if (!bias->is_object()) {
      r.wrong_type("logit_bias", "an object of token id -> bias", *bias);
    } else if (bias->size() > kMaxLogitBiasEntries) {
      r.fail("'logit_bias' may hold at most " + std::to_string(kMaxLogitBiasEntries) + " entries",
             "logit_bias");
    } else {
      for (auto it = bias->begin(); it != bias->end(); ++it) {
        const std::string& key = it.key();
        char* end = nullptr;
        const long id = key.empty() ? -1 : std::strtol(key.c_str(), &end, 10);
        if (key.empty() || *end != '\0' || id < 0 || id >= vocab_size) {
          r.fail("'logit_bias' key '" + key + "' is not a token id in [0, " + std::to_string(vocab_size) + ")",
                 "logit_bias");
          break;
        }
        if (!it->is_number() || std::fabs(it->get<double>()) > engine::kMaxAbsLogitBias) {
          r.fail("'logit_bias' values must be numbers in [-100, 100]", "logit_bias");
          break;
        }
        sp.logit_bias[static_cast<int32_t>(id)] = it->get<float>();
      }
    }
  }
  if (chat) {
    const std::optional<bool> lp = r.boolean("logprobs");
    const std::optional<int64_t> top = r.integer("top_logprobs");
    r.in_range("top_logprobs", top, 0, engine::kMaxLogprobs);
    if (top && !lp.value_or(false)) r.fail("'top_logprobs' requires 'logprobs' to be true", "top_logprobs");
    if (lp.value_or(false)) {
      o->logprobs = LogprobsFormat::kChat;
      sp.logprobs = static_cast<int32_t>(std::clamp<int64_t>(top.value_or(0), 0, engine::kMaxLogprobs));
    }
  } else if (auto lp = r.integer("logprobs")) {
    r.in_range("logprobs", lp, 0, engine::kMaxLogprobs);
    o->logprobs = LogprobsFormat::kCompletion;
    sp.logprobs = static_cast<int32_t>(std::clamp<int64_t>(*lp, 0, engine::kMaxLogprobs));
  }
  if (const json* pl = r.find("prompt_logprobs")) {
    if (!pl->is_number_integer()) {
      r.wrong_type("prompt_logprobs", "an integer", *pl);
    } else if (pl->get<int64_t>() == -1) {
      r.fail("'prompt_logprobs' -1 (the whole vocabulary) is not supported by this server; the limit is " +
                 std::to_string(engine::kMaxLogprobs),
             "prompt_logprobs");
    } else {
      const std::optional<int64_t> v = pl->get<int64_t>();
      r.in_range("prompt_logprobs", v, 0, engine::kMaxLogprobs);
      o->prompt_logprobs = static_cast<int32_t>(std::clamp<int64_t>(*v, 0, engine::kMaxLogprobs));
    }
    if (o->stream)
      r.fail("'prompt_logprobs' is not available with 'stream' (use 'echo' with 'logprobs' on /v1/completions)",
             "prompt_logprobs");
  }
  if (const json* user = r.find("user"); user && !user->is_string()) r.wrong_type("user", "a string", *user);
  // Constrained output is not implemented: refuse it rather than pretend (a text answer is not JSON).
  if (const json* rf = r.find("response_format")) {
    const auto type = rf->is_object() ? rf->find("type") : rf->end();
    if (!rf->is_object() || type == rf->end() || !type->is_string()) {
      r.fail("'response_format' must be an object with a string 'type'", "response_format");
    } else if (*type != "text") {
      r.fail("'response_format' type '" + type->get<std::string>() +
                 "' is not supported by this server (only 'text'; no constrained decoding)",
             "response_format");
    }
  }
  if (!r.error) {
    // Defense in depth: the engine's own validation, with its message.
    Status s = engine::validate(sp, vocab_size);
    if (!s.ok()) r.fail(s.message(), "");
  }
}

std::optional<ApiError> read_model(Reader& r, std::string* model) {
  if (auto m = r.string("model")) *model = *m;
  return r.error;
}

}  // namespace

std::variant<json, ApiError> parse_json_body(const std::string& body, const JsonLimits& limits) {
  // nlohmann's lexer takes only well-formed UTF-8 (RFC 3629) inside strings and ASCII outside them, so a
  // body that parses is valid UTF-8, and one past a limit was valid up to where the parse stopped. The
  // whole-body UTF-8 scan (a byte loop: ~20% of the CPU a 2.7 MB body of 100,000 keys costs before its 400)
  // runs only on a syntax error, to say which byte is not UTF-8.
  auto parsed = parse_bounded_json(body, limits);
  if (auto* message = std::get_if<std::string>(&parsed)) {
    if (message->rfind("request body is not valid JSON", 0) == 0 && !tok::is_valid_utf8(body)) {
      return bad_request("request body is not valid UTF-8 (at byte " +
                         std::to_string(tok::valid_utf8_prefix(body)) + ")");
    }
    return bad_request(std::move(*message));
  }
  json& j = std::get<json>(parsed);
  if (!j.is_object()) return bad_request("request body must be a JSON object");
  return std::move(j);
}

std::variant<CompletionRequest, ApiError> parse_completion_request(const json& body, int vocab_size) {
  CompletionRequest req;
  Reader r(body);
  read_model(r, &req.model);
  const json* prompt = r.find("prompt");
  if (!prompt) return bad_request("'prompt' is required", "prompt");
  auto ids_of = [&](const json& list) -> std::optional<std::vector<int32_t>> {
    std::vector<int32_t> ids;
    for (const json& t : list) {
      if (!is_token_id(t, vocab_size)) return std::nullopt;
      ids.push_back(t.get<int32_t>());
    }
    return ids;
  };
  const std::string bad_prompt =
      "'prompt' must be a string, a list of strings, a list of token ids or a list of lists of token ids "
      "(ids in [0, " + std::to_string(vocab_size) + "))";
  if (prompt->is_string()) {
    req.prompts.emplace_back(prompt->get<std::string>());
  } else if (prompt->is_array()) {
    if (prompt->empty()) return bad_request("'prompt' must not be empty", "prompt");
    if ((*prompt)[0].is_number()) {
      auto ids = ids_of(*prompt);
      if (!ids) return bad_request(bad_prompt, "prompt");
      req.prompts.emplace_back(std::move(*ids));
    } else {
      for (const json& p : *prompt) {
        if (p.is_string()) {
          req.prompts.emplace_back(p.get<std::string>());
        } else if (p.is_array() && !p.empty()) {
          auto ids = ids_of(p);
          if (!ids) return bad_request(bad_prompt, "prompt");
          req.prompts.emplace_back(std::move(*ids));
        } else {
          return bad_request(bad_prompt, "prompt");
        }
      }
    }
  } else {
    return bad_request(bad_prompt, "prompt");
  }
  if (req.prompts.size() > static_cast<size_t>(kMaxN)) return bad_request("too many prompts in one request", "prompt");
  if (auto v = r.boolean("echo")) req.echo = *v;
  req.options.sampling.max_tokens = 16;  // OpenAI's and vLLM's default for completions
  read_common(r, /*chat=*/false, vocab_size, &req.options, req.echo ? &req.prompt_only : nullptr);
  if (r.error) return *r.error;
  if (req.prompts.size() * static_cast<size_t>(req.options.n) > static_cast<size_t>(kMaxN))
    return bad_request("number of prompts times 'n' must be at most " + std::to_string(kMaxN), "n");
  return req;
}

std::optional<ApiError> normalize_messages(const json& in, json* out) {
  if (!in.is_array()) return bad_request("'messages' must be a list of messages", "messages");
  if (in.empty()) return bad_request("'messages' must not be empty", "messages");
  if (in.size() > kMaxMessages)
    return bad_request("'messages' may hold at most " + std::to_string(kMaxMessages) + " messages",
                       "messages");
  *out = json::array();
  for (size_t i = 0; i < in.size(); ++i) {
    const json& m = in[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return bad_request(where + " must be an object", "messages");
    auto role_it = m.find("role");
    if (role_it == m.end() || !role_it->is_string()) return bad_request(where + ".role must be a string", "messages");
    const std::string role = role_it->get<std::string>();
    if (role != "system" && role != "developer" && role != "user" && role != "assistant" && role != "tool")
      return bad_request(where + ".role '" + role + "' is not one of system, developer, user, assistant, tool",
                         "messages");
    json msg = json::object();
    msg["role"] = role;
    auto content_it = m.find("content");
    const bool has_tool_calls = m.contains("tool_calls") && m["tool_calls"].is_array() && !m["tool_calls"].empty();
    if (content_it == m.end() || content_it->is_null()) {
      if (role != "assistant") return bad_request(where + ".content is required", "messages");
      if (!has_tool_calls) return bad_request(where + ".content is required (or tool_calls)", "messages");
      msg["content"] = nullptr;
    } else if (content_it->is_string()) {
      msg["content"] = content_it->get<std::string>();
    } else if (content_it->is_array()) {
      std::string text;
      for (const json& part : *content_it) {
        if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
          return bad_request(where + ".content parts must be objects with a 'type'", "messages");
        if (part["type"] != "text")
          return bad_request(where + ".content part type '" + part["type"].get<std::string>() +
                                 "' is not supported (text only)",
                             "messages");
        if (!part.contains("text") || !part["text"].is_string())
          return bad_request(where + ".content text part needs a string 'text'", "messages");
        if (!text.empty()) text += "\n";
        text += part["text"].get<std::string>();
      }
      msg["content"] = text;
    } else {
      return bad_request(where + ".content must be a string or a list of content parts", "messages");
    }
    if (auto it = m.find("name"); it != m.end() && !it->is_null()) {
      if (!it->is_string()) return bad_request(where + ".name must be a string", "messages");
      msg["name"] = *it;
    }
    if (has_tool_calls) msg["tool_calls"] = m["tool_calls"];
    if (auto it = m.find("tool_call_id"); it != m.end() && !it->is_null()) {
      if (!it->is_string()) return bad_request(where + ".tool_call_id must be a string", "messages");
      msg["tool_call_id"] = *it;
    }
    out->push_back(std::move(msg));
  }
  return std::nullopt;
}

std::variant<ChatRequest, ApiError> parse_chat_request(const json& body, int vocab_size) {
  ChatRequest req;
  Reader r(body);
  read_model(r, &req.model);
  const json* messages = r.find("messages");
  if (!messages) return bad_request("'messages' is required", "messages");
  if (auto err = normalize_messages(*messages, &req.messages)) return *err;
  if (auto v = r.boolean("add_generation_prompt")) req.add_generation_prompt = *v;
  if (const json* kw = r.find("chat_template_kwargs")) {
    if (!kw->is_object()) r.wrong_type("chat_template_kwargs", "an object", *kw);
    else req.chat_template_kwargs = *kw;
  }
  if (r.has("echo")) r.fail("'echo' is only supported by /v1/completions", "echo");
  // Tool calls are not parsed out of the output: a request that forces a call ("required" or a named
  // function) cannot be honoured. "none" and "auto" are (the model answers in text).
  if (const json* choice = r.find("tool_choice")) {
    if (choice->is_string()) {
      if (*choice == "required") {
        r.fail("'tool_choice' 'required' is not supported by this server (no tool-call parsing)",
               "tool_choice");
      } else if (*choice != "none" && *choice != "auto") {
        r.fail("'tool_choice' must be 'none', 'auto' or 'required'", "tool_choice");
      }
    } else {
      r.fail("'tool_choice' naming a function is not supported by this server (no tool-call parsing)",
             "tool_choice");
    }
  }
  read_common(r, /*chat=*/true, vocab_size, &req.options);
  if (r.error) return *r.error;
  return req;
}

}  // namespace xinfer::server
