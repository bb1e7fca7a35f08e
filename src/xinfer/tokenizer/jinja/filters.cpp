// jinja2's filters and tests, transformers' tojson, and the environment's globals (see builtins.h).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <map>
#include <set>
#include <string_view>

#include "xinfer/tokenizer/jinja/builtins.h"
#include "xinfer/tokenizer/jinja/py_text.h"

namespace xinfer::jinja {

namespace {

using FilterFn = Value (*)(const Value&, CallArgs&);
using TestFn = bool (*)(const Value&, CallArgs&);

const Value* arg(const CallArgs& a, size_t i, std::string_view name) { return a.get(i, name); }
bool arg_bool(const CallArgs& a, size_t i, std::string_view name, bool dflt) {
  const Value* v = a.get(i, name);
  return v ? v->truthy() : dflt;
}
int64_t arg_int(const CallArgs& a, size_t i, std::string_view name, int64_t dflt) {
  const Value* v = a.get(i, name);
  if (!v || v->is_none()) return dflt;
  if (!v->is_int() && !v->is_bool()) throw TemplateError("'" + v->type_name() + "' object cannot be interpreted as an integer");
  return v->as_int();
}

// jinja2's make_attrgetter: "a.b" or an integer index, looked up item-first.
Value attr_path(const Value& item, const Value& attribute) {
  if (!attribute.is_string()) return get_item(item, attribute);
  Value cur = item;
  for (const std::string& part : py::split(attribute.as_string(), std::string("."), -1)) {
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    cur = get_item(cur, digits ? Value(static_cast<int64_t>(std::stoll(part))) : Value(part));
  }
  return cur;
}

Value sort_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value(py::lower(v.as_string()));
  return v;
}

// select/reject/selectattr/rejectattr share this: args[first_test_arg] names the test.
Value select_impl(const Value& seq, CallArgs& a, bool by_attr, bool keep_if) {
  size_t t = by_attr ? 1 : 0;
  Value attribute = by_attr ? (a.args.empty() ? Value() : a.args[0]) : Value();
  std::string test;
  CallArgs test_args;
  if (a.args.size() > t) {
    if (!a.args[t].is_string()) throw TemplateError("test name must be a string");
    test = a.args[t].as_string();
    test_args.args.assign(a.args.begin() + static_cast<long>(t) + 1, a.args.end());
    test_args.kwargs = a.kwargs;
  }
  ValueList out;
  for (const Value& item : seq.iterate()) {
    Value v = by_attr ? attr_path(item, attribute) : item;
    bool r = test.empty() ? v.truthy() : apply_test(test, v, test_args);
    if (r == keep_if) out.push_back(item);
  }
  return Value::list(std::move(out));
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

std::optional<int64_t> parse_int(std::string s) {
  s = py::strip(s, std::nullopt, true, true);
  s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
  if (s.empty()) return std::nullopt;
  size_t i = (s[0] == '+' || s[0] == '-') ? 1 : 0;
  if (i == s.size()) return std::nullopt;
  for (size_t k = i; k < s.size(); ++k)
    if (s[k] < '0' || s[k] > '9') return std::nullopt;
  errno = 0;
  long long v = std::strtoll(s.c_str(), nullptr, 10);
  if (errno) return std::nullopt;
  return v;
}
std::optional<double> parse_float(const std::string& raw) {
  std::string s = py::strip(raw, std::nullopt, true, true);
  if (s.empty()) return std::nullopt;
  char* end = nullptr;
  double d = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size()) return std::nullopt;
  return d;
}

Value f_tojson(const Value& v, CallArgs& a) {  // transformers' override of jinja2's tojson
  JsonOptions o;
  o.ensure_ascii = arg_bool(a, 0, "ensure_ascii", false);
  if (const Value* ind = arg(a, 1, "indent"); ind && !ind->is_none()) {
    if (ind->is_string()) o.indent = ind->as_string();
    else o.indent = std::string(static_cast<size_t>(std::max<int64_t>(0, ind->as_int())), ' ');
  }
  if (const Value* sep = arg(a, 2, "separators"); sep && !sep->is_none()) {
    if (!sep->is_list() || sep->as_list().size() != 2) throw TemplateError("separators must be a pair of strings");
    o.separators = std::make_pair(sep->as_list()[0].str(), sep->as_list()[1].str());
  }
  o.sort_keys = arg_bool(a, 3, "sort_keys", false);
  return Value(json_dumps(v, o));
}

Value f_length(const Value& v, CallArgs&) {
  if (v.is_undefined()) return Value(int64_t{0});
  if (v.is_string()) return Value(py::length(v.as_string()));
  if (v.is_list()) return Value(static_cast<int64_t>(v.as_list().size()));
  if (v.is_dict()) return Value(static_cast<int64_t>(v.as_dict().items.size()));
  throw TemplateError("object of type '" + v.type_name() + "' has no len()");
}

Value f_default(const Value& v, CallArgs& a) {
  const Value* d = arg(a, 0, "default_value");
  bool boolean = arg_bool(a, 1, "boolean", false);
  if (v.is_undefined() || (boolean && !v.truthy())) return d ? *d : Value("");
  return v;
}

Value f_trim(const Value& v, CallArgs& a) {
  const Value* chars = arg(a, 0, "chars");
  std::optional<std::string> c;
  if (chars && !chars->is_none()) c = chars->str();
  return Value(py::strip(v.str(), c, true, true));
}

Value f_join(const Value& v, CallArgs& a) {
  const Value* d = arg(a, 0, "d");
  const Value* attribute = arg(a, 1, "attribute");
  std::string sep = d ? d->str() : "";
  std::string out;
  bool first = true;
  for (const Value& item : v.iterate()) {
    if (!first) out += sep;
    first = false;
    out += (attribute && !attribute->is_none() ? attr_path(item, *attribute) : item).str();
  }
  return Value(out);
}

Value f_first(const Value& v, CallArgs&) {
  ValueList items = v.iterate();
  return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
}
Value f_last(const Value& v, CallArgs&) {
  ValueList items = v.iterate();
  return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
}

Value f_items(const Value& v, CallArgs&) {
  if (v.is_undefined()) return Value::list({});
  if (!v.is_dict()) throw TemplateError("Can only get item pairs from a mapping.");
  ValueList out;
  for (const auto& [k, x] : v.as_dict().items) out.push_back(Value::list({Value(k), x}, true));
  return Value::list(std::move(out));
}

Value f_replace(const Value& v, CallArgs& a) {
  const Value* old = arg(a, 0, "old");
  const Value* nw = arg(a, 1, "new");
  if (!old || !nw) throw TemplateError("replace() needs 'old' and 'new'");
  int64_t count = arg_int(a, 2, "count", -1);
  return Value(py::replace(v.str(), old->str(), nw->str(), count));
}

Value f_indent(const Value& v, CallArgs& a) {
  const Value* w = arg(a, 0, "width");
  std::string ind = !w ? "    " : w->is_string() ? w->as_string() : std::string(static_cast<size_t>(std::max<int64_t>(0, w->as_int())), ' ');
  bool first = arg_bool(a, 1, "first", false), blank = arg_bool(a, 2, "blank", false);
  v.require_defined();
  if (!v.is_string()) throw TemplateError("unsupported operand type(s) for +=: '" + v.type_name() + "' and 'str'");
  std::string s = v.as_string() + "\n";
  std::vector<std::string> lines = py::splitlines(s);
  std::string rv;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) rv += (i ? "\n" + ind : "") + lines[i];
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) rv += "\n" + (lines[i].empty() ? lines[i] : ind + lines[i]);
  }
  return Value(first ? ind + rv : rv);
}

