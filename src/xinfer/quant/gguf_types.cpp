#include "xinfer/quant/gguf_types.h"

#include <string>

namespace xinfer::quant {
namespace {

struct TypeInfo {
  GgufType type;
  const char* name;
  int64_t block_elems;
  int64_t block_bytes;
};

constexpr TypeInfo kTypes[] = {
    {GgufType::kF32, "F32", 1, 4},       {GgufType::kF16, "F16", 1, 2},
    {GgufType::kQ4_0, "Q4_0", 32, 18},   {GgufType::kQ4_1, "Q4_1", 32, 20},
    {GgufType::kQ5_0, "Q5_0", 32, 22},   {GgufType::kQ5_1, "Q5_1", 32, 24},
    {GgufType::kQ8_0, "Q8_0", 32, 34},   {GgufType::kQ8_1, "Q8_1", 32, 36},
    {GgufType::kQ2_K, "Q2_K", 256, 84},  {GgufType::kQ3_K, "Q3_K", 256, 110},
    {GgufType::kQ4_K, "Q4_K", 256, 144}, {GgufType::kQ5_K, "Q5_K", 256, 176},
    {GgufType::kQ6_K, "Q6_K", 256, 210}, {GgufType::kQ8_K, "Q8_K", 256, 292},
    {GgufType::kBF16, "BF16", 1, 2},
};

const TypeInfo* find(GgufType t) {
  for (const TypeInfo& info : kTypes) {
    if (info.type == t) return &info;
  }
  return nullptr;
}

}  // namespace

std::optional<GgufType> gguf_type_from_id(uint32_t id) {
  const TypeInfo* info = find(static_cast<GgufType>(id));
  if (info == nullptr) return std::nullopt;
  return info->type;
}

const char* gguf_type_name(GgufType t) {
  const TypeInfo* info = find(t);
  return info ? info->name : "unknown";
}

int64_t gguf_block_elems(GgufType t) {
  const TypeInfo* info = find(t);
  return info ? info->block_elems : 0;
}

int64_t gguf_block_bytes(GgufType t) {
  const TypeInfo* info = find(t);
  return info ? info->block_bytes : 0;
}

Result<size_t> gguf_row_bytes(GgufType t, int64_t n) {
  const TypeInfo* info = find(t);
  if (info == nullptr) {
    return invalid_argument("unknown GGUF type id " + std::to_string(static_cast<uint32_t>(t)));
  }
  if (n < 0 || n % info->block_elems != 0) {
    return invalid_argument(std::string("GGUF ") + info->name + ": row of " + std::to_string(n) +
                            " elements is not a multiple of the block size " +
                            std::to_string(info->block_elems));
  }
  return static_cast<size_t>(n / info->block_elems * info->block_bytes);
}

}  // namespace xinfer::quant
