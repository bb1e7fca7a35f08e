// Element types used across xinfer, with host-side conversions to and from float.
//
// Storage:  f32 (IEEE binary32), bf16 (top 16 bits of f32), f16 (IEEE binary16), fp8_e4m3 (OCP E4M3FN:
// 1 sign, 4 exponent bits with bias 7, 3 mantissa bits, no infinities, 0x7f/0xff = NaN, max 448),
// i8, i32, i64, and i4 packed two per byte (element 2k in the low nibble, 2k+1 in the high nibble,
// two's complement -8..7). Conversions round to nearest even, as PyTorch does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace xinfer {

enum class DType : uint8_t { kF32, kBF16, kF16, kFP8E4M3, kI8, kI4, kI32, kI64, kU8, kBool };

// Bits per element (i4 is 4, so sizes of i4 tensors are rounded up to whole bytes).
int dtype_bits(DType t);
// Bytes for n elements of type t.
inline size_t dtype_bytes(DType t, size_t n) { return (n * static_cast<size_t>(dtype_bits(t)) + 7) / 8; }
const char* dtype_name(DType t);
// Parses safetensors dtype strings ("F32", "BF16", "F16", "F8_E4M3", "I8", "I32", "I64", "U8", "BOOL").
std::optional<DType> dtype_from_safetensors(std::string_view s);
const char* dtype_to_safetensors(DType t);

struct bf16 {
  uint16_t bits;
};
struct f16 {
  uint16_t bits;
};
struct fp8_e4m3 {
  uint8_t bits;
};

inline float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t float_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float to_float(bf16 v) { return bits_to_float(static_cast<uint32_t>(v.bits) << 16); }
inline bf16 to_bf16(float f) {
  uint32_t u = float_to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{static_cast<uint16_t>((u >> 16) | 0x40)};  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16{static_cast<uint16_t>(u >> 16)};
}

float to_float(f16 v);
f16 to_f16(float f);
float to_float(fp8_e4m3 v);
fp8_e4m3 to_fp8_e4m3(float f);  // saturates to +-448

// Packed i4: element i lives in byte i / 2, low nibble for even i, high nibble for odd i.
inline int8_t get_i4(const uint8_t* packed, size_t i) {
  const uint8_t nibble = (packed[i / 2] >> ((i % 2) * 4)) & 0xF;
  return static_cast<int8_t>(nibble >= 8 ? static_cast<int>(nibble) - 16 : nibble);  // sign-extend
}
inline void set_i4(uint8_t* packed, size_t i, int8_t value) {
  const int shift = static_cast<int>(i % 2) * 4;
  const auto nibble = static_cast<uint8_t>(value & 0xF);
  packed[i / 2] = static_cast<uint8_t>((packed[i / 2] & ~(0xF << shift)) | (nibble << shift));
}

// Converts n elements of `src` (type `from`) to float. Supports f32, bf16, f16, fp8_e4m3, i8, i32.
void convert_to_f32(DType from, const void* src, float* dst, size_t n);
// Converts n floats to `to`. Supports f32, bf16, f16, fp8_e4m3.
void convert_from_f32(DType to, const float* src, void* dst, size_t n);

}  // namespace xinfer
