// StreamingDetokenizer: ids arrive one at a time (a generation); push() returns only text that is
// final: complete UTF-8 that later ids cannot change. The concatenation of every push() and the final
// flush() equals decode(all pushed ids) (with prompt_ids: decode(prompt + pushed) minus decode(prompt)).
//
// Method (as vLLM's incremental detokenizer): keep two offsets into ids_, prefix_ <= read_. The text
// of ids_[prefix_, read_) has been emitted. On push, decode ids_[prefix_, end) and emit what extends
// the decode of ids_[prefix_, read_), unless it ends in U+FFFD (an incomplete UTF-8 sequence or byte
// fallback run that the next id may complete), or the last decoded token is a byte-fallback token
// (<0xXX>): Hugging Face's ByteFallback decoder replaces every byte of an invalid run by U+FFFD, so a
// later byte can change text that looked complete. Decoding a window that starts a few tokens back keeps
// context-dependent decoders (SentencePiece's leading-space strip) consistent; each push costs
// O(window), not O(generation).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "xinfer/tokenizer/tokenizer.h"

namespace xinfer::tok {

class StreamingDetokenizer {
 public:
  StreamingDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens = true,
                       std::span<const int32_t> prompt_ids = {});

  std::string push(int32_t id);
  // Emits whatever is still held back (e.g. a trailing incomplete UTF-8 sequence, as U+FFFD).
  std::string flush();

 private:
  std::string decode_range(size_t begin, size_t end) const;

  const Tokenizer& tokenizer_;
  bool skip_special_;
  std::vector<int32_t> ids_;
  size_t prefix_ = 0;  // start of the decode window
  size_t read_ = 0;    // ids_[prefix_, read_) are emitted
};

}  // namespace xinfer::tok
