// Added tokens of tokenizer.json ("added_tokens"): strings matched in the input before the model
// sees it, each becoming exactly one id. Matching is leftmost-longest over a byte trie (Hugging Face
// uses an Aho-Corasick automaton with the same match kind). Tokens with normalized=false are matched
// on the raw text; those with normalized=true on the normalized text of the stretches in between.
// lstrip/rstrip widen a match over adjacent whitespace; single_word requires word boundaries.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "xinfer/core/status.h"

namespace xinfer::tok {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false;
  bool normalized = false;
  bool lstrip = false, rstrip = false, single_word = false;
};

// A stretch of input: either an added token (id >= 0) or text for the normalizer/model (id == -1).
struct Segment {
  size_t begin, end;
  int32_t id;
};

class AddedVocabulary {
 public:
  static Result<AddedVocabulary> from_json(const nlohmann::json& added_tokens);

  // Splits `text` into segments covering it, matching tokens whose `normalized` flag equals `normalized`.
  void split(std::string_view text, bool normalized, std::vector<Segment>& out) const;

  const std::vector<AddedToken>& tokens() const { return tokens_; }
  const AddedToken* find_id(int32_t id) const;
  const AddedToken* find_content(std::string_view content) const;
  bool has_normalized_tokens() const { return tries_[1].nodes.size() > 1; }

 private:
  struct Trie {
    struct Node {
      std::vector<std::pair<uint8_t, int32_t>> children;  // sorted by byte
      int32_t token = -1;                                  // index into tokens_
    };
    std::vector<Node> nodes{1};
    std::array<bool, 256> first_byte{};
    void insert(std::string_view s, int32_t token);
    // Longest token starting at text[pos], -1 if none; sets len.
    int32_t longest_at(std::string_view text, size_t pos, size_t& len) const;
  };
  std::vector<AddedToken> tokens_;
  std::unordered_map<int32_t, size_t> by_id_;
  std::unordered_map<std::string, size_t> by_content_;
  std::array<Trie, 2> tries_;  // [normalized]
};

}  // namespace xinfer::tok
