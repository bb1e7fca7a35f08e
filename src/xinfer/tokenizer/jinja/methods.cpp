// Attribute and item lookup, Python methods of str/dict/list, and Python operators (see builtins.h).
#include <cmath>
#include <cstdio>

#include "xinfer/tokenizer/jinja/builtins.h"
#include "xinfer/tokenizer/jinja/py_text.h"

namespace xinfer::jinja {

namespace {

std::string type_repr(const Value& v) {  // jinja2's object_type_repr
  if (v.is_none()) return "None";
  return v.type_name() + " object";
}

Value missing_attr(const Value& obj, const std::string& name) {
  return Value::undefined("'" + type_repr(obj) + "' has no attribute '" + name + "'");
}

Value unsafe(const Value& obj, const std::string& name) {
  return Value::undefined("access to attribute '" + name + "' of '" + obj.type_name() + "' object is unsafe.");
}

std::optional<std::string> opt_str(const CallArgs& a, size_t i, std::string_view name) {
  const Value* v = a.get(i, name);
  if (!v || v->is_none()) return std::nullopt;
  if (!v->is_string()) throw TemplateError("expected a string argument, got '" + v->type_name() + "'");
  return v->as_string();
}

int64_t opt_int(const CallArgs& a, size_t i, std::string_view name, int64_t dflt) {
  const Value* v = a.get(i, name);
  if (!v || v->is_none()) return dflt;
  if (!v->is_int() && !v->is_bool()) throw TemplateError("'" + v->type_name() + "' object cannot be interpreted as an integer");
  return v->as_int();
}

std::string need_str(const CallArgs& a, size_t i, std::string_view name) {
  const Value* v = a.get(i, name);
  if (!v) throw TemplateError("missing required argument '" + std::string(name) + "'");
  if (!v->is_string()) {
    v->require_defined();
    throw TemplateError("must be str, not " + v->type_name());
  }
  return v->as_string();
}

Value str_list(std::vector<std::string> parts) {
  ValueList items;
  items.reserve(parts.size());
  for (auto& p : parts) items.emplace_back(std::move(p));
  return Value::list(std::move(items));
}

// Python's str.format with positional/keyword fields, !r/!s conversions and an empty format spec.
std::string str_format(const std::string& fmt, const CallArgs& a) {
  std::string out;
  size_t auto_idx = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    char c = fmt[i];
    if (c == '}' ) {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') ++i;
      else throw TemplateError("Single '}' encountered in format string");
      out.push_back('}');
      continue;
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    size_t close = fmt.find('}', i);
    if (close == std::string::npos) throw TemplateError("Single '{' encountered in format string");
    std::string field = fmt.substr(i + 1, close - i - 1);
    i = close;
    std::string spec, conv;
    if (size_t colon = field.find(':'); colon != std::string::npos) {
      spec = field.substr(colon + 1);
      field = field.substr(0, colon);
    }
    if (size_t bang = field.find('!'); bang != std::string::npos) {
      conv = field.substr(bang + 1);
      field = field.substr(0, bang);
    }
    if (!spec.empty()) throw TemplateError("unsupported format spec '" + spec + "' in str.format");
    Value v;
    if (field.empty() || std::isdigit(static_cast<unsigned char>(field[0]))) {
      size_t idx = field.empty() ? auto_idx++ : std::stoul(field);
      if (idx >= a.args.size()) throw TemplateError("Replacement index " + std::to_string(idx) + " out of range for positional args tuple");
      v = a.args[idx];
    } else {
      const Value* kw = nullptr;
      for (const auto& [k, val] : a.kwargs)
        if (k == field) kw = &val;
      if (!kw) throw TemplateError("KeyError: '" + field + "'");
      v = *kw;
    }
    out += conv == "r" ? v.repr() : v.str();
  }
  return out;
}

std::optional<Value> str_method(const std::string& self, const std::string& name) {
  auto fn = [&](auto body) { return Value::function("str." + name, [self, body](CallArgs& a) -> Value { return body(self, a); }); };
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    bool l = name != "rstrip", r = name != "lstrip";
    return fn([l, r](const std::string& s, CallArgs& a) { return Value(py::strip(s, opt_str(a, 0, "chars"), l, r)); });
  }
  if (name == "upper") return fn([](const std::string& s, CallArgs&) { return Value(py::upper(s)); });
  if (name == "lower" || name == "casefold") return fn([](const std::string& s, CallArgs&) { return Value(py::lower(s)); });
  if (name == "title") return fn([](const std::string& s, CallArgs&) { return Value(py::title(s)); });
  if (name == "capitalize") return fn([](const std::string& s, CallArgs&) { return Value(py::capitalize(s)); });
  if (name == "startswith" || name == "endswith") {
    bool start = name == "startswith";
    return fn([start](const std::string& s, CallArgs& a) {
      const Value* p = a.get(0, "prefix");
      if (!p) throw TemplateError("startswith/endswith expects an argument");
      ValueList options = p->is_tuple() ? p->as_list() : ValueList{*p};
      for (const Value& o : options) {
        if (!o.is_string()) throw TemplateError("startswith/endswith first arg must be str or a tuple of str, not " + o.type_name());
        const std::string& x = o.as_string();
        if (x.size() <= s.size() && (start ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0))
          return Value(true);
      }
      return Value(false);
    });
  }
  if (name == "split" || name == "rsplit") {
    bool rev = name == "rsplit";
    return fn([rev](const std::string& s, CallArgs& a) {
      auto sep = opt_str(a, 0, "sep");
      if (sep && sep->empty()) throw TemplateError("empty separator");
      int64_t maxsplit = opt_int(a, 1, "maxsplit", -1);
      return str_list(rev ? py::rsplit(s, sep, maxsplit) : py::split(s, sep, maxsplit));
    });
  }
  if (name == "splitlines") {
    return fn([](const std::string& s, CallArgs& a) {
      const Value* k = a.get(0, "keepends");
      return str_list(py::splitlines(s, k && k->truthy()));
    });
  }
  if (name == "replace") {
    return fn([](const std::string& s, CallArgs& a) {
      return Value(py::replace(s, need_str(a, 0, "old"), need_str(a, 1, "new"), opt_int(a, 2, "count", -1)));
    });
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex") {
    bool rev = name[0] == 'r', raise = name.find("index") != std::string::npos;
    return fn([rev, raise](const std::string& s, CallArgs& a) {
      int64_t r = py::find(s, need_str(a, 0, "sub"), rev);
      if (r < 0 && raise) throw TemplateError("substring not found");
      return Value(r);
    });
  }
  if (name == "count") return fn([](const std::string& s, CallArgs& a) { return Value(py::count(s, need_str(a, 0, "sub"))); });
  if (name == "join") {
    return fn([](const std::string& s, CallArgs& a) {
      const Value* it = a.get(0, "iterable");
      if (!it) throw TemplateError("join() takes exactly one argument");
      std::string out;
      size_t i = 0;
      for (const Value& v : it->iterate()) {
        if (!v.is_string())
          throw TemplateError("sequence item " + std::to_string(i) + ": expected str instance, " + v.type_name() + " found");
        if (i++) out += s;
        out += v.as_string();
      }
      return Value(out);
    });
  }
  if (name == "format") return fn([](const std::string& s, CallArgs& a) { return Value(str_format(s, a)); });
  if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace" || name == "isupper" ||
      name == "islower" || name == "isnumeric" || name == "isdecimal") {
    return fn([name](const std::string& s, CallArgs&) {
      std::u32string u = py::decode(s);
      if (u.empty()) return Value(false);
      if (name == "isupper" || name == "islower") {
        bool any = false;
        for (char32_t c : u) {
          bool up = py::is_upper(c), lo = py::is_lower(c);
          if ((name == "isupper" && lo) || (name == "islower" && up)) return Value(false);
          any = any || up || lo;
        }
        return Value(any);
      }
      for (char32_t c : u) {
        bool ok = name == "isalpha" ? py::is_alpha(c)
                  : name == "isspace" ? py::is_space(c)
                  : name == "isalnum" ? (py::is_alpha(c) || py::is_digit(c))
                                      : py::is_digit(c);
        if (!ok) return Value(false);
      }
      return Value(true);
    });
  }
  if (name == "removeprefix" || name == "removesuffix") {
    bool pre = name == "removeprefix";
    return fn([pre](const std::string& s, CallArgs& a) {
      std::string x = need_str(a, 0, "affix");
      if (x.size() <= s.size()) {
        if (pre && s.compare(0, x.size(), x) == 0) return Value(s.substr(x.size()));
        if (!pre && s.compare(s.size() - x.size(), x.size(), x) == 0) return Value(s.substr(0, s.size() - x.size()));
      }
      return Value(s);
    });
  }
  if (name == "center" || name == "ljust" || name == "rjust" || name == "zfill") {
    return fn([name](const std::string& s, CallArgs& a) {
      int64_t width = opt_int(a, 0, "width", 0);
      std::string fill = name == "zfill" ? "0" : opt_str(a, 1, "fillchar").value_or(" ");
      int64_t n = py::length(s);
      if (width <= n) return Value(s);
      int64_t pad = width - n;
      int64_t left = name == "ljust" ? 0 : name == "center" ? pad / 2 + (pad & width & 1) : pad;
      std::string out;
      for (int64_t i = 0; i < left; ++i) out += fill;
      out += s;
      for (int64_t i = left; i < pad; ++i) out += fill;
      return Value(out);
    });
  }
  return std::nullopt;
}

