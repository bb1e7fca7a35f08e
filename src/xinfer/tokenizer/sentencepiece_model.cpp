#include "xinfer/tokenizer/sentencepiece_model.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <unordered_map>

#include "xinfer/tokenizer/utf8.h"

namespace xinfer::tok {
namespace {

enum class PieceType { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

struct Piece {
  std::string text;
  float score = 0;
  PieceType type = PieceType::kNormal;
};

struct SpModel {
  std::vector<Piece> pieces;
  bool byte_fallback = false;
  bool add_dummy_prefix = true;
  int model_type = 1;  // 1 unigram, 2 BPE
  int bos_id = 1;
};

Result<std::string> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return not_found(path + ": cannot open");
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// Minimal protobuf wire-format reader.
struct Reader {
  const uint8_t* p;
  const uint8_t* end;
  bool ok = true;
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; p < end && shift < 64; shift += 7) {
      const uint8_t b = *p++;
      v |= static_cast<uint64_t>(b & 0x7F) << shift;
      if (!(b & 0x80)) return v;
    }
    ok = false;
    return 0;
  }
  std::string_view bytes() {
    const uint64_t n = varint();
    if (!ok || n > static_cast<uint64_t>(end - p)) {
      ok = false;
      return {};
    }
    std::string_view s(reinterpret_cast<const char*>(p), n);
    p += n;
    return s;
  }
  void skip(uint32_t wire) {
    if (wire == 0) varint();
    else if (wire == 1) p += std::min<ptrdiff_t>(8, end - p);
    else if (wire == 2) bytes();
    else if (wire == 5) p += std::min<ptrdiff_t>(4, end - p);
    else ok = false;
  }
};

Reader reader_of(std::string_view s) {
  const auto* b = reinterpret_cast<const uint8_t*>(s.data());
  return Reader{b, b + s.size()};
}

Result<SpModel> parse_model_proto(std::string_view data) {
  SpModel m;
  Reader r = reader_of(data);
  while (r.ok && r.p < r.end) {
    const uint64_t key = r.varint();
    const auto field = static_cast<uint32_t>(key >> 3), wire = static_cast<uint32_t>(key & 7);
    if (field == 1 && wire == 2) {  // SentencePiece
      Reader pr = reader_of(r.bytes());
      Piece piece;
      while (pr.ok && pr.p < pr.end) {
        const uint64_t k = pr.varint();
        const auto f = static_cast<uint32_t>(k >> 3), w = static_cast<uint32_t>(k & 7);
        if (f == 1 && w == 2) {
          piece.text = std::string(pr.bytes());
        } else if (f == 2 && w == 5 && pr.end - pr.p >= 4) {
          std::memcpy(&piece.score, pr.p, 4);
          pr.p += 4;
        } else if (f == 3 && w == 0) {
          piece.type = static_cast<PieceType>(pr.varint());
        } else {
          pr.skip(w);
        }
      }
      if (!pr.ok) return data_loss("tokenizer.model: corrupt piece");
      m.pieces.push_back(std::move(piece));
    } else if ((field == 2 || field == 3) && wire == 2) {  // TrainerSpec / NormalizerSpec
      Reader sr = reader_of(r.bytes());
      while (sr.ok && sr.p < sr.end) {
        const uint64_t k = sr.varint();
        const auto f = static_cast<uint32_t>(k >> 3), w = static_cast<uint32_t>(k & 7);
        if (w != 0) {
          sr.skip(w);
          continue;
        }
        const uint64_t v = sr.varint();
        if (field == 2 && f == 3) m.model_type = static_cast<int>(v);
        if (field == 2 && f == 35) m.byte_fallback = v != 0;
        if (field == 2 && f == 41) m.bos_id = static_cast<int>(v);
        if (field == 3 && f == 3) m.add_dummy_prefix = v != 0;
      }
    } else {
      r.skip(wire);
    }
  }
  if (!r.ok) return data_loss("tokenizer.model: corrupt protobuf");
  if (m.pieces.empty()) return data_loss("tokenizer.model: no pieces");
  if (m.model_type != 2) return unimplemented("tokenizer.model: only BPE SentencePiece models are supported");
  return m;
}

nlohmann::json to_tokenizer_json(const SpModel& m) {
  const std::string kSpace = "\xE2\x96\x81";
  nlohmann::json vocab = nlohmann::json::object();
  std::unordered_map<std::string, int> ids;
  nlohmann::json added = nlohmann::json::array();
  std::string unk;
  for (size_t i = 0; i < m.pieces.size(); ++i) {
    const Piece& p = m.pieces[i];
    ids.emplace(p.text, static_cast<int>(i));
    vocab[p.text] = i;
    if (p.type == PieceType::kUnknown && unk.empty()) unk = p.text;
    if (p.type == PieceType::kUnknown || p.type == PieceType::kControl || p.type == PieceType::kUserDefined) {
      const bool special = p.type != PieceType::kUserDefined;
      added.push_back({{"id", i}, {"content", p.text}, {"single_word", false}, {"lstrip", false},
                       {"rstrip", false}, {"normalized", false}, {"special", special}});
    }
  }
  // Merges as transformers' SentencePieceExtractor builds them.
  struct M {
    int l, r;
    float score;
  };
  std::vector<M> merges;
  for (size_t i = 0; i < m.pieces.size(); ++i) {
    const std::string& s = m.pieces[i].text;
    std::vector<M> local;
    for (size_t k = 1; k < s.size(); ++k) {
      if ((static_cast<uint8_t>(s[k]) & 0xC0) == 0x80) continue;
      auto l = ids.find(s.substr(0, k)), r = ids.find(s.substr(k));
      if (l != ids.end() && r != ids.end()) local.push_back({l->second, r->second, m.pieces[i].score});
    }
    std::sort(local.begin(), local.end(), [](const M& a, const M& b) { return a.l != b.l ? a.l < b.l : a.r < b.r; });
    merges.insert(merges.end(), local.begin(), local.end());
  }
  std::stable_sort(merges.begin(), merges.end(), [](const M& a, const M& b) { return a.score > b.score; });
  nlohmann::json mj = nlohmann::json::array();
  for (const M& x : merges) mj.push_back({m.pieces[static_cast<size_t>(x.l)].text, m.pieces[static_cast<size_t>(x.r)].text});

  nlohmann::json t;
  t["added_tokens"] = added;
  nlohmann::json norm = nlohmann::json::array();
  if (m.add_dummy_prefix) norm.push_back({{"type", "Prepend"}, {"prepend", kSpace}});
  norm.push_back({{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kSpace}});
  t["normalizer"] = {{"type", "Sequence"}, {"normalizers", norm}};
  t["pre_tokenizer"] = nullptr;
  t["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"merges", mj}, {"byte_fallback", m.byte_fallback},
                {"fuse_unk", true}, {"unk_token", unk.empty() ? nlohmann::json() : nlohmann::json(unk)}};
  nlohmann::json dec = nlohmann::json::array({{{"type", "Replace"}, {"pattern", {{"String", kSpace}}}, {"content", " "}},
                                              {{"type", "ByteFallback"}},
                                              {{"type", "Fuse"}}});
  if (m.add_dummy_prefix) dec.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  t["decoder"] = {{"type", "Sequence"}, {"decoders", dec}};
  if (m.bos_id >= 0 && static_cast<size_t>(m.bos_id) < m.pieces.size()) {
    const std::string& bos = m.pieces[static_cast<size_t>(m.bos_id)].text;
    nlohmann::json single = nlohmann::json::array();
    single.push_back({{"SpecialToken", {{"id", bos}, {"type_id", 0}}}});
    single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
    nlohmann::json special = nlohmann::json::object();
    special[bos] = {{"id", bos}, {"ids", nlohmann::json::array({m.bos_id})}, {"tokens", nlohmann::json::array({bos})}};
    t["post_processor"] = {{"type", "TemplateProcessing"}, {"single", single}, {"special_tokens", special}};
  } else {
    t["post_processor"] = nullptr;
  }
  return t;
}

}  // namespace

