#include "xinfer/tokenizer/bpe_model.h"

#include <cstdio>
#include <queue>

#include <nlohmann/json.hpp>

#include "xinfer/tokenizer/byte_level.h"
#include "xinfer/tokenizer/utf8.h"

namespace xinfer::tok {
namespace {

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

}  // namespace

Result<BpeModel> BpeModel::from_json(const nlohmann::json& j) {
  if (j.value("type", "BPE") != "BPE") return unimplemented("model type '" + j.value("type", "") + "' is not supported");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (j.contains(key) && j[key].is_string() && !j[key].get<std::string>().empty()) {
      return unimplemented(std::string("BPE ") + key + " is not supported");
    }
  }
  if (j.contains("dropout") && j["dropout"].is_number() && j["dropout"].get<double>() > 0) {
    return unimplemented("BPE dropout is not supported");
  }
  BpeModel m;
  const auto& vocab = j.at("vocab");
  m.vocab_.reserve(vocab.size());
  int32_t max_id = -1;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const auto id = it.value().get<int32_t>();
    if (id < 0) return invalid_argument("negative token id for '" + it.key() + "'");
    m.vocab_.emplace(it.key(), id);
    max_id = std::max(max_id, id);
  }
  m.id_to_token_.resize(static_cast<size_t>(max_id + 1));
  for (const auto& [tok, id] : m.vocab_) m.id_to_token_[static_cast<size_t>(id)] = tok;

  const auto& merges = j.at("merges");
  m.merges_.reserve(merges.size() * 2);
  int32_t rank = 0;
  for (const auto& mj : merges) {
    std::string a, b;
    if (mj.is_string()) {
      const auto& s = mj.get_ref<const std::string&>();
      const size_t sp = s.find(' ', 1);
      if (sp == std::string::npos) return invalid_argument("bad merge '" + s + "'");
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else {
      a = mj.at(0).get<std::string>();
      b = mj.at(1).get<std::string>();
    }
    auto ia = m.vocab_.find(a), ib = m.vocab_.find(b), ic = m.vocab_.find(a + b);
    if (ia == m.vocab_.end() || ib == m.vocab_.end() || ic == m.vocab_.end()) {
      return invalid_argument("merge '" + a + " " + b + "' uses a token missing from the vocab");
    }
    m.merges_.emplace(pair_key(ia->second, ib->second), Merge{rank++, ic->second});
  }

  const auto& bl = ByteLevelMap::get();
  for (int b = 0; b < 256; ++b) {
    auto it = m.vocab_.find(bl.byte_to_utf8[b]);
    m.byte_char_id_[b] = it == m.vocab_.end() ? -1 : it->second;
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    auto fb = m.vocab_.find(std::string_view(name));
    m.byte_fallback_id_[b] = fb == m.vocab_.end() ? -1 : fb->second;
  }
  if (j.contains("unk_token") && j["unk_token"].is_string()) {
    auto it = m.vocab_.find(j["unk_token"].get<std::string>());
    if (it != m.vocab_.end()) m.unk_id_ = it->second;
  }
  m.byte_fallback_ = j.value("byte_fallback", false);
  m.fuse_unk_ = j.value("fuse_unk", false);
  m.ignore_merges_ = j.value("ignore_merges", false);
  return m;
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size()) return nullptr;
  // Ids missing from a sparse vocab have an empty name.
  const std::string& t = id_to_token_[static_cast<size_t>(id)];
  return t.empty() ? nullptr : &t;
}

