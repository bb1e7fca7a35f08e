// The FP8 (e4m3) KV cache on the CPU backend, the oracle of the CUDA kernels (tests/gpu/kv_fp8_*):
//  - core/dtype.h's e4m3 conversions against ml_dtypes' float8_e4m3fn (tests/golden/e4m3, written by
//    tools/make_e4m3_golden.py): all 256 codes decoded, and the saturating round-to-nearest-even encoding
//    of every code value, every midpoint between neighbours (ties), one f32 ulp either side, signed zeros
//    and values past 448;
//  - rope_kv_write into an FP8 cache stores e4m3(x / scale) of what it stores into an f32 cache, nothing
//  else;
//  - paged_attention over an FP8 cache equals, bit for bit, paged_attention over the f32 cache holding the
//    dequantized values code * scale (the definition of the cache's contents), on mixed prefill / decode
//    steps with GQA, cached prefixes, block sizes 1, 4 and 16;
//  - paged_attention itself (any cache dtype) gives the same bits for one step at every block size (1, 4, 16,
//    32: its sums run by positions, not blocks) and stays within 2e-6 of a softmax(q k^T) V written here in
//    double, on its AVX2 loops and on its portable ones;
//  - the transformers goldens with an FP8 cache (scales 1.0 and 0.05): prompt logits near the golden's f32
//  ones
//    (e4m3's 3 mantissa bits: a few % relative L2 on these tiny random models) and greedy generation,
//    teacher-forced on the golden's tokens, mostly the golden's tokens (printed: tokens that agree).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "xinfer/backend/cpu/cpu_backend.h"
#include "xinfer/engine/model_runner.h"
#include "xinfer/model/llama.h"
#include "xinfer/model/safetensors.h"
#include "xinfer/quant/quantized_linear.h"

