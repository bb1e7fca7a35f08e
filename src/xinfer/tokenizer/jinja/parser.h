// Parser: tokens -> AST, following jinja2's grammar and operator precedence (lowest first):
//   x if c else y  <  or  <  and  <  not  <  comparisons/in  <  + -  <  ~  <  * / // %  <  **
//   <  unary - +  <  primary with .attr [item] (call)  and  |filter / is test (bind tightest, left to right)
// Statements: for/if/elif/else/set (incl. block set and namespace attributes)/macro/filter/with,
// break/continue (loopcontrols), generation (transformers' AssistantTracker tag).
#pragma once

#include <string_view>

#include "xinfer/core/status.h"
#include "xinfer/tokenizer/jinja/ast.h"

namespace xinfer::jinja {

Result<StmtList> parse_template(std::string_view source);

}  // namespace xinfer::jinja
