// Normalizers of tokenizer.json, applied to each stretch of text between added tokens before
// pre-tokenization. A Sequence is flattened into one list of steps at load time.
//   NFC/NFD/NFKC/NFKD (ICU), Prepend (only to non-empty text), Replace (literal or regex), Strip.
// Any other type fails to load (UNIMPLEMENTED) rather than tokenizing differently from Hugging Face.
#pragma once

#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "xinfer/core/status.h"
#include "xinfer/tokenizer/regex.h"

namespace xinfer::tok {

struct UnicodeNormalize {
  enum class Form { kNfc, kNfd, kNfkc, kNfkd } form;
};
struct PrependNormalize {
  std::string prefix;
};
struct ReplaceNormalize {
  Regex pattern;
  std::string content;
};
struct StripNormalize {
  bool left = false, right = false;
};
using NormalizerStep = std::variant<UnicodeNormalize, PrependNormalize, ReplaceNormalize, StripNormalize>;

class Normalizer {
 public:
  // `j` is tokenizer.json's "normalizer" (null: identity).
  static Result<Normalizer> from_json(const nlohmann::json& j);
  bool empty() const { return steps_.empty(); }
  std::string apply(std::string_view text) const;

 private:
  Status add(const nlohmann::json& j);
  std::vector<NormalizerStep> steps_;
};

// Unicode normalization of valid UTF-8 (fast path: returns false and leaves `out` untouched when
// `text` is already normalized).
bool unicode_normalize(UnicodeNormalize::Form form, std::string_view text, std::string& out);
// Unicode White_Space, as Rust's char::is_whitespace.
bool is_unicode_whitespace(uint32_t cp);

}  // namespace xinfer::tok
