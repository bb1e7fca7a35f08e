#include "xinfer/model/gguf_tokenizer.h"

#include "xinfer/model/gguf_config.h"
#include "xinfer/tokenizer/hf_tokenizer.h"
#include "xinfer/tokenizer/sentencepiece_model.h"

namespace xinfer::model {
namespace {

using json = nlohmann::json;

constexpr int kTypeUnknown = 2, kTypeControl = 3, kTypeUserDefined = 4;

// llama.cpp's pre-tokenizer regexes per tokenizer.ggml.pre, written as the tokenizer.json pre_tokenizer
// that Hugging Face's tokenizer of those models uses.
Result<json> pre_tokenizer_for(const std::string& pre, const std::string& file) {
  const json byte_level = {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  const json byte_level_no_regex = {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}};
  auto split = [](const char* regex) {
    return json{
        {"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}};
  };
  if (pre == "default" || pre == "gpt2" || pre == "gpt-2") return byte_level;
  if (pre == "smollm" || pre == "starcoder" || pre == "refact" || pre == "codeshell")
    return json{
        {"type", "Sequence"},
        {"pretokenizers", json::array({{{"type", "Digits"}, {"individual_digits", true}}, byte_level})}};
  if (pre == "llama-bpe" || pre == "llama3")
    return json{{"type", "Sequence"},
                {"pretokenizers",
                 json::array({split("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
                                    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"),
                              byte_level_no_regex})}};
  if (pre == "qwen2")
    return json{{"type", "Sequence"},
                {"pretokenizers",
                 json::array({split("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
                                    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"),
                              byte_level_no_regex})}};
  return unimplemented(
      file + ": metadata key 'tokenizer.ggml.pre': unsupported pre-tokenizer '" + pre +
      "' (supported: default, gpt2, smollm, starcoder, refact, codeshell, llama-bpe, qwen2)");
}

json template_processing(const std::vector<std::pair<std::string, int64_t>>& prefix,
                         const std::vector<std::pair<std::string, int64_t>>& suffix) {
  json single = json::array();
  json special = json::object();
  auto add = [&](const std::pair<std::string, int64_t>& t) {
    single.push_back({{"SpecialToken", {{"id", t.first}, {"type_id", 0}}}});
    special[t.first] = {
        {"id", t.first}, {"ids", json::array({t.second})}, {"tokens", json::array({t.first})}};
  };
  for (const auto& t : prefix) add(t);
  single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
  for (const auto& t : suffix) add(t);
  return {{"type", "TemplateProcessing"}, {"single", single}, {"special_tokens", special}};
}

}  // namespace

Result<GgufTokenizerJson> gguf_tokenizer_json(const GgufFile& f) {
  const std::string file = f.path();
  XI_ASSIGN_OR_RETURN(std::string model, f.get_string("tokenizer.ggml.model"));
  XI_ASSIGN_OR_RETURN(const std::vector<std::string>* tokens, f.get_string_array("tokenizer.ggml.tokens"));
  const size_t n = tokens->size();
  if (n == 0) return invalid_argument(file + ": metadata key 'tokenizer.ggml.tokens': empty vocabulary");
  std::vector<int64_t> types(n, 1);
  if (f.find("tokenizer.ggml.token_type")) {
    XI_ASSIGN_OR_RETURN(const std::vector<int64_t>* t, f.get_int_array("tokenizer.ggml.token_type"));
    if (t->size() != n)
      return invalid_argument(file + ": metadata key 'tokenizer.ggml.token_type': " +
                              std::to_string(t->size()) + " entries for " + std::to_string(n) + " tokens");
    types = *t;
  }
  auto token_id = [&](const char* key) -> Result<std::optional<int64_t>> {
    if (!f.find(key)) return std::optional<int64_t>();
    XI_ASSIGN_OR_RETURN(int64_t id, f.get_int(key));
    if (id < 0 || static_cast<size_t>(id) >= n)
      return invalid_argument(file + ": metadata key '" + std::string(key) + "': token id " +
                              std::to_string(id) + " outside the vocabulary of " + std::to_string(n));
    return std::optional<int64_t>(id);
  };
  XI_ASSIGN_OR_RETURN(std::optional<int64_t> bos, token_id("tokenizer.ggml.bos_token_id"));
  XI_ASSIGN_OR_RETURN(std::optional<int64_t> eos, token_id("tokenizer.ggml.eos_token_id"));
  XI_ASSIGN_OR_RETURN(std::optional<int64_t> unk, token_id("tokenizer.ggml.unknown_token_id"));
  const bool spm = model == "llama";
  if (!spm && model != "gpt2")
    return unimplemented(file + ": metadata key 'tokenizer.ggml.model': unsupported tokenizer '" + model +
                         "' (supported: gpt2, llama)");
  XI_ASSIGN_OR_RETURN(bool add_bos, f.get_bool_or("tokenizer.ggml.add_bos_token", spm));
  XI_ASSIGN_OR_RETURN(bool add_eos, f.get_bool_or("tokenizer.ggml.add_eos_token", false));

  GgufTokenizerJson out;
  json& t = out.tokenizer;
  if (spm) {
    XI_ASSIGN_OR_RETURN(const std::vector<double>* scores, f.get_float_array("tokenizer.ggml.scores"));
    if (scores->size() != n)
      return invalid_argument(file +
                              ": metadata key 'tokenizer.ggml.scores': " + std::to_string(scores->size()) +
                              " entries for " + std::to_string(n) + " tokens");
    tok::SentencePieceVocab v;
    XI_ASSIGN_OR_RETURN(v.add_dummy_prefix, f.get_bool_or("tokenizer.ggml.add_space_prefix", true));
    v.bos_id = add_bos && bos ? static_cast<int>(*bos) : -1;
    for (size_t i = 0; i < n; ++i)
      v.pieces.push_back({(*tokens)[i], static_cast<float>((*scores)[i]), static_cast<int>(types[i])});
    if (unk && types[static_cast<size_t>(*unk)] != kTypeUnknown)
      v.pieces[static_cast<size_t>(*unk)].type = kTypeUnknown;
    t = tok::sentencepiece_vocab_to_json(v);
    if (add_eos && eos) {
      const std::string& e = (*tokens)[static_cast<size_t>(*eos)];
      std::vector<std::pair<std::string, int64_t>> prefix;
      if (v.bos_id >= 0) prefix.push_back({(*tokens)[static_cast<size_t>(*bos)], *bos});
      t["post_processor"] = template_processing(prefix, {{e, *eos}});
    }
  } else {
    XI_ASSIGN_OR_RETURN(const std::vector<std::string>* merges, f.get_string_array("tokenizer.ggml.merges"));
    std::string pre = "default";
    if (f.find("tokenizer.ggml.pre")) {
      XI_ASSIGN_OR_RETURN(pre, f.get_string("tokenizer.ggml.pre"));
    }
    XI_ASSIGN_OR_RETURN(json pre_tokenizer, pre_tokenizer_for(pre, file));
    json vocab = json::object();
    json added = json::array();
    for (size_t i = 0; i < n; ++i) {
      const std::string& s = (*tokens)[i];
      if (!vocab.contains(s)) vocab[s] = i;
      const int64_t ty = types[i];
      if (ty == kTypeControl || ty == kTypeUnknown || ty == kTypeUserDefined)
        added.push_back({{"id", i},
                         {"content", s},
                         {"single_word", false},
                         {"lstrip", false},
                         {"rstrip", false},
                         {"normalized", false},
                         {"special", ty != kTypeUserDefined}});
    }
    t["added_tokens"] = added;
    t["normalizer"] = nullptr;
    t["pre_tokenizer"] = pre_tokenizer;
    t["model"] = {{"type", "BPE"},          {"vocab", vocab},    {"merges", *merges},
                  {"byte_fallback", false}, {"fuse_unk", false}, {"unk_token", nullptr},
                  {"ignore_merges", false}};
    t["decoder"] = {
        {"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
    std::vector<std::pair<std::string, int64_t>> prefix, suffix;
    if (add_bos && bos) prefix.push_back({(*tokens)[static_cast<size_t>(*bos)], *bos});
    if (add_eos && eos) suffix.push_back({(*tokens)[static_cast<size_t>(*eos)], *eos});
    t["post_processor"] = prefix.empty() && suffix.empty() ? json() : template_processing(prefix, suffix);
  }
  json& c = out.config;
  c = json::object();
  if (bos) c["bos_token"] = (*tokens)[static_cast<size_t>(*bos)];
  if (eos) c["eos_token"] = (*tokens)[static_cast<size_t>(*eos)];
  c["add_bos_token"] = add_bos;
  if (f.find("tokenizer.chat_template")) {
    XI_ASSIGN_OR_RETURN(std::string tmpl, f.get_string("tokenizer.chat_template"));
    c["chat_template"] = tmpl;
  }
  return out;
}

Result<std::unique_ptr<tok::Tokenizer>> gguf_tokenizer(const GgufFile& f) {
  XI_ASSIGN_OR_RETURN(GgufTokenizerJson j, gguf_tokenizer_json(f));
  try {
    Result<std::unique_ptr<tok::HfTokenizer>> t = tok::HfTokenizer::from_json(j.tokenizer, j.config);
    if (!t.ok())
      return Status(t.status().code(), f.path() + ": tokenizer from metadata: " + t.status().message());
    return std::unique_ptr<tok::Tokenizer>(std::move(t).value());
  } catch (const nlohmann::json::exception& e) {
    return data_loss(f.path() + ": tokenizer from metadata: " + e.what());
  }
}

Result<std::unique_ptr<tok::Tokenizer>> load_tokenizer(const std::string& path) {
  if (!is_gguf_path(path)) return tok::Tokenizer::load(path);
  XI_ASSIGN_OR_RETURN(GgufFile f, GgufFile::open(path));
  return gguf_tokenizer(f);
}

}  // namespace xinfer::model
