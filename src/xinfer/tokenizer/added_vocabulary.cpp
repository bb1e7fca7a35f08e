#include "xinfer/tokenizer/added_vocabulary.h"

#include <algorithm>
#include <cctype>
#include <climits>

#include <nlohmann/json.hpp>

#include "xinfer/tokenizer/normalizer.h"
#include "xinfer/tokenizer/utf8.h"

namespace xinfer::tok {
namespace {

bool is_word_char(std::string_view s, size_t at_byte, bool before) {
  // The code point just before / at `at_byte`.
  if (before) {
    if (at_byte == 0) return false;
    size_t k = at_byte - 1;
    while (k > 0 && (static_cast<uint8_t>(s[k]) & 0xC0) == 0x80) --k;
    const uint32_t cp = next_codepoint(s, k);
    return cp == '_' || (cp < 0x80 ? std::isalnum(static_cast<int>(cp)) != 0 : !is_unicode_whitespace(cp));
  }
  if (at_byte >= s.size()) return false;
  size_t k = at_byte;
  const uint32_t cp = next_codepoint(s, k);
  return cp == '_' || (cp < 0x80 ? std::isalnum(static_cast<int>(cp)) != 0 : !is_unicode_whitespace(cp));
}

}  // namespace

void AddedVocabulary::Trie::insert(std::string_view s, int32_t token) {
  if (s.empty()) return;
  first_byte[static_cast<uint8_t>(s[0])] = true;
  int32_t node = 0;
  for (char c : s) {
    const auto b = static_cast<uint8_t>(c);
    auto& ch = nodes[static_cast<size_t>(node)].children;
    auto it = std::lower_bound(ch.begin(), ch.end(), std::make_pair(b, INT32_MIN));
    if (it != ch.end() && it->first == b) {
      node = it->second;
    } else {
      const auto next = static_cast<int32_t>(nodes.size());
      ch.insert(it, {b, next});
      nodes.emplace_back();
      node = next;
    }
  }
  auto& slot = nodes[static_cast<size_t>(node)].token;
  if (slot < 0) slot = token;  // the first declaration of a duplicate string wins
}

int32_t AddedVocabulary::Trie::longest_at(std::string_view text, size_t pos, size_t& len) const {
  int32_t node = 0, best = -1;
  for (size_t i = pos; i < text.size(); ++i) {
    const auto b = static_cast<uint8_t>(text[i]);
    const auto& ch = nodes[static_cast<size_t>(node)].children;
    auto it = std::lower_bound(ch.begin(), ch.end(), std::make_pair(b, INT32_MIN));
    if (it == ch.end() || it->first != b) break;
    node = it->second;
    if (nodes[static_cast<size_t>(node)].token >= 0) {
      best = nodes[static_cast<size_t>(node)].token;
      len = i + 1 - pos;
    }
  }
  return best;
}

Result<AddedVocabulary> AddedVocabulary::from_json(const nlohmann::json& added) {
  AddedVocabulary v;
  if (added.is_null()) return v;
  for (const auto& a : added) {
    AddedToken t;
    t.content = a.at("content").get<std::string>();
    t.id = a.at("id").get<int32_t>();
    t.special = a.value("special", false);
    t.normalized = a.value("normalized", !t.special);
    t.lstrip = a.value("lstrip", false);
    t.rstrip = a.value("rstrip", false);
    t.single_word = a.value("single_word", false);
    v.tokens_.push_back(std::move(t));
  }
  for (size_t i = 0; i < v.tokens_.size(); ++i) {
    v.by_id_.emplace(v.tokens_[i].id, i);
    v.by_content_.emplace(v.tokens_[i].content, i);
    v.tries_[v.tokens_[i].normalized ? 1 : 0].insert(v.tokens_[i].content, static_cast<int32_t>(i));
  }
  return v;
}

const AddedToken* AddedVocabulary::find_id(int32_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

const AddedToken* AddedVocabulary::find_content(std::string_view content) const {
  auto it = by_content_.find(std::string(content));
  return it == by_content_.end() ? nullptr : &tokens_[it->second];
}

void AddedVocabulary::split(std::string_view text, bool normalized, std::vector<Segment>& out) const {
  const Trie& trie = tries_[normalized ? 1 : 0];
  size_t text_start = 0;  // start of the pending plain-text segment
  size_t pos = 0;
  while (pos < text.size()) {
    if (!trie.first_byte[static_cast<uint8_t>(text[pos])]) {
      ++pos;
      continue;
    }
    size_t len = 0;
    const int32_t idx = trie.longest_at(text, pos, len);
    if (idx < 0) {
      ++pos;
      continue;
    }
    const AddedToken& t = tokens_[static_cast<size_t>(idx)];
    size_t b = pos, e = pos + len;
    if (t.single_word && (is_word_char(text, b, true) || is_word_char(text, e, false))) {
      ++pos;
      continue;
    }
    if (t.lstrip) {
      while (b > text_start) {
        size_t k = b - 1;
        while (k > text_start && (static_cast<uint8_t>(text[k]) & 0xC0) == 0x80) --k;
        size_t k2 = k;
        if (!is_unicode_whitespace(next_codepoint(text, k2))) break;
        b = k;
      }
    }
    if (t.rstrip) {
      while (e < text.size()) {
        size_t k = e;
        if (!is_unicode_whitespace(next_codepoint(text, k))) break;
        e = k;
      }
    }
    if (b > text_start) out.push_back({text_start, b, -1});
    out.push_back({b, e, t.id});
    pos = text_start = e;
  }
  if (text_start < text.size()) out.push_back({text_start, text.size(), -1});
}

}  // namespace xinfer::tok
