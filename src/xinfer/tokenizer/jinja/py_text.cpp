#include "xinfer/tokenizer/jinja/py_text.h"
#include "xinfer/tokenizer/utf8.h"

#include <locale.h>
#include <wctype.h>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>

namespace xinfer::jinja::py {

namespace {

// C.UTF-8 gives glibc's Unicode classification and simple case mapping without touching the global
// locale. nullptr (locale missing) falls back to ASCII-only behaviour.
locale_t utf8_locale() {
  static locale_t loc = newlocale(LC_CTYPE_MASK, "C.UTF-8", static_cast<locale_t>(nullptr));
  return loc;
}

bool in_set(char32_t c, std::u32string_view set) { return set.find(c) != std::u32string_view::npos; }

}  // namespace

void append_utf8(std::string& out, char32_t cp) {
  if (cp >= 0xDC80 && cp <= 0xDCFF) {  // an escaped invalid byte goes back out unchanged
    out.push_back(static_cast<char>(cp - 0xDC00));
  } else {
    tok::append_codepoint(static_cast<uint32_t>(cp), out);
  }
}

std::u32string decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    auto b = static_cast<unsigned char>(s[i]);
    int len = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    char32_t cp = len == 1 ? b : len == 2 ? (b & 0x1F) : len == 3 ? (b & 0x0F) : (b & 0x07);
    bool ok = len > 0 && i + len <= s.size();
    for (int k = 1; ok && k < len; ++k) {
      auto c = static_cast<unsigned char>(s[i + k]);
      if ((c & 0xC0) != 0x80) ok = false;
      cp = (cp << 6) | (c & 0x3F);
    }
    if (!ok) {
      out.push_back(0xDC00 + b);
      ++i;
    } else {
      out.push_back(cp);
      i += len;
    }
  }
  return out;
}

std::string encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) append_utf8(out, c);
  return out;
}

bool is_ascii(std::string_view s) {
  for (char c : s)
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  return true;
}

int64_t length(std::string_view s) {
  if (is_ascii(s)) return static_cast<int64_t>(s.size());
  return static_cast<int64_t>(decode(s).size());
}

bool is_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

bool is_alpha(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  return utf8_locale() && iswalpha_l(static_cast<wint_t>(c), utf8_locale());
}
bool is_digit(char32_t c) { return c >= '0' && c <= '9'; }
bool is_upper(char32_t c) {
  if (c < 0x80) return c >= 'A' && c <= 'Z';
  return utf8_locale() && iswupper_l(static_cast<wint_t>(c), utf8_locale());
}
bool is_lower(char32_t c) {
  if (c < 0x80) return c >= 'a' && c <= 'z';
  return utf8_locale() && iswlower_l(static_cast<wint_t>(c), utf8_locale());
}
char32_t to_upper(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') ? c - 32 : c;
  return utf8_locale() ? static_cast<char32_t>(towupper_l(static_cast<wint_t>(c), utf8_locale())) : c;
}
char32_t to_lower(char32_t c) {
  if (c < 0x80) return (c >= 'A' && c <= 'Z') ? c + 32 : c;
  return utf8_locale() ? static_cast<char32_t>(towlower_l(static_cast<wint_t>(c), utf8_locale())) : c;
}

bool is_printable(char32_t c) {
  if (c < 0x20 || c == 0x7F) return false;
  if (c < 0x7F) return true;
  if (c <= 0xA0 || c == 0xAD) return false;  // C1 controls, NBSP (Zs), soft hyphen (Cf)
  if (c >= 0xDC80 && c <= 0xDCFF) return false;
  if (c == 0x1680 || (c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F) ||
      (c >= 0x205F && c <= 0x206F) || c == 0x3000 || c == 0xFEFF || (c >= 0xFFF9 && c <= 0xFFFB))
    return false;
  if ((c >= 0xE000 && c <= 0xF8FF) || c >= 0xF0000) return false;  // private use
  if (c == 0x061C || c == 0x180E || (c >= 0x0600 && c <= 0x0605) || c == 0x06DD || c == 0x070F) return false;
  return true;
}

