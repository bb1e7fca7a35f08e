// A tiny SentencePiece-style tokenizer.json (Llama 2 layout: Prepend/Replace normalizer, BPE with byte
// fallback, ByteFallback/Fuse/Strip decoder, BOS template, one non-special added token <tool>).
// Expected ids in the tests come from Hugging Face `tokenizers` 0.23 on the identical JSON.
#pragma once

#include <cstdio>
#include <memory>

#include <nlohmann/json.hpp>

#include "xinfer/tokenizer/hf_tokenizer.h"

namespace xinfer::tok::testing {

inline nlohmann::json tiny_tokenizer_json() {
  nlohmann::json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    vocab[name] = 3 + b;
  }
  int next = 259;
  for (const char* t : {"\xe2\x96\x81", "a", "b", "c", "h", "e", "l", "o", "\xe2\x96\x81h", "he", "ll", "llo",
                        "\xe2\x96\x81he", "\xe2\x96\x81hello", "ab", "abc", "x"}) {
    vocab[t] = next++;
  }
  auto added = [](int id, const char* content, bool special) {
    return nlohmann::json{{"id", id}, {"content", content}, {"single_word", false}, {"lstrip", false},
                          {"rstrip", false}, {"normalized", false}, {"special", special}};
  };
  nlohmann::json j;
  j["added_tokens"] = {added(1, "<s>", true), added(2, "</s>", true), added(276, "<tool>", false)};
  j["normalizer"] = nlohmann::json::parse(R"({"type":"Sequence","normalizers":[{"type":"Prepend","prepend":"▁"},
      {"type":"Replace","pattern":{"String":" "},"content":"▁"}]})");
  j["pre_tokenizer"] = nullptr;
  j["post_processor"] = nlohmann::json::parse(R"({"type":"TemplateProcessing",
      "single":[{"SpecialToken":{"id":"<s>","type_id":0}},{"Sequence":{"id":"A","type_id":0}}],
      "pair":[],"special_tokens":{"<s>":{"id":"<s>","ids":[1],"tokens":["<s>"]}}})");
  j["decoder"] = nlohmann::json::parse(R"({"type":"Sequence","decoders":[
      {"type":"Replace","pattern":{"String":"▁"},"content":" "},{"type":"ByteFallback"},{"type":"Fuse"},
      {"type":"Strip","content":" ","start":1,"stop":0}]})");
  j["model"] = {{"type", "BPE"}, {"unk_token", "<unk>"}, {"fuse_unk", true}, {"byte_fallback", true},
                {"vocab", vocab},
                {"merges", {"\xe2\x96\x81 h", "h e", "l l", "ll o", "\xe2\x96\x81h e", "\xe2\x96\x81he llo", "a b", "ab c"}}};
  return j;
}

inline std::unique_ptr<HfTokenizer> tiny_tokenizer() {
  auto t = HfTokenizer::from_json(tiny_tokenizer_json(), nlohmann::json{{"bos_token", "<s>"}, {"eos_token", "</s>"}});
  return t.ok() ? std::move(t).value() : nullptr;
}

}  // namespace xinfer::tok::testing
