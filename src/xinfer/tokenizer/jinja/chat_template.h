// ChatTemplate: renders a model's chat template exactly as transformers'
// tokenizer.apply_chat_template(conversation, tools=..., add_generation_prompt=..., tokenize=False,
// **kwargs) does. The template sees, like in transformers:
//   messages, tools (None when absent), documents (None unless given in `extra`), add_generation_prompt,
//   the tokenizer's special tokens that are set (bos_token, eos_token, and whatever `extra` adds:
//   unk_token, pad_token, additional_special_tokens...), and every other kwarg from `extra`
//   (e.g. enable_thinking). An empty bos_token/eos_token is left undefined, as transformers leaves
//   out special tokens that are None.
// JSON key order matters (tojson prints dicts in insertion order), hence ordered_json; a plain
// nlohmann::json converts implicitly but its objects come with sorted keys.
// `continue_final_message` is not implemented.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "xinfer/core/status.h"
#include "xinfer/tokenizer/jinja/template.h"

namespace xinfer::jinja {

struct ChatTemplateInputs {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  bool add_generation_prompt = true;
  nlohmann::ordered_json tools;  // null if none
  std::string bos_token, eos_token;
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();  // other kwargs, e.g. enable_thinking
};

class ChatTemplate {
 public:
  static Result<ChatTemplate> parse(std::string_view source);
  // The `chat_template` of a tokenizer_config.json: a string, or a list of {name, template} of which
  // `name` is chosen. NOT_FOUND when the config has none (e.g. GPT-2, Llama 2 base).
  static Result<ChatTemplate> from_tokenizer_config(const nlohmann::ordered_json& config,
                                                    std::string_view name = "default");

  Result<std::string> apply(const ChatTemplateInputs& inputs) const;

 private:
  explicit ChatTemplate(Template t) : template_(std::move(t)) {}
  Template template_;
};

// Fills bos_token/eos_token and the other special tokens (into extra) from a tokenizer_config.json,
// as transformers' special_tokens_map does (AddedToken objects give their "content").
void set_special_tokens(const nlohmann::ordered_json& config, ChatTemplateInputs* inputs);

}  // namespace xinfer::jinja
