// Bounded JSON parsing of request bodies: nlohmann's SAX interface drives our own DOM builder, which checks
// every limit BEFORE the value it guards is built, so no body under --max-body-bytes can make the parse
// (or anything after it: dump, destruction, the chat template) recurse deeply or cost more than linear time.
//
// Limits (JsonLimits): nesting depth (an object or array inside another counts one level; the top-level
// object is level 1), keys of one object, elements of one array, bytes of one string or key, values in the
// whole document. Past a limit: a 400 naming the limit and its value, e.g.
//   "request body nests deeper than the limit of 64 levels"
//
// Cost: nlohmann's own ordered_json parser inserts each key with ordered_map::emplace, a linear scan of
// the object's keys, so an object of k distinct keys costs O(k^2) string compares (100,000 unknown keys:
// ~14 s). Here keys are appended directly; duplicates (last value wins, at the first one's position, as
// nlohmann does) are found by a linear scan while an object is small and by a hash index once it has more
// than kIndexedKeys keys. nlohmann's SAX parser itself is iterative (no recursion on depth).
#pragma once

#include <cstddef>
#include <string>
#include <variant>

#include <nlohmann/json.hpp>

namespace xinfer::server {

struct JsonLimits {
  int max_depth = 64;
  size_t max_object_keys = 4096;
  size_t max_array_elements = size_t{1} << 20;
  size_t max_string_bytes = size_t{1} << 22;
  size_t max_values = size_t{1} << 21;
};

// Parses `text` as one JSON value within `limits`. Malformed JSON or a limit passed -> the error message
// (the caller answers 400 with it). Does not check the top-level type (the caller does).
std::variant<nlohmann::ordered_json, std::string> parse_bounded_json(const std::string& text,
                                                                     const JsonLimits& limits);

}  // namespace xinfer::server