std::optional<Value> dict_method(const Value& d, const std::string& name) {
  if (name == "items" || name == "keys" || name == "values") {
    return Value::function("dict." + name, [d, name](CallArgs&) {
      ValueList out;
      for (const auto& [k, v] : d.as_dict().items) {
        if (name == "items") out.push_back(Value::list({Value(k), v}, true));
        else if (name == "keys") out.emplace_back(k);
        else out.push_back(v);
      }
      return Value::list(std::move(out));
    });
  }
  if (name == "get") {
    return Value::function("dict.get", [d](CallArgs& a) {
      const Value* k = a.get(0, "key");
      if (!k) throw TemplateError("get expected at least 1 argument, got 0");
      if (k->is_string())
        if (const Value* v = d.as_dict().find(k->as_string())) return *v;
      const Value* dflt = a.get(1, "default");
      return dflt ? *dflt : Value(None{});
    });
  }
  if (name == "copy") return Value::function("dict.copy", [d](CallArgs&) { return Value::dict(d.as_dict().items); });
  if (name == "pop" || name == "popitem" || name == "setdefault" || name == "update" || name == "clear")
    return unsafe(d, name);
  return std::nullopt;
}

std::optional<Value> list_method(const Value& l, const std::string& name) {
  if (name == "index" || name == "count") {
    return Value::function("list." + name, [l, name](CallArgs& a) {
      const Value* x = a.get(0, "value");
      if (!x) throw TemplateError(name + "() takes exactly one argument");
      int64_t n = 0;
      const ValueList& items = l.as_list();
      for (size_t i = 0; i < items.size(); ++i) {
        if (!py_equal(items[i], *x)) continue;
        if (name == "index") return Value(static_cast<int64_t>(i));
        ++n;
      }
      if (name == "index") throw TemplateError(x->repr() + " is not in list");
      return Value(n);
    });
  }
  if (name == "copy" && !l.is_tuple()) return Value::function("list.copy", [l](CallArgs&) { return Value::list(l.as_list()); });
  if (!l.is_tuple() && (name == "append" || name == "extend" || name == "insert" || name == "pop" || name == "remove" ||
                        name == "reverse" || name == "sort" || name == "clear"))
    return unsafe(l, name);
  return std::nullopt;
}

}  // namespace

