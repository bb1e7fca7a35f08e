#include "xinfer/tokenizer/jinja/lexer.h"

#include <algorithm>
#include <array>
#include <cstdint>

#include "xinfer/tokenizer/jinja/py_text.h"

namespace xinfer::jinja {

namespace {

// Python \s on the code point starting at s[i]; returns its byte length or 0.
size_t space_len(std::string_view s, size_t i) {
  auto b = static_cast<unsigned char>(s[i]);
  if (b < 0x80) return py::is_space(b) ? 1 : 0;
  size_t len = (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 1;
  if (i + len > s.size()) return 0;
  std::u32string cp = py::decode(s.substr(i, len));
  return cp.size() == 1 && py::is_space(cp[0]) ? len : 0;
}

size_t skip_spaces(std::string_view s, size_t i) {
  while (i < s.size()) {
    size_t n = space_len(s, i);
    if (!n) break;
    i += n;
  }
  return i;
}

// str.rstrip() on raw UTF-8.
std::string_view rstrip_ws(std::string_view s) {
  std::u32string u = py::decode(s);
  size_t bytes = s.size();
  for (size_t k = u.size(); k > 0 && py::is_space(u[k - 1]); --k) {
    std::string enc;
    py::append_utf8(enc, u[k - 1]);
    bytes -= enc.size();
  }
  return s.substr(0, bytes);
}

bool all_space(std::string_view s) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size();) {
    size_t n = space_len(s, i);
    if (!n) return false;
    i += n;
  }
  return true;
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

// (\d+_)*\d+ at i; returns end or i if none.
size_t digits_end(std::string_view s, size_t i) {
  size_t j = i;
  while (true) {
    size_t k = j;
    while (k < s.size() && is_digit(s[k])) ++k;
    if (k == j) return j == i ? i : j - 1;  // a trailing '_' is not part of the number
    j = k;
    if (j < s.size() && s[j] == '_' && j + 1 < s.size() && is_digit(s[j + 1])) {
      ++j;
      continue;
    }
    return j;
  }
}

// Python's unicode-escape decoding of a string literal body.
std::string unescape(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c != '\\' || i + 1 >= s.size()) {
      out.push_back(c);
      continue;
    }
    char e = s[++i];
    auto hex = [&](size_t n) -> bool {
      uint32_t v = 0;
      for (size_t k = 1; k <= n; ++k) {
        if (i + k >= s.size()) return false;
        char h = s[i + k];
        int d = (h >= '0' && h <= '9') ? h - '0' : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
        if (d < 0) return false;
        v = v * 16 + static_cast<uint32_t>(d);
      }
      py::append_utf8(out, v);
      i += n;
      return true;
    };
    switch (e) {
      case '\n': break;
      case '\\': out.push_back('\\'); break;
      case '\'': out.push_back('\''); break;
      case '"': out.push_back('"'); break;
      case 'a': out.push_back('\a'); break;
      case 'b': out.push_back('\b'); break;
      case 'f': out.push_back('\f'); break;
      case 'n': out.push_back('\n'); break;
      case 'r': out.push_back('\r'); break;
      case 't': out.push_back('\t'); break;
      case 'v': out.push_back('\v'); break;
      case 'x': if (!hex(2)) out += "\\x"; break;
      case 'u': if (!hex(4)) out += "\\u"; break;
      case 'U': if (!hex(8)) out += "\\U"; break;
      default:
        if (e >= '0' && e <= '7') {
          uint32_t v = static_cast<uint32_t>(e - '0');
          for (int k = 0; k < 2 && i + 1 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '7'; ++k)
            v = v * 8 + static_cast<uint32_t>(s[++i] - '0');
          py::append_utf8(out, v);
        } else {
          out.push_back('\\');
          out.push_back(e);
        }
    }
  }
  return out;
}

constexpr std::array<std::string_view, 26> kOperators = {
    "//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[", "]",
    "(",  ")",  "{",  "}",  "<",  ">",  "=", ".", ":", "|", ",", ";"};

class Lexer {
 public:
  explicit Lexer(std::string src) : s_(std::move(src)) {}

