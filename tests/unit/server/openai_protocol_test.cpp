// Request parsing and validation (OpenAI field names, types, ranges) without a server.
#include "xinfer/server/openai_protocol.h"

#include <gtest/gtest.h>

namespace xinfer::server {
namespace {

using json = nlohmann::ordered_json;

TEST(OpenAIProtocol, CompletionDefaultsAndFields) {
  auto r = parse_completion_request(json::parse(R"({"model": "m", "prompt": "hi", "temperature": 0.5, "top_p": 0.9,
      "top_k": 5, "min_p": 0.1, "n": 3, "stop": ["a", "b"], "seed": 42, "logprobs": 2, "logit_bias": {"7": -100},
      "ignore_eos": true, "priority": -1, "presence_penalty": 1, "frequency_penalty": -1, "repetition_penalty": 1.2,
      "stream": true, "stream_options": {"include_usage": true}, "user": "u"})"),
                                    100);
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(r)) << std::get<ApiError>(r).message;
  const CompletionRequest& c = std::get<CompletionRequest>(r);
  EXPECT_EQ(c.model, "m");
  ASSERT_EQ(c.prompts.size(), 1u);
  EXPECT_EQ(std::get<std::string>(c.prompts[0]), "hi");
  const engine::SamplingParams& sp = c.options.sampling;
  EXPECT_FLOAT_EQ(sp.temperature, 0.5f);
  EXPECT_EQ(sp.top_k, 5);
  EXPECT_EQ(sp.max_tokens, 16);  // completions default
  EXPECT_EQ(sp.seed, 42);
  EXPECT_EQ(sp.logprobs, 2);
  EXPECT_EQ(sp.logit_bias.at(7), -100.0f);
  EXPECT_TRUE(sp.ignore_eos);
  EXPECT_EQ(c.options.n, 3);
  EXPECT_EQ(c.options.stop, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(c.options.priority, -1);
  EXPECT_TRUE(c.options.stream && c.options.include_usage);
  EXPECT_EQ(c.options.logprobs, LogprobsFormat::kCompletion);
}

TEST(OpenAIProtocol, PromptShapes) {
  auto ids = parse_completion_request(json::parse(R"({"prompt": [1, 2, 3]})"), 10);
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(ids));
  EXPECT_EQ(std::get<std::vector<int32_t>>(std::get<CompletionRequest>(ids).prompts[0]), (std::vector<int32_t>{1, 2, 3}));
  auto batch = parse_completion_request(json::parse(R"({"prompt": ["a", [4, 5]]})"), 10);
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(batch));
  EXPECT_EQ(std::get<CompletionRequest>(batch).prompts.size(), 2u);
  for (const char* bad : {R"({"prompt": [1, 10]})", R"({"prompt": [[]]})", R"({"prompt": {}})", R"({"prompt": [1.5]})",
                          R"({})"}) {
    auto r = parse_completion_request(json::parse(bad), 10);
    ASSERT_TRUE(std::holds_alternative<ApiError>(r)) << bad;
    EXPECT_EQ(std::get<ApiError>(r).status, 400);
    EXPECT_EQ(std::get<ApiError>(r).param, "prompt") << bad;
  }
}

TEST(OpenAIProtocol, TypeAndRangeErrorsNameTheField) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"prompt": "x", "temperature": "1"})", "temperature"}, {R"({"prompt": "x", "temperature": 2.5})", "temperature"},
      {R"({"prompt": "x", "top_p": 0})", "top_p"},               {R"({"prompt": "x", "max_tokens": 0})", "max_tokens"},
      {R"({"prompt": "x", "n": 0})", "n"},                       {R"({"prompt": "x", "logprobs": 21})", "logprobs"},
      {R"({"prompt": "x", "stop": [1]})", "stop"},               {R"({"prompt": "x", "logit_bias": {"x": 1}})", "logit_bias"},
      {R"({"prompt": "x", "seed": 1.5})", "seed"},               {R"({"prompt": "x", "stream_options": {}})", "stream_options"},
      {R"({"prompt": "x", "min_tokens": 20, "max_tokens": 5})", "min_tokens"},
      {R"({"prompt": "x", "prompt_logprobs": 21})", "prompt_logprobs"},
      {R"({"prompt": "x", "prompt_logprobs": -1})", "prompt_logprobs"},
      {R"({"prompt": "x", "prompt_logprobs": 1, "stream": true})", "prompt_logprobs"},
      {R"({"prompt": "x", "echo": false, "max_tokens": 0})", "max_tokens"},
  };
  for (const auto& [body, param] : cases) {
    auto r = parse_completion_request(json::parse(body), 10);
    ASSERT_TRUE(std::holds_alternative<ApiError>(r)) << body;
    EXPECT_EQ(std::get<ApiError>(r).param, param) << body << ": " << std::get<ApiError>(r).message;
  }
}

