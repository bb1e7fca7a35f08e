// libFuzzer target: the chat template renderer on what a client controls. The input's first byte picks a
// template; the rest is a chat request body, parsed and validated as the server does (bounded JSON,
// parse_chat_request), then rendered with its messages, chat_template_kwargs and tools. Templates: the
// bundled model's, the e2e tests' and every ../shared/tokenizers/*/tokenizer_config.json found at start
// (XINFER_FUZZ_TEMPLATES_DIR overrides that folder). Oracle: the sanitizers; a render may fail (a template's
// raise_exception) but must not crash, leak or hang.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "xinfer/server/openai_protocol.h"
#include "xinfer/tokenizer/jinja/chat_template.h"

namespace {

using json = nlohmann::ordered_json;
namespace fs = std::filesystem;

struct Loaded {
  xinfer::jinja::ChatTemplate tmpl;
  xinfer::jinja::ChatTemplateInputs special;  // bos/eos and other special tokens of its config
};

std::vector<Loaded>* templates = nullptr;

void add_config(const fs::path& path) {
  std::ifstream f(path);
  if (!f) return;
  const json config = json::parse(f, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded()) return;
  auto t = xinfer::jinja::ChatTemplate::from_tokenizer_config(config);
  if (!t.ok()) return;
  xinfer::jinja::ChatTemplateInputs special;
  xinfer::jinja::set_special_tokens(config, &special);
  templates->push_back(Loaded{std::move(*t), std::move(special)});
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  templates = new std::vector<Loaded>();
  const fs::path root = XINFER_SOURCE_DIR;
  add_config(root / "models/xinfer-tiny-shakespeare/tokenizer_config.json");
  // tests/e2e/xinfer_server.py's CHAT_TEMPLATE.
  auto e2e = xinfer::jinja::ChatTemplate::parse(
      "{{ bos_token }}{% for m in messages %}{{ m['role'] | capitalize }}: {{ m['content'] }}\n{% endfor %}"
      "{% if add_generation_prompt %}Assistant:{% endif %}");
  if (e2e.ok()) templates->push_back(Loaded{std::move(*e2e), {}});
  const char* env = std::getenv("XINFER_FUZZ_TEMPLATES_DIR");
  const fs::path shared = env ? fs::path(env) : root / "../shared/tokenizers";
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(shared, ec))
    add_config(entry.path() / "tokenizer_config.json");
  if (templates->empty()) std::abort();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const Loaded& t = (*templates)[data[0] % templates->size()];
  auto parsed =
      xinfer::server::parse_json_body(std::string(reinterpret_cast<const char*>(data) + 1, size - 1));
  if (!std::holds_alternative<json>(parsed)) return 0;
  const json& body = std::get<json>(parsed);
  auto chat = xinfer::server::parse_chat_request(body, 4096);
  if (!std::holds_alternative<xinfer::server::ChatRequest>(chat)) return 0;
  auto& req = std::get<xinfer::server::ChatRequest>(chat);
  xinfer::jinja::ChatTemplateInputs in = t.special;
  in.messages = std::move(req.messages);
  in.add_generation_prompt = req.add_generation_prompt;
  for (auto& [k, v] : req.chat_template_kwargs.items()) in.extra[k] = v;
  if (auto it = body.find("tools"); it != body.end() && it->is_array()) in.tools = *it;
  auto text = t.tmpl.apply(in);
  if (text.ok()) (void)text->size();
  return 0;
}
