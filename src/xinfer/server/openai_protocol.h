// OpenAI request schema: JSON bodies of /v1/completions and /v1/chat/completions -> validated request
// structs, and the OpenAI error shape. Pure functions (no engine, no tokenizer) so every rule is unit-tested.
//
// Validation is strict about types (a string where a number belongs is a 400 naming the field) and ranges
// (the same ones as engine::validate, checked here first so the message names the OpenAI field). Unknown
// fields are ignored, as vLLM does. null means "not given".
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "xinfer/engine/sampling_params.h"
#include "xinfer/server/json_body_parser.h"

namespace xinfer::server {

// {"error": {"message", "type", "param", "code"}} with an HTTP status.
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // "" -> null
  std::string code;   // "" -> null
  std::string body() const;
};

ApiError bad_request(std::string message, std::string param = "");

inline constexpr int kMaxN = 128;
inline constexpr int kMaxStopStrings = 16;
inline constexpr size_t kMaxMessages = 4096;  // chat messages in one request
inline constexpr size_t kMaxLogitBiasEntries = 1024;
inline constexpr size_t kMaxStopTokenIds = 1024;

enum class LogprobsFormat { kNone, kCompletion, kChat };

// Fields shared by both endpoints.
struct GenerationOptions {
  engine::SamplingParams sampling;  // max_tokens left unset when the client gave none
  int n = 1;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;       // stream_options.include_usage
  bool include_stop_str = false;    // vLLM's include_stop_str_in_output
  bool skip_special_tokens = true;
  int priority = 0;
  LogprobsFormat logprobs = LogprobsFormat::kNone;
  // vLLM's prompt_logprobs extension: per choice (completions) or per response (chat), a list with null
  // for the first prompt token, then {token id: {logprob, rank, decoded_token}} holding the prompt token and
  // the this-many most likely tokens. Not with stream (the chunks have no field for it).
  std::optional<int32_t> prompt_logprobs;
};

// A completion prompt: text (tokenized by the server) or token ids.
using Prompt = std::variant<std::string, std::vector<int32_t>>;

struct CompletionRequest {
  std::string model;
  std::vector<Prompt> prompts;  // a batch; choices are indexed prompt * n + i
  bool echo = false;
  // max_tokens 0 with echo (OpenAI legacy, vLLM): the prompt alone comes back (with its logprobs when
  // asked); options.sampling.max_tokens is then 1 and that token is computed and dropped.
  bool prompt_only = false;
  GenerationOptions options;
};

struct ChatRequest {
  std::string model;
  nlohmann::ordered_json messages;  // validated; content parts joined into strings
  bool add_generation_prompt = true;
  nlohmann::ordered_json chat_template_kwargs = nlohmann::ordered_json::object();
  GenerationOptions options;
};

// vocab_size bounds token ids (prompts, logit_bias, stop_token_ids).
std::variant<CompletionRequest, ApiError> parse_completion_request(const nlohmann::ordered_json& body,
                                                                   int vocab_size);
std::variant<ChatRequest, ApiError> parse_chat_request(const nlohmann::ordered_json& body, int vocab_size);

// Validates and normalizes a chat `messages` list (roles system/developer/user/assistant/tool; content a
// string, null for an assistant message, or a list of {"type": "text", "text": ...} parts, joined).
std::optional<ApiError> normalize_messages(const nlohmann::ordered_json& in, nlohmann::ordered_json* out);

// Parses a request body within `limits` (json_body_parser.h): malformed JSON, invalid UTF-8, a limit
// passed or a non-object -> 400.
std::variant<nlohmann::ordered_json, ApiError> parse_json_body(const std::string& body,
                                                               const JsonLimits& limits = {});

}  // namespace xinfer::server
