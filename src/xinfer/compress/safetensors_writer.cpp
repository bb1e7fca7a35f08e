#include "xinfer/compress/safetensors_writer.h"

#include <cstdio>
#include <cstring>
#include <set>

#include <nlohmann/json.hpp>

#include "xinfer/core/check.h"

namespace xinfer::compress {

void SafetensorsWriter::add(const std::string& name, DType dtype, const Shape& shape, const void* data) {
  for (const Entry& e : entries_) XI_CHECK(e.name != name) << "duplicate tensor " << name;
  Entry e{name, dtype, shape, {}};
  e.bytes.resize(dtype_bytes(dtype, static_cast<size_t>(shape.numel())));
  if (!e.bytes.empty()) std::memcpy(e.bytes.data(), data, e.bytes.size());
  entries_.push_back(std::move(e));
}

Status SafetensorsWriter::write(const std::string& path) const {
  nlohmann::ordered_json header;
  header["__metadata__"] = {{"format", "pt"}};
  size_t offset = 0;
  for (const Entry& e : entries_) {
    std::vector<int64_t> dims;
    for (int i = 0; i < e.shape.rank(); ++i) dims.push_back(e.shape[i]);
    header[e.name] = {{"dtype", dtype_to_safetensors(e.dtype)},
                      {"shape", dims},
                      {"data_offsets", {offset, offset + e.bytes.size()}}};
    offset += e.bytes.size();
  }
  std::string h = header.dump();
  while (h.size() % 8 != 0) h.push_back(' ');
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return not_found("cannot create " + path);
  uint64_t len = h.size();
  uint8_t le[8];
  for (int i = 0; i < 8; ++i) le[i] = static_cast<uint8_t>(len >> (8 * i));
  bool ok = std::fwrite(le, 1, 8, f) == 8 && std::fwrite(h.data(), 1, h.size(), f) == h.size();
  for (const Entry& e : entries_)
    ok = ok && (e.bytes.empty() || std::fwrite(e.bytes.data(), 1, e.bytes.size(), f) == e.bytes.size());
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) return data_loss("error writing " + path);
  return Status();
}

}  // namespace xinfer::compress
