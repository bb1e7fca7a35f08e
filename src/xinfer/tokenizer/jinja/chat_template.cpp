#include "xinfer/tokenizer/jinja/chat_template.h"

namespace xinfer::jinja {

Result<ChatTemplate> ChatTemplate::parse(std::string_view source) {
  XI_ASSIGN_OR_RETURN(Template t, Template::parse(source));
  return ChatTemplate(std::move(t));
}

Result<ChatTemplate> ChatTemplate::from_tokenizer_config(const nlohmann::ordered_json& config, std::string_view name) {
  auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) return not_found("tokenizer config has no chat_template");
  if (it->is_string()) return parse(it->get<std::string>());
  if (it->is_array()) {
    std::string names;
    for (const auto& entry : *it) {
      if (!entry.is_object() || !entry.contains("name") || !entry.contains("template")) continue;
      if (entry["name"] == name) return parse(entry["template"].get<std::string>());
      names += (names.empty() ? "" : ", ") + entry["name"].dump();
    }
    return not_found("chat_template named '" + std::string(name) + "' not found; available: " + names);
  }
  return invalid_argument("chat_template must be a string or a list of {name, template}");
}

Result<std::string> ChatTemplate::apply(const ChatTemplateInputs& in) const {
  if (!in.messages.is_array()) return invalid_argument("messages must be a JSON array");
  if (!in.extra.is_null() && !in.extra.is_object()) return invalid_argument("extra template kwargs must be a JSON object");
  nlohmann::ordered_json ctx = nlohmann::ordered_json::object();
  if (!in.bos_token.empty()) ctx["bos_token"] = in.bos_token;
  if (!in.eos_token.empty()) ctx["eos_token"] = in.eos_token;
  if (in.extra.is_object())
    for (const auto& [k, v] : in.extra.items()) ctx[k] = v;
  ctx["messages"] = in.messages;
  ctx["tools"] = in.tools;
  if (!ctx.contains("documents")) ctx["documents"] = nullptr;
  ctx["add_generation_prompt"] = in.add_generation_prompt;
  return template_.render(ctx);
}

void set_special_tokens(const nlohmann::ordered_json& config, ChatTemplateInputs* in) {
  auto token = [&](const char* key) -> std::string {
    auto it = config.find(key);
    if (it == config.end()) return "";
    if (it->is_string()) return it->get<std::string>();
    if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) return (*it)["content"].get<std::string>();
    return "";
  };
  in->bos_token = token("bos_token");
  in->eos_token = token("eos_token");
  for (const char* key : {"unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}) {
    std::string t = token(key);
    if (!t.empty()) in->extra[key] = t;
  }
  auto extra = config.find("additional_special_tokens");
  if (extra != config.end() && extra->is_array() && !extra->empty()) {
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    for (const auto& t : *extra) {
      if (t.is_string()) list.push_back(t);
      else if (t.is_object() && t.contains("content")) list.push_back(t["content"]);
    }
    in->extra["additional_special_tokens"] = list;
  }
}

}  // namespace xinfer::jinja
