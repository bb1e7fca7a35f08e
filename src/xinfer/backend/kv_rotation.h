// The FP8 KV cache's key rotation (KvCacheSpec::k_rotation == KvRotation::kHadamard): after RoPE, every q and k
// head is multiplied by the same orthogonal matrix (a Walsh-Hadamard matrix, up to a power-of-two scale), so
// every score q . k is unchanged while the cache holds the rotated keys. Why: e4m3 rounds each value to 3
// mantissa bits, so a score's error is the sum of q_j k_j times a ~2.5% relative error per product; SmolLM2's
// q . k products concentrate in a few channels, whose errors then dominate. Spread over all D channels by the
// rotation, the same relative errors add up to much less (WikiText-2, SmolLM2: KL of the FP8 cache vs an f32
// one 0.0061 -> 0.0038; tools/fp8_kv_study.py, docs/kv_cache.md). V is not rotated (its error is small).
//
// The transform, defined so that the CUDA kernel (rope_kv_write.cu, one thread per 16 values) and this host
// reference give the same f32 bits: value i of a head of D (a power of two, 16..256) sits at flat index
//   f(i) = 16 * (i / 8) + i % 8             for i <  D/2   (chunk i / 8 of the first half)
//   f(i) = 16 * ((i - D/2) / 8) + 8 + i % 8  for i >= D/2   (the same chunk of the second half)
// and a butterfly (y[f], y[f + b]) <- (y[f] + y[f + b], y[f] - y[f + b]) runs for b = 1, 2, 4, ..., D/2 in that
// order (each an exact-order f32 add / subtract), i.e. y = H y with H H^T = D I. Then
//   k' = H k * 2^-ceil(log2(D) / 2),  q' = H q * 2^-floor(log2(D) / 2)      (power-of-two scales: exact)
// so q' . k' = q . k, and k' has at most k's L2 norm (for D = 64 the same, for D = 128 0.71 of it).
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace xinfer::backend {

enum class KvRotation { kNone, kHadamard };

// Head dims the rotation is defined for.
inline bool kv_rotation_supported(int head_dim) {
  return head_dim >= 16 && head_dim <= 256 && std::has_single_bit(static_cast<unsigned>(head_dim));
}

// The power-of-two scale of a rotated k (is_k) or q head: 2^-ceil(log2(D)/2) or 2^-floor(log2(D)/2).
inline float kv_rotation_scale(int head_dim, bool is_k) {
  const int lg = std::countr_zero(static_cast<unsigned>(head_dim));
  return std::ldexp(1.0f, -(is_k ? (lg + 1) / 2 : lg / 2));
}

// Rotates one head x[0, D) in place (k: is_k), as the header says. D must be kv_rotation_supported().
inline void kv_rotate_head(float* x, int head_dim, bool is_k) {
  float y[256];
  const int half = head_dim / 2;
  auto flat = [half](int i) { return i < half ? 16 * (i / 8) + i % 8 : 16 * ((i - half) / 8) + 8 + i % 8; };
  for (int i = 0; i < head_dim; ++i) y[flat(i)] = x[i];
  for (int b = 1; b < head_dim; b *= 2)
    for (int f = 0; f < head_dim; ++f)
      if ((f & b) == 0) {
        const float u = y[f], v = y[f + b];
        y[f] = u + v;
        y[f + b] = u - v;
      }
  const float s = kv_rotation_scale(head_dim, is_k);
  for (int i = 0; i < head_dim; ++i) x[i] = y[flat(i)] * s;
}

}  // namespace xinfer::backend
