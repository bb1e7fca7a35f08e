// Value: a template-side value with Python object semantics, as jinja2 sees it.
//
//   Undefined  jinja2's default Undefined: prints as '', falsy, iterates as empty; most other uses
//              (arithmetic, attribute access, tojson) raise "'name' is undefined".
//   None, bool, int (int64), float (double), str (UTF-8), list, tuple, dict (insertion-ordered,
//   string keys, like Python dicts built from JSON), namespace (mutable attributes), function.
//
// Invariants: lists, tuples and dicts are shared by reference like Python objects (copying a Value
// copies a pointer); templates cannot mutate them (ImmutableSandboxedEnvironment), only namespaces
// are mutable. Conversions to text follow Python: str() for output, repr() inside containers.
//
// Errors inside the interpreter are thrown as TemplateError and turned into a Status at the public
// API (template.h); the exception never leaves the jinja library.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace xinfer::jinja {

class TemplateError : public std::runtime_error {
 public:
  explicit TemplateError(const std::string& msg) : std::runtime_error(msg) {}
};
// raise_exception(...) from the template: carries the template's own message.
class RaisedError : public TemplateError {
 public:
  explicit RaisedError(const std::string& msg) : TemplateError(msg) {}
};

class Value;
struct CallArgs;
using ValueList = std::vector<Value>;
using DictItems = std::vector<std::pair<std::string, Value>>;
using Function = std::function<Value(CallArgs&)>;

struct Undefined {
  std::string hint;  // the error message to raise when used: "'x' is undefined"
};
struct None {};
struct ListBox {
  ValueList items;
  bool is_tuple = false;
};
struct DictBox {
  DictItems items;
  bool is_namespace = false;
  const Value* find(std::string_view key) const;
  Value* find(std::string_view key);
  void set(const std::string& key, Value v);
};
struct FunctionBox {
  std::string name;
  Function fn;
};

class Value {
 public:
  using Storage = std::variant<Undefined, None, bool, int64_t, double, std::string, std::shared_ptr<ListBox>,
                               std::shared_ptr<DictBox>, std::shared_ptr<FunctionBox>>;

  Value() : v_(Undefined{}) {}
  Value(None) : v_(None{}) {}                          // NOLINT
  Value(bool b) : v_(b) {}                             // NOLINT
  Value(int64_t i) : v_(i) {}                          // NOLINT
  Value(int i) : v_(static_cast<int64_t>(i)) {}        // NOLINT
  Value(double d) : v_(d) {}                           // NOLINT
  Value(std::string s) : v_(std::move(s)) {}           // NOLINT
  Value(const char* s) : v_(std::string(s)) {}         // NOLINT
  Value(Undefined u) : v_(std::move(u)) {}             // NOLINT

  static Value undefined(std::string hint) { return Value(Undefined{std::move(hint)}); }
  static Value list(ValueList items, bool is_tuple = false);
  static Value dict(DictItems items = {});
  static Value namespace_(DictItems items = {});
  static Value function(std::string name, Function fn);
  static Value from_json(const nlohmann::ordered_json& j);  // throws TemplateError past 256 levels of nesting

  bool is_undefined() const { return std::holds_alternative<Undefined>(v_); }
  bool is_none() const { return std::holds_alternative<None>(v_); }
  bool is_bool() const { return std::holds_alternative<bool>(v_); }
  bool is_int() const { return std::holds_alternative<int64_t>(v_); }  // bool excluded
  bool is_float() const { return std::holds_alternative<double>(v_); }
  bool is_number() const { return is_int() || is_float() || is_bool(); }  // Python's numbers.Number
  bool is_string() const { return std::holds_alternative<std::string>(v_); }
  bool is_list() const;   // list or tuple
  bool is_tuple() const;
  bool is_dict() const;   // a real dict (not a namespace)
  bool is_namespace() const;
  bool is_function() const { return std::holds_alternative<std::shared_ptr<FunctionBox>>(v_); }

  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const;  // int or bool
  double as_double() const;  // any number
  const std::string& as_string() const { return std::get<std::string>(v_); }
  const ValueList& as_list() const { return std::get<std::shared_ptr<ListBox>>(v_)->items; }
  const DictBox& as_dict() const { return *std::get<std::shared_ptr<DictBox>>(v_); }
  DictBox& mutable_dict() const { return *std::get<std::shared_ptr<DictBox>>(v_); }
  const FunctionBox& as_function() const { return *std::get<std::shared_ptr<FunctionBox>>(v_); }
  const std::string& undefined_hint() const { return std::get<Undefined>(v_).hint; }
  const Storage& storage() const { return v_; }

  // Python type name as in error messages: 'str', 'int', 'NoneType', 'dict', 'Undefined'...
  std::string type_name() const;

  bool truthy() const;
  std::string str() const;   // Python str(); Undefined -> ''
  std::string repr() const;  // Python repr()
  // Python iteration: list/tuple items, dict keys, str code points; Undefined -> empty. Throws otherwise.
  ValueList iterate() const;
  // Throws TemplateError with the undefined hint when this is Undefined.
  void require_defined() const;

 private:
  static Value from_json(const nlohmann::ordered_json& j, int depth);
  Storage v_;
};

struct CallArgs {
  ValueList args;
  DictItems kwargs;
  // Returns positional arg i, else keyword `name`, else nullptr.
  const Value* get(size_t i, std::string_view name) const;
};

bool py_equal(const Value& a, const Value& b);
// Python ordering (<): numbers, strings, lists/tuples of comparable items; throws TypeError otherwise.
bool py_less(const Value& a, const Value& b);

struct JsonOptions {
  bool ensure_ascii = false;
  bool sort_keys = false;
  std::optional<std::string> indent;  // nullopt: one line
  std::optional<std::pair<std::string, std::string>> separators;
};
// Python json.dumps(value, ...) byte for byte. Throws for values JSON cannot hold (Undefined, functions).
std::string json_dumps(const Value& v, const JsonOptions& opts);

}  // namespace xinfer::jinja
