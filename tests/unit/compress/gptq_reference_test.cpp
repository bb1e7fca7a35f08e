// quantize_gptq against a numpy GPTQ written from the paper's Algorithm 1 (tools/gptq_numpy_reference.py ->
// tests/golden/gptq/cases.json): lazy-batch blocks smaller than K (2 blocks, groups inside and across
// blocks), per channel and per group, zero points, damp 0.1, act-order with static groups and with groups in
// act order (g_idx), int8, and the MSE clip search of the group / channel scales (weighted by H_jj;
// groups from the updated W, act-order static, g_idx with zero points, per channel); a dead input column. The reference updates in f32 as we do, so the integer values agree (a rounding flip near a
// .5 boundary is allowed in at most 1% of them) and the output error sum_r d_r H d_r^T within 1%.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "xinfer/compress/gptq.h"

namespace xinfer::compress {
namespace {

nlohmann::json load_cases() {
  const char* src = std::getenv("XINFER_SOURCE_DIR");
  const std::string path = std::string(src ? src : ".") + "/tests/golden/gptq/cases.json";
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  return nlohmann::json::parse(in);
}

TEST(GptqReference, MatchesNumpyAlgorithm1) {
  const nlohmann::json j = load_cases();
  const int64_t n = j["n"], k = j["k"];
  const std::vector<float> w = j["w"].get<std::vector<float>>();
  const std::vector<double> h = j["hessian"].get<std::vector<double>>();
  ASSERT_EQ(static_cast<int64_t>(w.size()), n * k);
  for (const auto& c : j["cases"]) {
    WeightQuantArgs a;
    a.bits = c["bits"];
    a.symmetric = c["symmetric"];
    a.mse_clip = c.value("mse_clip", false);
    const int group = c["group_size"];
    a.granularity = group > 0 ? Granularity::kGroup : Granularity::kChannel;
    a.group_size = group;
    GptqOptions o;
    o.block_size = c["block_size"];
    o.act_order = c["act_order"];
    o.static_groups = c["static_groups"];
    o.damp = c["damp"];
    const std::string name = "bits " + std::to_string(a.bits) + " group " + std::to_string(group) + " block " +
                             std::to_string(o.block_size) + (o.act_order ? (o.static_groups ? " act-order" : " act-order g_idx") : "") +
                             (a.symmetric ? "" : " zero points") + (a.mse_clip ? " mse clip" : "");
    const QuantizedWeight q = quantize_gptq(w.data(), n, k, h.data(), a, o);
    const std::vector<int64_t> ref_q = c["q"].get<std::vector<int64_t>>();
    int64_t differ = 0;
    for (size_t i = 0; i < ref_q.size(); ++i) differ += q.q[i] != ref_q[i];
    EXPECT_LE(differ, static_cast<int64_t>(ref_q.size()) / 100) << name;
    std::printf("%s: %lld of %zu integer values differ from numpy\n", name.c_str(), static_cast<long long>(differ), ref_q.size());
    const std::vector<float> ref_s = c["scales"].get<std::vector<float>>();
    ASSERT_EQ(ref_s.size(), q.scales.size()) << name;
    for (size_t i = 0; i < ref_s.size(); ++i) EXPECT_NEAR(q.scales[i], ref_s[i], 1e-6f * std::fabs(ref_s[i]) + 1e-9f) << name;
    EXPECT_EQ(std::vector<int64_t>(q.g_idx.begin(), q.g_idx.end()), c["g_idx"].get<std::vector<int64_t>>()) << name;
    if (!a.symmetric) {
      EXPECT_EQ(std::vector<int64_t>(q.zeros.begin(), q.zeros.end()), c["zeros"].get<std::vector<int64_t>>()) << name;
    }
    std::vector<float> deq(static_cast<size_t>(n * k));
    q.dequantize(deq.data());
    for (int64_t r = 0; r < n; ++r) EXPECT_EQ(deq[static_cast<size_t>(r * k + 7)], 0.0f) << name << ": dead input column 7";
    double err = 0;
    for (int64_t r = 0; r < n; ++r)
      for (int64_t x = 0; x < k; ++x)
        for (int64_t y = 0; y < k; ++y)
          err += (static_cast<double>(w[static_cast<size_t>(r * k + x)]) - deq[static_cast<size_t>(r * k + x)]) *
                 h[static_cast<size_t>(x * k + y)] *
                 (static_cast<double>(w[static_cast<size_t>(r * k + y)]) - deq[static_cast<size_t>(r * k + y)]);
    EXPECT_NEAR(err, c["output_error"].get<double>(), 0.01 * c["output_error"].get<double>()) << name;
  }
}

}  // namespace
}  // namespace xinfer::compress
