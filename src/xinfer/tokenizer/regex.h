// A compiled PCRE2 pattern (UTF + UCP, JIT when available) used by the Split pre-tokenizer and the
// Replace normalizer. Patterns come from tokenizer.json, written for Oniguruma; the few places where
// PCRE2's Unicode semantics differ (\s: Oniguruma also matches U+0085) are rewritten at compile time.
//
// Immutable after compile(); matching is thread-safe (per-thread match data and JIT stack).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "xinfer/core/status.h"

namespace xinfer::tok {

class Regex {
 public:
  // literal: match `pattern` as a plain string (tokenizer.json's {"String": ...} patterns).
  static Result<Regex> compile(std::string_view pattern, bool literal = false);

  // Non-overlapping matches of `text` (valid UTF-8) as [begin, end) byte offsets, left to right.
  // Empty matches are skipped.
  void find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const;

  const std::string& pattern() const { return pattern_; }

 private:
  struct CodeDeleter {
    void operator()(void* code) const;
  };
  std::string pattern_;
  std::shared_ptr<void> code_;  // pcre2_code_8*
  bool jit_ = false;
};

// Rewrites Oniguruma-isms into PCRE2 syntax with the same meaning (see header comment).
std::string onig_to_pcre2(std::string_view pattern);

}  // namespace xinfer::tok
