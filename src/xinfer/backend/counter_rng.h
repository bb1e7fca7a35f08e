// Counter-based normal random numbers: value i of a stream is a pure function of (seed, i), so any
// tensor can be filled in parallel (one GPU thread per element, or a host loop) and every backend
// produces the same values for the same seed. Used by `--load-format dummy` (random weights in the real
// shapes of a model). Not cryptographic; a splitmix64 finalizer per element pair and Box-Muller.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define XI_HOST_DEVICE __host__ __device__
#else
#define XI_HOST_DEVICE
#endif

namespace xinfer::backend {

XI_HOST_DEVICE inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Element i of the N(0, stddev^2) stream `seed`: 32 bits each of one 64-bit hash make the two uniforms
// of a Box-Muller pair (u1 in (0, 1], u2 in [0, 1)), computed in f32.
XI_HOST_DEVICE inline float counter_normal(uint64_t seed, uint64_t i, float stddev) {
  const uint64_t h = splitmix64(seed * 0xd1342543de82ef95ull + i);
  const float u1 = (static_cast<float>(static_cast<uint32_t>(h >> 40)) + 1.0f) * (1.0f / 16777216.0f);
  const float u2 = static_cast<float>(static_cast<uint32_t>(h & 0xffffffu)) * (1.0f / 16777216.0f);
  return stddev * sqrtf(-2.0f * logf(u1)) * cosf(6.2831853f * u2);
}

}  // namespace xinfer::backend
