#include "xinfer/server/generation_context.h"

#include <chrono>
#include <cmath>
#include <functional>

#include "xinfer/core/logging.h"
#include "xinfer/tokenizer/utf8.h"

namespace xinfer::server {

using json = nlohmann::ordered_json;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double finite_logprob(float lp) { return std::isfinite(lp) ? lp : -9999.0; }

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

ApiError submit_error(const Status& s) {
  ApiError e;
  e.message = s.message();
  switch (s.code()) {
    case StatusCode::kResourceExhausted:
      e.status = 429;
      e.type = "rate_limit_error";
      e.code = "rate_limit_exceeded";
      e.message = "the server is overloaded (too many waiting requests); retry later: " + s.message();
      break;
    case StatusCode::kUnavailable:
      e.status = 503;
      e.type = "server_error";
      e.code = "unavailable";
      break;
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
      e.status = 400;
      break;
    default:
      e.status = 500;
      e.type = "server_error";
      break;
  }
  return e;
}

}  // namespace

GenerationContext::GenerationContext(OpenAIServer* server, const ServedModel* model,
                                     std::shared_ptr<HttpExchange> exchange, GenerationSetup setup)
    : server_(server), model_(model), ex_(std::move(exchange)), setup_(std::move(setup)) {
  group_ = std::hash<std::string>{}(setup_.id) | 1;  // nonzero: the choices share one admission slot
  const int n = setup_.options.n;
  choices_.resize(setup_.prompts.size() * static_cast<size_t>(n));
  for (size_t p = 0; p < setup_.prompts.size(); ++p) {
    for (int i = 0; i < n; ++i) {
      Choice& c = choices_[p * static_cast<size_t>(n) + static_cast<size_t>(i)];
      c.index = static_cast<int>(p) * n + i;
      c.prompt = p;
      c.request_id = setup_.id + "-" + std::to_string(c.index);
      c.detok.emplace(*model_->tokenizer, setup_.options.skip_special_tokens, setup_.prompts[p].ids);
      c.filter.emplace(setup_.options.stop, setup_.filter_rules, setup_.options.include_stop_str);
      if (setup_.echo) c.text = setup_.prompts[p].text;
      // Offsets are cumulative lengths of the returned token strings (vLLM); with echo and logprobs they
      // start at the prompt's first token.
      c.text_offset = echo_logprobs() ? 0 : static_cast<int64_t>(tok::count_codepoints(tok::utf8_lossy(c.text)));
      if (setup_.options.logprobs == LogprobsFormat::kCompletion) {
        c.offsets.emplace(*model_->tokenizer, setup_.options.skip_special_tokens, setup_.prompts[p].ids);
        c.logprobs = json{{"tokens", json::array()}, {"token_logprobs", json::array()},
                          {"top_logprobs", json::array()}, {"text_offset", json::array()}};
      } else if (setup_.options.logprobs == LogprobsFormat::kChat) {
        c.logprobs = json{{"content", json::array()}};
      }
    }
  }
}

bool GenerationContext::submit_more() {
  auto self = shared_from_this();
  const double now = now_s();
  const size_t cap = static_cast<size_t>(std::max(1, setup_.max_choices_in_flight));
  while (!responded_ && next_submit_ < choices_.size() && in_flight_ < cap) {
    const size_t i = next_submit_++;
    Choice& c = choices_[i];
    engine::GenerationRequest req;
    req.request_id = c.request_id;
    req.prompt_ids = setup_.prompts[c.prompt].ids;
    req.sampling = setup_.options.sampling;
    if (!req.sampling.max_tokens) {
      req.sampling.max_tokens = model_->engine->info().max_model_len - static_cast<int>(req.prompt_ids.size());
    }
    req.priority = setup_.options.priority;
    req.prompt_logprobs = setup_.prompt_top;
    req.group = group_;
    req.rng_stream = static_cast<uint64_t>(c.index % setup_.options.n);
    // A choice submitted later queues as a new arrival: it does not overtake other clients' requests.
    req.arrival_time = now;
    std::shared_ptr<HttpExchange> ex = ex_;
    Status s = model_->engine->submit(std::move(req), [self, ex, i](engine::RequestOutput out) {
      ex->post([self, i, out = std::move(out)]() mutable { self->on_output(i, std::move(out)); });
    });
    if (!s.ok()) {
      fail(submit_error(s));
      maybe_release();
      return false;
    }
    c.submitted = true;
    ++in_flight_;
  }
  return true;
}

