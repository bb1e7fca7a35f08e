// quantized_matmul dispatch, the float reference (dequantize_matrix) and the row-dequantizing kernel used by
// every format without a dedicated integer kernel.
#include "xinfer/quant/quantized_linear.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>

#include "xinfer/core/check.h"
#include "xinfer/quant/cpu_features.h"
#include "xinfer/quant/gguf_matmul.h"

namespace xinfer::quant {

namespace {

std::atomic<int> g_force_portable{-1};  // -1: not yet read from the environment
std::atomic<int64_t> g_gemm_min_rows{detail::kGemmMinRows};

int group_count(const IntGroupFormat& f, int64_t k) {
  return static_cast<int>((k + f.group_size - 1) / f.group_size);
}

}  // namespace

void set_force_portable(bool portable) {
  g_force_portable.store(portable ? 1 : 0);
}

void set_gguf_gemm_min_rows(int64_t rows) {
  g_gemm_min_rows.store(rows);
}

bool simd_enabled() {
  int forced = g_force_portable.load(std::memory_order_relaxed);
  if (forced < 0) {
    const char* env = std::getenv("XINFER_QUANT_PORTABLE");
    forced = (env != nullptr && env[0] != '\0' && std::strcmp(env, "0") != 0) ? 1 : 0;
    g_force_portable.store(forced);
  }
  return forced == 0 && detail::cpu_has_avx2_fma();
}

namespace detail {

void dequantize_row(const QuantizedMatrix& w, int64_t n, float* dst) {
  const int64_t k = w.k;
  std::visit(
      [&](const auto& f) {
        using T = std::decay_t<decltype(f)>;
        if constexpr (std::is_same_v<T, DenseFormat>) {
          const size_t row_bytes = dtype_bytes(f.dtype, static_cast<size_t>(k));
          convert_to_f32(f.dtype, static_cast<const uint8_t*>(w.weight) + static_cast<size_t>(n) * row_bytes,
                         dst, static_cast<size_t>(k));
        } else if constexpr (std::is_same_v<T, Int8ChannelFormat> || std::is_same_v<T, W8A8Int8Format>) {
          const int8_t* q = static_cast<const int8_t*>(w.weight) + n * k;
          const float s = w.scales[n];
          for (int64_t i = 0; i < k; ++i) dst[i] = s * static_cast<float>(q[i]);
        } else if constexpr (std::is_same_v<T, IntGroupFormat>) {
          const int groups = group_count(f, k);
          const float* s = w.scales + n * groups;
          const uint8_t* z = f.zero_point ? w.zeros + n * groups : nullptr;
          const int sym = f.bits == 4 ? 8 : 128;
          const auto* q = static_cast<const uint8_t*>(w.weight) + n * (k * f.bits / 8);
          if (f.min_offset) {  // scale * value + min (GGUF Q4_1: an exact product, one rounding in the add)
            XI_CHECK(f.bits == 4 && w.mins != nullptr && w.g_idx == nullptr) << format_name(f) << ": mins";
            const float* mn = w.mins + n * groups;
            for (int64_t i = 0; i < k; ++i) {
              const int g = static_cast<int>(i / f.group_size);
              dst[i] = s[g] * static_cast<float>((q[i / 2] >> ((i % 2) * 4)) & 15) + mn[g];
            }
            return;
          }
          if (w.g_idx == nullptr && f.bits == 4 && f.group_size % 2 == 0) {  // the common case: per group
            for (int64_t g0 = 0, g = 0; g0 < k; g0 += f.group_size, ++g) {
              const float zg = static_cast<float>(z ? z[g] : sym), sg = s[g];
              for (int64_t i = g0; i < std::min<int64_t>(k, g0 + f.group_size); i += 2) {
                dst[i] = sg * (static_cast<float>(q[i / 2] & 15) - zg);
                dst[i + 1] = sg * (static_cast<float>(q[i / 2] >> 4) - zg);
              }
            }
            return;
          }
          for (int64_t i = 0; i < k; ++i) {
            const int g = w.g_idx ? w.g_idx[i] : static_cast<int>(i / f.group_size);
            const int v = f.bits == 4 ? (q[i / 2] >> ((i % 2) * 4)) & 15 : q[i];
            dst[i] = s[g] * static_cast<float>(v - (z ? z[g] : sym));
          }
        } else if constexpr (std::is_same_v<T, W8A8Fp8Format>) {
          static const auto* const kFp8 = [] {  // all 256 e4m3 values (core/dtype.h's decoding)
            auto* t = new float[256];
            for (int b = 0; b < 256; ++b) t[b] = to_float(fp8_e4m3{static_cast<uint8_t>(b)});
            return t;
          }();
          const uint8_t* q = static_cast<const uint8_t*>(w.weight) + n * k;
          const float s = w.scales[f.per_channel ? n : 0];
          for (int64_t i = 0; i < k; ++i) dst[i] = s * kFp8[q[i]];
        } else {
          const size_t row_bytes = gguf_row_bytes(f.type, k).value();
          XI_CHECK_OK(dequantize_gguf(f.type, static_cast<const uint8_t*>(w.weight) + n * row_bytes, k, dst));
        }
      },
      w.format);
}

}  // namespace detail

void dequantize_matrix(const QuantizedMatrix& w, float* dst) {
  if (w.input_perm == nullptr) {
    for (int64_t n = 0; n < w.n; ++n) detail::dequantize_row(w, n, dst + n * w.k);
    return;
  }
  std::vector<float> row(static_cast<size_t>(w.k));
  for (int64_t n = 0; n < w.n; ++n) {
    detail::dequantize_row(w, n, row.data());
    for (int64_t j = 0; j < w.k; ++j) dst[n * w.k + w.input_perm[j]] = row[static_cast<size_t>(j)];
  }
}

bool cpu_supports(const WeightFormat& f) {
  return std::visit(
      [](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, DenseFormat>) {
          return v.dtype == DType::kF32 || v.dtype == DType::kBF16 || v.dtype == DType::kF16;
        } else if constexpr (std::is_same_v<T, IntGroupFormat>) {
          return (v.bits == 4 || v.bits == 8) && v.group_size > 0 &&
                 !(v.min_offset && (v.bits != 4 || v.zero_point));
        } else if constexpr (std::is_same_v<T, GgufFormat>) {
          return gguf_block_elems(v.type) > 0;
        } else {
          return true;
        }
      },
      f);
}

