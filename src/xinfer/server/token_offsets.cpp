#include "xinfer/server/token_offsets.h"

#include <cctype>
#include <cstdlib>

#include "xinfer/tokenizer/utf8.h"

namespace xinfer::server {

namespace {
int64_t code_points(const std::string& s) { return static_cast<int64_t>(tok::count_codepoints(tok::utf8_lossy(s))); }

// A byte-fallback token ("<0xE6>"): its byte.
std::optional<char> fallback_byte(const tok::Tokenizer& t, int32_t id) {
  const std::string piece = t.id_to_token(id);
  if (piece.size() != 6 || piece.compare(0, 3, "<0x") != 0 || piece[5] != '>' ||
      !std::isxdigit(static_cast<unsigned char>(piece[3])) || !std::isxdigit(static_cast<unsigned char>(piece[4])))
    return std::nullopt;
  return static_cast<char>(std::strtol(piece.substr(3, 2).c_str(), nullptr, 16));
}

}  // namespace

TokenOffsets::TokenOffsets(const tok::Tokenizer& tokenizer, bool skip_special_tokens,
                           std::span<const int32_t> prompt_ids)
    : tokenizer_(tokenizer), skip_special_(skip_special_tokens) {
  detok_.emplace(tokenizer, skip_special_tokens, prompt_ids);
}

std::string TokenOffsets::held_complete_text() const {
  // Trailing byte-fallback tokens: their bytes, up to the last complete character (Hugging Face's
  // ByteFallback decoder turns a whole run with an open character into U+FFFD per byte, so the run is
  // not decoded through it). What precedes them: decoded, less the U+FFFD of a character still open.
  size_t tail = held_.size();
  std::string bytes;
  while (tail > 0 && fallback_byte(tokenizer_, held_[tail - 1])) --tail;
  for (size_t i = tail; i < held_.size(); ++i) bytes += *fallback_byte(tokenizer_, held_[i]);
  std::string head = tail == 0 ? std::string()
                               : tokenizer_.decode(std::span<const int32_t>(held_.data(), tail), skip_special_);
  static const std::string kReplacement = "\xEF\xBF\xBD";
  if (bytes.empty()) {
    while (head.size() >= kReplacement.size() &&
           head.compare(head.size() - kReplacement.size(), kReplacement.size(), kReplacement) == 0)
      head.resize(head.size() - kReplacement.size());
  }
  return head + tok::utf8_lossy(bytes.substr(0, tok::valid_utf8_prefix(bytes)));
}

TokenOffsets::Step TokenOffsets::push(int32_t id) {
  const std::string before = held_complete_text();
  Step step;
  step.added = detok_->push(id);
  if (step.added.empty()) {
    step.start = code_points(before);  // inside the held run: after its complete characters
    held_.push_back(id);
    return step;
  }
  if (step.added.compare(0, before.size(), before) == 0) step.start = code_points(before);
  held_.clear();
  step.width = code_points(step.added);
  return step;
}

}  // namespace xinfer::server
