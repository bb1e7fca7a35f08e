// Block hashes for prefix caching: a full KV block is named by hash(parent block's hash, its token ids),
// so equal hashes mean "same tokens in this block and in every block before it" (up to a 64-bit
// collision). The pool stores each cached block's key (parent hash + tokens) and compares it on a hit,
// so a collision can only cost a cache miss, never wrong KV data.
//
// Nothing else (model, LoRA, multimodal inputs) is part of the key yet: one engine serves one model.
#pragma once

#include <cstdint>
#include <span>

namespace xinfer::kv {

// Parent hash of a sequence's first block.
inline constexpr uint64_t kRootBlockHash = 0x9e3779b97f4a7c15ULL;

// tokens: [block_size] ids of one full block. Not cryptographic; deterministic across runs.
uint64_t hash_block(uint64_t parent_hash, std::span<const int32_t> tokens);

}  // namespace xinfer::kv
