#include "xinfer/tokenizer/utf8.h"

namespace xinfer::tok {
namespace {

// Length of the valid (possibly incomplete) sequence at s[i]: 0 if s[i] cannot start a sequence,
// otherwise how many bytes form a valid prefix; `complete` says whether that prefix is a whole
// character. Follows Unicode Table 3-7 (well-formed byte sequences).
size_t scan_sequence(std::string_view s, size_t i, bool& complete) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  complete = false;
  if (b0 < 0x80) {
    complete = true;
    return 1;
  }
  size_t need;
  uint8_t lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  size_t n = 1;
  while (n < need && i + n < s.size()) {
    const auto b = static_cast<uint8_t>(s[i + n]);
    if (b < lo || b > hi) break;
    lo = 0x80;
    hi = 0xBF;
    ++n;
  }
  complete = n == need;
  return n;
}

}  // namespace

uint32_t next_codepoint(std::string_view s, size_t& i) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  if (b0 < 0x80) {
    ++i;
    return b0;
  }
  const size_t n = utf8_seq_len(b0);
  uint32_t cp = b0 & (n == 2 ? 0x1F : n == 3 ? 0x0F : 0x07);
  for (size_t k = 1; k < n && i + k < s.size(); ++k) cp = (cp << 6) | (static_cast<uint8_t>(s[i + k]) & 0x3F);
  i += n;
  return cp;
}

void append_codepoint(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

size_t valid_utf8_prefix(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    bool complete;
    const size_t n = scan_sequence(s, i, complete);
    if (!complete) return i;
    i += n;
  }
  return i;
}

void append_utf8_lossy(std::string_view s, std::string& out) {
  size_t i = 0;
  while (i < s.size()) {
    size_t run = i;
    while (run < s.size() && static_cast<uint8_t>(s[run]) < 0x80) ++run;
    out.append(s.data() + i, run - i);
    i = run;
    if (i >= s.size()) break;
    bool complete;
    const size_t n = scan_sequence(s, i, complete);
    if (complete) {
      out.append(s.data() + i, n);
      i += n;
    } else {
      out.append(kReplacementChar);
      i += n == 0 ? 1 : n;
    }
  }
}

size_t count_codepoints(std::string_view s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<uint8_t>(c) & 0xC0) != 0x80;
  return n;
}

}  // namespace xinfer::tok
