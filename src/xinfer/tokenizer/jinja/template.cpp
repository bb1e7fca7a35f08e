#include "xinfer/tokenizer/jinja/template.h"

#include "xinfer/tokenizer/jinja/builtins.h"
#include "xinfer/tokenizer/jinja/interpreter.h"
#include "xinfer/tokenizer/jinja/parser.h"

namespace xinfer::jinja {

struct Template::Ast {
  StmtList body;
};

Result<Template> Template::parse(std::string_view source) {
  XI_ASSIGN_OR_RETURN(StmtList body, parse_template(source));
  auto ast = std::make_shared<Ast>();
  ast->body = std::move(body);
  return Template(std::move(ast));
}

Result<std::string> Template::render(const nlohmann::ordered_json& context) const {
  if (!context.is_object() && !context.is_null()) return invalid_argument("template context must be a JSON object");
  try {
    auto root = std::make_shared<Scope>();
    for (auto& [k, v] : make_globals()) root->vars[k] = std::move(v);
    if (context.is_object())
      for (const auto& [k, v] : context.items()) root->vars[k] = Value::from_json(v);
    return interpret(ast_->body, std::move(root));
  } catch (const RaisedError& e) {
    return invalid_argument(std::string("template raised an exception: ") + e.what());
  } catch (const TemplateError& e) {
    return invalid_argument(std::string("template error: ") + e.what());
  } catch (const std::exception& e) {
    return internal_error(std::string("template rendering failed: ") + e.what());
  }
}

}  // namespace xinfer::jinja
