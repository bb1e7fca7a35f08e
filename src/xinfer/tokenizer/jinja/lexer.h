// Lexer: template source -> tokens, reproducing jinja2's lexer with trim_blocks=True and
// lstrip_blocks=True (the environment transformers uses for chat templates):
//   - "\r\n" and "\r" become "\n"; one trailing newline of the source is dropped (keep_trailing_newline=False)
//   - {%- / {{- / {#- strip all whitespace before the tag; -%} / -}} / -#} strip all whitespace after
//   - lstrip_blocks: spaces/tabs between a line start and {% or {# are dropped (not before {{); {%+ opts out
//   - trim_blocks: the first newline after %} or #} is dropped; +%} opts out
//   - {% raw %}...{% endraw %} is data
// Inside a tag, an end marker only counts when (), [] and {} are balanced, as in jinja2.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "xinfer/core/status.h"

namespace xinfer::jinja {

enum class TokenKind { kData, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString, kInt, kFloat, kOp, kEof };

struct Token {
  TokenKind kind;
  std::string text;  // data text, name, decoded string literal, number text, or operator
  int line = 1;
};

Result<std::vector<Token>> tokenize(std::string_view source);

}  // namespace xinfer::jinja
