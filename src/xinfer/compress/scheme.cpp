#include "xinfer/compress/scheme.h"

namespace xinfer::compress {

const char* scheme_name(Scheme s) {
  switch (s) {
    case Scheme::kW8A8Int8: return "w8a8-int8";
    case Scheme::kW8A8Fp8: return "w8a8-fp8";
    case Scheme::kW8A16: return "w8a16";
    case Scheme::kW4A16: return "w4a16";
    case Scheme::kNone: return "none";
  }
  return "?";
}

Result<Scheme> parse_scheme(const std::string& s) {
  for (Scheme k : {Scheme::kW8A8Int8, Scheme::kW8A8Fp8, Scheme::kW8A16, Scheme::kW4A16, Scheme::kNone})
    if (s == scheme_name(k)) return k;
  return invalid_argument("unknown --scheme '" + s + "' (known: w8a8-int8, w8a8-fp8, w8a16, w4a16, none)");
}

bool quantizes_activations(Scheme s) { return s == Scheme::kW8A8Int8 || s == Scheme::kW8A8Fp8; }

ActQuant activation_quant(Scheme s) {
  return s == Scheme::kW8A8Int8 ? ActQuant::kInt8PerToken
         : s == Scheme::kW8A8Fp8 ? ActQuant::kFp8PerToken
                                 : ActQuant::kNone;
}

WeightQuantArgs weight_args(const SchemeOptions& o) {
  WeightQuantArgs a;
  switch (o.scheme) {
    case Scheme::kW8A8Int8:
      a.bits = 8;
      a.granularity = o.weight_granularity;
      break;
    case Scheme::kW8A8Fp8:
      a.bits = 8;
      a.is_float = true;
      a.granularity = o.weight_granularity;
      break;
    case Scheme::kW8A16:
      a.bits = 8;
      a.granularity = Granularity::kChannel;
      break;
    case Scheme::kW4A16:
      a.bits = 4;
      a.granularity = Granularity::kGroup;
      a.group_size = o.group_size;
      a.symmetric = o.symmetric;
      break;
    case Scheme::kNone: break;  // nothing is quantized
  }
  a.mse_clip = o.mse_clip;
  return a;
}

quant::WeightFormat xinfer_format(const SchemeOptions& o) {
  switch (o.scheme) {
    case Scheme::kW8A8Int8: return quant::W8A8Int8Format{};
    case Scheme::kW8A8Fp8: return quant::W8A8Fp8Format{true, quant::ActScaleMode::kDynamicPerToken};
    case Scheme::kW8A16: return quant::Int8ChannelFormat{};
    case Scheme::kW4A16: return quant::IntGroupFormat{4, o.group_size, !o.symmetric};
    case Scheme::kNone: return quant::DenseFormat{};
  }
  return quant::DenseFormat{};
}

}  // namespace xinfer::compress
