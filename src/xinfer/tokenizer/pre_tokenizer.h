// Pre-tokenizers of tokenizer.json: cut normalized text into pieces that the model tokenizes
// independently (so a piece is also the unit of the BPE cache). A Sequence is flattened at load.
//   Split (regex or literal; Isolated/Removed/MergedWithPrevious/MergedWithNext/Contiguous; invert),
//   ByteLevel (optional prefix space, optional GPT-2 regex, then bytes -> GPT-2 characters),
//   Metaspace (' ' -> replacement, prepend scheme, optional split), Digits, Whitespace, WhitespaceSplit.
// Invariant: when ByteLevel is the last step its byte->character mapping is left to the model
// (raw_bytes_output() == true), which looks the raw bytes up directly: same result, no copy.
#pragma once

#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "xinfer/core/status.h"
#include "xinfer/tokenizer/regex.h"

namespace xinfer::tok {

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct SplitPreTokenize {
  Regex pattern;
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
};
struct ByteLevelPreTokenize {
  bool add_prefix_space = false;
  bool use_regex = true;
  Regex gpt2;  // compiled only when use_regex
};
struct MetaspacePreTokenize {
  std::string replacement = "\xE2\x96\x81";  // U+2581
  enum class Prepend { kAlways, kFirst, kNever } prepend = Prepend::kAlways;
  bool split = true;
};
using PreTokenizerStep = std::variant<SplitPreTokenize, ByteLevelPreTokenize, MetaspacePreTokenize>;

class PreTokenizer {
 public:
  // `j` is tokenizer.json's "pre_tokenizer" (null: the whole text is one piece).
  static Result<PreTokenizer> from_json(const nlohmann::json& j);

  // Appends the pieces of `text` to `pieces`. first_segment: `text` starts the input (Metaspace "first").
  void apply(std::string_view text, bool first_segment, std::vector<std::string>& pieces) const;
  // True when pieces are raw bytes that still need the ByteLevel character map (see header).
  bool raw_bytes_output() const { return raw_bytes_output_; }

 private:
  Status add(const nlohmann::json& j);
  std::vector<PreTokenizerStep> steps_;
  bool raw_bytes_output_ = false;
};

}  // namespace xinfer::tok
