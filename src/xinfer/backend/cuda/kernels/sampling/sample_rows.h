// Device sampling: one token per row of f32 logits with the host Sampler's transforms (engine/sampler.h),
// launched by CudaBackend::sample_rows. Three launches on one stream:
//   1. adjust:  for each LogitAdjustArgs, save the logit, then write the adjusted one (mask, bias,
//               repetition, presence/frequency: the host's order and float operations);
//   2. sample:  one CTA of 512 threads per row, vocab-sized passes over the row (from L2 / HBM):
//               P1 max + lowest-id argmax (greedy rows and rows whose max is not finite stop here);
//               top-k / min-p / small vocab: collect every logit at or above a lower bound of the threshold
//               (top-k: the k-th largest of the threads' maxima) into shared memory, sort, and finish there
//               (top-k cut, weights, top-p cut, draw) - two passes in all;
//               else (or when more than kSampleCandidates qualify): exact radix selects on the float bit
//               pattern - top-k by count, top-p by mass in 2^-44 fixed point (deterministic integer sums) -
//               11 + 11 + 10 bits, leaving the boundary bin to shared memory as soon as it fits; then the draw;
//   3. restore: put the saved logits back (the logits are unchanged when the sequence ends).
// Draw: exponential race, token = argmax over kept tokens of w_i / E_i with E_i = -log(1 - v_i), v_i a
// uniform from SplitMix64(random_bits + (i + 1) * golden gamma): P(i) = w_i / sum w exactly, and the result
// is a pure function of (row logits, params, random_bits) - independent of batch position and launch order.
// Weights w_i = exp((l_i - max) / T) use the host Sampler's exp polynomial with round-to-nearest operations,
// so they equal the host's bit for bit; top-p keeps the most-likely-first prefix (ties -> lower id) whose
// preceding mass is < top_p * total, with masses summed in fixed point (resolution 2^-44 of the max weight).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace xinfer::cuda {

inline constexpr int kMaxSampleVocab = 1 << 19;  // fixed-point masses: vocab * 2^44 < 2^63
inline constexpr int kSampleCandidates = 4096;   // sorted in shared memory

struct SampleRowArgs {
  int32_t logit_row;
  int32_t greedy;          // 1: argmax
  float temperature;
  float inv_temperature;
  float log_min_p;         // std::log(min_p) when has_min_p
  int32_t has_min_p;
  int32_t top_k;           // 0: off; else 1 <= top_k < vocab
  float top_p;             // >= 1: off
  float repetition_penalty;
  float presence_penalty;
  float frequency_penalty;
  int32_t pad;
  uint64_t random_bits;
};

enum : int32_t { kAdjustMasked = 1, kAdjustBias = 2, kAdjustRepeated = 4 };

struct LogitAdjustArgs {
  int32_t row;    // index into rows
  int32_t token;
  float bias;
  int32_t count;  // output occurrences (presence / frequency when > 0)
  int32_t flags;  // kAdjust*
};

struct SampleRowsArgs {
  float* logits;                  // [*, vocab]; rows[r].logit_row selects the row
  int vocab;
  const SampleRowArgs* rows;      // [num_rows]
  int num_rows;
  const LogitAdjustArgs* adjust;  // [num_adjust], at most one per (logit row, token)
  float* saved;                   // [num_adjust] scratch: the original logits
  int num_adjust;
  int32_t* out;                   // [num_rows]
};

void launch_sample_rows(const SampleRowsArgs& args, cudaStream_t stream);

}  // namespace xinfer::cuda
