// Tokenizer: text <-> token ids, exact against the Hugging Face `tokenizers` package.
//
// Tokenizer::load(dir) picks the implementation from what the directory holds:
//   tokenizer.json   Hugging Face format (HfTokenizer: BPE, byte-level or SentencePiece-style)
//   tokenizer.model  SentencePiece BPE protobuf, converted in memory as transformers' LlamaConverter does
//   tokenizer.bin / tok512.bin   llama2.c's format (scores + pieces), converted the same way
// plus tokenizer_config.json when present (bos/eos token strings, add_bos_token, chat_template).
//
// encode() runs: added tokens split -> normalizer -> pre-tokenizer -> model -> post-processor
// (add_special_tokens adds what tokenizer.json's post_processor adds, e.g. Llama 2's BOS).
// Special tokens written in the text are always recognized, as in `tokenizers`.
// encode() accepts any bytes: invalid UTF-8 is first repaired, each maximal invalid subsequence
// becoming U+FFFD (what Python's bytes.decode(errors="replace") gives).
// All methods are const and thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "xinfer/core/status.h"

namespace xinfer::tok {

class Tokenizer {
 public:
  virtual ~Tokenizer();

  static Result<std::unique_ptr<Tokenizer>> load(const std::string& dir);

  virtual std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const = 0;
  virtual std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = true) const = 0;

  // 1 + the largest id of the vocab or the added tokens.
  virtual int32_t vocab_size() const = 0;
  virtual std::optional<int32_t> token_to_id(std::string_view token) const = 0;
  virtual std::string id_to_token(int32_t id) const = 0;  // "" for an unknown id
  virtual std::optional<int32_t> bos_id() const = 0;
  virtual std::optional<int32_t> eos_id() const = 0;
  virtual bool is_special(int32_t id) const = 0;
  // From tokenizer_config.json ("" if none).
  virtual const std::string& chat_template() const = 0;
  virtual const std::string& bos_token() const = 0;
  virtual const std::string& eos_token() const = 0;
  // tokenizer_config.json's add_bos_token, if it says. Note: encode() follows tokenizer.json only;
  // transformers' Llama tokenizers additionally add BOS when this is true and the post-processor
  // does not (DeepSeek V3).
  virtual std::optional<bool> config_add_bos_token() const = 0;
};

}  // namespace xinfer::tok

// The public tokenizer API also includes the streaming detokenizer.
#include "xinfer/tokenizer/streaming_detokenizer.h"  // IWYU pragma: export