Value get_attr(const Value& obj, const std::string& name) {
  obj.require_defined();
  std::optional<Value> m;
  if (obj.is_string()) m = str_method(obj.as_string(), name);
  else if (obj.is_dict()) m = dict_method(obj, name);
  else if (obj.is_list()) m = list_method(obj, name);
  if (m) return *m;
  if (obj.is_dict() || obj.is_namespace()) {
    if (const Value* v = obj.as_dict().find(name)) return *v;
  }
  return missing_attr(obj, name);
}

Value get_item(const Value& obj, const Value& key) {
  obj.require_defined();
  if (obj.is_dict() && key.is_string()) {
    if (const Value* v = obj.as_dict().find(key.as_string())) return *v;
  } else if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t i = key.as_int();
    if (obj.is_list()) {
      int64_t n = static_cast<int64_t>(obj.as_list().size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return obj.as_list()[static_cast<size_t>(i)];
    } else {
      std::u32string u = py::decode(obj.as_string());
      int64_t n = static_cast<int64_t>(u.size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) {
        std::string s;
        py::append_utf8(s, u[static_cast<size_t>(i)]);
        return Value(s);
      }
    }
    return Value::undefined("'" + type_repr(obj) + "' has no element " + key.repr());
  }
  if (key.is_string()) {
    Value v = get_attr(obj, key.as_string());
    if (!v.is_undefined() || !obj.is_dict()) return v;
    return missing_attr(obj, key.as_string());
  }
  return Value::undefined("'" + type_repr(obj) + "' has no element " + key.repr());
}