Value f_title(const Value& v, CallArgs&) {  // jinja2's do_title, not str.title()
  std::u32string u = py::decode(v.str());
  auto is_sep = [](char32_t c) { return py::is_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<'; };
  bool start = true;
  for (char32_t& c : u) {
    if (is_sep(c)) {
      start = true;
      continue;
    }
    c = start ? py::to_upper(c) : py::to_lower(c);
    start = false;
  }
  return Value(py::encode(u));
}

Value f_int(const Value& v, CallArgs& a) {
  const Value* d = arg(a, 0, "default");
  Value dflt = d ? *d : Value(int64_t{0});
  if (v.is_int() || v.is_bool()) return Value(v.as_int());
  if (v.is_float()) return std::isfinite(v.as_double()) ? Value(static_cast<int64_t>(v.as_double())) : dflt;
  if (v.is_string()) {
    if (auto i = parse_int(v.as_string())) return Value(*i);
    if (auto f = parse_float(v.as_string()); f && std::isfinite(*f)) return Value(static_cast<int64_t>(*f));
  }
  return dflt;
}

Value f_float(const Value& v, CallArgs& a) {
  const Value* d = arg(a, 0, "default");
  if (v.is_number()) return Value(v.as_double());
  if (v.is_string())
    if (auto f = parse_float(v.as_string())) return Value(*f);
  return d ? *d : Value(0.0);
}

Value f_map(const Value& v, CallArgs& a) {
  ValueList out;
  const Value* attribute = nullptr;
  for (const auto& [k, x] : a.kwargs)
    if (k == "attribute") attribute = &x;
  if (attribute) {
    const Value* dflt = nullptr;
    for (const auto& [k, x] : a.kwargs)
      if (k == "default") dflt = &x;
    for (const Value& item : v.iterate()) {
      Value r = attr_path(item, *attribute);
      out.push_back(r.is_undefined() && dflt ? *dflt : r);
    }
    return Value::list(std::move(out));
  }
  if (a.args.empty() || !a.args[0].is_string()) throw TemplateError("map requires a filter name or attribute=");
  std::string name = a.args[0].as_string();
  CallArgs rest;
  rest.args.assign(a.args.begin() + 1, a.args.end());
  rest.kwargs = a.kwargs;
  for (const Value& item : v.iterate()) {
    CallArgs copy = rest;
    out.push_back(apply_filter(name, item, copy));
  }
  return Value::list(std::move(out));
}

Value f_sort(const Value& v, CallArgs& a) {
  bool reverse = arg_bool(a, 0, "reverse", false), cs = arg_bool(a, 1, "case_sensitive", false);
  const Value* attribute = arg(a, 2, "attribute");
  ValueList items = v.iterate();
  auto key = [&](const Value& x) { return sort_key(attribute && !attribute->is_none() ? attr_path(x, *attribute) : x, cs); };
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    return reverse ? py_less(key(y), key(x)) : py_less(key(x), key(y));
  });
  return Value::list(std::move(items));
}

