// ChatTemplate: context construction as transformers' apply_chat_template does it.
#include "xinfer/tokenizer/jinja/chat_template.h"

#include <gtest/gtest.h>

namespace xinfer::jinja {
namespace {

using nlohmann::ordered_json;

TEST(ChatTemplate, PassesMessagesToolsSpecialTokensAndKwargs) {
  auto t = ChatTemplate::parse(
      "{{ bos_token }}{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}"
      "{% if tools is none %}notools{% endif %}{% if documents is none %}nodocs{% endif %}"
      "{% if add_generation_prompt %}<gen>{% endif %}{{ enable_thinking }}{{ eos_token }}");
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  ChatTemplateInputs in;
  in.messages = nlohmann::json::parse(R"([{"role": "user", "content": "hi"}])");  // plain json converts
  in.bos_token = "<s>";
  in.eos_token = "</s>";
  in.extra["enable_thinking"] = false;
  auto r = t->apply(in);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(*r, "<s>[user:hi]notoolsnodocs<gen>False</s>");
}

TEST(ChatTemplate, UnsetSpecialTokensAreUndefined) {
  auto t = ChatTemplate::parse("{{ bos_token is defined }}");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t->apply(ChatTemplateInputs{}), "False");
}

TEST(ChatTemplate, FromTokenizerConfig) {
  auto cfg = ordered_json::parse(R"({
    "bos_token": {"content": "<|b|>", "lstrip": false}, "eos_token": "<|e|>", "pad_token": null,
    "additional_special_tokens": ["<x>"],
    "chat_template": [{"name": "default", "template": "{{ bos_token }}{{ additional_special_tokens[0] }}"},
                      {"name": "tool_use", "template": "tools"}]})");
  auto t = ChatTemplate::from_tokenizer_config(cfg);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  ChatTemplateInputs in;
  set_special_tokens(cfg, &in);
  EXPECT_EQ(in.bos_token, "<|b|>");
  EXPECT_FALSE(in.extra.contains("pad_token"));
  EXPECT_EQ(*t->apply(in), "<|b|><x>");
  EXPECT_EQ(*ChatTemplate::from_tokenizer_config(cfg, "tool_use")->apply(in), "tools");
  EXPECT_EQ(ChatTemplate::from_tokenizer_config(cfg, "nope").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(ChatTemplate::from_tokenizer_config(ordered_json::object()).status().code(), StatusCode::kNotFound);
}

TEST(ChatTemplate, AlternationCheckIsAClearError) {
  auto t = ChatTemplate::parse(
      "{% for m in messages %}{% if (m.role == 'user') != (loop.index0 % 2 == 0) %}"
      "{{ raise_exception('Conversation roles must alternate') }}{% endif %}{{ m.content }}{% endfor %}");
  ASSERT_TRUE(t.ok());
  ChatTemplateInputs in;
  in.messages = ordered_json::parse(R"([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])");
  auto r = t->apply(in);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("Conversation roles must alternate"), std::string::npos);
}

}  // namespace
}  // namespace xinfer::jinja
