#include "xinfer/server/json_body_parser.h"

#include <memory>
#include <unordered_map>
#include <vector>

namespace xinfer::server {

using json = nlohmann::ordered_json;

namespace {

// Objects up to this many keys find duplicates by a linear scan; larger ones through a hash index.
constexpr size_t kIndexedKeys = 16;

class BoundedDomBuilder {
 public:
  using number_integer_t = json::number_integer_t;
  using number_unsigned_t = json::number_unsigned_t;
  using number_float_t = json::number_float_t;
  using string_t = json::string_t;
  using binary_t = json::binary_t;

  explicit BoundedDomBuilder(const JsonLimits& limits) : limits_(limits) {}

  bool null() { return add(json(nullptr)) != nullptr; }
  bool boolean(bool v) { return add(json(v)) != nullptr; }
  bool number_integer(number_integer_t v) { return add(json(v)) != nullptr; }
  bool number_unsigned(number_unsigned_t v) { return add(json(v)) != nullptr; }
  bool number_float(number_float_t v, const string_t&) { return add(json(v)) != nullptr; }
  bool string(string_t& v) {
    if (!string_fits(v)) return false;
    return add(json(std::move(v))) != nullptr;
  }
  bool binary(binary_t&) { return fail("binary values are not JSON"); }

  bool start_object(size_t) { return open(json::object()); }
  bool key(string_t& k) {
    if (!string_fits(k)) return false;
    key_ = std::move(k);
    return true;
  }
  bool end_object() { return close(); }
  bool start_array(size_t) { return open(json::array()); }
  bool end_array() { return close(); }

  bool parse_error(size_t, const std::string&, const nlohmann::detail::exception& e) {
    std::string what = e.what();
    // "[json.exception.parse_error.101] parse error at line 1, column 3: ..." -> "parse error at ..."
    if (const size_t end = what.find("] ");
        what.rfind("[json.exception.", 0) == 0 && end != std::string::npos)
      what = what.substr(end + 2);
    return fail("request body is not valid JSON: " + what);
  }

  json& root() { return root_; }
  const std::string& error() const { return error_; }

 private:
  struct Frame {
    json* value;  // an object or array; stable while it is on the stack (only its own children grow)
    std::unique_ptr<std::unordered_map<std::string, size_t>> index;  // objects past kIndexedKeys
  };

  bool fail(std::string message) {
    if (error_.empty()) error_ = std::move(message);
    return false;
  }

  bool string_fits(const string_t& s) {
    if (s.size() <= limits_.max_string_bytes) return true;
    return fail("request body has a string of " + std::to_string(s.size()) + " bytes, over the limit of " +
                std::to_string(limits_.max_string_bytes) + " bytes");
  }

  bool open(json container) {
    if (static_cast<int>(stack_.size()) >= limits_.max_depth) {
      return fail("request body nests deeper than the limit of " + std::to_string(limits_.max_depth) +
                  " levels");
    }
    json* v = add(std::move(container));
    if (v == nullptr) return false;
    stack_.push_back(Frame{v, nullptr});
    return true;
  }

  bool close() {
    stack_.pop_back();
    return true;
  }

  // Places v in the current container (or as the root); nullptr past a limit.
  json* add(json&& v) {
    if (++num_values_ > limits_.max_values) {
      fail("request body has more than the limit of " + std::to_string(limits_.max_values) + " values");
      return nullptr;
    }
    if (stack_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    Frame& top = stack_.back();
    if (top.value->is_array()) {
      json::array_t& arr = top.value->get_ref<json::array_t&>();
      if (arr.size() >= limits_.max_array_elements) {
        fail("request body has an array of more than the limit of " +
             std::to_string(limits_.max_array_elements) + " elements");
        return nullptr;
      }
      arr.push_back(std::move(v));
      return &arr.back();
    }
    json::object_t& obj = top.value->get_ref<json::object_t&>();
    if (json* existing = find_key(top, obj)) {  // a duplicate key: the last value wins
      *existing = std::move(v);
      return existing;
    }
    if (obj.size() >= limits_.max_object_keys) {
      fail("request body has an object of more than the limit of " + std::to_string(limits_.max_object_keys) +
           " keys");
      return nullptr;
    }
    // Appended without ordered_map::emplace's linear scan (find_key above already looked).
    static_cast<json::object_t::Container&>(obj).emplace_back(key_, std::move(v));
    if (top.index) top.index->emplace(key_, obj.size() - 1);
    return &obj.back().second;
  }

  json* find_key(Frame& top, json::object_t& map) {
    json::object_t::Container& obj = map;  // by position (ordered_map's operator[] takes keys)
    if (!top.index && obj.size() >= kIndexedKeys) {
      top.index = std::make_unique<std::unordered_map<std::string, size_t>>();
      for (size_t i = 0; i < obj.size(); ++i) top.index->emplace(obj[i].first, i);
    }
    if (top.index) {
      auto it = top.index->find(key_);
      return it == top.index->end() ? nullptr : &obj[it->second].second;
    }
    for (auto& [k, val] : obj)
      if (k == key_) return &val;
    return nullptr;
  }

  const JsonLimits& limits_;
  json root_;
  std::vector<Frame> stack_;
  std::string key_;
  size_t num_values_ = 0;
  std::string error_;
};

}  // namespace

std::variant<json, std::string> parse_bounded_json(const std::string& text, const JsonLimits& limits) {
  BoundedDomBuilder builder(limits);
  const bool ok = json::sax_parse(text, &builder, json::input_format_t::json, /*strict=*/true);
  if (!ok) {
    return builder.error().empty() ? std::string("request body is not valid JSON") : builder.error();
  }
  return std::move(builder.root());
}

}  // namespace xinfer::server