void GenerationContext::start() {
  auto self = shared_from_this();
  if (!submit_more()) return;
  ex_->set_on_disconnect([self] { self->on_disconnect(); });
  if (!setup_.options.stream) return;
  ex_->start_stream();
  stream_started_ = true;
  server_->counters().responses[200].fetch_add(1);
  // Opening chunks: the assistant role (chat) or the echoed prompt (completions).
  for (Choice& c : choices_) {
    // With echo and logprobs the prompt goes out with its logprobs, in the first output's chunk (vLLM).
    if (!setup_.chat && (!setup_.echo || echo_logprobs())) break;
    json chunk = chunk_base();
    json choice = json::object();
    choice["index"] = c.index;
    if (setup_.chat) {
      choice["delta"] = json{{"role", "assistant"}, {"content", ""}};
    } else {
      choice["text"] = c.text;
    }
    choice["logprobs"] = nullptr;
    choice["finish_reason"] = nullptr;
    chunk["choices"] = json::array({choice});
    send_event(chunk);
  }
}

json GenerationContext::chunk_base() const {
  json j = json::object();
  j["id"] = setup_.id;
  j["object"] = setup_.chat ? "chat.completion.chunk" : "text_completion";
  j["created"] = setup_.created;
  j["model"] = setup_.model_name;
  return j;
}

void GenerationContext::send_event(const json& j) {
  json copy = j;
  if (setup_.options.include_usage && !copy.contains("usage")) copy["usage"] = nullptr;
  ex_->write("data: " + dump(copy) + "\n\n");
}

json GenerationContext::logprob_delta(Choice& c, const engine::RequestOutput& out, size_t count) {
  const tok::Tokenizer& t = *model_->tokenizer;
  auto token_text = [&](int32_t id) { return t.decode(std::span<const int32_t>(&id, 1), /*skip_special=*/false); };
  auto bytes_of = [](const std::string& s) {
    json b = json::array();
    for (unsigned char ch : s) b.push_back(static_cast<int>(ch));
    return b;
  };
  if (setup_.options.logprobs == LogprobsFormat::kChat) {
    json content = json::array();
    for (size_t k = 0; k < count && k < out.new_logprobs.size(); ++k) {
      const engine::TokenLogprob& lp = out.new_logprobs[k];
      const std::string s = token_text(lp.token);
      json e = json::object();
      e["token"] = s;
      e["logprob"] = finite_logprob(lp.logprob);
      e["bytes"] = bytes_of(s);
      json top = json::array();
      for (const auto& [id, v] : lp.top) {
        const std::string ts = token_text(id);
        top.push_back(json{{"token", ts}, {"logprob", finite_logprob(v)}, {"bytes", bytes_of(ts)}});
      }
      e["top_logprobs"] = std::move(top);
      content.push_back(std::move(e));
    }
    return json{{"content", std::move(content)}};
  }
  json d{{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()},
         {"text_offset", json::array()}};
  for (size_t k = 0; k < count && k < out.new_logprobs.size(); ++k) {
    const engine::TokenLogprob& lp = out.new_logprobs[k];
    const std::string s = token_text(lp.token);
    d["tokens"].push_back(s);
    d["token_logprobs"].push_back(finite_logprob(lp.logprob));
    // The chosen token and the top ones (up to logprobs + 1 entries, as OpenAI and vLLM).
    json top = json::object();
    top[s] = finite_logprob(lp.logprob);
    for (const auto& [id, v] : lp.top) top[token_text(id)] = finite_logprob(v);
    d["top_logprobs"].push_back(std::move(top));
    // Where the token is in the text, not the sum of the tokens' texts alone (token_offsets.h says why).
    const TokenOffsets::Step step = c.offsets->push(lp.token);
    d["text_offset"].push_back(c.text_offset + step.start);
    c.text_offset += step.width;
  }
  return d;
}

