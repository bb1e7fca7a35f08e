#include "xinfer/compress/weight_quantizer.h"

#include <algorithm>
#include <cmath>

#include "xinfer/core/check.h"
#include "xinfer/core/dtype.h"

namespace xinfer::compress {

const char* granularity_name(Granularity g) {
  switch (g) {
    case Granularity::kTensor: return "tensor";
    case Granularity::kChannel: return "channel";
    case Granularity::kGroup: return "group";
  }
  return "?";
}

int64_t QuantizedWeight::groups() const {
  if (args.granularity != Granularity::kGroup) return 1;
  return (k + args.group_size - 1) / args.group_size;
}

float QuantizedWeight::scale(int64_t row, int64_t col) const {
  if (args.granularity == Granularity::kTensor) return scales[0];
  return scales[static_cast<size_t>(row * groups() + group_of(col))];
}

int QuantizedWeight::zero(int64_t row, int64_t col) const {
  if (zeros.empty()) return 0;
  if (args.granularity == Granularity::kTensor) return zeros[0];
  return zeros[static_cast<size_t>(row * groups() + group_of(col))];
}

void QuantizedWeight::dequantize(float* out) const {
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < k; ++c) {
      const int8_t v = q[static_cast<size_t>(r * k + c)];
      out[r * k + c] = args.is_float ? scale(r, c) * to_float(fp8_e4m3{static_cast<uint8_t>(v)})
                                     : scale(r, c) * static_cast<float>(v - zero(r, c));
    }
}

namespace {

// Scale (and zero) of one block from its min and max.
void block_params(float lo, float hi, const WeightQuantArgs& a, float* scale, int* zero) {
  lo = std::min(lo, 0.0f);
  hi = std::max(hi, 0.0f);
  *zero = 0;
  if (a.is_float) {
    const float amax = std::max(-lo, hi);
    *scale = amax > 0 ? amax / 448.0f : 1.0f;
  } else if (a.symmetric) {
    const float amax = std::max(-lo, hi);
    *scale = amax > 0 ? amax / static_cast<float>(a.qmax()) : 1.0f;
  } else {
    const float range = hi - lo;
    *scale = range > 0 ? range / static_cast<float>((1 << a.bits) - 1) : 1.0f;
    const int z = a.qmin() - static_cast<int>(std::nearbyint(lo / *scale));
    *zero = std::clamp(z, a.qmin(), a.qmax());
  }
}

// Block parameters of rows [0, rows) x columns [c0, c1) of w (row stride k): block_params of the block's
// min / max, or with args.mse_clip of the shrunk range with the smallest weighted squared error.
void choose_block_params(const float* w, int64_t rows, int64_t k, int64_t c0, int64_t c1, const double* col_w,
                         const WeightQuantArgs& a, float* scale, int* zero) {
  float lo = 0, hi = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = c0; c < c1; ++c) {
      lo = std::min(lo, w[r * k + c]);
      hi = std::max(hi, w[r * k + c]);
    }
  block_params(lo, hi, a, scale, zero);
  if (!a.mse_clip || (lo == 0 && hi == 0)) return;
  auto weighted_error = [&](float s, int z) {
    double err = 0;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = c0; c < c1; ++c) {
        float deq;
        const float x = w[r * k + c];
        quantize_value(x, s, z, a, &deq);
        const double d = static_cast<double>(x) - deq;
        err += (col_w ? col_w[c] : 1.0) * d * d;
      }
    return err;
  };
  if (a.is_float) {  // the block's max placed at 448 / 2^(i / 16) of the top binade, i = 0 .. 15
    const float s0 = *scale;
    double best = weighted_error(s0, 0);
    for (int i = 1; i < kFp8ScaleSteps; ++i) {
      const float s = s0 * static_cast<float>(std::exp2(static_cast<double>(i) / kFp8ScaleSteps));
      const double err = weighted_error(s, 0);
      if (err < best) {
        best = err;
        *scale = s;
      }
    }
    return;
  }
  constexpr int kGrid = 100, kSteps = 80;  // p = 1 - i / kGrid, i < kSteps (GPTQ: grid 100, maxshrink 0.8)
  double best = -1;
  for (int i = 0; i < kSteps; ++i) {
    const float p = 1.0f - static_cast<float>(i) / kGrid;
    float s;
    int z;
    block_params(p * lo, p * hi, a, &s, &z);
    const double err = weighted_error(s, z);
    if (best < 0 || err < best) {
      best = err;
      *scale = s;
      *zero = z;
    }
  }
}

}  // namespace

