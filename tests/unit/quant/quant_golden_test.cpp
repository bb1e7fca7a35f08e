// Dequantization vs implementations written by others: the goldens of tools/make_quant_golden.py (gguf
// package for every GGUF block type; numpy from the published definitions for the int and fp8 formats).
// XINFER_QUANT_GOLDEN_DIR overrides the committed tests/golden/quant (tests/python/test_quant_reference.py
// points it at fresh data with another seed and rows of the real SmolLM2 GGUF file).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "xinfer/quant/quantized_linear.h"

namespace xinfer::quant {
namespace {

std::string golden_dir() {
  if (const char* d = std::getenv("XINFER_QUANT_GOLDEN_DIR")) return d;
  const char* src = std::getenv("XINFER_SOURCE_DIR");
  return std::string(src ? src : ".") + "/tests/golden/quant";
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << path;
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

template <typename T>
std::vector<T> read_as(const std::string& path) {
  const std::vector<uint8_t> b = read_bytes(path);
  std::vector<T> v(b.size() / sizeof(T));
  std::memcpy(v.data(), b.data(), v.size() * sizeof(T));
  return v;
}

// Same float ops in a different order (e.g. (d * sc) * q vs d * (sc * q)) differ by a few ulps.
void expect_close(const std::vector<float>& got, const std::vector<float>& want, const std::string& name) {
  ASSERT_EQ(got.size(), want.size()) << name;
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const float tol = 4e-7f * std::fabs(want[i]) + 1e-9f;
    if (!(std::fabs(got[i] - want[i]) <= tol) && bad++ < 5) {
      ADD_FAILURE() << name << "[" << i << "]: got " << got[i] << " want " << want[i];
    }
  }
  EXPECT_EQ(bad, 0) << name << ": " << bad << " of " << got.size() << " elements differ";
}

TEST(QuantGolden, EveryCaseMatchesTheReference) {
  const std::string dir = golden_dir();
  std::ifstream manifest(dir + "/manifest.txt");
  ASSERT_TRUE(manifest.good()) << dir << "/manifest.txt missing (tools/make_quant_golden.py makes it)";
  std::string line;
  int cases = 0, gguf_types = 0;
  while (std::getline(manifest, line)) {
    std::istringstream in(line);
    std::string kind, name;
    in >> kind >> name;
    if (kind.empty()) continue;
    const std::string base = dir + "/" + name;
    SCOPED_TRACE(line);
    ++cases;
    if (kind == "gguf") {
      uint32_t id;
      int64_t n;
      std::string bin, f32;
      in >> id >> n >> bin >> f32;
      const auto type = gguf_type_from_id(id);
      ASSERT_TRUE(type.has_value()) << id;
      const std::vector<uint8_t> raw = read_bytes(dir + "/" + bin);
      ASSERT_EQ(raw.size(), gguf_row_bytes(*type, n).value()) << name;
      std::vector<float> got(static_cast<size_t>(n));
      ASSERT_TRUE(dequantize_gguf(*type, raw.data(), n, got.data()).ok());
      expect_close(got, read_as<float>(dir + "/" + f32), name);
      ++gguf_types;
      continue;
    }
    QuantizedMatrix w;
    const std::vector<uint8_t> weight = read_bytes(base + ".weight");
    const std::vector<float> scales = read_as<float>(base + ".scales");
    std::vector<uint8_t> zeros;
    std::vector<int32_t> g_idx;
    if (kind == "int") {
      int bits, group, zp, gidx;
      in >> bits >> group >> zp >> gidx >> w.n >> w.k;
      w.format = IntGroupFormat{bits, group, zp != 0};
      if (zp) zeros = read_bytes(base + ".zeros");
      if (gidx) g_idx = read_as<int32_t>(base + ".gidx");
    } else if (kind == "int8ch") {
      in >> w.n >> w.k;
      w.format = Int8ChannelFormat{};
    } else if (kind == "fp8") {
      int per_channel;
      in >> per_channel >> w.n >> w.k;
      w.format = W8A8Fp8Format{per_channel != 0, ActScaleMode::kDynamicPerToken};
    } else {
      FAIL() << "unknown kind " << kind;
    }
    ASSERT_EQ(weight.size(), format_weight_bytes(w.format, w.n, w.k) - scales.size() * 4 - zeros.size());
    w.weight = weight.data();
    w.scales = scales.data();
    w.zeros = zeros.empty() ? nullptr : zeros.data();
    w.g_idx = g_idx.empty() ? nullptr : g_idx.data();
    std::vector<float> got(static_cast<size_t>(w.n * w.k));
    dequantize_matrix(w, got.data());
    expect_close(got, read_as<float>(base + ".f32"), name);
  }
  EXPECT_GE(cases, 21);
  EXPECT_GE(gguf_types, 12);  // F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K..Q6_K
}

}  // namespace
}  // namespace xinfer::quant
