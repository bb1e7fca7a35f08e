// The tokenizer of a GGUF file, built from its metadata as the equivalent tokenizer.json (run by
// tok::HfTokenizer), so that ids match llama.cpp's tokenizer for the same file:
//
//   tokenizer.ggml.model "gpt2": byte-level BPE. vocab = tokenizer.ggml.tokens (id = index), ranked merges =
//     tokenizer.ggml.merges ("a b"), pre-tokenizer from tokenizer.ggml.pre (llama.cpp's regex set for it):
//       default, gpt2, gpt-2:                 ByteLevel with the GPT-2 regex
//       smollm, starcoder, refact, codeshell: Digits (individual digits) then ByteLevel with the GPT-2 regex
//       llama-bpe, llama3:                    Split on the Llama 3 regex, then ByteLevel without regex
//       qwen2:                                Split on the Qwen2 regex (single digits), then ByteLevel
//     anything else: UNIMPLEMENTED naming the value.
//   tokenizer.ggml.model "llama": SentencePiece BPE from tokens + tokenizer.ggml.scores + token_type, as
//     tok::sentencepiece_vocab_to_json builds it (byte fallback, dummy prefix from add_space_prefix).
// token_type (llama.cpp's: 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte): control and
// unknown tokens become special added tokens, user-defined ones non-special added tokens.
// add_bos_token / add_eos_token (defaults: true for llama, false for gpt2) decide what encode() adds;
// bos/eos from tokenizer.ggml.bos_token_id / eos_token_id; chat template from tokenizer.chat_template.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "xinfer/core/status.h"
#include "xinfer/model/gguf_file.h"
#include "xinfer/tokenizer/tokenizer.h"

namespace xinfer::model {

struct GgufTokenizerJson {
  nlohmann::json tokenizer;  // tokenizer.json
  nlohmann::json config;     // tokenizer_config.json (bos/eos tokens, add_bos_token, chat_template)
};
Result<GgufTokenizerJson> gguf_tokenizer_json(const GgufFile& file);
Result<std::unique_ptr<tok::Tokenizer>> gguf_tokenizer(const GgufFile& file);

// `path` a .gguf file (is_gguf_path): its metadata tokenizer; otherwise tok::Tokenizer::load(path).
Result<std::unique_ptr<tok::Tokenizer>> load_tokenizer(const std::string& path);

}  // namespace xinfer::model
