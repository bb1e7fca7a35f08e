// GGUF Q4_0 / Q4_1 / Q5_0 / Q8_0 / Q4_K / Q6_K rows repacked into the int per-group format
// (quant/weight_format.h IntGroupFormat, group 32; 16 for Q6_K), for backends that prefer their int4 / int8
// kernels to GGUF blocks (Backend::prefers_repacked_gguf: CUDA, which has no GGUF kernels; the CPU for Q4_K,
// Q5_0 and Q6_K). Exact: the same codes, and each group's scale (and min) as the f32 products the GGUF
// arithmetic forms, so dequantize_matrix of the result equals dequantize_gguf bit for bit.
//   Q4_0 [d, qs[16]]: x[j] = d (qs[j] & 15 - 8), x[j + 16] = d (qs[j] >> 4 - 8)
//        -> int4-g32: element e in the low nibble of byte e / 2 for even e (the nibbles re-ordered), scale d,
//        zero 8 (symmetric)
//   Q4_1 [d, m, qs[16]]: x[j] = d (qs[j] & 15) + m, x[j + 16] = d (qs[j] >> 4) + m
//        -> int4-g32-min: the nibbles as Q4_0's, scale d, min m (its zero point -m / d is no integer)
//   Q5_0 [d, qh[4], qs[16]]: x[e] = d (q5[e] - 16), the fifth bit of element e bit e of qh
//        -> int8-g32: u8 q5 - 16 + 128, scale d, zero 128 (symmetric)
//   Q8_0 [d, qs[32] i8]: x[j] = d qs[j]  ->  int8-g32: u8 qs[j] + 128, scale d, zero 128 (symmetric)
//   Q4_K [d, dmin, 12 bytes of 6-bit (sc, m) per sub-block, qs[128]]: sub-block j's x = d sc_j q - dmin m_j
//        -> int4-g32-min: one group per sub-block, scale d sc_j, min -(dmin m_j) (both exact in f32)
//   Q6_K [ql[128], qh[64], i8 sc[16], d]: element e of each 128-half x = d sc[e / 16] (q6 - 32)
//        -> int8-g16: u8 q6 + 96, scale d sc_j (exact in f32), zero 128 (symmetric)
// The other types (Q5_1 and Q5_K: 5-bit codes with a min; Q2_K / Q3_K) stay dequantized
// at load on such backends. Unsharded only (the loader repacks only then; shard_weights.h does not carry
// mins).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "xinfer/core/status.h"
#include "xinfer/model/checkpoint_linear.h"
#include "xinfer/quant/gguf_types.h"
#include "xinfer/quant/weight_format.h"

namespace xinfer::model {

// The format a GGUF type repacks into, or nullopt (only Q4_0, Q4_1, Q5_0, Q8_0, Q4_K and Q6_K do).
std::optional<quant::IntGroupFormat> gguf_repack_format(quant::GgufType type);
// The format GGUF tensor `tensor_name` of `type` is repacked into at load where the backend runs it and not
// the GGUF blocks (the loader and the memory plan ask this alike), or nullopt: those types' linears of an
// unsharded model, never the embedding table (a float table on such backends).
std::optional<quant::IntGroupFormat> gguf_repack_format(quant::GgufType type, const std::string& tensor_name,
                                                        bool sharded);
// rows: n rows of gguf_row_bytes(type, k) bytes each, contiguous. INVALID_ARGUMENT for other types or a k
// that is not a multiple of the type's block (32; 256 for the K-quants).
Result<HostLinear> repack_gguf_rows(quant::GgufType type, const uint8_t* rows, int64_t n, int64_t k);

}  // namespace xinfer::model
