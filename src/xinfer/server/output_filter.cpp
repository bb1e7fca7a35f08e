#include "xinfer/server/output_filter.h"

#include <fstream>
#include <limits>
#include <sstream>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <nlohmann/json.hpp>

namespace xinfer::server {

namespace {

constexpr size_t kNone = std::numeric_limits<size_t>::max();

struct Match {
  size_t begin = kNone;  // complete match [begin, end)
  size_t end = kNone;
  size_t partial = kNone;  // start of a tail that could still become a match
};

Match match_literal(std::string_view text, std::string_view pattern, bool final) {
  Match m;
  if (const size_t pos = text.find(pattern); pos != std::string_view::npos) {
    m.begin = pos;
    m.end = pos + pattern.size();
  }
  if (!final) {
    const size_t first = text.size() >= pattern.size() ? text.size() - pattern.size() + 1 : 0;
    for (size_t s = first; s < text.size(); ++s) {
      if (pattern.compare(0, text.size() - s, text.substr(s)) == 0) {
        m.partial = s;
        break;
      }
    }
  }
  return m;
}

Match match_regex(std::string_view text, pcre2_code* code, bool final) {
  Match m;
  pcre2_match_data* data = pcre2_match_data_create_from_pattern(code, nullptr);
  uint32_t options = PCRE2_NOTEMPTY | PCRE2_NO_UTF_CHECK;
  if (!final) options |= PCRE2_PARTIAL_HARD;
  const int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), 0, options, data,
                             nullptr);
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data);
  if (rc >= 0) {
    m.begin = ov[0];
    m.end = ov[1];
  } else if (rc == PCRE2_ERROR_PARTIAL) {
    m.partial = ov[0];
  }
  pcre2_match_data_free(data);
  return m;
}

Result<FilterAction> parse_action(const std::string& s) {
  if (s == "mask") return FilterAction::kMask;
  if (s == "stop") return FilterAction::kStop;
  if (s == "content_filter") return FilterAction::kContentFilter;
  return invalid_argument("action must be mask, stop or content_filter, got '" + s + "'");
}

}  // namespace

Result<std::shared_ptr<const FilterRules>> FilterRules::create(std::vector<FilterRule> rules) {
  auto out = std::make_shared<FilterRules>();
  out->compiled_ = std::make_shared<std::vector<Compiled>>();
  for (size_t i = 0; i < rules.size(); ++i) {
    const std::string where = "filter rule " + std::to_string(i) + ": ";
    FilterRule& r = rules[i];
    if (r.pattern.empty()) return invalid_argument(where + "empty pattern");
    Compiled c{std::move(r), nullptr};
    if (c.rule.regex) {
      int error = 0;
      PCRE2_SIZE offset = 0;
      pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(c.rule.pattern.data()), c.rule.pattern.size(),
                                       PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
      if (code == nullptr) {
        PCRE2_UCHAR buf[256];
        pcre2_get_error_message(error, buf, sizeof(buf));
        return invalid_argument(where + "regex '" + c.rule.pattern + "' does not compile at offset " +
                                std::to_string(offset) + ": " + reinterpret_cast<const char*>(buf));
      }
      c.code = std::shared_ptr<void>(code, [](void* p) { pcre2_code_free(static_cast<pcre2_code*>(p)); });
      pcre2_match_data* data = pcre2_match_data_create_from_pattern(code, nullptr);
      const int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(""), 0, 0, 0, data, nullptr);
      pcre2_match_data_free(data);
      if (rc >= 0) return invalid_argument(where + "regex '" + c.rule.pattern + "' matches the empty string");
    }
    out->compiled_->push_back(std::move(c));
  }
  return std::shared_ptr<const FilterRules>(std::move(out));
}

