#include "xinfer/tokenizer/hf_tokenizer.h"

#include "xinfer/tokenizer/utf8.h"

namespace xinfer::tok {
namespace {

// tokenizer_config.json writes a token either as a string or as {"content": ...}.
std::string config_token(const nlohmann::json& config, const char* key) {
  if (!config.is_object() || !config.contains(key)) return {};
  const auto& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return {};
}

}  // namespace

Result<PostProcessor> PostProcessor::from_json(const nlohmann::json& j) {
  PostProcessor p;
  if (j.is_null()) return p;
  const std::string type = j.value("type", "");
  if (type == "ByteLevel") return p;
  if (type == "Sequence") {
    for (const auto& sub : j["processors"]) {
      XI_ASSIGN_OR_RETURN(PostProcessor s, from_json(sub));
      p.prefix.insert(p.prefix.begin(), s.prefix.begin(), s.prefix.end());
      p.suffix.insert(p.suffix.end(), s.suffix.begin(), s.suffix.end());
    }
    return p;
  }
  if (type == "TemplateProcessing") {
    bool seen_sequence = false;
    for (const auto& item : j.at("single")) {
      if (item.contains("Sequence")) {
        seen_sequence = true;
        continue;
      }
      const std::string name = item.at("SpecialToken").at("id").get<std::string>();
      const auto& st = j.at("special_tokens");
      if (!st.contains(name)) return invalid_argument("TemplateProcessing: undefined special token " + name);
      for (const auto& id : st[name].at("ids")) (seen_sequence ? p.suffix : p.prefix).push_back(id.get<int32_t>());
    }
    return p;
  }
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    p.prefix.push_back(j.at("cls").at(1).get<int32_t>());
    p.suffix.push_back(j.at("sep").at(1).get<int32_t>());
    return p;
  }
  return unimplemented("post_processor type '" + type + "' is not supported");
}

Result<std::unique_ptr<HfTokenizer>> HfTokenizer::from_json(const nlohmann::json& tj, const nlohmann::json& config) {
  auto t = std::make_unique<HfTokenizer>();
  XI_ASSIGN_OR_RETURN(t->added_, AddedVocabulary::from_json(tj.value("added_tokens", nlohmann::json())));
  XI_ASSIGN_OR_RETURN(t->normalizer_, Normalizer::from_json(tj.value("normalizer", nlohmann::json())));
  XI_ASSIGN_OR_RETURN(t->pre_tokenizer_, PreTokenizer::from_json(tj.value("pre_tokenizer", nlohmann::json())));
  XI_ASSIGN_OR_RETURN(t->model_, BpeModel::from_json(tj.at("model")));
  XI_ASSIGN_OR_RETURN(t->post_, PostProcessor::from_json(tj.value("post_processor", nlohmann::json())));
  XI_ASSIGN_OR_RETURN(t->decoder_, Decoder::from_json(tj.value("decoder", nlohmann::json())));

  int32_t max_id = t->model_.max_id();
  for (const auto& a : t->added_.tokens()) max_id = std::max(max_id, a.id);
  t->vocab_size_ = max_id + 1;
  t->special_by_id_.assign(static_cast<size_t>(t->vocab_size_), 0);
  for (const auto& a : t->added_.tokens()) {
    if (a.special) {
      t->special_contents_.insert(a.content);
      t->special_by_id_[static_cast<size_t>(a.id)] = 1;
    }
  }
  t->bos_token_ = config_token(config, "bos_token");
  t->eos_token_ = config_token(config, "eos_token");
  if (!t->bos_token_.empty()) t->bos_id_ = t->token_to_id(t->bos_token_);
  if (!t->eos_token_.empty()) t->eos_id_ = t->token_to_id(t->eos_token_);
  if (config.is_object()) {
    if (config.contains("add_bos_token") && config["add_bos_token"].is_boolean()) {
      t->add_bos_token_ = config["add_bos_token"].get<bool>();
    }
    if (config.contains("chat_template")) {
      const auto& ct = config["chat_template"];
      if (ct.is_string()) {
        t->chat_template_ = ct.get<std::string>();
      } else if (ct.is_array()) {  // [{"name": "default", "template": ...}, ...]
        for (const auto& entry : ct) {
          if (entry.value("name", "") == "default" || t->chat_template_.empty()) {
            t->chat_template_ = entry.value("template", "");
          }
        }
      }
    }
  }
  return t;
}

void HfTokenizer::encode_text(std::string_view text, bool first_segment, std::vector<std::string>& pieces,
                              std::vector<int32_t>& ids) const {
  pieces.clear();
  pre_tokenizer_.apply(text, first_segment, pieces);
  const bool raw = pre_tokenizer_.raw_bytes_output();
  for (const auto& p : pieces) model_.tokenize(p, raw, ids);
}

std::vector<int32_t> HfTokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::string repaired;
  if (!is_valid_utf8(text)) {
    repaired = utf8_lossy(text);
    text = repaired;
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 8);
  if (add_special_tokens) ids.insert(ids.end(), post_.prefix.begin(), post_.prefix.end());
  std::vector<Segment> segments, inner;
  std::vector<std::string> pieces;
  added_.split(text, /*normalized=*/false, segments);
  for (const auto& seg : segments) {
    if (seg.id >= 0) {
      ids.push_back(seg.id);
      continue;
    }
    const std::string_view raw = text.substr(seg.begin, seg.end - seg.begin);
    std::string normalized;
    std::string_view norm = raw;
    if (!normalizer_.empty()) {
      normalized = normalizer_.apply(raw);
      norm = normalized;
    }
    if (!added_.has_normalized_tokens()) {
      if (!norm.empty()) encode_text(norm, seg.begin == 0, pieces, ids);
      continue;
    }
    inner.clear();
    added_.split(norm, /*normalized=*/true, inner);
    for (const auto& in : inner) {
      if (in.id >= 0) {
        ids.push_back(in.id);
      } else {
        encode_text(norm.substr(in.begin, in.end - in.begin), seg.begin == 0 && in.begin == 0, pieces, ids);
      }
    }
  }
  if (add_special_tokens) ids.insert(ids.end(), post_.suffix.begin(), post_.suffix.end());
  return ids;
}

const std::string* HfTokenizer::token_of(int32_t id) const {
  if (const AddedToken* a = added_.find_id(id)) return &a->content;
  return model_.id_to_token(id);
}

std::string HfTokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const int32_t id : ids) {
    const std::string* t = token_of(id);
    if (t == nullptr) continue;
    if (skip_special_tokens && !special_contents_.empty() && special_contents_.count(*t)) continue;
    tokens.push_back(*t);
  }
  return decoder_.decode(std::move(tokens));
}

std::optional<int32_t> HfTokenizer::token_to_id(std::string_view token) const {
  if (const AddedToken* a = added_.find_content(token)) return a->id;
  return model_.token_to_id(token);
}

std::string HfTokenizer::id_to_token(int32_t id) const {
  const std::string* t = token_of(id);
  return t ? *t : std::string();
}

bool HfTokenizer::is_special(int32_t id) const {
  return id >= 0 && id < vocab_size_ && special_by_id_[static_cast<size_t>(id)] != 0;
}

}  // namespace xinfer::tok
