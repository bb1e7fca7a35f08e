// Fills a device tensor with counter-based N(0, stddev^2) values (backend/counter_rng.h): element i is
// counter_normal(seed, i, stddev), rounded to bf16 or stored as f32, the same values the host makes.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace xinfer::cuda {

struct RandomNormalArgs {
  void* out;      // [n] bf16 or f32
  bool out_f32;   // false: bf16
  size_t n;
  uint64_t seed;
  float stddev;
};

void launch_random_normal(const RandomNormalArgs& args, cudaStream_t stream);

}  // namespace xinfer::cuda
