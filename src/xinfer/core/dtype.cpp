#include "xinfer/core/dtype.h"

#include <cmath>

#include "xinfer/core/check.h"

namespace xinfer {

int dtype_bits(DType t) {
  switch (t) {
    case DType::kF32: case DType::kI32: return 32;
    case DType::kBF16: case DType::kF16: return 16;
    case DType::kFP8E4M3: case DType::kI8: case DType::kU8: case DType::kBool: return 8;
    case DType::kI4: return 4;
    case DType::kI64: return 64;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "f16";
    case DType::kFP8E4M3: return "fp8_e4m3";
    case DType::kI8: return "i8";
    case DType::kI4: return "i4";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
    case DType::kU8: return "u8";
    case DType::kBool: return "bool";
  }
  return "?";
}

std::optional<DType> dtype_from_safetensors(std::string_view s) {
  if (s == "F32") return DType::kF32;
  if (s == "BF16") return DType::kBF16;
  if (s == "F16") return DType::kF16;
  if (s == "F8_E4M3") return DType::kFP8E4M3;
  if (s == "I8") return DType::kI8;
  if (s == "I32") return DType::kI32;
  if (s == "I64") return DType::kI64;
  if (s == "U8") return DType::kU8;
  if (s == "BOOL") return DType::kBool;
  return std::nullopt;
}

const char* dtype_to_safetensors(DType t) {
  switch (t) {
    case DType::kF32: return "F32";
    case DType::kBF16: return "BF16";
    case DType::kF16: return "F16";
    case DType::kFP8E4M3: return "F8_E4M3";
    case DType::kI8: return "I8";
    case DType::kI32: return "I32";
    case DType::kI64: return "I64";
    case DType::kU8: return "U8";
    case DType::kBool: return "BOOL";
    case DType::kI4: return "I4";
  }
  return "?";
}

float to_float(f16 v) {
  const uint32_t sign = static_cast<uint32_t>(v.bits & 0x8000u) << 16;
  uint32_t exp = (v.bits >> 10) & 0x1fu;
  uint32_t mant = v.bits & 0x3ffu;
  if (exp == 0x1f) return bits_to_float(sign | 0x7f800000u | (mant << 13));  // inf / nan
  if (exp == 0) {
    if (mant == 0) return bits_to_float(sign);
    // subnormal: value = mant * 2^-24
    float f = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -f : f;
  }
  return bits_to_float(sign | ((exp + 112) << 23) | (mant << 13));
}

f16 to_f16(float f) {
  uint32_t u = float_to_bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  u &= 0x7fffffffu;
  if (u > 0x7f800000u) return f16{static_cast<uint16_t>(sign | 0x7e00u)};
  if (u >= 0x477ff000u) return f16{static_cast<uint16_t>(sign | 0x7c00u)};  // overflow -> inf
  if (u < 0x38800000u) {                                                 // subnormal or zero in f16
    float a = bits_to_float(u);
    float scaled = std::nearbyint(a * 16777216.0f);  // round to nearest even multiple of 2^-24
    return f16{static_cast<uint16_t>(sign | static_cast<uint16_t>(scaled))};
  }
  uint32_t rounded = u + 0xfffu + ((u >> 13) & 1u);
  return f16{static_cast<uint16_t>(sign | static_cast<uint16_t>((rounded - 0x38000000u) >> 13))};
}

float to_float(fp8_e4m3 v) {
  const bool neg = v.bits & 0x80u;
  const int exp = (v.bits >> 3) & 0xf;
  const int mant = v.bits & 0x7;
  float f;
  if (exp == 0xf && mant == 0x7) return std::nanf("");
  if (exp == 0) f = std::ldexp(static_cast<float>(mant), -9);  // subnormal: mant/8 * 2^-6
  else f = std::ldexp(1.0f + static_cast<float>(mant) / 8.0f, exp - 7);
  return neg ? -f : f;
}

fp8_e4m3 to_fp8_e4m3(float f) {
  if (std::isnan(f)) return fp8_e4m3{0x7f};
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  float a = std::fabs(f);
  if (a >= 448.0f) return fp8_e4m3{static_cast<uint8_t>(sign | 0x7e)};
  if (a < std::ldexp(1.0f, -6)) {  // subnormal range: multiples of 2^-9
    int m = static_cast<int>(std::nearbyint(a * 512.0f));
    return fp8_e4m3{static_cast<uint8_t>(sign | m)};  // m == 8 rolls into the smallest normal
  }
  int e;
  float frac = std::frexp(a, &e);  // a = frac * 2^e, frac in [0.5, 1)
  int exp = e - 1 + 7;
  int m = static_cast<int>(std::nearbyint((frac * 2.0f - 1.0f) * 8.0f));
  if (m == 8) {
    m = 0;
    ++exp;
  }
  return fp8_e4m3{static_cast<uint8_t>(sign | (exp << 3) | m)};
}

void convert_to_f32(DType from, const void* src, float* dst, size_t n) {
  switch (from) {
    case DType::kF32: std::memcpy(dst, src, n * 4); return;
    case DType::kBF16: {
      auto* s = static_cast<const bf16*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = to_float(s[i]);
      return;
    }
    case DType::kF16: {
      auto* s = static_cast<const f16*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = to_float(s[i]);
      return;
    }
    case DType::kFP8E4M3: {
      auto* s = static_cast<const fp8_e4m3*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = to_float(s[i]);
      return;
    }
    case DType::kI8: {
      auto* s = static_cast<const int8_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = s[i];
      return;
    }
    case DType::kI32: {
      auto* s = static_cast<const int32_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(s[i]);
      return;
    }
    default: XI_CHECK(false) << "convert_to_f32: unsupported dtype " << dtype_name(from);
  }
}

void convert_from_f32(DType to, const float* src, void* dst, size_t n) {
  switch (to) {
    case DType::kF32: std::memcpy(dst, src, n * 4); return;
    case DType::kBF16: {
      auto* d = static_cast<bf16*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = to_bf16(src[i]);
      return;
    }
    case DType::kF16: {
      auto* d = static_cast<f16*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = to_f16(src[i]);
      return;
    }
    case DType::kFP8E4M3: {
      auto* d = static_cast<fp8_e4m3*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = to_fp8_e4m3(src[i]);
      return;
    }
    default: XI_CHECK(false) << "convert_from_f32: unsupported dtype " << dtype_name(to);
  }
}

}  // namespace xinfer
