#include "xinfer/quant/gguf_matmul.h"

namespace xinfer::quant::detail {

bool gguf_matmul(const GgufFormat& f, const QuantizedMatrix& w, const float* x, int64_t rows, float* y,
                 ThreadPool* pool) {
  return false;  // integer kernels land next; the row-dequantizing kernel handles every type meanwhile
}

}  // namespace xinfer::quant::detail
