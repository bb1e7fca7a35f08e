#include "xinfer/tokenizer/streaming_detokenizer.h"

#include <cctype>

#include "xinfer/tokenizer/utf8.h"

namespace xinfer::tok {
namespace {

// How many prompt tokens before the first generated one seed the decode window.
constexpr size_t kPromptContext = 5;

bool ends_with_replacement(const std::string& s) {
  return s.size() >= kReplacementChar.size() &&
         s.compare(s.size() - kReplacementChar.size(), kReplacementChar.size(), kReplacementChar) == 0;
}

// "<0xXX>": a byte-fallback token. The ByteFallback decoder turns a whole run of them into U+FFFDs
// when the run is not valid UTF-8, so text inside a run is not final until the run ends.
bool is_byte_token(const std::string& t) {
  return t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' && std::isxdigit(static_cast<uint8_t>(t[3])) &&
         std::isxdigit(static_cast<uint8_t>(t[4]));
}

}  // namespace

StreamingDetokenizer::StreamingDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens,
                                           std::span<const int32_t> prompt_ids)
    : tokenizer_(tokenizer), skip_special_(skip_special_tokens) {
  const size_t keep = std::min(prompt_ids.size(), kPromptContext);
  ids_.assign(prompt_ids.end() - static_cast<ptrdiff_t>(keep), prompt_ids.end());
  prefix_ = 0;
  read_ = ids_.size();
}

std::string StreamingDetokenizer::decode_range(size_t begin, size_t end) const {
  return tokenizer_.decode(std::span<const int32_t>(ids_.data() + begin, end - begin), skip_special_);
}

std::string StreamingDetokenizer::push(int32_t id) {
  ids_.push_back(id);
  // Skipped specials and unknown ids decode to nothing and do not end a byte run.
  if (skip_special_ && tokenizer_.is_special(id)) return {};
  const std::string token = tokenizer_.id_to_token(id);
  if (token.empty() || is_byte_token(token)) return {};
  const std::string prefix_text = decode_range(prefix_, read_);
  std::string new_text = decode_range(prefix_, ids_.size());
  if (new_text.size() <= prefix_text.size() || ends_with_replacement(new_text) ||
      new_text.compare(0, prefix_text.size(), prefix_text) != 0) {
    return {};
  }
  std::string out = new_text.substr(prefix_text.size());
  prefix_ = read_;
  read_ = ids_.size();
  // Drop ids that no window will read again.
  if (prefix_ > 64) {
    ids_.erase(ids_.begin(), ids_.begin() + static_cast<ptrdiff_t>(prefix_));
    read_ -= prefix_;
    prefix_ = 0;
  }
  return out;
}

std::string StreamingDetokenizer::flush() {
  const std::string prefix_text = decode_range(prefix_, read_);
  const std::string new_text = decode_range(prefix_, ids_.size());
  prefix_ = read_ = ids_.size();
  if (new_text.size() <= prefix_text.size() || new_text.compare(0, prefix_text.size(), prefix_text) != 0) return {};
  return new_text.substr(prefix_text.size());
}

}  // namespace xinfer::tok