json GenerationContext::prompt_logprob_delta(Choice& c, const engine::RequestOutput& out) {
  const tok::Tokenizer& t = *model_->tokenizer;
  const std::vector<int32_t>& ids = setup_.prompts[c.prompt].ids;
  const size_t k = static_cast<size_t>(setup_.options.sampling.logprobs.value_or(0));
  json d{{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()},
         {"text_offset", json::array()}};
  // Offsets line up with the echoed text (c.text is still the prompt alone): each token's place in the text
  // the prompt decodes to in context (token_offsets.h), special tokens skipped, so a special token the
  // tokenizer added (a BOS) that the text lacks has width 0; one whose literal is next in the text (a chat
  // template's) spans it.
  const std::string& text = c.text;
  TokenOffsets offsets(t, /*skip_special_tokens=*/true);
  size_t at = 0;  // bytes of `text` accounted for
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::string s = t.decode(std::span<const int32_t>(&ids[i], 1), /*skip_special=*/false);
    d["tokens"].push_back(s);
    const TokenOffsets::Step step = offsets.push(ids[i]);
    if (t.is_special(ids[i]) && !s.empty() && at <= text.size() && text.compare(at, s.size(), s) == 0) {
      d["text_offset"].push_back(c.text_offset);
      c.text_offset += static_cast<int64_t>(tok::count_codepoints(s));
      at += s.size();
    } else {
      d["text_offset"].push_back(c.text_offset + step.start);
      c.text_offset += step.width;
      at += step.added.size();
    }
    if (i == 0 || i - 1 >= out.prompt_logprobs.size()) {  // nothing predicts the first token
      d["token_logprobs"].push_back(nullptr);
      d["top_logprobs"].push_back(nullptr);
      continue;
    }
    const engine::TokenLogprob& lp = out.prompt_logprobs[i - 1];
    d["token_logprobs"].push_back(finite_logprob(lp.logprob));
    json top = json::object();
    top[s] = finite_logprob(lp.logprob);
    for (size_t j = 0; j < lp.top.size() && j < k; ++j) {
      const int32_t id = lp.top[j].first;
      top[t.decode(std::span<const int32_t>(&id, 1), false)] = finite_logprob(lp.top[j].second);
    }
    d["top_logprobs"].push_back(std::move(top));
  }
  // Generated text follows the echo.
  c.text_offset = static_cast<int64_t>(tok::count_codepoints(tok::utf8_lossy(text)));
  return d;
}

json GenerationContext::prompt_logprob_list(const Choice& c, const engine::RequestOutput& out) const {
  const tok::Tokenizer& t = *model_->tokenizer;
  const std::vector<int32_t>& ids = setup_.prompts[c.prompt].ids;
  const size_t k = static_cast<size_t>(setup_.options.prompt_logprobs.value_or(0));
  auto entry = [&](int32_t id, float logprob, int32_t rank) {
    return json{{"logprob", finite_logprob(logprob)},
                {"rank", rank},
                {"decoded_token", t.decode(std::span<const int32_t>(&id, 1), /*skip_special=*/false)}};
  };
  json list = json::array({nullptr});
  for (size_t i = 1; i < ids.size() && i - 1 < out.prompt_logprobs.size(); ++i) {
    const engine::TokenLogprob& lp = out.prompt_logprobs[i - 1];
    json d = json::object();
    d[std::to_string(lp.token)] = entry(lp.token, lp.logprob, lp.rank);  // the prompt token first (vLLM)
    for (size_t j = 0; j < lp.top.size() && j < k; ++j)
      d[std::to_string(lp.top[j].first)] = entry(lp.top[j].first, lp.top[j].second, static_cast<int32_t>(j + 1));
    list.push_back(std::move(d));
  }
  return list;
}

void GenerationContext::append_logprobs(json& acc, const json& delta) const {
  for (auto it = delta.begin(); it != delta.end(); ++it)
    for (const json& v : *it) acc[it.key()].push_back(v);
}

