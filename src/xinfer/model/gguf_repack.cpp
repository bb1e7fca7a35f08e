#include "xinfer/model/gguf_repack.h"

#include <cstring>
#include <string>

#include "xinfer/core/dtype.h"
#include "xinfer/model/gguf_config.h"

namespace xinfer::model {

namespace {

// One block as the int formats hold it: its codes in element order (0..15 for int4; u8 with 128 as zero for
// int8) and per group of the format (32; 16 for Q6_K) the scale and (int4-g32-min) the min, so that
// x = scale * (code - zero) or scale * code + min.
struct Block {
  uint8_t code[256];
  float scale[16];
  float min[16];
};

// A 32-element block's nibbles: element j in the low nibble of byte j, element j + 16 in its high nibble.
void nibbles(const uint8_t* qs, uint8_t* code) {
  for (int j = 0; j < 16; ++j) {
    code[j] = qs[j] & 15;
    code[j + 16] = qs[j] >> 4;
  }
}

// One block of `type` (32 elements, or 256 for the K-quants); each product below is exact in f32.
void unpack_block(quant::GgufType type, const uint8_t* b, Block* out) {
  uint8_t* code = out->code;
  switch (type) {
    case quant::GgufType::kQ4_0:  // d, qs[16]; zero 8 (int4-g32, symmetric)
      out->scale[0] = quant::gguf_f16(b);
      nibbles(b + 2, code);
      return;
    case quant::GgufType::kQ4_1:  // d, m, qs[16]
      out->scale[0] = quant::gguf_f16(b);
      out->min[0] = quant::gguf_f16(b + 2);
      nibbles(b + 4, code);
      return;
    case quant::GgufType::kQ5_0: {  // d, qh[4], qs[16]: 5-bit q - 16 as int8 (q - 16) + 128
      out->scale[0] = quant::gguf_f16(b);
      uint32_t qh;
      std::memcpy(&qh, b + 2, 4);
      nibbles(b + 6, code);
      for (int j = 0; j < 32; ++j) code[j] = static_cast<uint8_t>(code[j] + (((qh >> j) & 1) << 4) + 112);
      return;
    }
    case quant::GgufType::kQ8_0:  // d, qs[32] i8
      out->scale[0] = quant::gguf_f16(b);
      for (int j = 0; j < 32; ++j) code[j] = static_cast<uint8_t>(static_cast<int8_t>(b[2 + j]) + 128);
      return;
    case quant::GgufType::kQ4_K: {  // d, dmin, 12 packed 6-bit (sc, m), qs[128]: sub-blocks 2i / 2i + 1 the
                                    // low / high nibbles of qs[32 i .. 32 i + 31]; x = d sc q - dmin m
      const float d = quant::gguf_f16(b), dmin = quant::gguf_f16(b + 2);
      for (int j = 0; j < 8; ++j) {
        int sc, m;
        quant::gguf_k_scale_min(j, b + 4, &sc, &m);
        out->scale[j] = d * static_cast<float>(sc);
        out->min[j] = -(dmin * static_cast<float>(m));
        const uint8_t* qs = b + 16 + 32 * (j / 2);
        for (int l = 0; l < 32; ++l) code[32 * j + l] = j % 2 == 0 ? qs[l] & 15 : qs[l] >> 4;
      }
      return;
    }
    case quant::GgufType::kQ6_K: {  // ql[128], qh[64], sc[16] i8, d: x = d sc[e / 16] (q6 - 32) per 128-half;
                                    // q6 + 96 as int8 (q6 - 32) + 128
      const float d = quant::gguf_f16(b + 208);
      const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
      for (int j = 0; j < 16; ++j) out->scale[j] = d * static_cast<float>(sc[j]);
      for (int h = 0; h < 2; ++h) {
        const uint8_t* ql = b + 64 * h;
        const uint8_t* qh = b + 128 + 32 * h;
        uint8_t* c = code + 128 * h;
        for (int l = 0; l < 32; ++l) {
          c[l] = static_cast<uint8_t>(((ql[l] & 15) | ((qh[l] & 3) << 4)) + 96);
          c[l + 32] = static_cast<uint8_t>(((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) + 96);
          c[l + 64] = static_cast<uint8_t>(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) + 96);
          c[l + 96] = static_cast<uint8_t>(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) + 96);
        }
      }
      return;
    }
    default:
      return;
  }
}

}  // namespace