Value f_dictsort(const Value& v, CallArgs& a) {
  bool cs = arg_bool(a, 0, "case_sensitive", false);
  const Value* by = arg(a, 1, "by");
  bool reverse = arg_bool(a, 2, "reverse", false);
  bool by_value = by && by->is_string() && by->as_string() == "value";
  v.require_defined();
  if (!v.is_dict()) throw TemplateError("'" + v.type_name() + "' object has no attribute 'items'");
  ValueList items = f_items(v, a).as_list();
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    Value kx = sort_key(x.as_list()[by_value], cs), ky = sort_key(y.as_list()[by_value], cs);
    return reverse ? py_less(ky, kx) : py_less(kx, ky);
  });
  return Value::list(std::move(items));
}

Value min_max(const Value& v, CallArgs& a, bool want_max) {
  bool cs = arg_bool(a, 0, "case_sensitive", false);
  const Value* attribute = arg(a, 1, "attribute");
  ValueList items = v.iterate();
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  auto key = [&](const Value& x) { return sort_key(attribute && !attribute->is_none() ? attr_path(x, *attribute) : x, cs); };
  size_t best = 0;
  for (size_t i = 1; i < items.size(); ++i)
    if (want_max ? py_less(key(items[best]), key(items[i])) : py_less(key(items[i]), key(items[best]))) best = i;
  return items[best];
}

Value f_unique(const Value& v, CallArgs& a) {
  bool cs = arg_bool(a, 0, "case_sensitive", false);
  const Value* attribute = arg(a, 1, "attribute");
  ValueList out, seen;
  for (const Value& x : v.iterate()) {
    Value k = sort_key(attribute && !attribute->is_none() ? attr_path(x, *attribute) : x, cs);
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return py_equal(s, k); })) continue;
    seen.push_back(k);
    out.push_back(x);
  }
  return Value::list(std::move(out));
}

