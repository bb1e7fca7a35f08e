// Interpreter: executes a parsed template (ast.h) against a root scope of variables.
//
// Scoping follows jinja2: `for` bodies get a fresh scope per iteration (a `set` inside a loop is
// invisible to the next iteration and after the loop); the for-else body, macros, `with`, block `set`
// bodies and `filter` blocks get their own scope; `if` does not. Variables are looked up innermost-first; a missing name is Undefined.
// Runtime errors are thrown as TemplateError/RaisedError (value.h) with the template line prepended;
// Template::render turns them into a Status.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>

#include "xinfer/tokenizer/jinja/ast.h"

namespace xinfer::jinja {

struct Scope {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Scope> parent;
};

// Renders `body` with `root` as the outermost scope; throws TemplateError on failure.
std::string interpret(const StmtList& body, std::shared_ptr<Scope> root);

}  // namespace xinfer::jinja
