// OutputFilter: the text of one generated sequence passes through it, piece by piece, before it reaches
// the client. It ends the sequence on a stop string and applies the server's rules (--filter-rules):
//   mask            the matched text is replaced by `replacement` and generation goes on;
//   stop            generation ends before the match (finish_reason "stop"), the match is dropped;
//   content_filter  generation ends before the match (finish_reason "content_filter").
//
// Invariant (no leak): push() returns only text that no later text can change, i.e. it holds back the
// shortest tail that could still be the start of a stop string or of a rule's match. Literal patterns hold
// back a tail that is a proper prefix of the pattern; regexes use PCRE2's hard partial matching (a tail
// that could still grow into a match, or into a longer one, is held). Matching is leftmost: a held partial
// match that starts earlier than a complete one wins once it is resolved. finish() resolves what is held
// (partial matches become no match). Text in and out is valid UTF-8; matches fall on code point bounds.
//
// FilterRules are immutable after load and shared by all requests (thread-safe); an OutputFilter belongs
// to one sequence and is used from one thread at a time.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "xinfer/core/status.h"

namespace xinfer::server {

enum class FilterAction { kMask, kStop, kContentFilter };

struct FilterRule {
  std::string pattern;
  bool regex = false;  // false: literal text
  FilterAction action = FilterAction::kMask;
  std::string replacement;  // for kMask
};

class FilterRules {
 public:
  FilterRules() = default;
  // Compiles each rule; INVALID_ARGUMENT naming the rule index for an empty pattern, a regex that does not
  // compile or one that can match the empty string.
  static Result<std::shared_ptr<const FilterRules>> create(std::vector<FilterRule> rules);
  // JSON: [{"pattern": "...", "type": "literal"|"regex" (default literal),
  //         "action": "mask"|"stop"|"content_filter", "replacement": "***" (mask only; default "***")}]
  static Result<std::shared_ptr<const FilterRules>> parse_json(std::string_view json_text);
  static Result<std::shared_ptr<const FilterRules>> load(const std::string& path);

  struct Compiled {
    FilterRule rule;
    std::shared_ptr<void> code;  // pcre2_code_8*; null for literals
  };
  const std::vector<Compiled>& compiled() const { return *compiled_; }
  size_t size() const { return compiled_ ? compiled_->size() : 0; }

 private:
  std::shared_ptr<std::vector<Compiled>> compiled_;
};

enum class FilterStop { kNone, kStopString, kStopRule, kContentFilter };

struct FilterOutput {
  std::string text;                  // safe to emit now
  FilterStop stop = FilterStop::kNone;  // != kNone: the sequence ends here; later pushes return nothing
  std::string matched;               // the stop string or rule text that ended it
};

class OutputFilter {
 public:
  // stop_strings: each non-empty. include_stop_str: emit the stop string itself (vLLM's
  // include_stop_str_in_output). rules may be null.
  OutputFilter(std::vector<std::string> stop_strings, std::shared_ptr<const FilterRules> rules,
               bool include_stop_str = false);

  FilterOutput push(std::string_view text);
  FilterOutput finish();  // end of generation: flush what is held
  bool stopped() const { return stopped_; }
  size_t held_bytes() const { return pending_.size(); }

 private:
  FilterOutput process(bool final);

  std::vector<std::string> stops_;
  std::shared_ptr<const FilterRules> rules_;
  bool include_stop_str_;
  std::string pending_;  // received, not yet emitted
  bool stopped_ = false;
};

}  // namespace xinfer::server