namespace {
template <typename F>
std::string map_chars(std::string_view s, F f) {
  if (is_ascii(s)) {
    std::string out(s);
    for (char& c : out) c = static_cast<char>(f(static_cast<char32_t>(c)));
    return out;
  }
  std::u32string u = decode(s);
  for (char32_t& c : u) c = f(c);
  return encode(u);
}
bool is_cased(char32_t c) { return is_upper(c) || is_lower(c); }
}  // namespace

std::string upper(std::string_view s) { return map_chars(s, to_upper); }
std::string lower(std::string_view s) { return map_chars(s, to_lower); }

std::string capitalize(std::string_view s) {
  std::u32string u = decode(s);
  for (size_t i = 0; i < u.size(); ++i) u[i] = i == 0 ? to_upper(u[i]) : to_lower(u[i]);
  return encode(u);
}

std::string title(std::string_view s) {
  std::u32string u = decode(s);
  bool prev_cased = false;
  for (char32_t& c : u) {
    bool cased = is_cased(c);
    c = prev_cased ? to_lower(c) : to_upper(c);
    prev_cased = cased;
  }
  return encode(u);
}

std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  std::u32string u = decode(s);
  std::u32string set = chars ? decode(*chars) : std::u32string();
  auto strip_it = [&](char32_t c) { return chars ? in_set(c, set) : is_space(c); };
  size_t b = 0, e = u.size();
  if (left)
    while (b < e && strip_it(u[b])) ++b;
  if (right)
    while (e > b && strip_it(u[e - 1])) --e;
  return encode(std::u32string_view(u).substr(b, e - b));
}

std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {  // byte search is exact for valid UTF-8
    size_t pos = 0;
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      size_t hit = s.find(*sep, pos);
      if (hit == std::string_view::npos) break;
      out.emplace_back(s.substr(pos, hit - pos));
      pos = hit + sep->size();
    }
    out.emplace_back(s.substr(pos));
    return out;
  }
  std::u32string u = decode(s);
  size_t i = 0, n = u.size();
  while (i < n && is_space(u[i])) ++i;
  while (i < n) {
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
      out.push_back(encode(std::u32string_view(u).substr(i)));
      break;
    }
    size_t j = i;
    while (j < n && !is_space(u[j])) ++j;
    out.push_back(encode(std::u32string_view(u).substr(i, j - i)));
    i = j;
    while (i < n && is_space(u[i])) ++i;
  }
  return out;
}

std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    size_t end = s.size();
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      if (end < sep->size()) break;
      size_t hit = s.rfind(*sep, end - sep->size());
      if (hit == std::string_view::npos) break;
      out.emplace_back(s.substr(hit + sep->size(), end - hit - sep->size()));
      end = hit;
    }
    out.emplace_back(s.substr(0, end));
  } else {
    std::u32string u = decode(s);
    size_t e = u.size();
    while (e > 0 && is_space(u[e - 1])) --e;
    while (e > 0) {
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
        out.push_back(encode(std::u32string_view(u).substr(0, e)));
        break;
      }
      size_t b = e;
      while (b > 0 && !is_space(u[b - 1])) --b;
      out.push_back(encode(std::u32string_view(u).substr(b, e - b)));
      e = b;
      while (e > 0 && is_space(u[e - 1])) --e;
    }
  }
  return {out.rbegin(), out.rend()};
}

std::vector<std::string> splitlines(std::string_view s, bool keepends) {
  std::u32string u = decode(s);
  std::vector<std::string> out;
  size_t i = 0, start = 0, n = u.size();
  while (i < n) {
    char32_t c = u[i];
    bool brk = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E ||
               c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!brk) {
      ++i;
      continue;
    }
    size_t eol = i;
    i += (c == '\r' && i + 1 < n && u[i + 1] == '\n') ? 2 : 1;
    out.push_back(encode(std::u32string_view(u).substr(start, (keepends ? i : eol) - start)));
    start = i;
  }
  if (start < n) out.push_back(encode(std::u32string_view(u).substr(start)));
  return out;
}

