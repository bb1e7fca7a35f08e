// Tensor views: a pointer, a dtype, a row-major contiguous shape and the device the memory lives on.
// Views never own memory. HostTensor owns a 64-byte-aligned host buffer and hands out views.
//
// Shapes have at most kMaxDims dimensions; the last dimension is contiguous. Packed i4 tensors count
// elements (two per byte), so bytes() rounds up.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>

#include "xinfer/core/check.h"
#include "xinfer/core/dtype.h"

namespace xinfer {

enum class Device : uint8_t { kCpu, kCuda };

class Shape {
 public:
  static constexpr int kMaxDims = 5;
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) {
    XI_CHECK_LE(static_cast<int>(dims.size()), kMaxDims);
    for (int64_t d : dims) dims_[rank_++] = d;
  }
  int rank() const { return rank_; }
  int64_t operator[](int i) const {
    XI_CHECK(i >= 0 && i < rank_) << "dim " << i << " of rank-" << rank_ << " shape";
    return dims_[i];
  }
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < rank_; ++i) n *= dims_[i];
    return n;
  }
  bool operator==(const Shape& o) const {
    if (rank_ != o.rank_) return false;
    for (int i = 0; i < rank_; ++i)
      if (dims_[i] != o.dims_[i]) return false;
    return true;
  }
  bool operator!=(const Shape& o) const { return !(*this == o); }
  std::string to_string() const;  // "[2, 3, 4]"

 private:
  int64_t dims_[kMaxDims] = {};
  int rank_ = 0;
};

std::ostream& operator<<(std::ostream& os, const Shape& s);

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kF32;
  Shape shape;
  Device device = Device::kCpu;

  int64_t numel() const { return shape.numel(); }
  size_t bytes() const { return dtype_bytes(dtype, static_cast<size_t>(numel())); }
  bool empty() const { return data == nullptr; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data);
  }
  // The rows [begin, end) of the outermost dimension, as a view.
  TensorView rows(int64_t begin, int64_t end) const;
};

// Owns an aligned host buffer.
class HostTensor {
 public:
  HostTensor() = default;
  HostTensor(DType dtype, Shape shape);  // zero-filled
  TensorView view() const { return TensorView{buf_.get(), dtype_, shape_, Device::kCpu}; }
  template <typename T>
  T* data() const {
    return reinterpret_cast<T*>(buf_.get());
  }
  const Shape& shape() const { return shape_; }
  DType dtype() const { return dtype_; }
  int64_t numel() const { return shape_.numel(); }

 private:
  struct FreeDeleter {
    void operator()(void* p) const;
  };
  std::unique_ptr<void, FreeDeleter> buf_;
  DType dtype_ = DType::kF32;
  Shape shape_;
};

}  // namespace xinfer
