// Writes a .safetensors file: 8-byte little-endian header length, the JSON header
// {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {"format": "pt"}} padded with
// spaces to a multiple of 8 bytes, then the tensors' bytes in the order added (offsets relative to the
// end of the header). Tensors are copied when added.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "xinfer/core/dtype.h"
#include "xinfer/core/status.h"
#include "xinfer/core/tensor.h"

namespace xinfer::compress {

class SafetensorsWriter {
 public:
  // data: shape.numel() elements of dtype. Names must be unique (CHECK).
  void add(const std::string& name, DType dtype, const Shape& shape, const void* data);
  void add_f32(const std::string& name, const Shape& shape, const std::vector<float>& v) {
    add(name, DType::kF32, shape, v.data());
  }
  size_t size() const { return entries_.size(); }
  Status write(const std::string& path) const;  // DATA_LOSS / NOT_FOUND naming the path on I/O errors

 private:
  struct Entry {
    std::string name;
    DType dtype;
    Shape shape;
    std::vector<uint8_t> bytes;
  };
  std::vector<Entry> entries_;
};

}  // namespace xinfer::compress
