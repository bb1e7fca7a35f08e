#include "xinfer/tokenizer/jinja/value.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "xinfer/tokenizer/jinja/py_text.h"

namespace xinfer::jinja {

const Value* DictBox::find(std::string_view key) const {
  for (const auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}
Value* DictBox::find(std::string_view key) {
  for (auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}
void DictBox::set(const std::string& key, Value v) {
  if (Value* slot = find(key)) *slot = std::move(v);
  else items.emplace_back(key, std::move(v));
}

Value Value::list(ValueList items, bool is_tuple) {
  Value v;
  v.v_ = std::make_shared<ListBox>(ListBox{std::move(items), is_tuple});
  return v;
}
Value Value::dict(DictItems items) {
  Value v;
  v.v_ = std::make_shared<DictBox>(DictBox{std::move(items), false});
  return v;
}
Value Value::namespace_(DictItems items) {
  Value v;
  v.v_ = std::make_shared<DictBox>(DictBox{std::move(items), true});
  return v;
}
Value Value::function(std::string name, Function fn) {
  Value v;
  v.v_ = std::make_shared<FunctionBox>(FunctionBox{std::move(name), std::move(fn)});
  return v;
}

namespace {
constexpr int kMaxJsonDepth = 256;  // deeper inputs are rejected instead of recursing toward a stack overflow
}  // namespace

Value Value::from_json(const nlohmann::ordered_json& j) { return from_json(j, 0); }

Value Value::from_json(const nlohmann::ordered_json& j, int depth) {
  if (depth > kMaxJsonDepth) throw TemplateError("template context nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value(None{});
    case nlohmann::ordered_json::value_t::boolean: return Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      auto u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<double>(u));
      return Value(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      ValueList items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json(e, depth + 1));
      return list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      DictItems items;
      items.reserve(j.size());
      for (const auto& [k, e] : j.items()) items.emplace_back(k, from_json(e, depth + 1));
      return dict(std::move(items));
    }
    default: return Value(None{});  // binary / discarded: not produced by JSON text
  }
}

bool Value::is_list() const { return std::holds_alternative<std::shared_ptr<ListBox>>(v_); }
bool Value::is_tuple() const { return is_list() && std::get<std::shared_ptr<ListBox>>(v_)->is_tuple; }
bool Value::is_dict() const {
  return std::holds_alternative<std::shared_ptr<DictBox>>(v_) && !std::get<std::shared_ptr<DictBox>>(v_)->is_namespace;
}
bool Value::is_namespace() const {
  return std::holds_alternative<std::shared_ptr<DictBox>>(v_) && std::get<std::shared_ptr<DictBox>>(v_)->is_namespace;
}
int64_t Value::as_int() const { return is_bool() ? (as_bool() ? 1 : 0) : std::get<int64_t>(v_); }
double Value::as_double() const { return is_float() ? std::get<double>(v_) : static_cast<double>(as_int()); }

std::string Value::type_name() const {
  if (is_undefined()) return "Undefined";
  if (is_none()) return "NoneType";
  if (is_bool()) return "bool";
  if (is_int()) return "int";
  if (is_float()) return "float";
  if (is_string()) return "str";
  if (is_tuple()) return "tuple";
  if (is_list()) return "list";
  if (is_namespace()) return "Namespace";
  if (is_dict()) return "dict";
  return "function";
}

bool Value::truthy() const {
  if (is_undefined() || is_none()) return false;
  if (is_bool()) return as_bool();
  if (is_int()) return as_int() != 0;
  if (is_float()) return as_double() != 0.0;
  if (is_string()) return !as_string().empty();
  if (is_list()) return !as_list().empty();
  if (is_dict()) return !as_dict().items.empty();
  return true;
}

std::string Value::str() const {
  if (is_undefined()) return "";
  if (is_string()) return as_string();
  return repr();
}

std::string Value::repr() const {
  if (is_undefined()) return "Undefined";
  if (is_none()) return "None";
  if (is_bool()) return as_bool() ? "True" : "False";
  if (is_int()) return std::to_string(as_int());
  if (is_float()) return py::float_repr(as_double());
  if (is_string()) return py::repr(as_string());
  if (is_list()) {
    const auto& items = as_list();
    std::string out = is_tuple() ? "(" : "[";
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) out += ", ";
      out += items[i].repr();
    }
    if (is_tuple() && items.size() == 1) out += ",";
    return out + (is_tuple() ? ")" : "]");
  }
  if (std::holds_alternative<std::shared_ptr<DictBox>>(v_)) {
    std::string out = "{";
    bool first = true;
    for (const auto& [k, v] : as_dict().items) {
      if (!first) out += ", ";
      first = false;
      out += py::repr(k) + ": " + v.repr();
    }
    out += "}";
    return is_namespace() ? "<Namespace " + out + ">" : out;
  }
  return "<function " + as_function().name + ">";
}

