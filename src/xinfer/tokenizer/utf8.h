// UTF-8 helpers for the tokenizer. Text inside the tokenizer is always valid UTF-8 after encode()'s
// entry (invalid input is repaired first); decoded bytes are turned back into text "lossily":
// every maximal invalid subsequence becomes one U+FFFD, the rule of Unicode 15 section 3.9 that both
// Rust's String::from_utf8_lossy and Python's bytes.decode(errors="replace") follow.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace xinfer::tok {

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

// Length in bytes of the sequence that starts with `lead` in VALID UTF-8.
inline size_t utf8_seq_len(uint8_t lead) {
  return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
}

// Decodes the code point at s[i] of valid UTF-8 and advances i past it.
uint32_t next_codepoint(std::string_view s, size_t& i);
void append_codepoint(uint32_t cp, std::string& out);

// Length of the longest prefix of `s` that is valid UTF-8.
size_t valid_utf8_prefix(std::string_view s);
inline bool is_valid_utf8(std::string_view s) { return valid_utf8_prefix(s) == s.size(); }

// Appends `bytes` to `out`, replacing each maximal invalid subsequence by U+FFFD.
void append_utf8_lossy(std::string_view bytes, std::string& out);
inline std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  append_utf8_lossy(bytes, out);
  return out;
}

// Number of code points in valid UTF-8.
size_t count_codepoints(std::string_view s);

}  // namespace xinfer::tok
