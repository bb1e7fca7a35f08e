#include "xinfer/model/gguf_repack.h"

#include <cstring>
#include <string>

#include "xinfer/core/dtype.h"
#include "xinfer/model/gguf_config.h"

namespace xinfer::model {

std::optional<quant::IntGroupFormat> gguf_repack_format(quant::GgufType type) {
  if (type == quant::GgufType::kQ4_0) return quant::IntGroupFormat{4, 32, false};
  if (type == quant::GgufType::kQ4_1) return quant::IntGroupFormat{4, 32, false, true};
  if (type == quant::GgufType::kQ8_0) return quant::IntGroupFormat{8, 32, false};
  return std::nullopt;
}

std::optional<quant::IntGroupFormat> gguf_repack_format(quant::GgufType type, const std::string& tensor_name,
                                                        bool sharded) {
  if (sharded || tensor_name == gguf_tensor_name(-1, "token_embd")) return std::nullopt;
  return gguf_repack_format(type);
}

Result<HostLinear> repack_gguf_rows(quant::GgufType type, const uint8_t* rows, int64_t n, int64_t k) {
  const std::optional<quant::IntGroupFormat> f = gguf_repack_format(type);
  if (!f) return invalid_argument(std::string("gguf repack: no int format for ") + quant::gguf_type_name(type));
  if (k <= 0 || k % 32 != 0) return invalid_argument("gguf repack: k " + std::to_string(k) + " is not a multiple of 32");
  const int64_t blocks = k / 32;
  const auto block_bytes = static_cast<size_t>(quant::gguf_block_bytes(type));
  const size_t codes_at = f->min_offset ? 4 : 2;  // Q4_1: d, m, then the codes
  HostLinear h;
  h.format = *f;
  h.n = n;
  h.k = k;
  h.scales = HostTensor(DType::kF32, Shape{n, blocks});
  float* s = h.scales.data<float>();
  float* mn = nullptr;
  if (f->min_offset) {
    h.mins = HostTensor(DType::kF32, Shape{n, blocks});
    mn = h.mins.data<float>();
  }
  h.weight = HostTensor(DType::kU8, Shape{n, f->bits == 4 ? k / 2 : k});
  uint8_t* w = h.weight.data<uint8_t>();
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8_t* blk = rows + (static_cast<size_t>(r * blocks + b)) * block_bytes;
      uint16_t d;
      std::memcpy(&d, blk, 2);
      s[r * blocks + b] = to_float(f16{d});
      if (mn != nullptr) {
        uint16_t m;
        std::memcpy(&m, blk + 2, 2);
        mn[r * blocks + b] = to_float(f16{m});
      }
      const uint8_t* qs = blk + codes_at;
      if (f->bits == 4) {
        uint8_t* out = w + r * (k / 2) + b * 16;  // 32 elements, two per byte
        uint8_t e[32];
        for (int j = 0; j < 16; ++j) {
          e[j] = qs[j] & 15;
          e[j + 16] = qs[j] >> 4;
        }
        for (int j = 0; j < 16; ++j) out[j] = static_cast<uint8_t>(e[2 * j] | (e[2 * j + 1] << 4));
      } else {
        uint8_t* out = w + r * k + b * 32;
        for (int j = 0; j < 32; ++j) out[j] = static_cast<uint8_t>(static_cast<int8_t>(qs[j]) + 128);
      }
    }
  }
  h.note = std::string("gguf ") + quant::gguf_type_name(type) + " repacked into " + quant::format_name(*f);
  return h;
}

}  // namespace xinfer::model
