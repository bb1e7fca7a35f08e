// CpuBackend::argmax_rows (the engine's device-side greedy path) against two oracles written here: the host
// Sampler at temperature 0 (the choice the engine would otherwise make) and a plain scan of the definition
// (max over non-NaN values, lowest id holding it, 0 for a row with none).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "xinfer/backend/cpu/cpu_backend.h"
#include "xinfer/engine/sampler.h"

namespace xinfer::engine {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// rows x vocab logits with awkward rows: exact ties at the max (lowest must win), -inf, huge values, NaN,
// all -inf, all NaN, -0/+0 ties.
std::vector<float> awkward_logits(int rows, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::vector<float> x(static_cast<size_t>(rows) * vocab);
  for (auto& v : x) v = nd(rng);
  for (int r = 0; r < rows; ++r) {
    float* row = x.data() + static_cast<size_t>(r) * vocab;
    const auto at = [&](uint32_t k) -> float& { return row[k % static_cast<uint32_t>(vocab)]; };
    switch (r % 7) {
      case 0: {  // tie at the max between two (or three) random ids
        const uint32_t a = rng(), b = rng();
        at(a) = 50.0f;
        at(b) = 50.0f;
        if (r % 2 == 0) at(rng()) = 50.0f;
        break;
      }
      case 1:  // huge values and -inf around
        at(rng()) = 3.0e38f;
        at(rng()) = 3.0e38f;
        at(rng()) = -kInf;
        break;
      case 2:  // NaN before and after the max
        at(rng()) = std::nanf("");
        at(rng()) = 40.0f;
        row[0] = std::nanf("");
        row[vocab - 1] = std::nanf("");
        break;
      case 3:  // all -inf but a tie of two late ids
        for (int c = 0; c < vocab; ++c) row[c] = -kInf;
        if (vocab > 2) row[vocab - 1] = row[vocab - 2] = -1.0f;
        break;
      case 4:  // all -inf: id 0
        for (int c = 0; c < vocab; ++c) row[c] = -kInf;
        break;
      case 5:  // all NaN: id 0
        for (int c = 0; c < vocab; ++c) row[c] = std::nanf("");
        break;
      case 6:  // all zeros of both signs: the first id
        for (int c = 0; c < vocab; ++c) row[c] = (c % 3 == 0) ? -0.0f : 0.0f;
        if (r % 2 == 1) at(rng()) = kInf;
        break;
    }
  }
  return x;
}

int32_t reference_argmax(const float* row, int vocab) {
  bool any = false;
  float m = 0.0f;
  for (int c = 0; c < vocab; ++c)
    if (!std::isnan(row[c]) && (!any || row[c] > m)) {
      m = row[c];
      any = true;
    }
  if (!any) return 0;
  for (int c = 0; c < vocab; ++c)
    if (row[c] == m) return c;
  return 0;
}

TEST(ArgmaxRows, CpuOpMatchesSamplerAndDefinition) {
  cpu::CpuBackend be(cpu::CpuBackendOptions{1});
  for (const auto& [rows, vocab] : {std::pair{1, 1}, {3, 5}, {14, 1001}, {21, 128256}, {257, 64}}) {
    const std::vector<float> x = awkward_logits(rows, vocab, static_cast<uint32_t>(rows * 131 + vocab));
    backend::DeviceTensor logits = be.upload(TensorView{const_cast<float*>(x.data()), DType::kF32, Shape{rows, vocab}},
                                             DType::kF32);
    backend::DeviceTensor out = be.allocate(DType::kI32, Shape{rows});
    be.argmax_rows(logits.view, out.view);
    std::vector<int32_t> got(static_cast<size_t>(rows));
    be.to_host_raw(out.view, got.data());

    Sampler sampler(vocab);
    SamplingParams greedy;
    greedy.temperature = 0.0f;
    std::vector<SampleInput> batch;
    for (int r = 0; r < rows; ++r)
      batch.push_back(SampleInput{x.data() + static_cast<size_t>(r) * vocab, &greedy, nullptr, {}, {}});
    const std::vector<SampleOutput> host = sampler.sample(batch);
    for (int r = 0; r < rows; ++r) {
      const int32_t want = reference_argmax(x.data() + static_cast<size_t>(r) * vocab, vocab);
      EXPECT_EQ(got[static_cast<size_t>(r)], want) << "rows " << rows << " vocab " << vocab << " row " << r;
      EXPECT_EQ(host[static_cast<size_t>(r)].token, want) << "sampler, rows " << rows << " vocab " << vocab << " row " << r;
    }
  }
}

}  // namespace
}  // namespace xinfer::engine
