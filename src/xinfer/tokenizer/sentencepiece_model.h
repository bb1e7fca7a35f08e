// Converters from SentencePiece-style vocabularies to the tokenizer.json they correspond to, so that
// HfTokenizer runs them (the same construction as transformers' LlamaConverter):
//   normalizer   Prepend U+2581 (if add_dummy_prefix) + Replace ' ' -> U+2581
//   model        BPE; merges = every split (l, r) of a piece p with l, r in the vocab, ranked by p's
//                score (descending; ties in vocab order), byte_fallback, unk, fuse_unk
//   decoder      Replace U+2581 -> ' ', ByteFallback, Fuse, Strip one leading ' '
//   post         BOS (TemplateProcessing)
// Control/unknown pieces become special added tokens, user-defined pieces non-special added tokens.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "xinfer/core/status.h"

namespace xinfer::tok {

// tokenizer.model: the SentencePiece ModelProto (BPE models only).
Result<nlohmann::json> sentencepiece_model_to_json(const std::string& path);
// llama2.c tokenizer.bin / tok512.bin: int32 max_token_length, then per token f32 score, int32 length,
// bytes. Ids 0/1/2 are <unk>/<s>/</s>, byte pieces are <0xXX>, and ' ' stands for U+2581.
Result<nlohmann::json> llama2c_tokenizer_to_json(const std::string& path);

}  // namespace xinfer::tok
