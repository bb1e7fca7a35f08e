// The BPE model of tokenizer.json ("model": {"type": "BPE"}): vocab (token -> id), ranked merges,
// byte_fallback (<0xXX> tokens for characters missing from the vocab), unk_token + fuse_unk, and
// ignore_merges (a piece that is itself in the vocab is one token).
//
// Merging follows Hugging Face's Word::merge_all exactly: repeatedly apply the adjacent pair with the
// lowest merge rank, leftmost first on ties.
// Thread-safe: the piece -> ids cache is sharded, each shard under its own mutex; it only grows,
// up to a fixed number of entries, and pieces longer than kMaxCachedPieceBytes are never cached.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "xinfer/core/status.h"

namespace xinfer::tok {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

class BpeModel {
 public:
  static constexpr size_t kMaxCachedPieceBytes = 128;
  static constexpr size_t kCacheEntriesPerShard = 8192;

  // `j` is tokenizer.json's "model" object.
  static Result<BpeModel> from_json(const nlohmann::json& j);

  // Appends the ids of one pre-tokenized piece. raw_bytes: `piece` holds raw bytes that are first
  // mapped through the GPT-2 ByteLevel map (see PreTokenizer::raw_bytes_output).
  void tokenize(std::string_view piece, bool raw_bytes, std::vector<int32_t>& out) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  const std::string* id_to_token(int32_t id) const;  // nullptr if no such id
  int32_t max_id() const { return static_cast<int32_t>(id_to_token_.size()) - 1; }

 private:
  struct Merge {
    int32_t rank;
    int32_t new_id;
  };
  struct CacheShard {
    std::mutex mu;
    std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> map;
  };
  static constexpr size_t kShards = 16;

  void tokenize_uncached(std::string_view piece, bool raw_bytes, std::vector<int32_t>& out) const;
  void merge_symbols(std::vector<int32_t>& ids) const;

  TokenMap vocab_;
  std::vector<std::string> id_to_token_;
  std::unordered_map<uint64_t, Merge> merges_;
  std::array<int32_t, 256> byte_char_id_{};  // id of the ByteLevel character of each byte, -1 if none
  std::array<int32_t, 256> byte_fallback_id_{};  // id of "<0xXX>", -1 if none
  std::optional<int32_t> unk_id_;
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
  std::unique_ptr<std::array<CacheShard, kShards>> cache_ = std::make_unique<std::array<CacheShard, kShards>>();
};

}  // namespace xinfer::tok