void GenerationContext::on_output(size_t index, engine::RequestOutput out) {
  Choice& c = choices_[index];
  if (out.finished) {
    c.engine_done = true;
    --in_flight_;
  }
  if (out.finished && !responded_ && !submit_more()) return;
  if (responded_ || !c.finish_reason.empty()) {
    maybe_release();
    return;
  }
  if (out.finished && out.finish_reason == engine::FinishReason::kError) {
    c.num_tokens += static_cast<int>(out.new_token_ids.size());
    ApiError e;
    e.status = 500;
    e.type = "server_error";
    e.message = "generation failed: " + out.error;
    finish_choice(c, "error");
    fail(e);
    maybe_release();
    return;
  }
  // The first output carries the prompt's logprobs (when asked): echo entries lead the logprobs, and the
  // echoed prompt text leads a streamed completion's first chunk.
  json prompt_lp;
  std::string prompt_text;
  if (!c.prompt_seen) {
    c.prompt_seen = true;
    if (echo_logprobs()) {
      prompt_lp = prompt_logprob_delta(c, out);
      if (setup_.options.stream) prompt_text = c.text;
    }
    if (setup_.options.prompt_logprobs) c.prompt_logprobs = prompt_logprob_list(c, out);
  }
  std::string delta;
  std::string reason;
  size_t consumed = 0;
  // max_tokens 0 with echo: the one token computed is dropped, the prompt alone is the answer.
  if (setup_.prompt_only) {
    json lp = prompt_lp.is_null() ? json() : std::move(prompt_lp);
    if (!out.finished) {  // max_tokens is 1: the first output is final; abort anything else
      model_->engine->abort(c.request_id);
    }
    finish_choice(c, "length");
    if (setup_.options.stream) {
      json chunk = chunk_base();
      json choice = json::object();
      choice["index"] = c.index;
      choice["text"] = echo_logprobs() ? c.text : std::string();
      choice["logprobs"] = lp.is_null() ? json(nullptr) : lp;
      choice["finish_reason"] = "length";
      chunk["choices"] = json::array({choice});
      send_event(chunk);
    } else if (!lp.is_null()) {
      append_logprobs(c.logprobs, lp);
    }
    maybe_complete();
    maybe_release();
    return;
  }
  for (int32_t id : out.new_token_ids) {
    ++consumed;
    ++c.num_tokens;
    FilterOutput f = c.filter->push(c.detok->push(id));
    delta += f.text;
    if (f.stop != FilterStop::kNone) {
      reason = f.stop == FilterStop::kContentFilter ? "content_filter" : "stop";
      break;
    }
  }
  if (reason.empty() && out.finished) {
    FilterOutput f = c.filter->push(c.detok->flush());
    delta += f.text;
    if (f.stop == FilterStop::kNone) {
      FilterOutput g = c.filter->finish();
      delta += g.text;
      f.stop = g.stop;
    }
    if (f.stop != FilterStop::kNone) {
      reason = f.stop == FilterStop::kContentFilter ? "content_filter" : "stop";
    } else {
      reason = engine::finish_reason_name(out.finish_reason);
    }
  } else if (!reason.empty() && !out.finished) {
    model_->engine->abort(c.request_id);  // a stop string or rule ended it: free its blocks now
  }
  json lp;
  if (setup_.options.logprobs != LogprobsFormat::kNone) lp = logprob_delta(c, out, consumed);
  if (!prompt_lp.is_null()) {
    append_logprobs(prompt_lp, lp);
    lp = std::move(prompt_lp);
  }
  c.text += delta;
  if (!reason.empty()) finish_choice(c, reason);
  if (setup_.options.stream) {
    const bool has_lp = !lp.is_null() && !lp.begin()->empty();
    if (!delta.empty() || has_lp || !reason.empty() || !prompt_text.empty()) {
      json chunk = chunk_base();
      json choice = json::object();
      choice["index"] = c.index;
      if (setup_.chat) {
        choice["delta"] = delta.empty() && !reason.empty() ? json::object() : json{{"content", delta}};
      } else {
        choice["text"] = prompt_text + delta;
      }
      choice["logprobs"] = has_lp ? lp : json(nullptr);
      choice["finish_reason"] = reason.empty() ? json(nullptr) : json(reason);
      chunk["choices"] = json::array({choice});
      send_event(chunk);
    }
  } else if (!lp.is_null()) {
    append_logprobs(c.logprobs, lp);
  }
  maybe_complete();
  maybe_release();
}

