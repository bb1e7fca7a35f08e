#include "xinfer/quant/weight_format.h"

#include <type_traits>

#include "xinfer/core/check.h"

namespace xinfer::quant {

namespace {
const char* act_name(ActScaleMode m) {
  return m == ActScaleMode::kDynamicPerToken ? "dynamic" : "static";
}
}  // namespace

std::string format_name(const WeightFormat& f) {
  return std::visit(
      [](const auto& v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, DenseFormat>) {
          return std::string("dense(") + dtype_name(v.dtype) + ")";
        } else if constexpr (std::is_same_v<T, Int8ChannelFormat>) {
          return "int8-channel";
        } else if constexpr (std::is_same_v<T, IntGroupFormat>) {
          return "int" + std::to_string(v.bits) + "-g" + std::to_string(v.group_size) +
                 (v.zero_point ? "-zp" : "") + (v.min_offset ? "-min" : "");
        } else if constexpr (std::is_same_v<T, W8A8Int8Format>) {
          return std::string("w8a8-int8-") + act_name(v.act);
        } else if constexpr (std::is_same_v<T, W8A8Fp8Format>) {
          return std::string("w8a8-fp8-") + (v.per_channel ? "channel-" : "tensor-") + act_name(v.act);
        } else {
          return std::string("gguf(") + gguf_type_name(v.type) + ")";
        }
      },
      f);
}

size_t format_weight_bytes(const WeightFormat& f, int64_t n, int64_t k) {
  const auto un = static_cast<size_t>(n), uk = static_cast<size_t>(k);
  return std::visit(
      [&](const auto& v) -> size_t {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, DenseFormat>) {
          return un * dtype_bytes(v.dtype, uk);
        } else if constexpr (std::is_same_v<T, Int8ChannelFormat> || std::is_same_v<T, W8A8Int8Format>) {
          return un * uk + un * 4;
        } else if constexpr (std::is_same_v<T, IntGroupFormat>) {
          const size_t groups =
              (uk + static_cast<size_t>(v.group_size) - 1) / static_cast<size_t>(v.group_size);
          return un * (uk * static_cast<size_t>(v.bits) / 8) +
                 un * groups * (4 + (v.zero_point ? 1 : 0) + (v.min_offset ? 4 : 0));
        } else if constexpr (std::is_same_v<T, W8A8Fp8Format>) {
          return un * uk + (v.per_channel ? un : 1) * 4;
        } else {
          Result<size_t> row = gguf_row_bytes(v.type, k);
          XI_CHECK(row.ok()) << row.status().to_string();
          return un * row.value();
        }
      },
      f);
}

}  // namespace xinfer::quant
