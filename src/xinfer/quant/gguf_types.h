// GGUF tensor element types (ggml's `ggml_type` ids, as stored in a GGUF file's tensor infos) and their
// block layouts, plus the float dequantization of each: the reference every GGUF kernel is tested against.
//
// A GGUF row of n elements is n / block_elems consecutive blocks of block_bytes bytes (little-endian, no
// padding). Block layouts (d, m, dmin: f16 unless said; qs: quants; elements in block order):
//   Q4_0 [18]: d, qs[16]            x[j] = d * ((qs[j] & 15) - 8), x[j + 16] = d * ((qs[j] >> 4) - 8)
//   Q4_1 [20]: d, m, qs[16]         x[j] = d * (qs[j] & 15) + m,   x[j + 16] = d * (qs[j] >> 4) + m
//   Q5_0 [22]: d, qh[4], qs[16]     as Q4_0 with a fifth bit from qh (bit j, bit j + 16), minus 16
//   Q5_1 [24]: d, m, qh[4], qs[16]  as Q4_1 with the fifth bit
//   Q8_0 [34]: d, qs[32] (i8)       x[j] = d * qs[j]
//   Q8_1 [36]: d, s, qs[32] (i8)    x[j] = d * qs[j] (s = d * sum(qs) is for dot products)
//   K-quants: super-blocks of 256 elements with 6/4-bit sub-block scales (Q2_K 84, Q3_K 110, Q4_K 144,
//   Q5_K 176, Q6_K 210 bytes; Q8_K 292: f32 d, i8 qs[256], i16 bsums[16]). See gguf_dequantize.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>

#include "xinfer/core/dtype.h"
#include "xinfer/core/status.h"

namespace xinfer::quant {

enum class GgufType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kBF16 = 30
};

std::optional<GgufType> gguf_type_from_id(uint32_t id);  // nullopt: unknown id
const char* gguf_type_name(GgufType t);                  // "Q4_1"
int64_t gguf_block_elems(GgufType t);                    // 32 / 256; 1 for F32, F16, BF16
int64_t gguf_block_bytes(GgufType t);                    // e.g. Q4_1: 20, Q8_0: 34, Q4_K: 144
// Bytes of a row of n elements; INVALID_ARGUMENT if n is not a multiple of the block size (or negative).
Result<size_t> gguf_row_bytes(GgufType t, int64_t n);
// dst[n] = the n elements of src (n a multiple of the block size). Every type above is supported, Q8_1 and
// Q8_K included. INVALID_ARGUMENT when n is not a multiple of the block size.
Status dequantize_gguf(GgufType t, const void* src, int64_t n, float* dst);
// A block's f16 field (d, m, dmin) at p, as f32 (exact).
inline float gguf_f16(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  return to_float(f16{bits});
}
// The 6-bit scale and min of sub-block j (0..7) of a Q4_K / Q5_K super-block, from its 12 packed scale bytes
// (the block's bytes 4..15): x = d * sc * q - dmin * m over the sub-block's 32 elements.
void gguf_k_scale_min(int j, const uint8_t* packed, int* sc, int* m);

}  // namespace xinfer::quant
