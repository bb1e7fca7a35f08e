// `xinfer tokenize` and `xinfer detokenize`: the tokenizer from the command line, for scripts and for
// the conformance tests (which drive thousands of lines through one process with --jsonl).
//
//   echo "Hello" | xinfer tokenize --tokenizer DIR             -> [9906]
//   xinfer tokenize --tokenizer DIR --jsonl < lines.jsonl       each line a JSON string (or {"hex": "..."}
//                                                               for arbitrary bytes) -> one JSON id array
//   echo "[9906]" | xinfer detokenize --tokenizer DIR          -> Hello
//   xinfer detokenize --tokenizer DIR --jsonl [--stream]        each line a JSON id array -> a JSON string
//                                                               (--stream: the StreamingDetokenizer's pieces)
#include <cstdio>
#include <cstring>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "xinfer/cli/command.h"
#include "xinfer/model/gguf_tokenizer.h"
#include "xinfer/tokenizer/streaming_detokenizer.h"
#include "xinfer/tokenizer/tokenizer.h"

namespace xinfer::cli {
namespace {

struct Flags {
  std::string dir;
  bool jsonl = false;
  bool special = true;  // tokenize: add_special_tokens; detokenize: keep special tokens (inverted below)
  bool stream = false;
};

int usage(const char* prog, bool detok) {
  std::fprintf(stderr,
               detok ? "usage: %s --tokenizer DIR [--jsonl] [--keep-special] [--stream]\n"
                       "  stdin: a JSON array of ids (--jsonl: one array per line)\n"
                     : "usage: %s --tokenizer DIR [--jsonl] [--no-special]\n"
                       "  stdin: text (--jsonl: one JSON string, or {\"hex\": \"...\"}, per line)\n",
               prog);
  return 2;
}

bool parse_flags(int argc, char** argv, bool detok, Flags& f) {
  f.special = !detok;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--tokenizer") && i + 1 < argc) f.dir = argv[++i];
    else if (!std::strcmp(argv[i], "--jsonl")) f.jsonl = true;
    else if (!detok && !std::strcmp(argv[i], "--no-special")) f.special = false;
    else if (detok && !std::strcmp(argv[i], "--keep-special")) f.special = true;
    else if (detok && !std::strcmp(argv[i], "--stream")) f.stream = true;
    else return false;
  }
  return !f.dir.empty();
}

std::unique_ptr<tok::Tokenizer> load_or_die(const std::string& dir) {
  auto t = model::load_tokenizer(dir);
  if (!t.ok()) {
    std::fprintf(stderr, "error: %s\n", t.status().to_string().c_str());
    return nullptr;
  }
  return std::move(t).value();
}

void write_ids(const std::vector<int32_t>& ids, std::string& out) {
  out += '[';
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(ids[i]);
  }
  out += "]\n";
}

std::string from_hex(const std::string& h) {
  std::string s;
  for (size_t i = 0; i + 1 < h.size(); i += 2) s.push_back(static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16)));
  return s;
}

std::string dump(const nlohmann::json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

int run_tokenize(int argc, char** argv) {
  Flags f;
  if (!parse_flags(argc, argv, false, f)) return usage(argv[0], false);
  auto t = load_or_die(f.dir);
  if (!t) return 1;
  std::ios::sync_with_stdio(false);
  std::string out;
  if (!f.jsonl) {
    const std::string text((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    write_ids(t->encode(text, f.special), out);
    std::fwrite(out.data(), 1, out.size(), stdout);
    return 0;
  }
  std::string line;
  while (std::getline(std::cin, line)) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      std::fprintf(stderr, "error: bad JSON line: %s\n", e.what());
      return 1;
    }
    const std::string text = j.is_string() ? j.get<std::string>() : from_hex(j.value("hex", ""));
    out.clear();
    write_ids(t->encode(text, f.special), out);
    std::fwrite(out.data(), 1, out.size(), stdout);
  }
  return 0;
}

int run_detokenize(int argc, char** argv) {
  Flags f;
  if (!parse_flags(argc, argv, true, f)) return usage(argv[0], true);
  auto t = load_or_die(f.dir);
  if (!t) return 1;
  const bool skip = !f.special;
  auto handle = [&](const std::string& text) -> std::string {
    std::vector<int32_t> ids = nlohmann::json::parse(text).get<std::vector<int32_t>>();
    if (f.stream) {
      tok::StreamingDetokenizer stream(*t, skip);
      nlohmann::json pieces = nlohmann::json::array();
      for (int32_t id : ids) pieces.push_back(stream.push(id));
      pieces.push_back(stream.flush());
      return dump(pieces);
    }
    const std::string s = t->decode(ids, skip);
    return f.jsonl ? dump(nlohmann::json(s)) : s;
  };
  try {
    if (!f.jsonl) {
      const std::string in((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
      std::cout << handle(in) << '\n';
      return 0;
    }
    std::string line;
    while (std::getline(std::cin, line)) std::cout << handle(line) << '\n';
  } catch (const nlohmann::json::exception& e) {
    std::fprintf(stderr, "error: expected a JSON array of ids: %s\n", e.what());
    return 1;
  }
  return 0;
}

const CommandRegistration kTokenize{"tokenize", "text on stdin -> token ids as JSON", &run_tokenize};
const CommandRegistration kDetokenize{"detokenize", "JSON token ids on stdin -> text", &run_detokenize};

}  // namespace
}  // namespace xinfer::cli