std::optional<quant::IntGroupFormat> gguf_repack_format(quant::GgufType type) {
  switch (type) {
    case quant::GgufType::kQ4_0:
      return quant::IntGroupFormat{4, 32, false};
    case quant::GgufType::kQ4_1:
    case quant::GgufType::kQ4_K:
      return quant::IntGroupFormat{4, 32, false, true};
    case quant::GgufType::kQ5_0:
    case quant::GgufType::kQ8_0:
      return quant::IntGroupFormat{8, 32, false};
    case quant::GgufType::kQ6_K:
      return quant::IntGroupFormat{8, 16, false};
    default:
      return std::nullopt;
  }
}

std::optional<quant::IntGroupFormat> gguf_repack_format(quant::GgufType type, const std::string& tensor_name,
                                                        bool sharded) {
  if (sharded || tensor_name == gguf_tensor_name(-1, "token_embd")) return std::nullopt;
  return gguf_repack_format(type);
}

Result<HostLinear> repack_gguf_rows(quant::GgufType type, const uint8_t* rows, int64_t n, int64_t k) {
  const std::optional<quant::IntGroupFormat> f = gguf_repack_format(type);
  if (!f) return invalid_argument(std::string("gguf repack: no int format for ") + quant::gguf_type_name(type));
  const int64_t block = quant::gguf_block_elems(type);
  if (k <= 0 || k % block != 0)
    return invalid_argument("gguf repack: k " + std::to_string(k) + " is not a multiple of " +
                            quant::gguf_type_name(type) + "'s block of " + std::to_string(block));
  const int64_t blocks = k / block, group = f->group_size, groups = k / group;
  const int per_block = static_cast<int>(block / group);
  const auto block_bytes = static_cast<size_t>(quant::gguf_block_bytes(type));
  HostLinear h;
  h.format = *f;
  h.n = n;
  h.k = k;
  h.scales = HostTensor(DType::kF32, Shape{n, groups});
  float* s = h.scales.data<float>();
  float* mn = nullptr;
  if (f->min_offset) {
    h.mins = HostTensor(DType::kF32, Shape{n, groups});
    mn = h.mins.data<float>();
  }
  const int64_t row_bytes = f->bits == 4 ? k / 2 : k;
  h.weight = HostTensor(DType::kU8, Shape{n, row_bytes});
  uint8_t* w = h.weight.data<uint8_t>();
  Block unpacked;
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t b = 0; b < blocks; ++b) {
      unpack_block(type, rows + static_cast<size_t>(r * blocks + b) * block_bytes, &unpacked);
      std::memcpy(s + r * groups + b * per_block, unpacked.scale, sizeof(float) * per_block);
      if (mn != nullptr)
        std::memcpy(mn + r * groups + b * per_block, unpacked.min, sizeof(float) * per_block);
      if (f->bits == 4) {  // element e in the low nibble of byte e / 2 for even e
        uint8_t* out = w + r * row_bytes + b * block / 2;
        for (int64_t e = 0; e < block / 2; ++e)
          out[e] = static_cast<uint8_t>(unpacked.code[2 * e] | (unpacked.code[2 * e + 1] << 4));
      } else {
        std::memcpy(w + r * row_bytes + b * block, unpacked.code, static_cast<size_t>(block));
      }
    }
  }
  h.note = std::string("gguf ") + quant::gguf_type_name(type) + " repacked into " + quant::format_name(*f);
  return h;
}

}  // namespace xinfer::model
