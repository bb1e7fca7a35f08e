// WeightFormat: how a linear layer's weight W [N, K] (y = x W^T) is stored, as a std::variant of small value
// types. The format says the layout of the packed weight and of its side tensors (scales, zero points,
// g_idx, input scale), which travel next to it (backend::LinearWeights, quant::QuantizedMatrix).
//
//   DenseFormat        weight dtype [N, K] (f32, bf16, f16)
//   Int8ChannelFormat  W8A16: weight i8 [N, K], scales f32 [N]; W[n, k] = scales[n] * q[n, k]
//   IntGroupFormat     W4A16 / W8A16 per group of `group_size` input columns:
//     bits 4: u8 [N, K/2], element k in the low nibble of byte k/2 for even k, high for odd, values 0..15
//             (W = scale * (value - 8) when symmetric, scale * (value - zero) with zero points);
//     bits 8: u8 [N, K] (W = scale * (value - 128) symmetric, scale * (value - zero) with zero points);
//     scales f32 [N, G]; zeros u8 [N, G] (zero_point) or absent; G = ceil(K / group) (a last partial group).
//     g_idx (i32 [K], GPTQ act-order) optional: the group of input column k is g_idx[k] instead of k/group.
//     min_offset (bits 4, no zero point, no g_idx; GGUF Q4_1 repacked, model/gguf_repack.h):
//             W = scale * value + min, mins f32 [N, G]; scales and mins are f16 values (GGUF's), which the
//             CUDA kernel relies on (it forms these weights in f16).
//   W8A8Int8Format     weight i8 [N, K], scales f32 [N]; activations quantized to int8 per token (dynamic,
//                      scale = max|x_t| / 127) or with a static per-tensor input_scale f32 [1]
//   W8A8Fp8Format      weight fp8_e4m3 [N, K], scales f32 [N] (per_channel) or [1]; activations to e4m3 per
//                      token (dynamic, scale = max|x_t| / 448) or with a static input_scale f32 [1]
//   GgufFormat         weight u8 [N, gguf_row_bytes(type, K)]: the raw GGUF blocks of each row
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <variant>

#include "xinfer/core/dtype.h"
#include "xinfer/quant/gguf_types.h"

namespace xinfer::quant {

struct DenseFormat {
  DType dtype = DType::kF32;
};
struct Int8ChannelFormat {};
struct IntGroupFormat {
  int bits = 4;  // 4 or 8
  int group_size = 128;
  bool zero_point = false;
  bool min_offset = false;  // W = scale * value + min (value 0..15 unshifted), mins f32 [N, G]
};
enum class ActScaleMode { kDynamicPerToken, kStaticPerTensor };
struct W8A8Int8Format {
  ActScaleMode act = ActScaleMode::kDynamicPerToken;
};
struct W8A8Fp8Format {
  bool per_channel = true;
  ActScaleMode act = ActScaleMode::kDynamicPerToken;
};
struct GgufFormat {
  GgufType type = GgufType::kQ8_0;
};

using WeightFormat =
    std::variant<DenseFormat, Int8ChannelFormat, IntGroupFormat, W8A8Int8Format, W8A8Fp8Format, GgufFormat>;

// The weight-only integer formats (int8 per channel, int4 / int8 per group): activations stay float.
inline bool is_weight_only_int(const WeightFormat& f) {
  return std::holds_alternative<Int8ChannelFormat>(f) || std::holds_alternative<IntGroupFormat>(f);
}

// "dense(bf16)", "int8-channel", "int4-g128", "int4-g128-zp", "int4-g32-min", "w8a8-int8-dynamic",
// "w8a8-fp8-channel-static", "gguf(Q4_1)".
std::string format_name(const WeightFormat& f);
// Bytes of the weight plus its scales and zero points (or mins) for an [n, k] linear (g_idx and input_scale
// not counted: they do not scale with n). For GGUF, n * gguf_row_bytes(k) (k must be a multiple of the
// block).
size_t format_weight_bytes(const WeightFormat& f, int64_t n, int64_t k);

}  // namespace xinfer::quant