Value f_sum(const Value& v, CallArgs& a) {
  const Value* attribute = arg(a, 0, "attribute");
  const Value* start = arg(a, 1, "start");
  Value total = start ? *start : Value(int64_t{0});
  for (const Value& x : v.iterate())
    total = binary_op("+", total, attribute && !attribute->is_none() ? attr_path(x, *attribute) : x);
  return total;
}

Value f_reverse(const Value& v, CallArgs&) {
  if (v.is_string()) {
    std::u32string u = py::decode(v.as_string());
    std::reverse(u.begin(), u.end());
    return Value(py::encode(u));
  }
  ValueList items = v.iterate();
  std::reverse(items.begin(), items.end());
  return Value::list(std::move(items));
}

Value f_round(const Value& v, CallArgs& a) {
  int64_t precision = arg_int(a, 0, "precision", 0);
  const Value* m = arg(a, 1, "method");
  std::string method = m ? m->str() : "common";
  if (!v.is_number()) {
    v.require_defined();
    throw TemplateError("type " + v.type_name() + " doesn't define __round__ method");
  }
  if (!v.is_float() && method == "common" && precision >= 0) return Value(v.as_int());  // round(int) is an int
  double x = v.as_double(), scale = std::pow(10.0, static_cast<double>(precision));
  double r = method == "ceil" ? std::ceil(x * scale) / scale
             : method == "floor" ? std::floor(x * scale) / scale
                                 : std::nearbyint(x * scale) / scale;
  if (method != "common" && method != "ceil" && method != "floor") throw TemplateError("method must be common, ceil or floor");
  return Value(r);
}