void GenerationContext::finish_choice(Choice& c, const std::string& reason) {
  c.finish_reason = reason;
  OpenAIServer::Counters& k = server_->counters();
  if (reason == "stop") k.finished_stop.fetch_add(1);
  else if (reason == "length") k.finished_length.fetch_add(1);
  else if (reason == "content_filter") k.finished_content_filter.fetch_add(1);
  else if (reason == "error") k.finished_error.fetch_add(1);
  else k.finished_abort.fetch_add(1);
}

json GenerationContext::usage() const {
  int64_t prompt = 0, completion = 0;
  for (const PromptInput& p : setup_.prompts) prompt += static_cast<int64_t>(p.ids.size());
  for (const Choice& c : choices_) completion += c.num_tokens;
  return json{{"prompt_tokens", prompt}, {"total_tokens", prompt + completion}, {"completion_tokens", completion}};
}

json GenerationContext::full_response() const {
  json j = json::object();
  j["id"] = setup_.id;
  j["object"] = setup_.chat ? "chat.completion" : "text_completion";
  j["created"] = setup_.created;
  j["model"] = setup_.model_name;
  json choices = json::array();
  for (const Choice& c : choices_) {
    json ch = json::object();
    ch["index"] = c.index;
    if (setup_.chat) {
      ch["message"] = json{{"role", "assistant"}, {"content", c.text}};
    } else {
      ch["text"] = c.text;
    }
    ch["logprobs"] = c.logprobs.is_null() ? json(nullptr) : c.logprobs;
    ch["finish_reason"] = c.finish_reason;
    if (setup_.options.prompt_logprobs && !setup_.chat) ch["prompt_logprobs"] = c.prompt_logprobs;
    choices.push_back(std::move(ch));
  }
  j["choices"] = std::move(choices);
  // Chat has one prompt: vLLM reports its prompt_logprobs once, on the response.
  if (setup_.options.prompt_logprobs && setup_.chat && !choices_.empty())
    j["prompt_logprobs"] = choices_[0].prompt_logprobs;
  j["usage"] = usage();
  return j;
}

void GenerationContext::maybe_complete() {
  if (responded_) return;
  for (const Choice& c : choices_)
    if (c.finish_reason.empty()) return;
  responded_ = true;
  if (setup_.options.stream) {
    if (setup_.options.include_usage) {
      json chunk = chunk_base();
      chunk["choices"] = json::array();
      chunk["usage"] = usage();
      send_event(chunk);
    }
    ex_->write("data: [DONE]\n\n");
    ex_->end_stream();
  } else {
    server_->counters().responses[200].fetch_add(1);
    ex_->respond(200, "application/json", dump(full_response()));
  }
}

void GenerationContext::fail(const ApiError& error) {
  if (responded_) return;
  responded_ = true;
  abort_running();
  if (stream_started_) {
    // Headers (200) are out: report the error as an event, then end the stream.
    ex_->write("data: " + error.body() + "\n\n");
    ex_->write("data: [DONE]\n\n");
    ex_->end_stream();
    return;
  }
  server_->counters().responses[static_cast<size_t>(error.status) % 600].fetch_add(1);
  ex_->respond(error.status, "application/json", error.body());
}

void GenerationContext::abort_running() {
  for (Choice& c : choices_)
    if (c.submitted && !c.engine_done) model_->engine->abort(c.request_id);
}

void GenerationContext::on_disconnect() {
  if (responded_) return;
  responded_ = true;
  server_->counters().client_disconnects.fetch_add(1);
  abort_running();
}

void GenerationContext::maybe_release() {
  if (released_) return;
  for (const Choice& c : choices_)
    if (c.submitted && !c.engine_done) return;
  released_ = true;
  server_->request_done();
}

}  // namespace xinfer::server