QuantizedWeight compute_qparams(const float* w, int64_t n, int64_t k, const WeightQuantArgs& args,
                                const double* col_weights) {
  XI_CHECK(args.granularity != Granularity::kGroup || args.group_size > 0) << "group size " << args.group_size;
  QuantizedWeight out;
  out.n = n;
  out.k = k;
  out.args = args;
  const bool zp = !args.is_float && !args.symmetric;
  if (args.granularity == Granularity::kTensor) {
    float s;
    int z;
    choose_block_params(w, n, k, 0, k, col_weights, args, &s, &z);
    out.scales = {s};
    if (zp) out.zeros = {static_cast<int8_t>(z)};
    return out;
  }
  const int64_t g = out.groups();
  const int64_t width = args.granularity == Granularity::kGroup ? args.group_size : k;
  out.scales.resize(static_cast<size_t>(n * g));
  if (zp) out.zeros.resize(static_cast<size_t>(n * g));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < g; ++j) {
      float s;
      int z;
      choose_block_params(w + r * k, 1, k, j * width, std::min(k, (j + 1) * width), col_weights, args, &s, &z);
      out.scales[static_cast<size_t>(r * g + j)] = s;
      if (zp) out.zeros[static_cast<size_t>(r * g + j)] = static_cast<int8_t>(z);
    }
  return out;
}

int8_t quantize_value(float x, float scale, int zero, const WeightQuantArgs& a, float* deq) {
  if (a.is_float) {
    const fp8_e4m3 v = to_fp8_e4m3(x / scale);
    *deq = scale * to_float(v);
    return static_cast<int8_t>(v.bits);
  }
  // Symmetric: -qmax .. qmax (the W8A8 int8 kernels' sign trick needs |q| <= 127; GPTQ's updated weights
  // may exceed the block's max).
  const int lo = a.symmetric ? -a.qmax() : a.qmin();
  const int q = std::clamp(static_cast<int>(std::nearbyint(x / scale)) + zero, lo, a.qmax());
  *deq = scale * static_cast<float>(q - zero);
  return static_cast<int8_t>(q);
}

QuantizedWeight quantize_rtn(const float* w, int64_t n, int64_t k, const WeightQuantArgs& args,
                             const double* col_weights) {
  QuantizedWeight out = compute_qparams(w, n, k, args, col_weights);
  out.q.resize(static_cast<size_t>(n * k));
  float deq;
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < k; ++c)
      out.q[static_cast<size_t>(r * k + c)] = quantize_value(w[r * k + c], out.scale(r, c), out.zero(r, c), args, &deq);
  return out;
}

void fake_quantize_rows(float* x, int64_t rows, int64_t k, ActQuant mode) {
  if (mode == ActQuant::kNone) return;
  for (int64_t r = 0; r < rows; ++r) {
    float* row = x + r * k;
    float amax = 0;
    for (int64_t c = 0; c < k; ++c) amax = std::max(amax, std::fabs(row[c]));
    if (amax == 0) continue;
    if (mode == ActQuant::kInt8PerToken) {
      const float s = amax / 127.0f;
      for (int64_t c = 0; c < k; ++c) row[c] = s * std::clamp(std::nearbyint(row[c] / s), -127.0f, 127.0f);
    } else {
      const float s = amax / 448.0f;
      for (int64_t c = 0; c < k; ++c) row[c] = s * to_float(to_fp8_e4m3(row[c] / s));
    }
  }
}

}  // namespace xinfer::compress