namespace {

[[noreturn]] void unsupported(const std::string& op, const Value& a, const Value& b) {
  throw TemplateError("unsupported operand type(s) for " + op + ": '" + a.type_name() + "' and '" + b.type_name() + "'");
}

template <typename Op>
Value checked(Op op, int64_t a, int64_t b) {
  int64_t r = 0;
  if (op(a, b, &r)) throw TemplateError("integer overflow");
  return Value(r);
}
bool add(int64_t a, int64_t b, int64_t* r) { return __builtin_add_overflow(a, b, r); }
bool sub(int64_t a, int64_t b, int64_t* r) { return __builtin_sub_overflow(a, b, r); }
bool mul(int64_t a, int64_t b, int64_t* r) { return __builtin_mul_overflow(a, b, r); }

Value repeat(const ValueList& items, bool tuple, int64_t n) {
  ValueList out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), items.begin(), items.end());
  return Value::list(std::move(out), tuple);
}

std::string repeat(const std::string& s, int64_t n) {
  if (n > 0 && s.size() * static_cast<size_t>(n) > (size_t{1} << 30)) throw TemplateError("string too large");
  std::string out;
  for (int64_t i = 0; i < n; ++i) out += s;
  return out;
}

// printf-style `str % args` (what jinja2's format filter does): %s %r %d %i %f %.Nf %x %%.
std::string percent_format(const std::string& fmt, const Value& args) {
  ValueList list = args.is_tuple() ? args.as_list() : ValueList{args};
  const Value* mapping = args.is_dict() ? &args : nullptr;
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out.push_back(fmt[i]);
      continue;
    }
    if (++i >= fmt.size()) throw TemplateError("incomplete format");
    const Value* v = nullptr;
    Value keyed;
    if (fmt[i] == '(') {
      size_t close = fmt.find(')', i);
      if (close == std::string::npos || !mapping) throw TemplateError("format requires a mapping");
      keyed = get_item(*mapping, Value(fmt.substr(i + 1, close - i - 1)));
      v = &keyed;
      i = close + 1;
    }
    std::string flags;
    while (i < fmt.size() && (std::isdigit(static_cast<unsigned char>(fmt[i])) || fmt[i] == '.' || fmt[i] == '-' || fmt[i] == '+' || fmt[i] == ' '))
      flags.push_back(fmt[i++]);
    if (i >= fmt.size()) throw TemplateError("incomplete format");
    char conv = fmt[i];
    if (conv == '%') {
      out.push_back('%');
      continue;
    }
    if (!v) {
      if (next >= list.size()) throw TemplateError("not enough arguments for format string");
      v = &list[next++];
    }
    char buf[512];
    std::string spec = "%" + flags;
    if (conv == 's' || conv == 'r') {
      std::string s = conv == 's' ? v->str() : v->repr();
      std::snprintf(buf, sizeof buf, (spec + "s").c_str(), s.c_str());
      out += flags.empty() ? s : std::string(buf);
    } else if (conv == 'd' || conv == 'i' || conv == 'x' || conv == 'X' || conv == 'o') {
      if (!v->is_number()) throw TemplateError("%" + std::string(1, conv) + " format: a real number is required, not " + v->type_name());
      long long n = v->is_float() ? static_cast<long long>(v->as_double()) : v->as_int();
      std::snprintf(buf, sizeof buf, (spec + "ll" + (conv == 'i' ? 'd' : conv)).c_str(), n);
      out += buf;
    } else if (conv == 'f' || conv == 'F' || conv == 'e' || conv == 'g') {
      if (!v->is_number()) throw TemplateError("must be real number, not " + v->type_name());
      std::snprintf(buf, sizeof buf, (spec + conv).c_str(), v->as_double());
      out += buf;
    } else {
      throw TemplateError(std::string("unsupported format character '") + conv + "'");
    }
  }
  if (!mapping && next < list.size()) throw TemplateError("not all arguments converted during string formatting");
  return out;
}

}  // namespace