  Result<std::vector<Token>> run() {
    size_t pos = 0;
    bool line_starting = true;
    while (pos < s_.size()) {
      size_t a = s_.find("{{", pos), b = s_.find("{%", pos), c = s_.find("{#", pos);
      size_t start = std::min({a, b, c});
      if (start == std::string::npos) {
        emit(TokenKind::kData, s_.substr(pos));
        break;
      }
      char kind = s_[start + 1];  // '{', '%', '#'
      char sign = start + 2 < s_.size() && (s_[start + 2] == '-' || s_[start + 2] == '+') ? s_[start + 2] : 0;
      std::string_view text = std::string_view(s_).substr(pos, start - pos);
      if (sign == '-') {
        text = rstrip_ws(text);
      } else if (sign != '+' && kind != '{') {
        size_t nl = text.rfind('\n');
        size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
        if ((l_pos > 0 || line_starting) && all_space(text.substr(l_pos))) text = text.substr(0, l_pos);
      }
      if (!text.empty()) emit(TokenKind::kData, std::string(text));
      line_ += count_nl(pos, start);
      size_t body = start + 2 + (sign ? 1 : 0);
      if (kind == '#') {
        size_t q = s_.find("#}", body);
        if (q == std::string::npos) return error("Missing end of comment tag");
        char esign = q > body && (s_[q - 1] == '-' || s_[q - 1] == '+') ? s_[q - 1] : 0;
        size_t end = q + 2;
        if (esign == '-') end = skip_spaces(s_, end);
        else if (!esign && end < s_.size() && s_[end] == '\n') ++end;
        line_ += count_nl(body, end);
        line_starting = s_[end - 1] == '\n';
        pos = end;
        continue;
      }
      if (kind == '%') {
        size_t r = raw_begin_end(body);
        if (r) {
          auto st = lex_raw(r, &pos, &line_starting);
          if (!st.ok()) return st;
          continue;
        }
      }
      emit(kind == '{' ? TokenKind::kVarBegin : TokenKind::kBlockBegin, "");
      auto st = lex_tag(kind == '{', body, &pos, &line_starting);
      if (!st.ok()) return st;
    }
    emit(TokenKind::kEof, "");
    return std::move(toks_);
  }

 private:
  Status error(const std::string& m) const {
    return invalid_argument("template syntax error (line " + std::to_string(line_) + "): " + m);
  }
  void emit(TokenKind k, std::string text) { toks_.push_back(Token{k, std::move(text), line_}); }
  int count_nl(size_t from, size_t to) const {
    int n = 0;
    for (size_t i = from; i < to && i < s_.size(); ++i) n += s_[i] == '\n';
    return n;
  }

  // `{% raw %}` starting after "{%" and its sign at `body`: returns the end of the tag or 0.
  size_t raw_begin_end(size_t body) const {
    size_t i = skip_spaces(s_, body);
    if (s_.compare(i, 3, "raw") != 0) return 0;
    i = skip_spaces(s_, i + 3);
    if (s_.compare(i, 3, "-%}") == 0) return skip_spaces(s_, i + 3);
    if (s_.compare(i, 2, "%}") == 0) return i + 2;
    return 0;
  }

  Status lex_raw(size_t from, size_t* pos, bool* line_starting) {
    for (size_t q = s_.find("{%", from); q != std::string::npos; q = s_.find("{%", q + 2)) {
      size_t i = q + 2;
      char sign = i < s_.size() && (s_[i] == '-' || s_[i] == '+') ? s_[i] : 0;
      if (sign) ++i;
      i = skip_spaces(s_, i);
      if (s_.compare(i, 6, "endraw") != 0) continue;
      i = skip_spaces(s_, i + 6);
      size_t end;
      if (s_.compare(i, 3, "+%}") == 0) end = i + 3;
      else if (s_.compare(i, 3, "-%}") == 0) end = skip_spaces(s_, i + 3);
      else if (s_.compare(i, 2, "%}") == 0) end = i + 2 + (i + 2 < s_.size() && s_[i + 2] == '\n' ? 1 : 0);
      else continue;
      std::string_view text = std::string_view(s_).substr(from, q - from);
      if (sign == '-') {
        text = rstrip_ws(text);
      } else if (sign != '+') {
        size_t nl = text.rfind('\n');
        size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
        if ((l_pos > 0 || *line_starting) && all_space(text.substr(l_pos))) text = text.substr(0, l_pos);
      }
      if (!text.empty()) emit(TokenKind::kData, std::string(text));
      line_ += count_nl(from, end);
      *line_starting = s_[end - 1] == '\n';
      *pos = end;
      return Status::ok_status();
    }
    return error("Missing end of raw directive");
  }

