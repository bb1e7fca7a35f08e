// TokenOffsets: where each token of a sequence starts in the text the sequence decodes to, in code points
// (the completions API's logprobs.text_offset), as ids arrive one at a time.
//
// A token's text alone is not its part of the text: alone, each byte of a character split over tokens
// decodes to U+FFFD (one code point each, so summing lengths drifted by one per extra byte), and
// SentencePiece strips a leading space from the first token of a decode (so every word alone lacked its
// space). Here the ids go through a StreamingDetokenizer (in context, complete characters only) and:
//   - tokens whose pushes add nothing (they end inside a character, or the detokenizer holds a byte-fallback
//     run, "<0xE6><0x97><0xA5><0xE6>...") are held; a token starts after the complete characters of the run
//     held before it (the run's decoding alone, less the U+FFFD of a character still open), i.e. at the
//     character its first byte belongs to;
//   - when a push adds text after held tokens, those characters are the first part of it, and the token
//     starts after them;
//   - the width of a token is what its push adds (special tokens that are skipped add nothing).
// push() returns the token's start relative to the position before the held run and how far that position
// moves (0 while held); the caller keeps the absolute position. Held runs are short: O(run) per push.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "xinfer/tokenizer/tokenizer.h"

namespace xinfer::server {

class TokenOffsets {
 public:
  // prompt_ids: context before the first pushed id (not counted).
  TokenOffsets(const tok::Tokenizer& tokenizer, bool skip_special_tokens, std::span<const int32_t> prompt_ids = {});

  struct Step {
    int64_t start = 0;  // code points from the position before push() to where the token starts
    int64_t width = 0;  // code points the position advances
    std::string added;  // the text the token's push added (complete UTF-8)
  };
  Step push(int32_t id);

 private:
  std::string held_complete_text() const;  // the complete characters of the held run

  const tok::Tokenizer& tokenizer_;
  bool skip_special_;
  std::optional<tok::StreamingDetokenizer> detok_;
  std::vector<int32_t> held_;  // ids pushed since the last push that added text
};

}  // namespace xinfer::server