Result<std::shared_ptr<const FilterRules>> FilterRules::parse_json(std::string_view json_text) {
  nlohmann::json j = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return invalid_argument("filter rules: not valid JSON");
  if (!j.is_array()) return invalid_argument("filter rules: expected a JSON list of rules");
  std::vector<FilterRule> rules;
  for (size_t i = 0; i < j.size(); ++i) {
    const nlohmann::json& e = j[i];
    const std::string where = "filter rule " + std::to_string(i) + ": ";
    if (!e.is_object()) return invalid_argument(where + "expected an object");
    FilterRule r;
    if (!e.contains("pattern") || !e["pattern"].is_string()) return invalid_argument(where + "missing string 'pattern'");
    r.pattern = e["pattern"].get<std::string>();
    const std::string type = e.value("type", std::string("literal"));
    if (type != "literal" && type != "regex")
      return invalid_argument(where + "type must be literal or regex, got '" + type + "'");
    r.regex = type == "regex";
    if (!e.contains("action") || !e["action"].is_string()) return invalid_argument(where + "missing string 'action'");
    auto action = parse_action(e["action"].get<std::string>());
    if (!action.ok()) return invalid_argument(where + action.status().message());
    r.action = *action;
    if (e.contains("replacement")) {
      if (!e["replacement"].is_string()) return invalid_argument(where + "'replacement' must be a string");
      r.replacement = e["replacement"].get<std::string>();
    } else {
      r.replacement = "***";
    }
    rules.push_back(std::move(r));
  }
  return create(std::move(rules));
}

Result<std::shared_ptr<const FilterRules>> FilterRules::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("filter rules file " + path + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  auto r = parse_json(ss.str());
  if (!r.ok()) return Status(r.status().code(), path + ": " + r.status().message());
  return r;
}

OutputFilter::OutputFilter(std::vector<std::string> stop_strings, std::shared_ptr<const FilterRules> rules,
                           bool include_stop_str)
    : stops_(std::move(stop_strings)), rules_(std::move(rules)), include_stop_str_(include_stop_str) {}

FilterOutput OutputFilter::push(std::string_view text) {
  if (stopped_) return {};
  pending_.append(text);
  return process(/*final=*/false);
}

FilterOutput OutputFilter::finish() {
  if (stopped_) return {};
  return process(/*final=*/true);
}

FilterOutput OutputFilter::process(bool final) {
  FilterOutput out;
  const size_t num_rules = rules_ ? rules_->size() : 0;
  while (!pending_.empty()) {
    // Leftmost complete match (first matcher wins a tie: stop strings, then rules in file order) and the
    // leftmost held partial start over all matchers.
    size_t best_begin = kNone, best_end = kNone, best_index = kNone, hold = pending_.size();
    auto consider = [&](const Match& m, size_t index) {
      if (m.begin < best_begin) {
        best_begin = m.begin;
        best_end = m.end;
        best_index = index;
      }
      if (m.partial < hold) hold = m.partial;
    };
    for (size_t i = 0; i < stops_.size(); ++i) consider(match_literal(pending_, stops_[i], final), i);
    for (size_t i = 0; i < num_rules; ++i) {
      const FilterRules::Compiled& c = rules_->compiled()[i];
      consider(c.code ? match_regex(pending_, static_cast<pcre2_code*>(c.code.get()), final) : match_literal(pending_, c.rule.pattern, final),
               stops_.size() + i);
    }
    if (best_begin == kNone || best_begin > hold) {
      out.text.append(pending_, 0, hold);
      pending_.erase(0, hold);
      return out;
    }
    out.text.append(pending_, 0, best_begin);
    const std::string matched = pending_.substr(best_begin, best_end - best_begin);
    if (best_index < stops_.size()) {
      if (include_stop_str_) out.text += matched;
      out.stop = FilterStop::kStopString;
    } else {
      const FilterRule& rule = rules_->compiled()[best_index - stops_.size()].rule;
      if (rule.action == FilterAction::kMask) {
        out.text += rule.replacement;
        pending_.erase(0, best_end);
        continue;
      }
      out.stop = rule.action == FilterAction::kStop ? FilterStop::kStopRule : FilterStop::kContentFilter;
    }
    out.matched = matched;
    stopped_ = true;
    pending_.clear();
    return out;
  }
  return out;
}

}  // namespace xinfer::server
