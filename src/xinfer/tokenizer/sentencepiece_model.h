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
#include <vector>

#include <nlohmann/json.hpp>

#include "xinfer/core/status.h"

namespace xinfer::tok {

// tokenizer.model: the SentencePiece ModelProto (BPE models only).
Result<nlohmann::json> sentencepiece_model_to_json(const std::string& path);
// llama2.c tokenizer.bin / tok512.bin: int32 max_token_length, then per token f32 score, int32 length,
// bytes. Ids 0/1/2 are <unk>/<s>/</s>, byte pieces are <0xXX>, and ' ' stands for U+2581.
Result<nlohmann::json> llama2c_tokenizer_to_json(const std::string& path);

// A SentencePiece vocabulary given piece by piece (e.g. from GGUF metadata: tokenizer.ggml.tokens, scores,
// token_type); `type` is SentencePiece's piece type (1 normal, 2 unknown, 3 control, 4 user-defined,
// 5 unused, 6 byte). bos_id < 0: no BOS post-processor.
struct SentencePieceEntry {
  std::string text;
  float score = 0;
  int type = 1;
};
struct SentencePieceVocab {
  std::vector<SentencePieceEntry> pieces;
  bool byte_fallback = true;
  bool add_dummy_prefix = true;
  int bos_id = 1;
};
nlohmann::json sentencepiece_vocab_to_json(const SentencePieceVocab& vocab);

}  // namespace xinfer::tok