  Status lex_tag(bool is_var, size_t i, size_t* pos, bool* line_starting) {
    std::vector<char> balance;
    while (true) {
      if (i >= s_.size()) return error(is_var ? "unexpected end of template, expected '}}'" : "unexpected end of template, expected '%}'");
      if (balance.empty()) {
        size_t end = 0;
        if (is_var) {
          if (s_.compare(i, 3, "-}}") == 0) end = skip_spaces(s_, i + 3);
          else if (s_.compare(i, 2, "}}") == 0) end = i + 2;
        } else {
          if (s_.compare(i, 3, "+%}") == 0) end = i + 3;
          else if (s_.compare(i, 3, "-%}") == 0) end = skip_spaces(s_, i + 3);
          else if (s_.compare(i, 2, "%}") == 0) end = i + 2 + (i + 2 < s_.size() && s_[i + 2] == '\n' ? 1 : 0);
        }
        if (end) {
          emit(is_var ? TokenKind::kVarEnd : TokenKind::kBlockEnd, "");
          line_ += count_nl(i, end);
          *line_starting = s_[end - 1] == '\n';
          *pos = end;
          return Status::ok_status();
        }
      }
      size_t sp = skip_spaces(s_, i);
      if (sp != i) {
        line_ += count_nl(i, sp);
        i = sp;
        continue;
      }
      char c = s_[i];
      if (is_digit(c) && !(i > 0 && s_[i - 1] == '.')) {
        size_t j = digits_end(s_, i);
        bool is_float = false;
        size_t k = j;
        if (k < s_.size() && s_[k] == '.' && k + 1 < s_.size() && is_digit(s_[k + 1])) {
          k = digits_end(s_, k + 1);
          is_float = true;
        }
        if (k < s_.size() && (s_[k] == 'e' || s_[k] == 'E')) {
          size_t e = k + 1;
          if (e < s_.size() && (s_[e] == '+' || s_[e] == '-')) ++e;
          if (e < s_.size() && is_digit(s_[e])) {
            k = digits_end(s_, e);
            is_float = true;
          }
        }
        std::string num;
        for (size_t x = i; x < k; ++x)
          if (s_[x] != '_') num.push_back(s_[x]);
        emit(is_float ? TokenKind::kFloat : TokenKind::kInt, num);
        i = k;
        continue;
      }
      if (is_digit(c)) {  // digits right after '.', e.g. foo.0: an integer token
        size_t j = digits_end(s_, i);
        emit(TokenKind::kInt, s_.substr(i, j - i));
        i = j;
        continue;
      }
      if (is_name_start(c)) {
        size_t j = i;
        while (j < s_.size() && is_name_char(s_[j])) ++j;
        emit(TokenKind::kName, s_.substr(i, j - i));
        i = j;
        continue;
      }
      if (c == '\'' || c == '"') {
        size_t j = i + 1;
        while (j < s_.size() && s_[j] != c) j += s_[j] == '\\' ? 2 : 1;
        if (j >= s_.size()) return error("unexpected char '" + std::string(1, c) + "'");
        emit(TokenKind::kString, unescape(std::string_view(s_).substr(i + 1, j - i - 1)));
        line_ += count_nl(i, j);
        i = j + 1;
        continue;
      }
      bool matched = false;
      for (std::string_view op : kOperators) {
        if (s_.compare(i, op.size(), op) != 0) continue;
        if (op == "(" || op == "[" || op == "{") {
          balance.push_back(op == "(" ? ')' : op == "[" ? ']' : '}');
        } else if (op == ")" || op == "]" || op == "}") {
          if (balance.empty()) return error("unexpected '" + std::string(op) + "'");
          if (balance.back() != op[0])
            return error("unexpected '" + std::string(op) + "', expected '" + std::string(1, balance.back()) + "'");
          balance.pop_back();
        }
        emit(TokenKind::kOp, std::string(op));
        i += op.size();
        matched = true;
        break;
      }
      if (!matched) return error("unexpected char '" + std::string(1, c) + "'");
    }
  }

  std::string s_;
  std::vector<Token> toks_;
  int line_ = 1;
};

}  // namespace

Result<std::vector<Token>> tokenize(std::string_view source) {
  std::string s;
  s.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      s.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      s.push_back(source[i]);
    }
  }
  if (!s.empty() && s.back() == '\n') s.pop_back();
  return Lexer(std::move(s)).run();
}

}  // namespace xinfer::jinja