Result<nlohmann::json> sentencepiece_model_to_json(const std::string& path) {
  XI_ASSIGN_OR_RETURN(std::string data, read_file(path));
  XI_ASSIGN_OR_RETURN(SpModel m, parse_model_proto(data));
  return to_tokenizer_json(m);
}

Result<nlohmann::json> llama2c_tokenizer_to_json(const std::string& path) {
  XI_ASSIGN_OR_RETURN(std::string data, read_file(path));
  SpModel m;
  m.byte_fallback = true;
  m.model_type = 2;
  size_t off = 4;
  while (off + 8 <= data.size()) {
    Piece p;
    int32_t len = 0;
    std::memcpy(&p.score, data.data() + off, 4);
    std::memcpy(&len, data.data() + off + 4, 4);
    off += 8;
    if (len < 0 || off + static_cast<size_t>(len) > data.size()) return data_loss(path + ": truncated token");
    p.text.assign(data.data() + off, static_cast<size_t>(len));
    off += static_cast<size_t>(len);
    const size_t id = m.pieces.size();
    if (id == 0) {
      p.type = PieceType::kUnknown;
    } else if (id == 1 || id == 2) {
      p.type = PieceType::kControl;
      p.text = id == 1 ? "<s>" : "</s>";  // llama2.c stores them as "\n<s>\n", "\n</s>\n"
    } else if (p.text.size() == 6 && p.text.compare(0, 3, "<0x") == 0 && p.text[5] == '>') {
      p.type = PieceType::kByte;
    } else {
      std::string t;
      for (char c : p.text) {
        if (c == ' ') t += "\xE2\x96\x81";
        else t += c;
      }
      p.text = std::move(t);
    }
    m.pieces.push_back(std::move(p));
  }
  if (off != data.size() || m.pieces.size() < 3) return data_loss(path + ": not a llama2.c tokenizer file");
  return to_tokenizer_json(m);
}

nlohmann::json sentencepiece_vocab_to_json(const SentencePieceVocab& vocab) {
  SpModel m;
  m.byte_fallback = vocab.byte_fallback;
  m.add_dummy_prefix = vocab.add_dummy_prefix;
  m.model_type = 2;
  m.bos_id = vocab.bos_id;
  for (const SentencePieceEntry& e : vocab.pieces)
    m.pieces.push_back({e.text, e.score, static_cast<PieceType>(e.type)});
  return to_tokenizer_json(m);
}

}  // namespace xinfer::tok
