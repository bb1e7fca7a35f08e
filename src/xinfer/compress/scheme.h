// The quantization schemes of `xinfer quantize`, and how each maps onto the weight arguments
// (weight_quantizer.h), the activation treatment and xinfer's in-memory format (quant/weight_format.h):
//
//   scheme     weights                              activations              xinfer format
//   w8a8-int8  int8 symmetric, channel (or tensor)  int8 dynamic per token   W8A8Int8Format (scales [N])
//   w8a8-fp8   e4m3, channel (or tensor)            e4m3 dynamic per token   W8A8Fp8Format (scales [N])
//   w8a16      int8 symmetric, channel              f32                      Int8ChannelFormat
//   w4a16      int4, group G, symmetric or zp       f32                      IntGroupFormat{4, G, zp}
//   none       kept as they are (f32)               f32                      DenseFormat (with --kv-cache-scheme
//                                                                            fp8: a checkpoint of FP8 KV scales only)
//
// A per-tensor scale is one per Hugging Face module (q, k, v, ... separately); in memory it is repeated
// over the module's rows of the fused qkv / gate_up matrices.
#pragma once

#include <string>

#include "xinfer/compress/weight_quantizer.h"
#include "xinfer/core/status.h"
#include "xinfer/quant/weight_format.h"

namespace xinfer::compress {

enum class Scheme { kW8A8Int8, kW8A8Fp8, kW8A16, kW4A16, kNone };
const char* scheme_name(Scheme s);              // "w8a8-int8", ...
Result<Scheme> parse_scheme(const std::string& s);  // INVALID_ARGUMENT naming the known ones
bool quantizes_activations(Scheme s);           // the W8A8 schemes
ActQuant activation_quant(Scheme s);

struct SchemeOptions {
  Scheme scheme = Scheme::kW8A8Int8;
  Granularity weight_granularity = Granularity::kChannel;  // W8A8: channel or tensor (--weight-scales)
  int group_size = 128;   // w4a16
  bool symmetric = true;  // w4a16
  bool mse_clip = false;  // integer weights: clip ratio per block searched (WeightQuantArgs::mse_clip)
};
WeightQuantArgs weight_args(const SchemeOptions& o);
quant::WeightFormat xinfer_format(const SchemeOptions& o);

}  // namespace xinfer::compress
