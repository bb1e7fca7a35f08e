// Decoders of tokenizer.json: turn the token strings of `ids` back into text. Each step maps the list
// of token strings to a new list (Hugging Face's decode_chain); the result is their concatenation.
// A Sequence is flattened at load. Without a decoder, tokens are joined with ' ' (as Hugging Face).
//   ByteLevel (characters -> bytes, lossy UTF-8), Replace, ByteFallback (<0xXX> runs -> UTF-8, one
//   U+FFFD per byte of an invalid run), Fuse, Strip, Metaspace.
#pragma once

#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "xinfer/core/status.h"
#include "xinfer/tokenizer/regex.h"

namespace xinfer::tok {

struct ByteLevelDecode {};
struct ReplaceDecode {
  Regex pattern;
  std::string content;
};
struct ByteFallbackDecode {};
struct FuseDecode {};
struct StripDecode {
  uint32_t content = ' ';
  size_t start = 0, stop = 0;
};
struct MetaspaceDecode {
  std::string replacement = "\xE2\x96\x81";
  bool prepend = true;  // prepend_scheme != never: replacements of the first token are dropped
};
using DecoderStep =
    std::variant<ByteLevelDecode, ReplaceDecode, ByteFallbackDecode, FuseDecode, StripDecode, MetaspaceDecode>;

class Decoder {
 public:
  // `j` is tokenizer.json's "decoder" (null: join with spaces).
  static Result<Decoder> from_json(const nlohmann::json& j);
  std::string decode(std::vector<std::string> tokens) const;

 private:
  Status add(const nlohmann::json& j);
  std::vector<DecoderStep> steps_;
  bool present_ = false;
};

}  // namespace xinfer::tok