Value binary_op(const std::string& op, const Value& a, const Value& b) {
  a.require_defined();
  b.require_defined();
  bool ints = (a.is_int() || a.is_bool()) && (b.is_int() || b.is_bool());
  bool nums = a.is_number() && b.is_number();
  if (op == "+") {
    if (ints) return checked(add, a.as_int(), b.as_int());
    if (nums) return Value(a.as_double() + b.as_double());
    if (a.is_string() && b.is_string()) return Value(a.as_string() + b.as_string());
    if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
      ValueList out = a.as_list();
      out.insert(out.end(), b.as_list().begin(), b.as_list().end());
      return Value::list(std::move(out), a.is_tuple());
    }
    if (a.is_string() || a.is_list())
      throw TemplateError("can only concatenate " + a.type_name() + " (not \"" + b.type_name() + "\") to " + a.type_name());
    unsupported(op, a, b);
  }
  if (op == "-") {
    if (ints) return checked(sub, a.as_int(), b.as_int());
    if (nums) return Value(a.as_double() - b.as_double());
    unsupported(op, a, b);
  }
  if (op == "*") {
    if (ints) return checked(mul, a.as_int(), b.as_int());
    if (nums) return Value(a.as_double() * b.as_double());
    if (a.is_string() && (b.is_int() || b.is_bool())) return Value(repeat(a.as_string(), b.as_int()));
    if (b.is_string() && (a.is_int() || a.is_bool())) return Value(repeat(b.as_string(), a.as_int()));
    if (a.is_list() && (b.is_int() || b.is_bool())) return repeat(a.as_list(), a.is_tuple(), b.as_int());
    if (b.is_list() && (a.is_int() || a.is_bool())) return repeat(b.as_list(), b.is_tuple(), a.as_int());
    unsupported(op, a, b);
  }
  if (op == "/") {
    if (!nums) unsupported(op, a, b);
    if (b.as_double() == 0.0) throw TemplateError("division by zero");
    return Value(a.as_double() / b.as_double());
  }
  if (op == "//" || op == "%") {
    if (op == "%" && a.is_string()) return Value(percent_format(a.as_string(), b));
    if (!nums) unsupported(op, a, b);
    if (ints) {
      int64_t x = a.as_int(), y = b.as_int();
      if (y == 0) throw TemplateError("integer division or modulo by zero");
      if (x == INT64_MIN && y == -1) throw TemplateError("integer overflow");
      int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {
        --q;
        m += y;
      }
      return Value(op == "//" ? q : m);
    }
    double x = a.as_double(), y = b.as_double();
    if (y == 0.0) throw TemplateError(op == "//" ? "float floor division by zero" : "float modulo");
    double mod = std::fmod(x, y), div = (x - mod) / y;
    if (mod != 0.0) {
      if ((y < 0) != (mod < 0)) {
        mod += y;
        div -= 1.0;
      }
    } else {
      mod = std::copysign(0.0, y);
    }
    double fdiv;
    if (div != 0.0) {
      fdiv = std::floor(div);
      if (div - fdiv > 0.5) fdiv += 1.0;
    } else {
      fdiv = std::copysign(0.0, x / y);
    }
    return Value(op == "//" ? fdiv : mod);
  }
  if (op == "**") {
    if (!nums) unsupported(op, a, b);
    if (ints && b.as_int() >= 0) {
      int64_t base = a.as_int(), e = b.as_int(), result = 1;
      if (base == 0) return Value(int64_t{e == 0 ? 1 : 0});
      if (base == 1) return Value(int64_t{1});
      if (base == -1) return Value(int64_t{e % 2 ? -1 : 1});
      for (; e > 0; --e)
        if (__builtin_mul_overflow(result, base, &result)) throw TemplateError("integer overflow");
      return Value(result);
    }
    return Value(std::pow(a.as_double(), b.as_double()));
  }
  throw TemplateError("unknown operator " + op);
}

bool contains(const Value& c, const Value& item) {
  if (c.is_string()) {
    if (!item.is_string()) {
      item.require_defined();
      throw TemplateError("'in <string>' requires string as left operand, not " + item.type_name());
    }
    return c.as_string().find(item.as_string()) != std::string::npos;
  }
  if (c.is_list()) {
    for (const Value& v : c.as_list())
      if (py_equal(v, item)) return true;
    return false;
  }
  if (c.is_dict()) return item.is_string() && c.as_dict().find(item.as_string()) != nullptr;
  if (c.is_undefined()) return false;
  throw TemplateError("argument of type '" + c.type_name() + "' is not iterable");
}

}  // namespace xinfer::jinja
