// jinja2's runtime library as seen from a transformers chat template: attribute/item lookup with the
// sandbox's rules (x.attr tries the Python attribute, e.g. a dict or str method, before the item;
// x['k'] tries the item first), Python methods of str/dict/list, filters, tests and global functions.
// All throw TemplateError on misuse, with Python's/jinja2's wording where it matters.
#pragma once

#include <string>

#include "xinfer/tokenizer/jinja/value.h"

namespace xinfer::jinja {

Value get_attr(const Value& obj, const std::string& name);
Value get_item(const Value& obj, const Value& key);

// Python operators on values (binary: + - * / // % **).
Value binary_op(const std::string& op, const Value& a, const Value& b);
bool contains(const Value& container, const Value& item);  // `item in container`

// Filters and tests by jinja2 name; `apply_test` also accepts the name of a comparison test ("==" etc.).
Value apply_filter(const std::string& name, const Value& v, CallArgs& args);
bool apply_test(const std::string& name, const Value& v, CallArgs& args);
bool has_filter(const std::string& name);
bool has_test(const std::string& name);

// Globals of transformers' environment: range, dict, namespace, raise_exception, strftime_now, cycler-free.
DictItems make_globals();

}  // namespace xinfer::jinja