namespace {

// Activations as the format's kernel sees them (W8A8: quantized and dequantized back, which is exact for
// the integer products since every product of two quantized values and their sum is representable up to
// float summation order). xq: [rows, k]
void fake_quantize_activations(const WeightFormat& f, const float* input_scale, const float* x, int64_t rows,
                               int64_t k, float* xq) {
  const bool is_int8 = std::holds_alternative<W8A8Int8Format>(f);
  const ActScaleMode mode = is_int8 ? std::get<W8A8Int8Format>(f).act : std::get<W8A8Fp8Format>(f).act;
  const float qmax = is_int8 ? 127.0f : 448.0f;
  for (int64_t t = 0; t < rows; ++t) {
    const float* xr = x + t * k;
    float* out = xq + t * k;
    float s;
    if (mode == ActScaleMode::kStaticPerTensor) {
      XI_CHECK(input_scale != nullptr) << "static activation scale missing";
      s = *input_scale;
    } else {
      float amax = 0.0f;
      for (int64_t i = 0; i < k; ++i) amax = std::max(amax, std::fabs(xr[i]));
      s = amax / qmax;
    }
    if (s == 0.0f) {
      std::fill(out, out + k, 0.0f);
      continue;
    }
    const float inv = 1.0f / s;
    for (int64_t i = 0; i < k; ++i) {
      if (is_int8) {
        out[i] = s * std::clamp(std::nearbyint(xr[i] * inv), -127.0f, 127.0f);
      } else {
        out[i] = s * to_float(to_fp8_e4m3(xr[i] * inv));
      }
    }
  }
}

}  // namespace

void quantized_matmul(const QuantizedMatrix& w, const float* x, int64_t rows, float* y, ThreadPool* pool) {
  XI_CHECK(cpu_supports(w.format)) << format_name(w.format);
  if (rows <= 0 || w.n <= 0) return;
  if (w.input_perm != nullptr) {  // x's columns in the stored order, then the plain matrix
    std::vector<float> xp(static_cast<size_t>(rows * w.k));
    for (int64_t t = 0; t < rows; ++t)
      for (int64_t j = 0; j < w.k; ++j) xp[static_cast<size_t>(t * w.k + j)] = x[t * w.k + w.input_perm[j]];
    QuantizedMatrix plain = w;
    plain.input_perm = nullptr;
    quantized_matmul(plain, xp.data(), rows, y, pool);
    return;
  }
  if (const auto* g = std::get_if<GgufFormat>(&w.format)) {
    if (rows >= g_gemm_min_rows.load(std::memory_order_relaxed) && detail::gguf_gemm(*g, w, x, rows, y, pool)) return;
    if (detail::gguf_matmul(*g, w, x, rows, y, pool)) return;
  }
  if (simd_enabled() && detail::int_matmul_avx2(w, x, rows, y, pool)) return;
  const float* xs = x;
  std::vector<float> xq;
  if (std::holds_alternative<W8A8Int8Format>(w.format) || std::holds_alternative<W8A8Fp8Format>(w.format)) {
    xq.resize(static_cast<size_t>(rows * w.k));
    fake_quantize_activations(w.format, w.input_scale, x, rows, w.k, xq.data());
    xs = xq.data();
    if (simd_enabled() && detail::fp8_matmul_avx2(w, xs, rows, y, pool)) return;
  }
  detail::dequant_rows_matmul(w, xs, rows, y, pool);
}

}  // namespace xinfer::quant