namespace xinfer {
namespace {

std::string source_dir() {
  const char* src = std::getenv("XINFER_SOURCE_DIR");
  return src ? src : ".";
}

nlohmann::json e4m3_golden() {
  std::ifstream in(source_dir() + "/tests/golden/e4m3/e4m3_ml_dtypes.json");
  EXPECT_TRUE(in.good()) << "tests/golden/e4m3/e4m3_ml_dtypes.json";
  return nlohmann::json::parse(in);
}

TEST(E4m3Reference, EveryCodeDecodesAsMlDtypes) {
  const nlohmann::json g = e4m3_golden();
  ASSERT_EQ(g.at("decode").size(), 256u);
  for (int c = 0; c < 256; ++c) {
    const nlohmann::json& want = g.at("decode")[static_cast<size_t>(c)];
    const float got = to_float(fp8_e4m3{static_cast<uint8_t>(c)});
    if (want.is_null()) {
      EXPECT_TRUE(std::isnan(got)) << "code " << c;
      continue;
    }
    EXPECT_EQ(got, want.get<float>()) << "code " << c;
    EXPECT_EQ(std::signbit(got), std::signbit(want.get<float>())) << "code " << c;
  }
}

TEST(E4m3Reference, SaturatingRoundToNearestEvenAsMlDtypes) {
  const nlohmann::json g = e4m3_golden();
  ASSERT_GT(g.at("encode").size(), 1000u);
  int bad = 0;
  for (const nlohmann::json& e : g.at("encode")) {
    const auto x = e[0].get<float>();
    const int want = e[1].get<int>();
    const int got = to_fp8_e4m3(x).bits;
    if (got != want && bad++ < 10) ADD_FAILURE() << x << " -> " << got << ", ml_dtypes " << want;
  }
  EXPECT_EQ(bad, 0);
}

// ---- ops ----

struct Seq {
  int cached, q_len;
};

// A step over seqs with block tables from a shuffled pool of block ids 1.. (block 0 stays the null block).
backend::StepPlan make_plan(const std::vector<Seq>& seqs, int block_size, int& total_blocks, std::mt19937& rng) {
  int needed = 0;
  for (const Seq& s : seqs) needed += (s.cached + s.q_len + block_size - 1) / block_size;
  total_blocks = needed + 1;
  std::vector<int32_t> pool(static_cast<size_t>(needed));
  std::iota(pool.begin(), pool.end(), 1);
  std::shuffle(pool.begin(), pool.end(), rng);
  backend::StepPlan plan;
  int width = 1;
  for (const Seq& s : seqs) width = std::max(width, (s.cached + s.q_len + block_size - 1) / block_size);
  plan.max_blocks_per_seq = width;
  plan.query_start_loc.push_back(0);
  size_t next = 0;
  for (const Seq& s : seqs) {
    const int len = s.cached + s.q_len;
    std::vector<int32_t> table(static_cast<size_t>(width), 0);
    for (int b = 0; b < (len + block_size - 1) / block_size; ++b) table[static_cast<size_t>(b)] = pool[next++];
    for (int i = 0; i < s.q_len; ++i) {
      const int pos = s.cached + i;
      plan.token_ids.push_back(0);
      plan.positions.push_back(pos);
      plan.slot_mapping.push_back(table[static_cast<size_t>(pos / block_size)] * block_size + pos % block_size);
    }
    plan.block_tables.insert(plan.block_tables.end(), table.begin(), table.end());
    plan.seq_lens.push_back(len);
    plan.query_start_loc.push_back(static_cast<int32_t>(plan.token_ids.size()));
    plan.max_seq_len = std::max(plan.max_seq_len, len);
  }
  return plan;
}

std::vector<float> normals(size_t n, std::mt19937& rng, float stddev = 1.0f) {
  std::normal_distribution<float> d(0.0f, stddev);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

TensorView host_view(std::vector<float>& v, const Shape& s) { return TensorView{v.data(), DType::kF32, s, Device::kCpu}; }

struct OpCase {
  const char* name;
  int hq, hkv, d, block_size;
  std::vector<Seq> seqs;
  float k_scale, v_scale;
};

const std::vector<OpCase>& op_cases() {
  static const std::vector<OpCase> cases = {
      {"mixed_gqa4_d16_bs4", 8, 2, 16, 4, {{0, 7}, {32, 1}, {5, 33}, {97, 1}}, 0.05f, 0.02f},
      {"prefix_gqa1_d64_bs16", 4, 4, 64, 16, {{54, 17}, {0, 1}, {200, 1}}, 1.0f, 1.0f},
      {"mqa_d32_bs1", 6, 1, 32, 1, {{0, 33}, {53, 1}}, 0.3f, 2.0f},
  };
  return cases;
}

// One case's step (its sequences' blocks drawn from `rng`) and its two caches, allocated (zeroed) on `be`:
// k8 / v8 e4m3 codes and kf / vf f32, each [total_blocks, hkv, block_size, d].
struct OpSetup {
  backend::StepPlan plan;
  int T = 0, width = 0;  // tokens of the step; qkv row width (hq + 2 hkv) * d
  Shape cache_shape;
  backend::DeviceTensor k8, v8, kf, vf;
};

OpSetup setup_case(cpu::CpuBackend& be, const OpCase& oc, std::mt19937& rng) {
  OpSetup c;
  int total_blocks = 0;
  c.plan = make_plan(oc.seqs, oc.block_size, total_blocks, rng);
  c.T = c.plan.num_tokens();
  c.width = (oc.hq + 2 * oc.hkv) * oc.d;
  c.cache_shape = Shape{total_blocks, oc.hkv, oc.block_size, oc.d};
  c.k8 = be.allocate(DType::kFP8E4M3, c.cache_shape);
  c.v8 = be.allocate(DType::kFP8E4M3, c.cache_shape);
  c.kf = be.allocate(DType::kF32, c.cache_shape);
  c.vf = be.allocate(DType::kF32, c.cache_shape);
  return c;
}

// The default-RoPE table [max_pos, d] rope_kv_write takes: cos in [:, :d/2], sin in [:, d/2:] (theta 10000).
std::vector<float> rope_table(int max_pos, int d) {
  std::vector<float> cs(static_cast<size_t>(max_pos) * d);
  for (int p = 0; p < max_pos; ++p)
    for (int i = 0; i < d / 2; ++i) {
      const double a = p * std::pow(10000.0, -2.0 * i / d);
      cs[static_cast<size_t>(p) * d + i] = static_cast<float>(std::cos(a));
      cs[static_cast<size_t>(p) * d + d / 2 + i] = static_cast<float>(std::sin(a));
    }
  return cs;
}

// body(be, case, its setup, the rng after the setup) for every op case, each from a fresh std::mt19937(seed).
template <typename Body>
void for_each_case(uint32_t seed, Body body) {
  cpu::CpuBackend be{cpu::CpuBackendOptions{2}};
  for (const OpCase& oc : op_cases()) {
    SCOPED_TRACE(oc.name);
    std::mt19937 rng(seed);
    OpSetup c = setup_case(be, oc, rng);
    body(be, oc, c, rng);
  }
}

TEST(Fp8KvCpu, AttentionEqualsF32AttentionOnTheDequantizedCache) {
  for_each_case(7, [](cpu::CpuBackend& be, const OpCase& oc, OpSetup& c, std::mt19937& rng) {
    const auto n = static_cast<size_t>(c.cache_shape.numel());
    // Codes of N(0, 1) values quantized with the scales: normal, subnormal and (rarely) saturated codes.
    const std::vector<float> kx = normals(n, rng), vx = normals(n, rng);
    for (size_t i = 0; i < n; ++i) {
      const fp8_e4m3 kc = to_fp8_e4m3(kx[i] / oc.k_scale), vc = to_fp8_e4m3(vx[i] / oc.v_scale);
      static_cast<fp8_e4m3*>(c.k8.view.data)[i] = kc;
      static_cast<fp8_e4m3*>(c.v8.view.data)[i] = vc;
      c.kf.view.as<float>()[i] = to_float(kc) * oc.k_scale;
      c.vf.view.as<float>()[i] = to_float(vc) * oc.v_scale;
    }
    std::vector<float> qkv = normals(static_cast<size_t>(c.T) * c.width, rng);
    backend::DeviceTensor out8 = be.allocate(DType::kF32, Shape{c.T, oc.hq * oc.d});
    backend::DeviceTensor outf = be.allocate(DType::kF32, Shape{c.T, oc.hq * oc.d});
    const backend::StepMeta meta = be.upload_step(c.plan);
    const float scale = 1.0f / std::sqrt(static_cast<float>(oc.d));
    be.paged_attention(meta, host_view(qkv, Shape{c.T, c.width}), oc.hq, oc.hkv, oc.d, scale,
                       {c.k8.view, c.v8.view, oc.k_scale, oc.v_scale}, out8.view);
    be.paged_attention(meta, host_view(qkv, Shape{c.T, c.width}), oc.hq, oc.hkv, oc.d, scale,
                       {c.kf.view, c.vf.view}, outf.view);
    size_t differ = 0;
    for (int64_t i = 0; i < out8.view.numel(); ++i)
      differ += std::memcmp(out8.view.as<float>() + i, outf.view.as<float>() + i, sizeof(float)) != 0;
    EXPECT_EQ(differ, 0u) << "of " << out8.view.numel();
  });
}

// Head dims: 24 (a 16-wide step and an 8-wide one), 136 (the V sum in slices of 64, 64 and 8), 12 (not a
// multiple of 8: the portable loops on the AVX2 path too). Block size 1 scores one row per call; the larger
// ones four rows at a time, and their runs of 16 positions span blocks (4) or lie inside one (16, 32): the
// same bits throughout.
class CpuAttentionHeadDim : public testing::TestWithParam<int> {};

TEST_P(CpuAttentionHeadDim, SameBitsForEveryBlockSizeAndNearADoubleReference) {
  const int hq = 6, hkv = 2, d = GetParam(), group = hq / hkv;
  const std::vector<Seq> seqs = {{0, 40}, {70, 1}, {33, 5}};  // a prompt, a decode at 71, a chunk after 33
  const int width = (hq + 2 * hkv) * d;
  std::mt19937 rng(11);
  // The sequences' K / V by position (the same for every block size), and the step's q rows.
  std::vector<std::vector<float>> kx, vx;
  for (const Seq& s : seqs) {
    kx.push_back(normals(static_cast<size_t>(s.cached + s.q_len) * hkv * d, rng));
    vx.push_back(normals(static_cast<size_t>(s.cached + s.q_len) * hkv * d, rng));
  }
  int tokens = 0;
  for (const Seq& s : seqs) tokens += s.q_len;
  std::vector<float> qkv = normals(static_cast<size_t>(tokens) * width, rng);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));

