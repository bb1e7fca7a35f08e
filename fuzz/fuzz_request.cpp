// libFuzzer target: a request body as a client sends it -> bounded JSON parse -> OpenAI schema validation
// of both generation endpoints, and the error body every rejection answers with. Two oracles besides the
// sanitizers: (1) wherever the bounded parser accepts a document, nlohmann's own parser (the reference)
// must accept it and build the same DOM, and wherever ours calls it invalid JSON, nlohmann must too;
// (2) every error body is itself valid JSON of the OpenAI error shape.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "xinfer/server/json_body_parser.h"
#include "xinfer/server/openai_protocol.h"

namespace {

using json = nlohmann::ordered_json;
using xinfer::server::ApiError;

void check(bool ok) {
  if (!ok) std::abort();
}

void check_error_body(const ApiError& e) {
  const json body = json::parse(e.body());
  check(body.contains("error") && body["error"]["message"].is_string() && body["error"]["type"].is_string());
  check(e.status >= 400 && e.status < 600);
}

void differential(const std::string& text) {
  xinfer::server::JsonLimits limits;
  auto ours = xinfer::server::parse_bounded_json(text, limits);
  const json ref = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (auto* j = std::get_if<json>(&ours)) {
    check(!ref.is_discarded());
    check(j->dump(-1, ' ', false, json::error_handler_t::replace) ==
          ref.dump(-1, ' ', false, json::error_handler_t::replace));
  } else if (std::get<std::string>(ours).rfind("request body is not valid JSON", 0) == 0) {
    check(ref.is_discarded());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  differential(text);
  auto parsed = xinfer::server::parse_json_body(text);
  if (auto* e = std::get_if<ApiError>(&parsed)) {
    check_error_body(*e);
    return 0;
  }
  const json& body = std::get<json>(parsed);
  constexpr int kVocab = 4096;
  auto c = xinfer::server::parse_completion_request(body, kVocab);
  if (auto* e = std::get_if<ApiError>(&c)) check_error_body(*e);
  auto chat = xinfer::server::parse_chat_request(body, kVocab);
  if (auto* e = std::get_if<ApiError>(&chat)) {
    check_error_body(*e);
  } else {
    const auto& r = std::get<xinfer::server::ChatRequest>(chat);
    check(r.messages.is_array() && !r.messages.empty());
    (void)r.messages.dump();
    (void)r.chat_template_kwargs.dump();
  }
  return 0;
}