std::string replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count) {
  std::string out;
  if (old.empty()) {  // Python inserts repl before every code point and at the end
    std::u32string u = decode(s);
    int64_t done = 0;
    for (char32_t c : u) {
      if (count < 0 || done < count) {
        out.append(repl);
        ++done;
      }
      append_utf8(out, c);
    }
    if (count < 0 || done < count) out.append(repl);
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t hit = s.find(old, pos);
    if (hit == std::string_view::npos) break;
    out.append(s.substr(pos, hit - pos));
    out.append(repl);
    pos = hit + old.size();
    ++done;
  }
  out.append(s.substr(pos));
  return out;
}

int64_t count(std::string_view s, std::string_view sub) {
  if (sub.empty()) return length(s) + 1;
  int64_t n = 0;
  for (size_t pos = s.find(sub); pos != std::string_view::npos; pos = s.find(sub, pos + sub.size())) ++n;
  return n;
}

int64_t find(std::string_view s, std::string_view sub, bool reverse) {
  size_t hit = reverse ? s.rfind(sub) : s.find(sub);
  if (hit == std::string_view::npos) return -1;
  return length(s.substr(0, hit));
}

std::string repr(std::string_view s) {
  bool has_single = s.find('\'') != std::string_view::npos;
  bool has_double = s.find('"') != std::string_view::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  char buf[16];
  for (char32_t c : decode(s)) {
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (is_printable(c)) {
      append_utf8(out, c);
    } else {
      if (c >= 0xDC80 && c <= 0xDCFF) std::snprintf(buf, sizeof buf, "\\udc%02x", static_cast<unsigned>(c - 0xDC00));
      else if (c <= 0xFF) std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(c));
      else if (c <= 0xFFFF) std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      else std::snprintf(buf, sizeof buf, "\\U%08x", static_cast<unsigned>(c));
      out += buf;
    }
  }
  out.push_back(quote);
  return out;
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // "-1.2345e+05"
  bool neg = sci[0] == '-';
  if (neg) sci.erase(0, 1);
  size_t epos = sci.find('e');
  int exp = std::stoi(sci.substr(epos + 1));
  std::string digits;
  for (size_t i = 0; i < epos; ++i)
    if (sci[i] != '.') digits.push_back(sci[i]);
  std::string out = neg ? "-" : "";
  if (exp < -4 || exp >= 16) {
    out.push_back(digits[0]);
    if (digits.size() > 1) {
      out.push_back('.');
      out.append(digits, 1, std::string::npos);
    }
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    return out + eb;
  }
  if (exp < 0) {
    out.append("0.");
    out.append(static_cast<size_t>(-exp - 1), '0');
    out.append(digits);
    return out;
  }
  size_t int_len = static_cast<size_t>(exp) + 1;
  if (digits.size() <= int_len) {
    out.append(digits);
    out.append(int_len - digits.size(), '0');
    out.append(".0");
    return out;
  }
  out.append(digits, 0, int_len);
  out.push_back('.');
  out.append(digits, int_len, std::string::npos);
  return out;
}

std::vector<int64_t> slice_indices(int64_t n, std::optional<int64_t> start, std::optional<int64_t> stop,
                                   std::optional<int64_t> step_opt) {
  int64_t step = step_opt.value_or(1);
  std::vector<int64_t> out;
  auto adjust = [&](std::optional<int64_t> v, int64_t dflt, int64_t lo, int64_t hi) {
    if (!v) return dflt;
    int64_t x = *v < 0 ? *v + n : *v;
    return x < lo ? lo : x > hi ? hi : x;
  };
  if (step > 0) {
    int64_t b = adjust(start, 0, 0, n), e = adjust(stop, n, 0, n);
    for (int64_t i = b; i < e; i += step) out.push_back(i);
  } else {
    int64_t b = adjust(start, n - 1, -1, n - 1), e = adjust(stop, -1, -1, n - 1);
    for (int64_t i = b; i > e; i += step) out.push_back(i);
  }
  return out;
}

}  // namespace xinfer::jinja::py
