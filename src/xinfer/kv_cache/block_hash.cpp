#include "xinfer/kv_cache/block_hash.h"

namespace xinfer::kv {
namespace {

// splitmix64's finalizer: a bijective mix with full avalanche.
inline uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

}  // namespace

uint64_t hash_block(uint64_t parent_hash, std::span<const int32_t> tokens) {
  uint64_t h = mix64(parent_hash ^ (0x2545f4914f6cdd1dULL * (tokens.size() + 1)));
  for (int32_t t : tokens) h = mix64(h ^ (static_cast<uint64_t>(static_cast<uint32_t>(t)) + 0x9e3779b97f4a7c15ULL));
  return h;
}

}  // namespace xinfer::kv