Value f_wordcount(const Value& v, CallArgs&) {
  int64_t n = 0;
  bool in_word = false;
  for (char32_t c : py::decode(v.str())) {
    bool w = py::is_alpha(c) || py::is_digit(c) || c == '_';
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value(n);
}

Value f_truncate(const Value& v, CallArgs& a) {
  if (!v.is_string()) {  // jinja2 returns anything short enough unchanged, checking only len()
    int64_t n = f_length(v, a).as_int();
    int64_t limit = arg_int(a, 0, "length", 255) + 5;
    if (n <= limit) return v;
    throw TemplateError("truncate of a long '" + v.type_name() + "' is not supported");
  }
  std::u32string s = py::decode(v.as_string());
  int64_t length = arg_int(a, 0, "length", 255);
  bool killwords = arg_bool(a, 1, "killwords", false);
  const Value* e = arg(a, 2, "end");
  std::u32string end = py::decode(e ? e->str() : "...");
  const Value* lw = arg(a, 3, "leeway");
  int64_t leeway = lw && !lw->is_none() ? lw->as_int() : 5;
  if (static_cast<int64_t>(s.size()) <= length + leeway) return v;
  size_t keep = static_cast<size_t>(std::max<int64_t>(0, length - static_cast<int64_t>(end.size())));
  std::u32string head = s.substr(0, keep);
  if (!killwords) {
    size_t sp = head.rfind(U' ');
    if (sp != std::u32string::npos) head = head.substr(0, sp);
  }
  return Value(py::encode(head + end));
}

Value f_batch(const Value& v, CallArgs& a) {
  int64_t n = arg_int(a, 0, "linecount", 1);
  if (n <= 0) throw TemplateError("batch size must be positive");
  const Value* fill = arg(a, 1, "fill_with");
  ValueList out, cur;
  for (const Value& x : v.iterate()) {
    cur.push_back(x);
    if (static_cast<int64_t>(cur.size()) == n) {
      out.push_back(Value::list(std::move(cur)));
      cur.clear();
    }
  }
  if (!cur.empty()) {
    if (fill && !fill->is_none())
      while (static_cast<int64_t>(cur.size()) < n) cur.push_back(*fill);
    out.push_back(Value::list(std::move(cur)));
  }
  return Value::list(std::move(out));
}

const std::map<std::string, FilterFn, std::less<>>& filters() {
  static const std::map<std::string, FilterFn, std::less<>> kFilters = {
      {"abs", [](const Value& v, CallArgs&) {
         if (v.is_float()) return Value(std::fabs(v.as_double()));
         if (!v.is_number()) throw TemplateError("bad operand type for abs(): '" + v.type_name() + "'");
         return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
       }},
      {"attr", [](const Value& v, CallArgs& a) {
         const Value* n = arg(a, 0, "name");
         if (!n || !n->is_string()) throw TemplateError("attr() needs a name");
         if (v.is_dict()) {  // Python attributes of a dict are its methods, never its items
           Value m = get_attr(Value::dict(), n->as_string());
           return m.is_undefined() ? m : get_attr(v, n->as_string());
         }
         return get_attr(v, n->as_string());
       }},
      {"batch", f_batch},
      {"capitalize", [](const Value& v, CallArgs&) { return Value(py::capitalize(v.str())); }},
      {"center", [](const Value& v, CallArgs& a) {
         CallArgs c;
         c.args.push_back(Value(arg_int(a, 0, "width", 80)));
         return get_attr(Value(v.str()), "center").as_function().fn(c);
       }},
      {"count", f_length},
      {"d", f_default},
      {"default", f_default},
      {"dictsort", f_dictsort},
      {"e", [](const Value& v, CallArgs&) { return Value(html_escape(v.str())); }},
      {"escape", [](const Value& v, CallArgs&) { return Value(html_escape(v.str())); }},
      {"first", f_first},
      {"float", f_float},
      {"forceescape", [](const Value& v, CallArgs&) { return Value(html_escape(v.str())); }},
      {"format", [](const Value& v, CallArgs& a) {
         if (!a.kwargs.empty()) return binary_op("%", Value(v.str()), Value::dict(a.kwargs));
         return binary_op("%", Value(v.str()), Value::list(a.args, true));
       }},
      {"indent", f_indent},
      {"int", f_int},
      {"items", f_items},
      {"join", f_join},
      {"last", f_last},
      {"length", f_length},
      {"list", [](const Value& v, CallArgs&) { return Value::list(v.iterate()); }},
      {"lower", [](const Value& v, CallArgs&) { return Value(py::lower(v.str())); }},
      {"map", f_map},
      {"max", [](const Value& v, CallArgs& a) { return min_max(v, a, true); }},
      {"min", [](const Value& v, CallArgs& a) { return min_max(v, a, false); }},
      {"pprint", [](const Value& v, CallArgs&) { return Value(v.repr()); }},
      {"reject", [](const Value& v, CallArgs& a) { return select_impl(v, a, false, false); }},
      {"rejectattr", [](const Value& v, CallArgs& a) { return select_impl(v, a, true, false); }},
      {"replace", f_replace},
      {"reverse", f_reverse},
      {"round", f_round},
      {"safe", [](const Value& v, CallArgs&) { return Value(v.str()); }},
      {"select", [](const Value& v, CallArgs& a) { return select_impl(v, a, false, true); }},
      {"selectattr", [](const Value& v, CallArgs& a) { return select_impl(v, a, true, true); }},
      {"sort", f_sort},
      {"string", [](const Value& v, CallArgs&) { return Value(v.str()); }},
      {"sum", f_sum},
      {"title", f_title},
      {"tojson", f_tojson},
      {"trim", f_trim},
      {"truncate", f_truncate},
      {"unique", f_unique},
      {"upper", [](const Value& v, CallArgs&) { return Value(py::upper(v.str())); }},
      {"wordcount", f_wordcount},
  };
  return kFilters;
}

// str.isupper() / str.islower(): at least one cased character and none of the other case.
bool cased_only(const std::string& s, bool upper) {
  bool any = false;
  for (char32_t c : py::decode(s)) {
    if (upper ? py::is_lower(c) : py::is_upper(c)) return false;
    any = any || py::is_lower(c) || py::is_upper(c);
  }
  return any;
}

bool t_iterable(const Value& v) {
  return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
}

const std::map<std::string, TestFn, std::less<>>& tests() {
  static const auto need = [](const CallArgs& a, std::string_view n) -> const Value& {
    const Value* v = a.get(0, n);
    if (!v) throw TemplateError("test requires an argument");
    return *v;
  };
  static const std::map<std::string, TestFn, std::less<>> kTests = {
      {"boolean", [](const Value& v, CallArgs&) { return v.is_bool(); }},
      {"callable", [](const Value& v, CallArgs&) { return v.is_function() || v.is_undefined(); }},
      {"defined", [](const Value& v, CallArgs&) { return !v.is_undefined(); }},
      {"divisibleby", [](const Value& v, CallArgs& a) {
         return py_equal(binary_op("%", v, need(a, "num")), Value(int64_t{0}));
       }},
      {"eq", [](const Value& v, CallArgs& a) { return py_equal(v, need(a, "other")); }},
      {"equalto", [](const Value& v, CallArgs& a) { return py_equal(v, need(a, "other")); }},
      {"==", [](const Value& v, CallArgs& a) { return py_equal(v, need(a, "other")); }},
      {"escaped", [](const Value&, CallArgs&) { return false; }},
      {"even", [](const Value& v, CallArgs&) { return py_equal(binary_op("%", v, Value(int64_t{2})), Value(int64_t{0})); }},
      {"false", [](const Value& v, CallArgs&) { return v.is_bool() && !v.as_bool(); }},
      {"filter", [](const Value& v, CallArgs&) { return v.is_string() && has_filter(v.as_string()); }},
      {"float", [](const Value& v, CallArgs&) { return v.is_float(); }},
      {"ge", [](const Value& v, CallArgs& a) { return !py_less(v, need(a, "other")); }},
      {">=", [](const Value& v, CallArgs& a) { return !py_less(v, need(a, "other")); }},
      {"gt", [](const Value& v, CallArgs& a) { return py_less(need(a, "other"), v); }},
      {"greaterthan", [](const Value& v, CallArgs& a) { return py_less(need(a, "other"), v); }},
      {">", [](const Value& v, CallArgs& a) { return py_less(need(a, "other"), v); }},
      {"in", [](const Value& v, CallArgs& a) { return contains(need(a, "seq"), v); }},
      {"integer", [](const Value& v, CallArgs&) { return v.is_int(); }},
      {"iterable", [](const Value& v, CallArgs&) { return t_iterable(v); }},
      {"le", [](const Value& v, CallArgs& a) { return !py_less(need(a, "other"), v); }},
      {"<=", [](const Value& v, CallArgs& a) { return !py_less(need(a, "other"), v); }},
      {"lower", [](const Value& v, CallArgs&) { return cased_only(v.str(), false); }},
      {"lt", [](const Value& v, CallArgs& a) { return py_less(v, need(a, "other")); }},
      {"lessthan", [](const Value& v, CallArgs& a) { return py_less(v, need(a, "other")); }},
      {"<", [](const Value& v, CallArgs& a) { return py_less(v, need(a, "other")); }},
      {"mapping", [](const Value& v, CallArgs&) { return v.is_dict(); }},
      {"ne", [](const Value& v, CallArgs& a) { return !py_equal(v, need(a, "other")); }},
      {"!=", [](const Value& v, CallArgs& a) { return !py_equal(v, need(a, "other")); }},
      {"none", [](const Value& v, CallArgs&) { return v.is_none(); }},
      {"number", [](const Value& v, CallArgs&) { return v.is_number(); }},
      {"odd", [](const Value& v, CallArgs&) { return py_equal(binary_op("%", v, Value(int64_t{2})), Value(int64_t{1})); }},
      {"sameas", [](const Value& v, CallArgs& a) {
         const Value& o = need(a, "other");
         if (v.is_list() && o.is_list()) return &v.as_list() == &o.as_list();
         if ((v.is_dict() || v.is_namespace()) && (o.is_dict() || o.is_namespace())) return &v.as_dict() == &o.as_dict();
         return v.storage().index() == o.storage().index() && py_equal(v, o);
       }},
      {"sequence", [](const Value& v, CallArgs&) { return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict(); }},
      {"string", [](const Value& v, CallArgs&) { return v.is_string(); }},
      {"test", [](const Value& v, CallArgs&) { return v.is_string() && has_test(v.as_string()); }},
      {"true", [](const Value& v, CallArgs&) { return v.is_bool() && v.as_bool(); }},
      {"undefined", [](const Value& v, CallArgs&) { return v.is_undefined(); }},
      {"upper", [](const Value& v, CallArgs&) { return cased_only(v.str(), true); }},
  };
  return kTests;
}

}  // namespace

