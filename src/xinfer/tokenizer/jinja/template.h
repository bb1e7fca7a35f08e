// Template: a jinja2 template parsed once and rendered many times, configured exactly like the
// environment transformers uses for chat templates:
//   ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
//   + filters["tojson"] = json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
//   + globals raise_exception(msg) and strftime_now(fmt), default Undefined (not strict).
//
//   XI_ASSIGN_OR_RETURN(Template t, Template::parse("{{ greeting | upper }}"));
//   XI_ASSIGN_OR_RETURN(std::string s, t.render({{"greeting", "hi"}}));   // "HI"
//
// Failures come back as Status: syntax errors at parse (with the line), and at render time
// runtime errors (undefined attribute of an undefined value, type errors, unknown filter, ...) and
// raise_exception(msg), whose Status message contains msg. A Template is immutable and safe to
// render from several threads at once. Key order of JSON objects is kept when the context is an
// ordered_json (what tojson prints depends on it); a plain nlohmann::json renders keys sorted.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "xinfer/core/status.h"

namespace xinfer::jinja {

struct Stmt;

class Template {
 public:
  static Result<Template> parse(std::string_view source);

  // A plain nlohmann::json context converts implicitly (with its keys sorted); one overload only, so
  // that render({{"key", value}}) is not ambiguous.
  Result<std::string> render(const nlohmann::ordered_json& context) const;

 private:
  struct Ast;
  explicit Template(std::shared_ptr<const Ast> ast) : ast_(std::move(ast)) {}
  std::shared_ptr<const Ast> ast_;
};

}  // namespace xinfer::jinja