ValueList Value::iterate() const {
  if (is_undefined()) return {};
  if (is_list()) return as_list();
  if (is_dict()) {
    ValueList keys;
    for (const auto& kv : as_dict().items) keys.emplace_back(kv.first);
    return keys;
  }
  if (is_string()) {
    ValueList chars;
    for (char32_t c : py::decode(as_string())) {
      std::string s;
      py::append_utf8(s, c);
      chars.emplace_back(std::move(s));
    }
    return chars;
  }
  throw TemplateError("'" + type_name() + "' object is not iterable");
}

void Value::require_defined() const {
  if (is_undefined()) throw TemplateError(undefined_hint());
}

const Value* CallArgs::get(size_t i, std::string_view name) const {
  if (i < args.size()) return &args[i];
  for (const auto& [k, v] : kwargs)
    if (k == name) return &v;
  return nullptr;
}

bool py_equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.as_string() == b.as_string();
  if (a.is_none() && b.is_none()) return true;
  if (a.is_undefined() && b.is_undefined()) return true;
  if (a.is_list() && b.is_list()) {
    if (a.is_tuple() != b.is_tuple()) return false;
    const auto &x = a.as_list(), &y = b.as_list();
    if (x.size() != y.size()) return false;
    for (size_t i = 0; i < x.size(); ++i)
      if (!py_equal(x[i], y[i])) return false;
    return true;
  }
  if (a.is_dict() && b.is_dict()) {
    const auto &x = a.as_dict(), &y = b.as_dict();
    if (x.items.size() != y.items.size()) return false;
    for (const auto& [k, v] : x.items) {
      const Value* other = y.find(k);
      if (!other || !py_equal(v, *other)) return false;
    }
    return true;
  }
  if (a.is_namespace() && b.is_namespace()) return &a.as_dict() == &b.as_dict();
  if (a.is_function() && b.is_function()) return &a.as_function() == &b.as_function();
  return false;
}

bool py_less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() < b.as_double();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();  // UTF-8 order == code points
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    const auto &x = a.as_list(), &y = b.as_list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!py_equal(x[i], y[i])) return py_less(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  a.require_defined();
  b.require_defined();
  throw TemplateError("'<' not supported between instances of '" + a.type_name() + "' and '" + b.type_name() + "'");
}

namespace {

void json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out.push_back('"');
  char buf[16];
  auto emit_u = [&](unsigned cp) {
    std::snprintf(buf, sizeof buf, "\\u%04x", cp);
    out += buf;
  };
  for (char32_t c : py::decode(s)) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          emit_u(c);
        } else if (ensure_ascii && c >= 0x7F) {
          if (c >= 0x10000) {
            unsigned v = c - 0x10000;
            emit_u(0xD800 | (v >> 10));
            emit_u(0xDC00 | (v & 0x3FF));
          } else {
            emit_u(c);
          }
        } else {
          py::append_utf8(out, c);
        }
    }
  }
  out.push_back('"');
}

void dumps(std::string& out, const Value& v, const JsonOptions& o, int level) {
  std::string item_sep = o.separators ? o.separators->first : (o.indent ? "," : ", ");
  std::string key_sep = o.separators ? o.separators->second : ": ";
  auto newline = [&](int lvl) {
    if (!o.indent) return;
    out.push_back('\n');
    for (int i = 0; i < lvl; ++i) out += *o.indent;
  };
  if (v.is_none()) {
    out += "null";
  } else if (v.is_bool()) {
    out += v.as_bool() ? "true" : "false";
  } else if (v.is_int()) {
    out += std::to_string(v.as_int());
  } else if (v.is_float()) {
    double d = v.as_double();
    out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity") : py::float_repr(d);
  } else if (v.is_string()) {
    json_string(out, v.as_string(), o.ensure_ascii);
  } else if (v.is_list()) {
    const auto& items = v.as_list();
    if (items.empty()) {
      out += "[]";
      return;
    }
    out.push_back('[');
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) out += item_sep;
      newline(level + 1);
      dumps(out, items[i], o, level + 1);
    }
    newline(level);
    out.push_back(']');
  } else if (v.is_dict()) {
    std::vector<const std::pair<std::string, Value>*> items;
    for (const auto& kv : v.as_dict().items) items.push_back(&kv);
    if (items.empty()) {
      out += "{}";
      return;
    }
    if (o.sort_keys)
      std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
    out.push_back('{');
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) out += item_sep;
      newline(level + 1);
      json_string(out, items[i]->first, o.ensure_ascii);
      out += key_sep;
      dumps(out, items[i]->second, o, level + 1);
    }
    newline(level);
    out.push_back('}');
  } else {
    throw TemplateError("Object of type " + v.type_name() + " is not JSON serializable");
  }
}

}  // namespace

std::string json_dumps(const Value& v, const JsonOptions& opts) {
  std::string out;
  dumps(out, v, opts, 0);
  return out;
}

}  // namespace xinfer::jinja