TEST(OpenAIProtocol, EchoLogprobsAndPromptLogprobs) {
  // lm-eval's loglikelihood request: echo + logprobs with max_tokens 0 (the prompt alone) or 1.
  auto r = parse_completion_request(
      json::parse(R"({"prompt": [[1, 2, 3], [4, 5]], "echo": true, "logprobs": 1, "max_tokens": 0})"), 10);
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(r)) << std::get<ApiError>(r).message;
  const CompletionRequest& c = std::get<CompletionRequest>(r);
  EXPECT_TRUE(c.echo && c.prompt_only);
  EXPECT_EQ(c.options.sampling.max_tokens, 1);  // computed, then dropped
  EXPECT_EQ(c.options.logprobs, LogprobsFormat::kCompletion);
  EXPECT_EQ(c.options.sampling.logprobs, 1);
  EXPECT_FALSE(c.options.prompt_logprobs.has_value());
  r = parse_completion_request(json::parse(R"({"prompt": "x", "echo": true, "logprobs": 0, "max_tokens": 1})"), 10);
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(r));
  EXPECT_FALSE(std::get<CompletionRequest>(r).prompt_only);
  r = parse_completion_request(json::parse(R"({"prompt": "x", "prompt_logprobs": 20})"), 10);
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(r));
  EXPECT_EQ(std::get<CompletionRequest>(r).options.prompt_logprobs, 20);
  auto chat = parse_chat_request(json::parse(R"({"messages": [{"role": "user", "content": "x"}], "prompt_logprobs": 0})"), 10);
  ASSERT_TRUE(std::holds_alternative<ChatRequest>(chat));
  EXPECT_EQ(std::get<ChatRequest>(chat).options.prompt_logprobs, 0);
  // max_tokens 0 is a completions echo feature only.
  chat = parse_chat_request(json::parse(R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0})"), 10);
  ASSERT_TRUE(std::holds_alternative<ApiError>(chat));
  EXPECT_EQ(std::get<ApiError>(chat).param, "max_tokens");
}

TEST(OpenAIProtocol, ChatMessagesAndLogprobs) {
  auto r = parse_chat_request(json::parse(R"({"messages": [{"role": "system", "content": "s"},
      {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "1"}]}],
      "max_completion_tokens": 7, "max_tokens": 99, "logprobs": true, "top_logprobs": 3})"),
                              10);
  ASSERT_TRUE(std::holds_alternative<ChatRequest>(r)) << std::get<ApiError>(r).message;
  const ChatRequest& c = std::get<ChatRequest>(r);
  EXPECT_EQ(c.messages[1]["content"], "a\nb");
  EXPECT_TRUE(c.messages[2]["content"].is_null());
  EXPECT_EQ(c.options.sampling.max_tokens, 7);  // max_completion_tokens wins
  EXPECT_FALSE(parse_chat_request(json::parse(R"({"messages": [{"role": "user", "content": "x"}]})"), 10)
                   .index() == 1);
  EXPECT_EQ(std::get<ChatRequest>(r).options.sampling.logprobs, 3);
  for (const char* bad : {R"({"messages": []})", R"({"messages": [{"role": "bot", "content": "x"}]})",
                          R"({"messages": [{"role": "user"}]})", R"({"messages": [{"role": "user", "content": 1}]})",
                          R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})"}) {
    EXPECT_TRUE(std::holds_alternative<ApiError>(parse_chat_request(json::parse(bad), 10))) << bad;
  }
}

TEST(OpenAIProtocol, JsonBodyAndErrorShape) {
  EXPECT_TRUE(std::holds_alternative<ApiError>(parse_json_body("{")));
  EXPECT_TRUE(std::holds_alternative<ApiError>(parse_json_body("[]")));
  auto bad_utf8 = parse_json_body("{\"a\": \"\xff\"}");
  ASSERT_TRUE(std::holds_alternative<ApiError>(bad_utf8));
  EXPECT_NE(std::get<ApiError>(bad_utf8).message.find("UTF-8"), std::string::npos);
  EXPECT_TRUE(std::holds_alternative<json>(parse_json_body(R"({"a": "\u00e9"})")));
  // The UTF-8 scan runs only after a syntax error; the lexer refuses every ill-formed sequence inside a
  // string (overlong, surrogate, past U+10FFFF, truncated) and any non-ASCII byte outside one.
  for (const char* bad : {"{\"a\": \"\xc0\x80\"}", "{\"a\": \"\xed\xa0\x80\"}", "{\"a\": \"\xf4\x90\x80\x80\"}",
                          "{\"a\": \"\xe6\x97\"}", "{\"a\": 1}\xff"}) {
    auto r = parse_json_body(bad);
    ASSERT_TRUE(std::holds_alternative<ApiError>(r)) << bad;
    EXPECT_NE(std::get<ApiError>(r).message.find("not valid UTF-8"), std::string::npos) << bad;
  }
  EXPECT_TRUE(std::holds_alternative<json>(parse_json_body("{\"a\": \"\xe6\x97\xa5 \xf0\x9f\x99\x82\"}")));
  auto misplaced = parse_json_body("{\"a\"\xc3\xa9: 1}");  // valid UTF-8, not JSON
  ASSERT_TRUE(std::holds_alternative<ApiError>(misplaced));
  EXPECT_NE(std::get<ApiError>(misplaced).message.find("not valid JSON"), std::string::npos);
  json e = json::parse(bad_request("nope", "x").body());
  EXPECT_EQ(e["error"]["message"], "nope");
  EXPECT_EQ(e["error"]["type"], "invalid_request_error");
  EXPECT_EQ(e["error"]["param"], "x");
  EXPECT_TRUE(e["error"]["code"].is_null());
}

}  // namespace
}  // namespace xinfer::server

