#include "xinfer/model/dummy_quantized.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>

#include "xinfer/backend/counter_rng.h"
#include "xinfer/core/dtype.h"
#include "xinfer/core/thread_pool.h"

namespace xinfer::model {
namespace {

constexpr float kStd = 0.02f;

// 8 random bytes per call, element i of stream `seed`.
uint64_t bits(uint64_t seed, uint64_t i) { return backend::splitmix64(seed * 0x9e3779b97f4a7c15ull + i); }

// The host's threads for the large fills (a 70B model's linears are ~70 GB of codes); every value is a
// function of its index alone, so the split does not change them.
ThreadPool& fill_pool() {
  static ThreadPool pool;
  return pool;
}

// fn(begin, end) over [0, n) in chunks of at least 1 MiB, on fill_pool().
void parallel_bytes(size_t n, const std::function<void(size_t, size_t)>& fn) {
  constexpr int64_t kGrain = 1 << 20;
  fill_pool().parallel_for(0, static_cast<int64_t>((n + 7) / 8), [&](int64_t b, int64_t e) {
    fn(static_cast<size_t>(b) * 8, std::min(n, static_cast<size_t>(e) * 8));
  }, kGrain / 8);
}

void fill_bytes(uint8_t* p, size_t n, uint64_t seed) {
  parallel_bytes(n, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; i += 8) {
      const uint64_t b = bits(seed, i / 8);
      std::memcpy(p + i, &b, std::min<size_t>(8, end - i));
    }
  });
}

// scale_i = base * [0.75, 1.25)
void fill_scales(float* p, size_t n, float base, uint64_t seed) {
  for (size_t i = 0; i < n; ++i)
    p[i] = base * (0.75f + 0.5f * static_cast<float>(bits(seed, i) >> 40) / 16777216.0f);
}

// RMS of the values codes 0..255 stand for under `decode` (uniform codes).
template <typename F>
float code_rms(F decode) {
  double s = 0;
  for (int b = 0; b < 256; ++b) s += static_cast<double>(decode(b)) * decode(b);
  return static_cast<float>(std::sqrt(s / 256));
}

}  // namespace

Result<quant::WeightFormat> parse_dummy_quantization(const std::string& name) {
  if (name == "w4a16") return quant::WeightFormat{quant::IntGroupFormat{4, 128, false}};
  if (name == "w4a16-zp") return quant::WeightFormat{quant::IntGroupFormat{4, 128, true}};
  if (name == "w8a16") return quant::WeightFormat{quant::Int8ChannelFormat{}};
  if (name == "fp8") return quant::WeightFormat{quant::W8A8Fp8Format{true, quant::ActScaleMode::kDynamicPerToken}};
  if (name == "w8a8-int8") return quant::WeightFormat{quant::W8A8Int8Format{quant::ActScaleMode::kDynamicPerToken}};
  return invalid_argument("quantization must be one of w4a16, w4a16-zp, w8a16, fp8, w8a8-int8; got '" + name + "'");
}

Result<HostLinear> make_dummy_quantized_linear(const quant::WeightFormat& format, int64_t n, int64_t k, uint64_t seed) {
  HostLinear h;
  h.format = format;
  h.n = n;
  h.k = k;
  if (const auto* g = std::get_if<quant::IntGroupFormat>(&format)) {
    if (g->bits != 4 || k % 2 != 0)
      return invalid_argument("dummy " + quant::format_name(format) + " [" + std::to_string(n) + ", " +
                              std::to_string(k) + "]: only int4 with an even in_features");
    const int64_t groups = (k + g->group_size - 1) / g->group_size;
    h.weight = HostTensor(DType::kU8, Shape{n, k / 2});
    fill_bytes(h.weight.data<uint8_t>(), static_cast<size_t>(n * k / 2), seed);
    h.scales = HostTensor(DType::kF32, Shape{n, groups});
    fill_scales(h.scales.data<float>(), static_cast<size_t>(n * groups), kStd / 4.61f, seed + 1);  // rms(q - 8)
    if (g->zero_point) {
      h.zeros = HostTensor(DType::kU8, Shape{n, groups});
      uint8_t* z = h.zeros.data<uint8_t>();
      fill_bytes(z, static_cast<size_t>(n * groups), seed + 2);
      for (int64_t i = 0; i < n * groups; ++i) z[i] = static_cast<uint8_t>(4 + z[i] % 8);
    }
    return h;
  }
  const bool fp8 = std::holds_alternative<quant::W8A8Fp8Format>(format);
  if (!fp8 && !std::holds_alternative<quant::Int8ChannelFormat>(format) &&
      !std::holds_alternative<quant::W8A8Int8Format>(format))
    return invalid_argument("dummy weights in " + quant::format_name(format) + " are not supported");
  h.weight = HostTensor(fp8 ? DType::kFP8E4M3 : DType::kI8, Shape{n, k});
  uint8_t* w = static_cast<uint8_t*>(h.weight.view().data);
  fill_bytes(w, static_cast<size_t>(n * k), seed);
  float rms;
  if (fp8) {
    parallel_bytes(static_cast<size_t>(n * k), [&](size_t begin, size_t end) {
      for (size_t i = begin; i < end; ++i)
        if ((w[i] & 0x7f) == 0x7f) w[i] ^= 1;  // e4m3 NaN (S.1111.111) -> the largest finite value 448
    });
    rms = code_rms([](int b) { return (b & 0x7f) == 0x7f ? 448.0f : to_float(fp8_e4m3{static_cast<uint8_t>(b)}); });
  } else {
    rms = code_rms([](int b) { return static_cast<float>(static_cast<int8_t>(b)); });
  }
  h.scales = HostTensor(DType::kF32, Shape{n});
  fill_scales(h.scales.data<float>(), static_cast<size_t>(n), kStd / rms, seed + 1);
  return h;
}

}  // namespace xinfer::model
