// Dummy (random) linear weights in a quantized format, for `--load-format dummy --quantization ...`
// (benchmarks of the quantized kernels at real shapes without a checkpoint).
//
// The values are a pure function of (seed, element index) (splitmix64 of the pair, backend/counter_rng.h),
// so every backend loads the same weights: packed codes uniform over the format's range (e4m3 codes
// without the NaN encodings), scales (f32, one per group / channel / tensor) chosen so that the dequantized
// weights have a standard deviation of about 0.02 (the dense dummy weights' N(0, 0.02)), times a factor
// in [0.75, 1.25) per scale; zero points (with zero_point) uniform over the codes' middle half. No g_idx,
// dynamic activation scales (no input_scale).
//
//   --quantization   format                                   layout (quant/weight_format.h)
//   w4a16            IntGroupFormat{4, 128, symmetric}        u8 [N, K/2], scales f32 [N, K/128]
//   w4a16-zp         IntGroupFormat{4, 128, zero points}      + zeros u8 [N, K/128]
//   w8a16            Int8ChannelFormat                        i8 [N, K], scales f32 [N]
//   fp8              W8A8Fp8Format{per channel, dynamic}      e4m3 [N, K], scales f32 [N]
//   w8a8-int8        W8A8Int8Format{dynamic}                  i8 [N, K], scales f32 [N]
#pragma once

#include <cstdint>
#include <string>

#include "xinfer/core/status.h"
#include "xinfer/model/checkpoint_linear.h"
#include "xinfer/quant/weight_format.h"

namespace xinfer::model {

// The format of a --quantization name above; INVALID_ARGUMENT naming the choices otherwise.
Result<quant::WeightFormat> parse_dummy_quantization(const std::string& name);
// A random [n, k] linear in `format` (one of the formats above; k a multiple of the group for w4a16).
Result<HostLinear> make_dummy_quantized_linear(const quant::WeightFormat& format, int64_t n, int64_t k, uint64_t seed);

}  // namespace xinfer::model
