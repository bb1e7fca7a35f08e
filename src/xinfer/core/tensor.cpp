#include "xinfer/core/tensor.h"

#include <cstdlib>
#include <cstring>
#include <ostream>
#include <sstream>

namespace xinfer {

std::string Shape::to_string() const {
  std::ostringstream os;
  os << *this;
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Shape& s) {
  os << '[';
  for (int i = 0; i < s.rank(); ++i) os << (i ? ", " : "") << s[i];
  return os << ']';
}

TensorView TensorView::rows(int64_t begin, int64_t end) const {
  XI_CHECK_GE(shape.rank(), 1);
  XI_CHECK(begin >= 0 && begin <= end && end <= shape[0]) << begin << ".." << end << " of " << shape;
  const int64_t row_elems = shape[0] == 0 ? 0 : numel() / shape[0];
  XI_CHECK(dtype != DType::kI4 || row_elems % 2 == 0) << "i4 rows must hold whole bytes";
  TensorView v = *this;
  v.data = static_cast<char*>(data) + dtype_bytes(dtype, static_cast<size_t>(begin * row_elems));
  Shape s;
  switch (shape.rank()) {
    case 1: s = Shape{end - begin}; break;
    case 2: s = Shape{end - begin, shape[1]}; break;
    case 3: s = Shape{end - begin, shape[1], shape[2]}; break;
    case 4: s = Shape{end - begin, shape[1], shape[2], shape[3]}; break;
    default: s = Shape{end - begin, shape[1], shape[2], shape[3], shape[4]}; break;
  }
  v.shape = s;
  return v;
}

void HostTensor::FreeDeleter::operator()(void* p) const { std::free(p); }

HostTensor::HostTensor(DType dtype, Shape shape) : dtype_(dtype), shape_(shape) {
  size_t bytes = dtype_bytes(dtype, static_cast<size_t>(shape.numel()));
  size_t rounded = (bytes + 63) / 64 * 64;
  if (rounded == 0) rounded = 64;
  void* p = std::aligned_alloc(64, rounded);
  XI_CHECK(p != nullptr) << "out of host memory allocating " << rounded << " bytes";
  std::memset(p, 0, rounded);
  buf_.reset(p);
}

}  // namespace xinfer