namespace xinfer::server {
namespace {

std::string chat_error(const std::string& extra) {
  auto r = parse_chat_request(
      nlohmann::ordered_json::parse(R"({"messages": [{"role": "user", "content": "hi"}])" + extra + "}"),
      100);
  return std::holds_alternative<ApiError>(r) ? std::get<ApiError>(r).message : std::string();
}

TEST(OpenAIProtocol, UnsupportedFeaturesAreRefusedNotIgnored) {
  const std::string tools =
      R"(, "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}])";
  EXPECT_NE(
      chat_error(tools + R"(, "tool_choice": "required")").find("'tool_choice' 'required' is not supported"),
      std::string::npos);
  EXPECT_NE(chat_error(tools + R"(, "tool_choice": {"type": "function", "function": {"name": "f"}})")
                .find("naming a function is not supported"),
            std::string::npos);
  EXPECT_EQ(chat_error(tools + R"(, "tool_choice": "auto")"), "");
  EXPECT_EQ(chat_error(tools + R"(, "tool_choice": "none")"), "");
  EXPECT_NE(
      chat_error(R"(, "response_format": {"type": "json_object"})").find("'json_object' is not supported"),
      std::string::npos);
  EXPECT_NE(chat_error(R"(, "response_format": {"type": "json_schema", "json_schema": {"name": "x"}})")
                .find("'json_schema' is not supported"),
            std::string::npos);
  EXPECT_EQ(chat_error(R"(, "response_format": {"type": "text"})"), "");
  auto c = parse_completion_request(
      nlohmann::ordered_json::parse(R"({"prompt": "x", "response_format": {"type": "json_object"}})"), 100);
  ASSERT_TRUE(std::holds_alternative<ApiError>(c));
  EXPECT_EQ(std::get<ApiError>(c).param, "response_format");
}

TEST(OpenAIProtocol, EntryCountLimits) {
  std::string messages = "[";
  for (size_t i = 0; i <= kMaxMessages; ++i)
    messages += std::string(i ? "," : "") + R"({"role":"user","content":"x"})";
  messages += "]";
  auto r = parse_chat_request(nlohmann::ordered_json::parse(R"({"messages": )" + messages + "}"), 100);
  ASSERT_TRUE(std::holds_alternative<ApiError>(r));
  EXPECT_EQ(std::get<ApiError>(r).message, "'messages' may hold at most 4096 messages");
  std::string bias = "{";
  for (size_t i = 0; i <= kMaxLogitBiasEntries; ++i)
    bias += std::string(i ? "," : "") + "\"" + std::to_string(i) + "\":1";
  bias += "}";
  auto b = parse_completion_request(
      nlohmann::ordered_json::parse(R"({"prompt": "x", "logit_bias": )" + bias + "}"), 100000);
  ASSERT_TRUE(std::holds_alternative<ApiError>(b));
  EXPECT_EQ(std::get<ApiError>(b).message, "'logit_bias' may hold at most 1024 entries");
  auto s = parse_completion_request(
      nlohmann::ordered_json::parse(
          R"({"prompt": "x", "stop": [)" + std::string(16 * 4, ' ') +
          R"("a","b","c","d","e","f","g","h","i","j","k","l","m","n","o","p","q"]})"),
      100);
  ASSERT_TRUE(std::holds_alternative<ApiError>(s));
  EXPECT_EQ(std::get<ApiError>(s).message, "'stop' may hold at most 16 strings");
}

TEST(OpenAIProtocol, BodyLimitsGiveAnOpenAIError) {
  auto deep = parse_json_body("{\"a\":" + std::string(100000, '[') + std::string(100000, ']') + "}");
  ASSERT_TRUE(std::holds_alternative<ApiError>(deep));
  const ApiError& e = std::get<ApiError>(deep);
  EXPECT_EQ(e.status, 400);
  const auto body = nlohmann::json::parse(e.body());
  EXPECT_EQ(body["error"]["message"], "request body nests deeper than the limit of 64 levels");
  EXPECT_EQ(body["error"]["type"], "invalid_request_error");
}

}  // namespace
}  // namespace xinfer::server
