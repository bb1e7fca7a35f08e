// HfTokenizer: the tokenizer.json pipeline (see tokenizer.h for the order of the stages).
// Supported components are listed in normalizer.h, pre_tokenizer.h, bpe_model.h, decoder.h and
// below (post-processors: TemplateProcessing, ByteLevel, Roberta/Bert, Sequence). Anything else
// fails to load with UNIMPLEMENTED.
#pragma once

#include <string>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "xinfer/tokenizer/added_vocabulary.h"
#include "xinfer/tokenizer/bpe_model.h"
#include "xinfer/tokenizer/decoder.h"
#include "xinfer/tokenizer/normalizer.h"
#include "xinfer/tokenizer/pre_tokenizer.h"
#include "xinfer/tokenizer/tokenizer.h"

namespace xinfer::tok {

// The ids a post-processor puts around a single sequence (add_special_tokens=true).
struct PostProcessor {
  std::vector<int32_t> prefix, suffix;
  static Result<PostProcessor> from_json(const nlohmann::json& j);
};

class HfTokenizer final : public Tokenizer {
 public:
  // `config` is tokenizer_config.json, or null.
  static Result<std::unique_ptr<HfTokenizer>> from_json(const nlohmann::json& tokenizer,
                                                        const nlohmann::json& config);

  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const override;
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = true) const override;
  int32_t vocab_size() const override { return vocab_size_; }
  std::optional<int32_t> token_to_id(std::string_view token) const override;
  std::string id_to_token(int32_t id) const override;
  std::optional<int32_t> bos_id() const override { return bos_id_; }
  std::optional<int32_t> eos_id() const override { return eos_id_; }
  bool is_special(int32_t id) const override;
  const std::string& chat_template() const override { return chat_template_; }
  const std::string& bos_token() const override { return bos_token_; }
  const std::string& eos_token() const override { return eos_token_; }
  std::optional<bool> config_add_bos_token() const override { return add_bos_token_; }

 private:
  // The token string of `id` (added tokens first), nullptr if none.
  const std::string* token_of(int32_t id) const;
  void encode_text(std::string_view text, bool first_segment, std::vector<std::string>& pieces,
                   std::vector<int32_t>& ids) const;

  AddedVocabulary added_;
  Normalizer normalizer_;
  PreTokenizer pre_tokenizer_;
  BpeModel model_;
  PostProcessor post_;
  Decoder decoder_;
  std::unordered_set<std::string> special_contents_;
  std::vector<int8_t> special_by_id_;
  int32_t vocab_size_ = 0;
  std::optional<int32_t> bos_id_, eos_id_;
  std::optional<bool> add_bos_token_;
  std::string bos_token_, eos_token_, chat_template_;
};

}  // namespace xinfer::tok
