// `xinfer chat-template`: renders a chat template the way transformers' apply_chat_template
// (tokenize=False) does. One JSON request on stdin -> the prompt on stdout; with --jsonl, one request
// per line -> one {"ok": true, "text": ...} / {"ok": false, "error": ...} line each (for tests).
// A request is {"messages": [...], "add_generation_prompt": false, "tools": null, ...}; other keys are
// passed to the template as kwargs (enable_thinking, bos_token overrides, ...).
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "xinfer/cli/command.h"
#include "xinfer/tokenizer/jinja/chat_template.h"

namespace xinfer::cli {
namespace {

using nlohmann::ordered_json;
using xinfer::jinja::ChatTemplate;
using xinfer::jinja::ChatTemplateInputs;

void usage(FILE* out) {
  std::fprintf(out,
               "Usage: xinfer chat-template --tokenizer-config FILE [--template FILE] [--name NAME] [--jsonl]\n\n"
               "Reads {\"messages\": [...], \"add_generation_prompt\": bool, \"tools\": [...], ...kwargs} as JSON\n"
               "on stdin and prints the rendered prompt, as transformers' apply_chat_template(tokenize=False).\n"
               "  --tokenizer-config FILE  tokenizer_config.json: chat_template and special tokens\n"
               "  --template FILE          use this Jinja template file instead of the config's chat_template\n"
               "  --name NAME              which of several named chat templates (default: \"default\")\n"
               "  --jsonl                  one request per line; one JSON result per line\n"
               "add_generation_prompt defaults to false, as in transformers.\n");
}

Result<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot open " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Result<std::string> render(const ChatTemplate& tmpl, const ChatTemplateInputs& base, const ordered_json& req) {
  if (!req.is_object()) return invalid_argument("request must be a JSON object");
  ChatTemplateInputs in = base;
  in.add_generation_prompt = false;
  for (const auto& [k, v] : req.items()) {
    if (k == "messages") in.messages = v;
    else if (k == "add_generation_prompt") in.add_generation_prompt = v.is_boolean() && v.get<bool>();
    else if (k == "tools") in.tools = v;
    else if (k == "bos_token" && v.is_string()) in.bos_token = v.get<std::string>();
    else if (k == "eos_token" && v.is_string()) in.eos_token = v.get<std::string>();
    else in.extra[k] = v;
  }
  return tmpl.apply(in);
}

int run_chat_template(int argc, char** argv) {
  std::string config_path, template_path, name = "default";
  bool jsonl = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--tokenizer-config") config_path = value();
    else if (a == "--template") template_path = value();
    else if (a == "--name") name = value();
    else if (a == "--jsonl") jsonl = true;
    else if (a == "--help" || a == "-h") {
      usage(stdout);
      return 0;
    } else {
      std::fprintf(stderr, "unknown flag %s\n\n", a.c_str());
      usage(stderr);
      return 2;
    }
  }
  if (config_path.empty() && template_path.empty()) {
    usage(stderr);
    return 2;
  }
  ordered_json config = ordered_json::object();
  if (!config_path.empty()) {
    auto text = read_file(config_path);
    if (!text.ok()) {
      std::fprintf(stderr, "error: %s\n", text.status().to_string().c_str());
      return 1;
    }
    config = ordered_json::parse(*text, nullptr, /*allow_exceptions=*/false);
    if (config.is_discarded()) {
      std::fprintf(stderr, "error: %s is not valid JSON\n", config_path.c_str());
      return 1;
    }
  }
  ChatTemplateInputs base;
  jinja::set_special_tokens(config, &base);
  Result<ChatTemplate> tmpl = not_found("unset");
  if (!template_path.empty()) {
    auto text = read_file(template_path);
    if (!text.ok()) {
      std::fprintf(stderr, "error: %s\n", text.status().to_string().c_str());
      return 1;
    }
    tmpl = ChatTemplate::parse(*text);
  } else {
    tmpl = ChatTemplate::from_tokenizer_config(config, name);
  }
  if (!tmpl.ok()) {
    std::fprintf(stderr, "error: %s\n", tmpl.status().to_string().c_str());
    return 1;
  }
  if (!jsonl) {
    std::stringstream ss;
    ss << std::cin.rdbuf();
    ordered_json req = ordered_json::parse(ss.str(), nullptr, false);
    if (req.is_discarded()) {
      std::fprintf(stderr, "error: stdin is not valid JSON\n");
      return 1;
    }
    auto out = render(*tmpl, base, req);
    if (!out.ok()) {
      std::fprintf(stderr, "error: %s\n", out.status().to_string().c_str());
      return 1;
    }
    std::fwrite(out->data(), 1, out->size(), stdout);
    return 0;
  }
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    ordered_json req = ordered_json::parse(line, nullptr, false);
    ordered_json res;
    if (req.is_discarded()) {
      res = {{"ok", false}, {"error", "request is not valid JSON"}};
    } else if (auto out = render(*tmpl, base, req); out.ok()) {
      res = {{"ok", true}, {"text", *out}};
    } else {
      res = {{"ok", false}, {"error", out.status().to_string()}};
    }
    std::string s = res.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fputc('\n', stdout);
  }
  return 0;
}

const CommandRegistration kReg{"chat-template", "render a chat template (JSON messages on stdin -> prompt)",
                               &run_chat_template};

}  // namespace
}  // namespace xinfer::cli