  cpu::CpuBackend be{cpu::CpuBackendOptions{2}};
  struct RestoreSimd {
    ~RestoreSimd() { quant::set_force_portable(false); }
  } restore;
  // The AVX2 loops (where the CPU has them), then the portable ones.
  for (const bool portable : {false, true}) {
    quant::set_force_portable(portable);
    std::vector<float> first;
    for (const int bs : {1, 4, 16, 32}) {
      SCOPED_TRACE(std::string(portable ? "portable" : "simd") + ", block size " + std::to_string(bs));
      int total_blocks = 0;
      const backend::StepPlan plan = make_plan(seqs, bs, total_blocks, rng);
      const Shape shape{total_blocks, hkv, bs, d};
      backend::DeviceTensor kc = be.allocate(DType::kF32, shape), vc = be.allocate(DType::kF32, shape);
      for (size_t s = 0; s < seqs.size(); ++s)
        for (int pos = 0; pos < seqs[s].cached + seqs[s].q_len; ++pos)
          for (int h = 0; h < hkv; ++h) {
            const int32_t block =
                plan.block_tables[s * static_cast<size_t>(plan.max_blocks_per_seq) + pos / bs];
            const int64_t row = ((static_cast<int64_t>(block) * hkv + h) * bs + pos % bs) * d;
            const size_t src = (static_cast<size_t>(pos) * hkv + h) * d;
            std::copy_n(kx[s].data() + src, d, kc.view.as<float>() + row);
            std::copy_n(vx[s].data() + src, d, vc.view.as<float>() + row);
          }
      backend::DeviceTensor out = be.allocate(DType::kF32, Shape{tokens, hq * d});
      be.paged_attention(be.upload_step(plan), host_view(qkv, Shape{tokens, width}), hq, hkv, d, scale,
                         {kc.view, vc.view}, out.view);
      const std::vector<float> got(out.view.as<float>(), out.view.as<float>() + out.view.numel());
      if (first.empty()) {
        first = got;
        // softmax(q k^T * scale) V in double, from the positions' K / V.
        int t = 0;
        double worst = 0;
        for (size_t s = 0; s < seqs.size(); ++s)
          for (int i = 0; i < seqs[s].q_len; ++i, ++t) {
            const int n = seqs[s].cached + i + 1;
            for (int h = 0; h < hq; ++h) {
              const float* q = qkv.data() + static_cast<size_t>(t) * width + static_cast<size_t>(h) * d;
              const int kvh = h / group;
              std::vector<double> w(static_cast<size_t>(n));
              double max_w = -1e300, sum = 0;
              for (int j = 0; j < n; ++j) {
                const float* k = kx[s].data() + (static_cast<size_t>(j) * hkv + kvh) * d;
                double dot = 0;
                for (int e = 0; e < d; ++e) dot += static_cast<double>(q[e]) * k[e];
                w[static_cast<size_t>(j)] = dot * scale;
                max_w = std::max(max_w, w[static_cast<size_t>(j)]);
              }
              for (double& x : w) sum += x = std::exp(x - max_w);
              for (int e = 0; e < d; ++e) {
                double ref = 0;
                for (int j = 0; j < n; ++j)
                  ref += w[static_cast<size_t>(j)] * vx[s][(static_cast<size_t>(j) * hkv + kvh) * d + e];
                ref /= sum;
                worst = std::max(
                    worst,
                    std::fabs(ref - got[static_cast<size_t>(t) * hq * d + static_cast<size_t>(h) * d + e]));
              }
            }
          }
        std::printf("[ cpu attention ] max |xinfer - double reference|: %.2e\n", worst);
        EXPECT_LT(worst, 2e-6);
      } else {
        size_t differ = 0;
        for (size_t i = 0; i < got.size(); ++i) differ += std::memcmp(&got[i], &first[i], sizeof(float)) != 0;
        EXPECT_EQ(differ, 0u) << "of " << got.size() << " outputs differ from block size 1's";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(HeadDims, CpuAttentionHeadDim, testing::Values(24, 136, 12),
                         [](const testing::TestParamInfo<int>& i) {
                           return std::string("d").append(std::to_string(i.param));
                         });

TEST(Fp8KvCpu, RopeKvWriteStoresTheScaledE4m3OfTheF32Cache) {
  for_each_case(9, [](cpu::CpuBackend& be, const OpCase& oc, OpSetup& c, std::mt19937& rng) {
    const int max_pos = *std::max_element(c.plan.positions.begin(), c.plan.positions.end()) + 1;
    std::vector<float> cs = rope_table(max_pos, oc.d);
    std::vector<float> qkv8 = normals(static_cast<size_t>(c.T) * c.width, rng, 3.0f), qkvf = qkv8;
    const backend::StepMeta meta = be.upload_step(c.plan);
    be.rope_kv_write(meta, host_view(qkv8, Shape{c.T, c.width}), oc.hq, oc.hkv, oc.d,
                     host_view(cs, Shape{max_pos, oc.d}), {c.k8.view, c.v8.view, oc.k_scale, oc.v_scale});
    be.rope_kv_write(meta, host_view(qkvf, Shape{c.T, c.width}), oc.hq, oc.hkv, oc.d,
                     host_view(cs, Shape{max_pos, oc.d}), {c.kf.view, c.vf.view});
    EXPECT_EQ(qkv8, qkvf) << "q and k are rotated in place as with an f32 cache";
    const auto n = static_cast<size_t>(c.cache_shape.numel());
    size_t bad = 0, written = 0;
    for (size_t i = 0; i < n; ++i) {
      // Unwritten rows stay 0 in both (allocate() zeroes); written rows hold e4m3(x / scale).
      const uint8_t kc = static_cast<const uint8_t*>(c.k8.view.data)[i],
                    vc = static_cast<const uint8_t*>(c.v8.view.data)[i];
      bad += kc != to_fp8_e4m3(c.kf.view.as<float>()[i] / oc.k_scale).bits;
      bad += vc != to_fp8_e4m3(c.vf.view.as<float>()[i] / oc.v_scale).bits;
      written += c.kf.view.as<float>()[i] != 0.0f;
    }
    EXPECT_EQ(bad, 0u);
    EXPECT_EQ(written, static_cast<size_t>(c.T) * oc.hkv * oc.d);
  });
}

// ---- key rotation (backend/kv_rotation.h) ----

// The rotation is kv_rotation.h's definition: Sylvester's Hadamard matrix on the flat index f(i), times the
// power-of-two scale, for every supported head_dim; q . k is preserved.
TEST(KvRotation, IsTheScaledHadamardMatrixOfTheFlatIndex) {
  std::mt19937 rng(5);
  for (const int d : {16, 32, 64, 128, 256}) {
    SCOPED_TRACE("head_dim " + std::to_string(d));
    ASSERT_TRUE(backend::kv_rotation_supported(d));
    auto flat = [d](int i) { return i < d / 2 ? 16 * (i / 8) + i % 8 : 16 * ((i - d / 2) / 8) + 8 + i % 8; };
    // H[a][b] = (-1)^popcount(a & b) (Sylvester), on flat indices.
    const std::vector<float> q = normals(static_cast<size_t>(d), rng), k = normals(static_cast<size_t>(d), rng);
    std::vector<float> qr = q, kr = k;
    backend::kv_rotate_head(qr.data(), d, false);
    backend::kv_rotate_head(kr.data(), d, true);
    double dot = 0, dot_r = 0, worst = 0;
    for (int i = 0; i < d; ++i) {
      double want_k = 0;
      for (int j = 0; j < d; ++j) want_k += (std::popcount(static_cast<unsigned>(flat(i) & flat(j))) % 2 ? -1.0 : 1.0) * k[static_cast<size_t>(j)];
      want_k *= backend::kv_rotation_scale(d, true);
      worst = std::max(worst, std::abs(want_k - kr[static_cast<size_t>(i)]));
      dot += static_cast<double>(q[static_cast<size_t>(i)]) * k[static_cast<size_t>(i)];
      dot_r += static_cast<double>(qr[static_cast<size_t>(i)]) * kr[static_cast<size_t>(i)];
    }
    EXPECT_LT(worst, 1e-4) << "k' = H k * 2^-ceil(log2(d) / 2)";
    EXPECT_NEAR(dot_r, dot, 1e-4 * std::sqrt(static_cast<double>(d))) << "q' . k' = q . k";
    EXPECT_EQ(backend::kv_rotation_scale(d, true) * backend::kv_rotation_scale(d, false), 1.0f / static_cast<float>(d));
  }
  EXPECT_FALSE(backend::kv_rotation_supported(8));
  EXPECT_FALSE(backend::kv_rotation_supported(96));
  EXPECT_FALSE(backend::kv_rotation_supported(512));
}

// rope_kv_write with the rotation stores (and leaves in qkv) the rotated q and k of what it stores without it,
// and attention over the rotated cache equals attention over the plain one (f32 caches: to rounding).
TEST(KvRotation, RotatedCacheGivesTheSameAttention) {
  for_each_case(13, [](cpu::CpuBackend& be, const OpCase& oc, OpSetup& c, std::mt19937& rng) {
    const int max_pos = *std::max_element(c.plan.positions.begin(), c.plan.positions.end()) + 1;
    std::vector<float> cs = rope_table(max_pos, oc.d);
    const std::vector<float> input = normals(static_cast<size_t>(c.T) * c.width, rng, 3.0f);
    std::vector<float> qkv_r = input, qkv = input;
    const backend::StepMeta meta = be.upload_step(c.plan);
    backend::DeviceTensor kr = be.allocate(DType::kF32, c.cache_shape), vr = be.allocate(DType::kF32, c.cache_shape);
    backend::LayerKvCache rotated{kr.view, vr.view};
    rotated.k_rotation = backend::KvRotation::kHadamard;
    const backend::LayerKvCache plain{c.kf.view, c.vf.view};
    be.rope_kv_write(meta, host_view(qkv_r, Shape{c.T, c.width}), oc.hq, oc.hkv, oc.d,
                     host_view(cs, Shape{max_pos, oc.d}), rotated);
    be.rope_kv_write(meta, host_view(qkv, Shape{c.T, c.width}), oc.hq, oc.hkv, oc.d,
                     host_view(cs, Shape{max_pos, oc.d}), plain);
    // qkv_r's q and k heads are kv_rotate_head() of qkv's, bit for bit; v untouched.
    size_t bad = 0;
    for (int t = 0; t < c.T; ++t)
      for (int h = 0; h < oc.hq + 2 * oc.hkv; ++h) {
        std::vector<float> x(qkv.begin() + (static_cast<ptrdiff_t>(t) * c.width + h * oc.d),
                             qkv.begin() + (static_cast<ptrdiff_t>(t) * c.width + (h + 1) * oc.d));
        if (h < oc.hq + oc.hkv) backend::kv_rotate_head(x.data(), oc.d, h >= oc.hq);
        bad += std::memcmp(x.data(), qkv_r.data() + static_cast<ptrdiff_t>(t) * c.width + h * oc.d,
                           x.size() * sizeof(float)) != 0;
      }
    EXPECT_EQ(bad, 0u) << "heads not rotated as kv_rotate_head()";
    backend::DeviceTensor out_r = be.allocate(DType::kF32, Shape{c.T, oc.hq * oc.d});
    backend::DeviceTensor out = be.allocate(DType::kF32, Shape{c.T, oc.hq * oc.d});
    const float scale = 1.0f / std::sqrt(static_cast<float>(oc.d));
    be.paged_attention(meta, host_view(qkv_r, Shape{c.T, c.width}), oc.hq, oc.hkv, oc.d, scale, rotated, out_r.view);
    be.paged_attention(meta, host_view(qkv, Shape{c.T, c.width}), oc.hq, oc.hkv, oc.d, scale, plain, out.view);
    double err = 0, norm = 0;
    for (int64_t i = 0; i < out.view.numel(); ++i) {
      const double a = out_r.view.as<float>()[i], b = out.view.as<float>()[i];
      err += (a - b) * (a - b);
      norm += b * b;
    }
    EXPECT_LT(std::sqrt(err / norm), 1e-5) << "attention changed by the rotation";
    // And into an FP8 cache with the case's scales: the codes of the rotated keys.
    backend::LayerKvCache fp8{c.k8.view, c.v8.view, oc.k_scale, oc.v_scale};
    fp8.k_rotation = backend::KvRotation::kHadamard;
    std::vector<float> qkv8 = input;
    be.rope_kv_write(meta, host_view(qkv8, Shape{c.T, c.width}), oc.hq, oc.hkv, oc.d,
                     host_view(cs, Shape{max_pos, oc.d}), fp8);
    EXPECT_EQ(qkv8, qkv_r) << "q and k rotated as with an f32 cache";
    size_t bad_codes = 0;
    for (int64_t i = 0; i < c.cache_shape.numel(); ++i)
      bad_codes += static_cast<const uint8_t*>(c.k8.view.data)[i] != to_fp8_e4m3(kr.view.as<float>()[i] / oc.k_scale).bits;
    EXPECT_EQ(bad_codes, 0u) << "fp8 codes are e4m3(rotated k / scale)";
  });
}

// ---- goldens ----

struct Golden {
  std::vector<std::vector<int32_t>> prompts, greedy;
  std::vector<std::vector<float>> logits;  // [len * vocab] per prompt
};

Golden read_golden(const std::string& dir) {
  auto files = model::WeightFiles::open_file(dir + "/golden.safetensors");
  Golden g;
  XI_CHECK(files.ok()) << files.status().to_string();
  for (int i = 0; files->contains("prompt_" + std::to_string(i)); ++i) {
    const std::string idx = std::to_string(i);
    auto ids = [&](const std::string& name) {
      const TensorView v = *files->get(name);
      return std::vector<int32_t>(v.as<int32_t>(), v.as<int32_t>() + v.numel());
    };
    g.prompts.push_back(ids("prompt_" + idx));
    g.greedy.push_back(ids("greedy_" + idx));
    const TensorView l = *files->get("logits_" + idx);
    g.logits.emplace_back(l.as<float>(), l.as<float>() + l.numel());
  }
  return g;
}

class Fp8KvGoldenTest : public ::testing::TestWithParam<std::string> {};

// The golden's prompt logits vs ours with an FP8 cache (scale 1.0 and 0.05), and greedy generation teacher-forced
// on the golden's tokens.
TEST_P(Fp8KvGoldenTest, LogitsAndGreedyTokensNearTheGoldens) {
  const std::string dir = source_dir() + "/tests/golden/" + GetParam();
  const Golden g = read_golden(dir);
  ASSERT_FALSE(g.prompts.empty());
  cpu::CpuBackend be{cpu::CpuBackendOptions{2}};
  model::LoadOptions opts;
  opts.max_tokens = 256;
  opts.max_logit_rows = 256;
  opts.show_progress = false;
  auto m = model::LlamaModel::load(dir, be, opts);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const model::ModelConfig& c = (*m)->config();
  const bool rotatable = backend::kv_rotation_supported(c.head_dim);
  for (const float kv_scale : {1.0f, 0.05f, 0.0f}) {  // 0: per-head scales 0.04, 0.05, ... and rotated keys
    SCOPED_TRACE("kv scale " + std::to_string(kv_scale));
    if (kv_scale == 0.0f && !rotatable) continue;
    backend::KvCacheSpec spec{c.num_layers, 128, 4, c.num_kv_heads, c.head_dim, DType::kFP8E4M3};
    for (int i = 0; i < c.num_layers * c.num_kv_heads; ++i) {
      spec.k_scales.push_back(kv_scale > 0 ? kv_scale : 0.04f + 0.01f * static_cast<float>(i % 3));
      spec.v_scales.push_back(kv_scale > 0 ? kv_scale : 0.05f - 0.01f * static_cast<float>(i % 2));
    }
    if (kv_scale == 0.0f) spec.k_rotation = backend::KvRotation::kHadamard;
    engine::ModelRunner runner(**m, be, spec);
    const backend::KvCache prompt_kv = be.allocate_kv_cache(spec);
    double worst_rel = 0, worst_abs = 0;
    int tokens = 0, agree = 0;
    for (size_t p = 0; p < g.prompts.size(); ++p) {
      std::vector<int32_t> seq = g.prompts[p];
      std::vector<int32_t> table(64);
      std::iota(table.begin(), table.end(), 1);
      // Prompt logits (every row) against the golden's.
      {
        engine::SequenceChunk chunk{seq, 0, table, true};
        backend::StepPlan plan = engine::ModelRunner::plan(std::span(&chunk, 1), 4);
        plan.logit_rows.resize(seq.size());
        std::iota(plan.logit_rows.begin(), plan.logit_rows.end(), 0);
        const TensorView lg = (*m)->forward(be.upload_step(plan), prompt_kv);
        double err = 0, norm = 0;
        for (int64_t i = 0; i < lg.numel(); ++i) {
          const double d = static_cast<double>(lg.as<float>()[i]) - g.logits[p][static_cast<size_t>(i)];
          err += d * d;
          norm += static_cast<double>(g.logits[p][static_cast<size_t>(i)]) * g.logits[p][static_cast<size_t>(i)];
          worst_abs = std::max(worst_abs, std::abs(d));
        }
        worst_rel = std::max(worst_rel, std::sqrt(err / norm));
      }
      // Greedy: prefill, then one decode per golden token, teacher-forced on the golden's tokens.
      size_t done = 0;
      for (size_t i = 0; i < g.greedy[p].size(); ++i) {
        engine::SequenceChunk chunk{std::span(seq).subspan(done), static_cast<int32_t>(done), table, true};
        const std::vector<float>& lg = runner.run(std::span(&chunk, 1));
        done = seq.size();
        const int got = static_cast<int>(std::max_element(lg.begin(), lg.end()) - lg.begin());
        ++tokens;
        agree += got == g.greedy[p][i];
        seq.push_back(g.greedy[p][i]);
      }
    }
    std::printf("[ fp8 kv ] %-12s scale %s: prompt logits rel L2 %.2e (max abs %.2e) vs transformers f32; "
                "greedy %d / %d tokens as the golden\n",
                GetParam().c_str(), kv_scale > 0 ? std::to_string(kv_scale).c_str() : "per head, rotated",
                worst_rel, worst_abs, agree, tokens);
    // Bounds above what was measured (session 9: 4-7% rel L2 and 50-57 of 60 tokens; llama_tied, whose
    // logits are the most sensitive of the goldens (the GPU tests' bf16 bound is 5x the others' for it),
    // 15-19% and 42-45 of 60): a broken cache gives ~100% and chance agreement.
    const double bound = GetParam() == "llama_tied" ? 0.35 : 0.15;
    EXPECT_LT(worst_rel, bound) << "prompt logits far from the golden's, beyond e4m3's rounding";
    EXPECT_GE(agree * 10, tokens * 6) << "fewer than 60% of greedy tokens as the golden";
  }
}

INSTANTIATE_TEST_SUITE_P(Goldens, Fp8KvGoldenTest,
                         ::testing::Values("llama_gqa", "llama_tied", "mistral", "qwen2", "qwen3"),
                         [](const auto& param_info) { return param_info.param; });

}  // namespace
}  // namespace xinfer