void BpeModel::tokenize(std::string_view piece, bool raw_bytes, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (piece.size() > kMaxCachedPieceBytes) {
    tokenize_uncached(piece, raw_bytes, out);
    return;
  }
  CacheShard& shard = (*cache_)[StringHash{}(piece) % kShards];
  {
    std::lock_guard<std::mutex> lock(shard.mu);
    auto it = shard.map.find(piece);
    if (it != shard.map.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t start = out.size();
  tokenize_uncached(piece, raw_bytes, out);
  std::lock_guard<std::mutex> lock(shard.mu);
  if (shard.map.size() < kCacheEntriesPerShard) {
    shard.map.emplace(std::string(piece), std::vector<int32_t>(out.begin() + static_cast<ptrdiff_t>(start), out.end()));
  }
}

void BpeModel::tokenize_uncached(std::string_view piece, bool raw_bytes, std::vector<int32_t>& out) const {
  std::string mapped;
  std::string_view word = piece;
  if (raw_bytes) {
    ByteLevelMap::get().encode(piece, mapped);
    word = mapped;
  }
  if (ignore_merges_) {
    auto it = vocab_.find(word);
    if (it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  std::vector<int32_t> ids;
  ids.reserve(piece.size());
  if (raw_bytes) {
    for (char c : piece) {
      const int32_t id = byte_char_id_[static_cast<uint8_t>(c)];
      if (id >= 0) ids.push_back(id);
      else if (unk_id_) ids.push_back(*unk_id_);
    }
  } else {
    bool prev_unk = false;
    size_t i = 0;
    while (i < word.size()) {
      const size_t n = std::min(utf8_seq_len(static_cast<uint8_t>(word[i])), word.size() - i);
      const std::string_view ch = word.substr(i, n);
      i += n;
      auto it = vocab_.find(ch);
      if (it != vocab_.end()) {
        ids.push_back(it->second);
        prev_unk = false;
        continue;
      }
      if (byte_fallback_) {
        bool all = true;
        for (char c : ch) all = all && byte_fallback_id_[static_cast<uint8_t>(c)] >= 0;
        if (all) {
          for (char c : ch) ids.push_back(byte_fallback_id_[static_cast<uint8_t>(c)]);
          prev_unk = false;
          continue;
        }
      }
      if (unk_id_) {
        if (!(fuse_unk_ && prev_unk)) ids.push_back(*unk_id_);
        prev_unk = true;
      }
    }
  }
  merge_symbols(ids);
  out.insert(out.end(), ids.begin(), ids.end());
}

void BpeModel::merge_symbols(std::vector<int32_t>& ids) const {
  const int32_t n = static_cast<int32_t>(ids.size());
  if (n < 2) return;
  struct Sym {
    int32_t id, prev, next;
    bool alive;
  };
  struct Cand {
    int32_t rank, pos, new_id;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::vector<Sym> syms(static_cast<size_t>(n));
  std::priority_queue<Cand, std::vector<Cand>, std::greater<>> heap;
  for (int32_t i = 0; i < n; ++i) {
    syms[i] = {ids[i], i - 1, i + 1 < n ? i + 1 : -1, true};
    if (i + 1 < n) {
      auto it = merges_.find(pair_key(ids[i], ids[i + 1]));
      if (it != merges_.end()) heap.push({it->second.rank, i, it->second.new_id});
    }
  }
  auto push_pair = [&](int32_t left) {
    if (left < 0 || syms[left].next < 0) return;
    auto it = merges_.find(pair_key(syms[left].id, syms[syms[left].next].id));
    if (it != merges_.end()) heap.push({it->second.rank, left, it->second.new_id});
  };
  while (!heap.empty()) {
    const Cand c = heap.top();
    heap.pop();
    Sym& s = syms[c.pos];
    if (!s.alive || s.next < 0) continue;
    Sym& r = syms[s.next];
    auto it = merges_.find(pair_key(s.id, r.id));
    if (it == merges_.end() || it->second.new_id != c.new_id) continue;
    s.id = c.new_id;
    r.alive = false;
    s.next = r.next;
    if (s.next >= 0) syms[s.next].prev = c.pos;
    push_pair(s.prev);
    push_pair(c.pos);
  }
  ids.clear();
  for (int32_t i = 0; i >= 0; i = syms[i].next) ids.push_back(syms[i].id);
}

}  // namespace xinfer::tok