bool has_filter(const std::string& name) { return filters().count(name) > 0; }
bool has_test(const std::string& name) { return tests().count(name) > 0; }

Value apply_filter(const std::string& name, const Value& v, CallArgs& args) {
  auto it = filters().find(name);
  if (it == filters().end()) throw TemplateError("No filter named '" + name + "'.");
  return it->second(v, args);
}

bool apply_test(const std::string& name, const Value& v, CallArgs& args) {
  auto it = tests().find(name);
  if (it == tests().end()) throw TemplateError("No test named '" + name + "'.");
  static const std::set<std::string, std::less<>> kTakesOther = {
      "divisibleby", "eq", "equalto", "==", "ge", ">=", "gt", "greaterthan", ">", "in", "le", "<=",
      "lt", "lessthan", "<", "ne", "!=", "sameas"};
  size_t given = args.args.size() + args.kwargs.size();
  size_t allowed = kTakesOther.count(name) ? 1 : 0;
  if (given > allowed)  // Python would raise TypeError for the extra argument
    throw TemplateError("test_" + name + "() takes " + std::to_string(allowed + 1) + " positional argument" +
                        (allowed ? "s" : "") + " but " + std::to_string(given + 1) + " were given");
  return it->second(v, args);
}

DictItems make_globals() {
  DictItems g;
  g.emplace_back("range", Value::function("range", [](CallArgs& a) {
    std::vector<int64_t> p;
    for (const Value& v : a.args) {
      if (!v.is_int() && !v.is_bool()) throw TemplateError("'" + v.type_name() + "' object cannot be interpreted as an integer");
      p.push_back(v.as_int());
    }
    if (p.empty() || p.size() > 3) throw TemplateError("range expected 1 to 3 arguments");
    int64_t start = p.size() == 1 ? 0 : p[0], stop = p.size() == 1 ? p[0] : p[1], step = p.size() == 3 ? p[2] : 1;
    if (step == 0) throw TemplateError("range() arg 3 must not be zero");
    ValueList out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      if (out.size() >= 100000)
        throw TemplateError("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
      out.emplace_back(i);
    }
    return Value::list(std::move(out));
  }));
  g.emplace_back("dict", Value::function("dict", [](CallArgs& a) {
    DictItems items;
    if (!a.args.empty() && a.args[0].is_dict()) items = a.args[0].as_dict().items;
    Value d = Value::dict(std::move(items));
    for (auto& [k, v] : a.kwargs) d.mutable_dict().set(k, v);
    return d;
  }));
  g.emplace_back("namespace", Value::function("namespace", [](CallArgs& a) {
    Value ns = Value::namespace_();
    for (const Value& pos : a.args) {
      if (!pos.is_dict()) throw TemplateError("namespace() positional arguments must be mappings");
      for (const auto& [k, v] : pos.as_dict().items) ns.mutable_dict().set(k, v);
    }
    for (auto& [k, v] : a.kwargs) ns.mutable_dict().set(k, v);
    return ns;
  }));
  g.emplace_back("raise_exception", Value::function("raise_exception", [](CallArgs& a) -> Value {
    const Value* m = a.get(0, "message");
    throw RaisedError(m ? m->str() : "");
  }));
  g.emplace_back("strftime_now", Value::function("strftime_now", [](CallArgs& a) {
    const Value* f = a.get(0, "format");
    if (!f || !f->is_string()) throw TemplateError("strftime_now() needs a format string");
    std::time_t now = std::time(nullptr);
    std::tm tm{};
    localtime_r(&now, &tm);
    char buf[512];
    size_t n = std::strftime(buf, sizeof buf, f->as_string().c_str(), &tm);
    return Value(std::string(buf, n));
  }));
  return g;
}

}  // namespace xinfer::jinja
