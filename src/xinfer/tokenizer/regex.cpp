#include "xinfer/tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "xinfer/tokenizer/utf8.h"

namespace xinfer::tok {
namespace {

// Per-thread scratch for pcre2_match: one pair of offsets is all we read.
struct MatchScratch {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_jit_stack* jit_stack = pcre2_jit_stack_create(64 * 1024, 16 * 1024 * 1024, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  MatchScratch() { pcre2_jit_stack_assign(context, nullptr, jit_stack); }
  ~MatchScratch() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_data_free(data);
  }
};

MatchScratch& scratch() {
  thread_local MatchScratch s;
  return s;
}

}  // namespace

void Regex::CodeDeleter::operator()(void* code) const { pcre2_code_free(static_cast<pcre2_code*>(code)); }

std::string onig_to_pcre2(std::string_view p) {
  // Oniguruma's \s is Unicode White_Space, which includes U+0085 (NEL); PCRE2 UCP's \s does not.
  std::string out;
  out.reserve(p.size() + 16);
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char n = p[i + 1];
      if (n == 's') {
        out += in_class ? "\\s\\x{85}" : "[\\s\\x{85}]";
      } else if (n == 'S' && !in_class) {
        out += "[^\\s\\x{85}]";
      } else {
        out += c;
        out += n;
      }
      ++i;
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal.
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

Result<Regex> Regex::compile(std::string_view pattern, bool literal) {
  Regex re;
  re.pattern_ = std::string(pattern);
  const std::string source = literal ? re.pattern_ : onig_to_pcre2(pattern);
  uint32_t options = PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK;
  if (literal) options = PCRE2_UTF | PCRE2_LITERAL | PCRE2_NO_UTF_CHECK;
  int error = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(source.data()), source.size(), options, &error,
                                   &error_offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(error, buf, sizeof(buf));
    return invalid_argument("regex '" + re.pattern_ + "' does not compile at offset " +
                            std::to_string(error_offset) + ": " + reinterpret_cast<char*>(buf));
  }
  re.jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  re.code_ = std::shared_ptr<void>(code, CodeDeleter{});
  return re;
}

void Regex::find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const {
  auto* code = static_cast<pcre2_code*>(code_.get());
  MatchScratch& s = scratch();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  while (pos <= text.size()) {
    int rc = jit_ ? pcre2_jit_match(code, subject, text.size(), pos, 0, s.data, s.context)
                  : pcre2_match(code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, s.data, s.context);
    if (rc < 0 && rc != PCRE2_ERROR_NOMATCH && jit_) {
      // JIT stack exhausted on a pathological input: the interpreter has no such limit.
      rc = pcre2_match(code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, s.data, s.context);
    }
    if (rc < 0) break;
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(s.data);
    const size_t b = ov[0], e = ov[1];
    if (e > b) {
      out.emplace_back(b, e);
      pos = e;
    } else {
      if (b >= text.size()) break;
      pos = b + utf8_seq_len(static_cast<uint8_t>(text[b]));
    }
  }
}

}  // namespace xinfer::tok
