// Weight-only quantized linears on CudaBackend (kernels/gemm/quant_linear.h, cuda_backend_quant.cpp) against
// the CPU oracle quant::quantized_matmul on the same bf16-valued inputs:
//  - the quantized GEMV (m <= 16 through linear(), in launches of 8 rows; m up to 21 and both compiled
//    occupancies through launch_quant_gemv directly):
//    int4 per group 32 / 64 / 128 / 256 (symmetric and zero points), int8 per group 32 / 64 / 128 and int8
//    per channel, n 1 / 7 / 33 / 4097, k 128..4224 incl. a partial last group and a partial last step (k 192,
//    576), bias, bf16 and f32 out.
//    f32 out with the scale applied in f32 (group % step == 0) is held to 1e-4 relative L2 (bf16 noise is
//    4e-3): the kernel's arithmetic is the oracle's up to summation order; folded scales (int4 g32 / g64,
//    int8 g32) to 1e-2 (one bf16 rounding of each weight);
//  - the CUDA-core GEMV (m 1..4, int4, int8 and W8A8-FP8) in each compiled schedule: f16 products and chunk
//    sums, so f32 out to 3e-3 relative L2 and bf16 out to 1e-2;
//  - the dequantize + bf16 GEMM path: m 17..61, and what the GEMV does not take at m = 1 (g_idx act-order,
//  group
//    16, k % 128 != 0), against the oracle (bf16 weights: 1e-2);
//  - the tiled GEMM past 16 rows (wq_gemm.h, set_wq_gemm_max_rows) against the oracle (1e-2, bf16 weights);
//  - the path counters say which path ran; the dequantized weight alone against quant::dequantize_matrix;
//  - linears recorded in a CUDA graph (GEMV and workspace path) replay bit-identical to eager runs, and a
//    recording that would grow the workspace fails cleanly and succeeds after end_capture() grew it;
//  - W8A8-FP8 (per-channel / per-tensor weight scales, dynamic / static activations) against the oracle: the
//    activations quantize to the CPU's bits, so f32 outputs agree to 1e-3 (tensor-core FP8 accumulation);
//  - GGUF Q4_0 / Q4_1 / Q5_0 / Q8_0 / Q4_K / Q6_K rows repacked at load (model/gguf_repack.h) through these
//  kernels vs the GGUF reference;
//  - supports(): the formats above and W8A8-INT8 (quant_w8a8_int8_test.cpp) yes, GGUF no; bad weights fail
//    with the format named.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "gpu_test_util.h"
#include "xinfer/backend/cuda/kernels/gemm/cublaslt_fp8_gemm.h"
#include "xinfer/backend/cuda/kernels/gemm/int4_decode_gemv.h"
#include "xinfer/backend/cuda/kernels/gemm/quant_dot_gemv.h"
#include "xinfer/backend/cuda/kernels/gemm/quant_linear.h"
#include "xinfer/backend/cuda/kernels/gemm/w8a8_int8_wgmma.h"
#include "xinfer/backend/cuda/kernels/gemm/wq_gemm.h"
#include "xinfer/backend/cuda/kernels/quant/quantize_activations.h"
#include "xinfer/model/checkpoint_linear.h"
#include "xinfer/model/gguf_repack.h"
#include "xinfer/quant/gguf_types.h"
#include "xinfer/quant/quantized_linear.h"

namespace xinfer::gpu_test {
namespace {

// A quantized weight on the host (the CPU layout) and on the GPU.
struct QuantCase {
  quant::WeightFormat format;
  int64_t n = 0, k = 0;
  std::vector<uint8_t> w;
  std::vector<float> scales;
  std::vector<uint8_t> zeros;
  std::vector<float> mins;  // IntGroupFormat::min_offset
  std::vector<int32_t> g_idx;
  std::vector<float> bias;  // bf16-valued, or empty
  std::vector<backend::DeviceTensor> owned;
  backend::LinearWeights lw;

  quant::QuantizedMatrix host() const {
    quant::QuantizedMatrix q;
    q.format = format;
    q.n = n;
    q.k = k;
    q.weight = w.data();
    q.scales = scales.data();
    q.zeros = zeros.empty() ? nullptr : zeros.data();
    q.mins = mins.empty() ? nullptr : mins.data();
    q.g_idx = g_idx.empty() ? nullptr : g_idx.data();
    return q;
  }
};

template <typename T>
TensorView raw_view(const std::vector<T>& v, DType dt, const Shape& s) {
  return TensorView{const_cast<T*>(v.data()), dt, s, Device::kCpu};
}

// Random weights: values uniform over the integer range, scales in [0.5, 1.5] / range, zero points uniform;
// mins (min_offset, GGUF Q4_1's form) about -8 scales, scales and mins f16 values as GGUF stores them; g_idx
// (act_order) a random permutation of the columns' groups.
QuantCase make_case(const quant::WeightFormat& f, int64_t n, int64_t k, bool bias, bool act_order, std::mt19937& rng) {
  QuantCase c;
  c.format = f;
  c.n = n;
  c.k = k;
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> sd(0.5f, 1.5f);
  cuda::CudaBackend& g = gpu();
  auto keep = [&](backend::DeviceTensor t) {
    c.owned.push_back(t);
    return t.view;
  };
  if (std::holds_alternative<quant::Int8ChannelFormat>(f)) {
    c.w.resize(static_cast<size_t>(n * k));
    for (auto& b : c.w) b = static_cast<uint8_t>(byte(rng));
    c.scales.resize(static_cast<size_t>(n));
    for (auto& s : c.scales) s = sd(rng) / 127.0f / std::sqrt(static_cast<float>(k));
    c.lw.weight = keep(g.upload(raw_view(c.w, DType::kI8, Shape{n, k}), DType::kI8));
    c.lw.scales = keep(g.upload(raw_view(c.scales, DType::kF32, Shape{n}), DType::kF32));
  } else {
    const auto& q = std::get<quant::IntGroupFormat>(f);
    const int64_t groups = (k + q.group_size - 1) / q.group_size;
    const int64_t row_bytes = q.bits == 4 ? k / 2 : k;
    c.w.resize(static_cast<size_t>(n * row_bytes));
    for (auto& b : c.w) b = static_cast<uint8_t>(byte(rng));
    c.scales.resize(static_cast<size_t>(n * groups));
    const float range = q.bits == 4 ? 7.5f : 127.5f;
    for (auto& s : c.scales) s = sd(rng) / range / std::sqrt(static_cast<float>(k));
    c.lw.weight = keep(g.upload(raw_view(c.w, DType::kU8, Shape{n, row_bytes}), DType::kU8));
    c.lw.scales = keep(g.upload(raw_view(c.scales, DType::kF32, Shape{n, groups}), DType::kF32));
    if (q.zero_point) {
      c.zeros.resize(static_cast<size_t>(n * groups));
      std::uniform_int_distribution<int> zd(0, q.bits == 4 ? 15 : 255);
      for (auto& z : c.zeros) z = static_cast<uint8_t>(zd(rng));
      c.lw.zeros = keep(g.upload(raw_view(c.zeros, DType::kU8, Shape{n, groups}), DType::kU8));
    }
    if (q.min_offset) {
      c.mins.resize(c.scales.size());
      for (size_t i = 0; i < c.scales.size(); ++i) {
        c.scales[i] = to_float(to_f16(c.scales[i]));
        c.mins[i] = to_float(to_f16(-8.0f * c.scales[i] * sd(rng)));
      }
      c.lw.scales = keep(g.upload(raw_view(c.scales, DType::kF32, Shape{n, groups}), DType::kF32));
      c.lw.mins = keep(g.upload(raw_view(c.mins, DType::kF32, Shape{n, groups}), DType::kF32));
    }
    if (act_order) {
      c.g_idx.resize(static_cast<size_t>(k));
      for (int64_t i = 0; i < k; ++i) c.g_idx[static_cast<size_t>(i)] = static_cast<int32_t>(i / q.group_size);
      std::shuffle(c.g_idx.begin(), c.g_idx.end(), rng);
      c.lw.g_idx = keep(g.upload(raw_view(c.g_idx, DType::kI32, Shape{k}), DType::kI32));
    }
  }
  c.lw.format = f;
  c.lw.k = k;
  if (bias) {
    c.bias = random_bf16(static_cast<size_t>(n), rng, 0.5f);
    c.lw.bias = keep(g.upload(host_view(c.bias, Shape{n}), DType::kBF16));
  }
  return c;
}

// The oracle: quantized_matmul on bf16-valued x, plus the bias.
std::vector<float> oracle(const QuantCase& c, const std::vector<float>& x, int64_t m) {
  std::vector<float> y(static_cast<size_t>(m * c.n));
  quant::quantized_matmul(c.host(), x.data(), m, y.data(), nullptr);
  if (!c.bias.empty())
    for (int64_t t = 0; t < m; ++t)
      for (int64_t j = 0; j < c.n; ++j) y[static_cast<size_t>(t * c.n + j)] += c.bias[static_cast<size_t>(j)];
  return y;
}

// Runs CudaBackend::linear on random x [m, k] and compares with the oracle; returns the relative L2 error.
double run_linear(QuantCase& c, int64_t m, bool f32_out, double tol, std::mt19937& rng, const std::string& what) {
  const std::vector<float> x = random_bf16(static_cast<size_t>(m * c.k), rng);
  auto xd = gpu().upload(host_view(x, Shape{m, c.k}), DType::kBF16);
  auto yd = gpu().allocate(f32_out ? DType::kF32 : DType::kBF16, Shape{m, c.n});
  poison(yd.view);
  gpu().linear(xd.view, c.lw, yd.view);
  const std::vector<float> got = download(gpu(), yd.view), ref = oracle(c, x, m);
  Compare cmp = compare(got, ref);
  if (cmp.rel_l2 >= tol && tol >= 1e-2 && c.n == 1) {
    // bf16-level comparison of a single output column, which may cancel: the error of bf16 weights scales with
    // sum_k |x| |w|, so measure it against that instead of against the (small) outputs.
    std::vector<float> w(static_cast<size_t>(c.n * c.k));
    quant::dequantize_matrix(c.host(), w.data());
    double err = 0, mag = 0;
    for (int64_t t = 0; t < m; ++t)
      for (int64_t j = 0; j < c.n; ++j) {
        double a = c.bias.empty() ? 0.0 : std::abs(c.bias[static_cast<size_t>(j)]);
        for (int64_t i = 0; i < c.k; ++i) a += std::abs(static_cast<double>(x[t * c.k + i]) * w[j * c.k + i]);
        const double d = static_cast<double>(got[t * c.n + j]) - ref[t * c.n + j];
        err += d * d;
        mag += a * a;
      }
    cmp.rel_l2 = std::sqrt(err / mag);
  }
  EXPECT_EQ(cmp.nans, 0) << what << ": unwritten outputs";
  EXPECT_LT(cmp.rel_l2, tol) << what << " (max abs " << cmp.max_abs << ")";
  return cmp.rel_l2;
}

std::string name(const QuantCase& c, int64_t m, bool f32_out) {
  return quant::format_name(c.format) + " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k) +
         " m=" + std::to_string(m) + (c.bias.empty() ? "" : " bias") + (f32_out ? " f32" : " bf16");
}

bool folded(const quant::WeightFormat& f) {
  const auto* g = std::get_if<quant::IntGroupFormat>(&f);
  return g != nullptr && g->group_size % (g->bits == 4 ? 128 : 64) != 0;
}

TEST(QuantLinear, GemvMatchesCpuOracle) {
  std::mt19937 rng(7);
  const std::vector<quant::WeightFormat> formats = {
      quant::IntGroupFormat{4, 128, false}, quant::IntGroupFormat{4, 128, true},
      quant::IntGroupFormat{4, 32, false},  quant::IntGroupFormat{4, 32, true},
      quant::IntGroupFormat{4, 64, true},   quant::IntGroupFormat{4, 256, true},
      quant::IntGroupFormat{8, 128, false}, quant::IntGroupFormat{8, 64, true},
      quant::IntGroupFormat{8, 32, true},   quant::IntGroupFormat{8, 16, false},
      quant::IntGroupFormat{8, 16, true},   quant::Int8ChannelFormat{}};
  struct Shape2 {
    int64_t n, k;
  };
  // k 192 and 576 (SmolLM2's hidden size) end in a partial int4 step of 128 columns
  const std::vector<Shape2> shapes = {{1, 128}, {7, 256}, {33, 384}, {4097, 1024}, {130, 4224}, {9, 192}, {65, 576}};
  int64_t case_index = 0;
  for (const auto& f : formats) {
    for (const Shape2& s : shapes) {
      const bool bias = case_index % 2 == 0;
      QuantCase c = make_case(f, s.n, s.k, bias, false, rng);
      for (int64_t m : {1, 2, 3, 5, 8, 13, 16}) {
        const bool f32_out = (case_index + m) % 2 == 1;
        const double tol = f32_out && !folded(f) ? 1e-4 : 1e-2;
        const int64_t before = gpu().quant_gemvs();
        run_linear(c, m, f32_out, tol, rng, name(c, m, f32_out));
        EXPECT_EQ(gpu().quant_gemvs(), before + 1) << name(c, m, f32_out) << " did not run the quantized GEMV";
      }
      ++case_index;
    }
  }
}

TEST(QuantLinear, GemvInChunksOfEightRows) {
  std::mt19937 rng(11);
  for (const auto& f : {quant::WeightFormat{quant::IntGroupFormat{4, 128, true}},
                        quant::WeightFormat{quant::Int8ChannelFormat{}}}) {
    QuantCase c = make_case(f, 77, 512, true, false, rng);
    const cuda::QuantWeight q = gpu().quant_weight(c.lw);
    for (int64_t m : {9, 16, 21, 3, 40, 26}) {
      const int ctas = m % 2 == 0 ? 2 : 3;  // both compiled variants (quant_linear.h QuantGemvConfig), with and
      const bool pdl = m > 10;              // without programmatic dependent launch
      // int8 at 2 CTAs per SM: 16 rows per launch (16: one launch of two tiles; 40 = 16 + 16 + 8; 26 = 16 +
      // 10)
      const bool tokens16 = q.bits == 8 && ctas == 2;
      const std::vector<float> x = random_bf16(static_cast<size_t>(m * c.k), rng);
      auto xd = gpu().upload(host_view(x, Shape{m, c.k}), DType::kBF16);
      auto yd = gpu().allocate(DType::kF32, Shape{m, c.n});
      poison(yd.view);
      cuda::launch_quant_gemv(
          {static_cast<const __nv_bfloat16*>(xd.view.data), q,
           static_cast<const __nv_bfloat16*>(c.lw.bias.data), yd.view.data, true, static_cast<int>(m)},
          gpu().stream(), cuda::QuantGemvConfig{ctas, pdl, 0, false, false, false, false, tokens16});
      const Compare cmp = compare(download(gpu(), yd.view), oracle(c, x, m));
      EXPECT_EQ(cmp.nans, 0);
      EXPECT_LT(cmp.rel_l2, 1e-4) << name(c, m, true);
    }
  }
}

// Every compiled schedule of the GEMV (batch 2 / 3 CTAs per SM, wide, sum_x, f16_x; pipelined 4 x 3, 4 x 2, 8 x 2,
// persistent)
// against the oracle, directly through launch_quant_gemv: shapes with a partial last tile (n 33, 4097), a
// partial last step (k 576), warps without steps (k 192: 2 int4 steps for 8 warps), long rows (k 14336) and
// more tiles than a persistent grid has CTAs (n 4097 on a small grid is not forced: the H200 has 132 SMs, so
// n 70000 = 4375 tiles loops ~11-17 times per CTA).
TEST(QuantLinear, GemvSchedulesMatchCpuOracle) {
  std::mt19937 rng(23);
  const std::vector<cuda::QuantGemvConfig> configs = {{2, true, 0, false, false},
                                                      {3, true, 4, false, false},
                                                      {2, false, 4, false, false},
                                                      {2, true, 8, false, false},
                                                      {3, false, 4, true, false},
                                                      {2, true, 4, true, false},
                                                      {2, true, 8, true, false},
                                                      {2, true, 0, false, true},
                                                      {2, false, 0, false, true},
                                                      {3, true, 0, false, false},
                                                      {2, true, 0, false, false, true},
                                                      {3, false, 0, false, false, true},
                                                      {2, true, 0, false, true, true},
                                                      {2, true, 0, false, false, false, true},
                                                      {3, true, 0, false, false, false, true},
                                                      {2, false, 0, false, true, false, true},
                                                      {2, true, 0, false, false, false, false, true},
                                                      {2, false, 0, false, true, false, false, true}};
  struct Case {
    quant::WeightFormat f;
    int64_t n, k;
  };
  const std::vector<Case> cases = {
      {quant::IntGroupFormat{4, 128, false}, 33, 576},
      {quant::IntGroupFormat{4, 128, true}, 4097, 1024},
      {quant::IntGroupFormat{4, 32, true}, 70, 192},
      {quant::IntGroupFormat{4, 64, false}, 70000, 256},
      {quant::IntGroupFormat{4, 128, true}, 48, 14336},
      {quant::Int8ChannelFormat{}, 4097, 576},
      {quant::Int8ChannelFormat{}, 70000, 128},
      {quant::IntGroupFormat{8, 64, true}, 130, 4224},
      {quant::IntGroupFormat{8, 32, false}, 9, 192},
      {quant::IntGroupFormat{8, 16, true}, 130, 1040},
      // The tail of k inside a step with scales after the MMA (session 39's audit): int4 g128 at k % 128 = 32
      // / 96, int8 groups of 64 / 128 and per channel at k % 64 != 0.
      {quant::IntGroupFormat{4, 128, true}, 33, 160},
      {quant::IntGroupFormat{4, 128, false}, 33, 4192},
      {quant::IntGroupFormat{8, 64, true}, 33, 1040},
      {quant::IntGroupFormat{8, 128, false}, 33, 1072},
      {quant::Int8ChannelFormat{}, 33, 1040}};
  for (const Case& cs : cases) {
    QuantCase c = make_case(cs.f, cs.n, cs.k, cs.n % 2 == 0, false, rng);
    const cuda::QuantWeight q = gpu().quant_weight(c.lw);
    const double tol = folded(cs.f) ? 1e-2 : 1e-4;
    for (size_t ci = 0; ci < configs.size(); ++ci) {
      if (configs[ci].sum_x && folded(cs.f)) continue;  // sum_x: unfolded scales only
      if (configs[ci].f16_x && (folded(cs.f) || q.bits != 8)) continue;  // f16_x: unfolded int8 only
      if (configs[ci].tokens16 && q.bits != 8) continue;                 // tokens16: int8 only
      const int64_t m = std::vector<int64_t>{1, 5, 8, 3, 11, 1, 2, 1, 13, 4, 1, 7, 12, 1, 6, 9, 16, 10}[ci];
      const std::vector<float> x = random_bf16(static_cast<size_t>(m * c.k), rng);
      auto xd = gpu().upload(host_view(x, Shape{m, c.k}), DType::kBF16);
      auto yd = gpu().allocate(DType::kF32, Shape{m, c.n});
      poison(yd.view);
      cuda::launch_quant_gemv({static_cast<const __nv_bfloat16*>(xd.view.data), q,
                               c.lw.bias.empty() ? nullptr : static_cast<const __nv_bfloat16*>(c.lw.bias.data),
                               yd.view.data, true, static_cast<int>(m)},
                              gpu().stream(), configs[ci]);
      const Compare cmp = compare(download(gpu(), yd.view), oracle(c, x, m));
      const std::string what = name(c, m, true) + " " + cuda::to_string(configs[ci]);
      EXPECT_EQ(cmp.nans, 0) << what << ": unwritten outputs";
      EXPECT_LT(cmp.rel_l2, tol) << what;
    }
  }
}

// The CUDA-core GEMV (quant_dot_gemv.h) in every compiled schedule against the oracle, directly through
// launch_dot_gemv: m 1..4, int4 groups 32 / 64 / 128 / 256 symmetric and with zero points, int8 per channel and
// per group 64 / 128, a partial last row group (n 1, 7, 33, 4097), rows shorter than a warp's chunks (k 16, 32,
// 192), a chunk count no batch divides (k 576, 4224, 14336), bias, bf16 and f32 out. Its products and 32-column sums are f16
// (quant_dot_gemv.h Numerics): f32 out within 3e-3 relative L2 (bf16 output rounding alone is ~1e-3; a wrong
// nibble, pairing or scale is O(1)), bf16 out 1e-2; n = 1 measured against sum |x| |w| (one output may cancel).
TEST(QuantLinear, DotGemvSchedulesMatchCpuOracle) {
  std::mt19937 rng(41);
  int count = 0;
  const cuda::DotGemvConfig* configs = cuda::dot_gemv_configs(&count);
  ASSERT_GE(count, 2);
  struct Case {
    quant::WeightFormat f;
    int64_t n, k;
  };
  const std::vector<Case> cases = {{quant::IntGroupFormat{4, 128, false}, 33, 576},
                                   {quant::IntGroupFormat{4, 128, true}, 4097, 1024},
                                   {quant::IntGroupFormat{4, 32, true}, 70, 192},
                                   {quant::IntGroupFormat{4, 32, false}, 7, 32},
                                   {quant::IntGroupFormat{4, 64, false}, 1, 4224},
                                   {quant::IntGroupFormat{4, 256, true}, 130, 4224},
                                   {quant::IntGroupFormat{4, 128, true}, 48, 14336},
                                   {quant::Int8ChannelFormat{}, 33, 576},
                                   {quant::Int8ChannelFormat{}, 4097, 1024},
                                   {quant::Int8ChannelFormat{}, 7, 16},
                                   {quant::Int8ChannelFormat{}, 40, 14336},
                                   {quant::IntGroupFormat{8, 128, true}, 130, 4224},
                                   {quant::IntGroupFormat{8, 64, false}, 1, 192},
                                   {quant::IntGroupFormat{8, 16, false}, 33, 576},
                                   // The tail of k inside a chunk group (session 39's audit).
                                   {quant::IntGroupFormat{4, 128, true}, 33, 160},
                                   {quant::IntGroupFormat{8, 64, true}, 33, 1040},
                                   {quant::Int8ChannelFormat{}, 33, 1040}};
  int run = 0;
  double worst4[2] = {0, 0}, worst8[2] = {0, 0};  // [bf16 out, f32 out]
  for (const Case& cs : cases) {
    QuantCase c = make_case(cs.f, cs.n, cs.k, cs.n % 2 == 0, false, rng);
    const cuda::QuantWeight q = gpu().quant_weight(c.lw);
    for (int ci = 0; ci < count; ++ci)
      for (int64_t m = 1; m <= 4; ++m) {
        ASSERT_TRUE(cuda::dot_gemv_supports(q, static_cast<int>(m))) << cuda::describe(q);
        cuda::DotGemvConfig config = configs[ci];
        config.pdl = (ci + m) % 2 == 0;
        if (!cuda::dot_gemv_config_fits(q, static_cast<int>(m), config)) continue;  // smem_x: m * k * 2 > 48 KB
        const bool f32_out = (run++ + ci) % 2 == 0;
        const std::vector<float> x = random_bf16(static_cast<size_t>(m * c.k), rng);
        auto xd = gpu().upload(host_view(x, Shape{m, c.k}), DType::kBF16);
        auto yd = gpu().allocate(f32_out ? DType::kF32 : DType::kBF16, Shape{m, c.n});
        poison(yd.view);
        cuda::launch_dot_gemv({static_cast<const __nv_bfloat16*>(xd.view.data), q,
                               c.lw.bias.empty() ? nullptr : static_cast<const __nv_bfloat16*>(c.lw.bias.data),
                               yd.view.data, f32_out, static_cast<int>(m)},
                              gpu().stream(), config);
        const std::vector<float> got = download(gpu(), yd.view), ref = oracle(c, x, m);
        const std::string what = name(c, m, f32_out) + " " + cuda::to_string(config);
        Compare cmp = compare(got, ref);
        EXPECT_EQ(cmp.nans, 0) << what << ": unwritten outputs";
        if (c.n == 1) {
          std::vector<float> w(static_cast<size_t>(c.k));
          quant::dequantize_matrix(c.host(), w.data());
          double err = 0, mag = 0;
          for (int64_t t = 0; t < m; ++t) {
            double a = 0;
            for (int64_t i = 0; i < c.k; ++i) a += std::abs(static_cast<double>(x[t * c.k + i]) * w[i]);
            const double d = static_cast<double>(got[t]) - ref[t];
            err += d * d;
            mag += a * a;
          }
          cmp.rel_l2 = std::sqrt(err / mag);
          // bf16 out: its rounding alone is up to 2^-8 of |y| <= sum |x w| (gemv16-2 measured 1.4e-3 on the FP8
          // twin of this case); f32 out: the f16 chunk sums only.
          EXPECT_LT(cmp.rel_l2, f32_out ? 1e-3 : 4e-3) << what;
        } else {
          EXPECT_LT(cmp.rel_l2, f32_out ? 3e-3 : 1e-2) << what;
          double& worst = (q.bits == 4 ? worst4 : worst8)[f32_out ? 1 : 0];
          worst = std::max(worst, cmp.rel_l2);
        }
      }
  }
  std::printf("[ dot   ] worst relative L2 vs the oracle: int4 bf16 out %.3g, f32 out %.3g; int8 bf16 %.3g, f32 %.3g\n",
              worst4[0], worst4[1], worst8[0], worst8[1]);
  // What it does not take: g_idx, m 5, a group that is not a power-of-two number of 16-byte chunks.
  QuantCase c8 = make_case(quant::IntGroupFormat{8, 48, false}, 16, 192, false, false, rng);
  EXPECT_FALSE(cuda::dot_gemv_supports(gpu().quant_weight(c8.lw), 1));
  QuantCase ca = make_case(quant::IntGroupFormat{4, 128, false}, 16, 256, false, true, rng);
  EXPECT_FALSE(cuda::dot_gemv_supports(gpu().quant_weight(ca.lw), 1));
  QuantCase c4 = make_case(quant::IntGroupFormat{4, 96, false}, 16, 192, false, false, rng);
  EXPECT_FALSE(cuda::dot_gemv_supports(gpu().quant_weight(c4.lw), 1));
  QuantCase cg = make_case(quant::IntGroupFormat{4, 128, false}, 16, 256, false, false, rng);
  EXPECT_TRUE(cuda::dot_gemv_supports(gpu().quant_weight(cg.lw), 4));
  EXPECT_FALSE(cuda::dot_gemv_supports(gpu().quant_weight(cg.lw), 5));
}

// The tensor-core int4 decode GEMV (int4_decode_gemv.h, linear()'s default for int4 at m <= 16) against the
// oracle, directly through launch_int4_decode_gemv in each schedule (direct_x included) at m = 1 and at one
// of m 2..16 (one or two tiles of tokens, partial tiles), with and without PDL: groups 128 / 256 / 512
// (several per row: k 1024 .. 65536) and one group over all of k (k 32, 256, 576, 4096), symmetric and with
// zero points; a partial last row tile (n 1, 7, 17, 33, 4097), a partial last step and warps without steps (k
// 32, 192, 576), rows of several batches per warp (k 4224, 14336), rows long enough that x needs the
// shared-memory opt-in (k 28672: 56 KB; k 65536, the longest taken: 128 KB), many tiles (n 70000). Its sums
// are f32 (products of f16 values, exact): f32 out within 1e-4 relative L2, bf16 out within bf16's rounding.
// Groups of 32 / 64 (GPTQ g32 / g64, GGUF Q4 blocks) fold the scale into bf16 weights as the mma GEMV does
// (one bf16 rounding per weight, 1e-2 against the oracle), and equal the mma GEMV's f32 result up to
// summation order (1e-5): the same folded weights and bf16 x. Mins (GGUF Q4_1 repacked; groups of 32 / 64):
// f16 weights, one rounding, 2e-3 against the oracle with f32 out.
TEST(QuantLinear, Int4DecodeGemvMatchesCpuOracle) {
  std::mt19937 rng(43);
  struct Case {
    int bits, group;
    bool zeros;
    int64_t n, k;
    bool mins = false;  // GGUF Q4_1's form (f16 weights in the kernel)
  };
  const std::vector<Case> cases = {
      {4, 128, false, 33, 576},
      {4, 128, true, 4097, 1024},
      {4, 128, true, 70, 192},
      {4, 32, false, 7, 32},
      {4, 128, false, 1, 4224},
      {4, 256, true, 130, 4224},
      {4, 128, true, 48, 14336},
      {4, 128, false, 40, 28672},
      {4, 512, true, 70000, 256},
      {4, 576, false, 9, 576},
      {4, 4096, true, 300, 4096},
      {4, 128, false, 6144, 4096},
      {4, 512, true, 200, 3072},
      {4, 256, false, 17, 65536},
      {4, 32, false, 33, 4096},
      {4, 32, true, 70, 576},
      {4, 64, true, 4097, 1024},
      {4, 64, false, 48, 14336},
      {4, 32, true, 17, 4128},
      {4, 32, false, 6144, 4096},
      {4, 64, false, 9, 192},
      {4, 32, false, 33, 576, true},
      {4, 64, false, 4097, 1024, true},
      {4, 32, false, 6144, 4096, true},
      {4, 32, false, 17, 4128, true},
      // Scales after the MMA with 1 or 3 lanes' runs past k (k % 128 = 32 / 96): session 39's audit.
      {4, 128, false, 33, 160},
      {4, 128, true, 33, 4192},
      {4, 256, false, 33, 4192}};
  // Rows of x besides 1: one or two tiles of 8 tokens, partial ones included, in turn per case and schedule.
  const int kRows[] = {2, 3, 5, 8, 9, 12, 16};
  int run = 0;
  for (const Case& cs : cases) {
    QuantCase c = make_case(quant::IntGroupFormat{cs.bits, cs.group, cs.zeros, cs.mins}, cs.n, cs.k,
                            cs.n % 2 == 0, false, rng);
    const cuda::QuantWeight q = gpu().quant_weight(c.lw);
    ASSERT_TRUE(cuda::int4_decode_gemv_supports(q)) << cuda::describe(q);
    for (const cuda::Int4GemvSchedule sched :
         {cuda::Int4GemvSchedule{8, false}, cuda::Int4GemvSchedule{8, true}, cuda::Int4GemvSchedule{4, false},
          cuda::Int4GemvSchedule{4, true}, cuda::Int4GemvSchedule{8, false, true}})
      for (const int m : {1, kRows[run % 7]}) {
        const bool pdl = run % 3 != 0;
        const bool f32_out = c.n == 1 || (run++ % 2 == 0);
        const std::vector<float> x = random_bf16(static_cast<size_t>(m) * c.k, rng);
        auto xd = gpu().upload(host_view(x, Shape{m, c.k}), DType::kBF16);
        auto yd = gpu().allocate(f32_out ? DType::kF32 : DType::kBF16, Shape{m, c.n});
        poison(yd.view);
        const auto* bias = c.lw.bias.empty() ? nullptr : static_cast<const __nv_bfloat16*>(c.lw.bias.data);
        cuda::launch_int4_decode_gemv(
            {static_cast<const __nv_bfloat16*>(xd.view.data), q, bias, yd.view.data, f32_out, m},
            gpu().stream(), pdl, sched);
        const Compare cmp = compare(download(gpu(), yd.view), oracle(c, x, m));
        const std::string what = name(c, m, f32_out) + " " + cuda::to_string(sched) + (pdl ? " pdl" : "");
        EXPECT_EQ(cmp.nans, 0) << what << ": unwritten outputs";
        const bool fold = cs.group < 128 && cs.group < cs.k;
        // mins: the weights rounded once to f16 (~2e-4 relative), x through f16
        EXPECT_LT(cmp.rel_l2, !f32_out ? 1e-2 : cs.mins ? 2e-3 : fold ? 1e-2 : 1e-4) << what;
        if (fold && f32_out && !cs.mins) {  // the mma GEMV on the same x: the same folded weights
          auto ym = gpu().allocate(DType::kF32, Shape{m, c.n});
          cuda::launch_quant_gemv(
              {static_cast<const __nv_bfloat16*>(xd.view.data), q, bias, ym.view.data, true, m},
              gpu().stream());
          const Compare cm = compare(download(gpu(), yd.view), download(gpu(), ym.view));
          EXPECT_LT(cm.rel_l2, 1e-5) << what << " vs the mma GEMV";
        }
      }
  }
  // What it does not take: g_idx, groups that are not a power of two (below k), int8, k % 32 != 0.
  QuantCase ca = make_case(quant::IntGroupFormat{4, 128, false}, 16, 256, false, true, rng);
  EXPECT_FALSE(cuda::int4_decode_gemv_supports(gpu().quant_weight(ca.lw)));
  for (const int group : {96, 384}) {
    QuantCase cg = make_case(quant::IntGroupFormat{4, group, false}, 16, 768, false, false, rng);
    EXPECT_FALSE(cuda::int4_decode_gemv_supports(gpu().quant_weight(cg.lw))) << group;
  }
  QuantCase c8 = make_case(quant::IntGroupFormat{8, 128, false}, 16, 256, false, false, rng);
  EXPECT_FALSE(cuda::int4_decode_gemv_supports(gpu().quant_weight(c8.lw)));
  QuantCase c48 = make_case(quant::IntGroupFormat{4, 48, false}, 16, 48, false, false, rng);
  EXPECT_FALSE(cuda::int4_decode_gemv_supports(gpu().quant_weight(c48.lw)));
}

// The FP8 GEMV alone (launch_fp8_gemv) in each pipelined schedule, on e4m3 x and weights made on the host: against
// f64 dot products of the decoded values times both scales (the products are exact, so f32 accumulation
// should land near 1e-6).
TEST(QuantLinear, Fp8GemvSchedulesMatchReference) {
  std::mt19937 rng(37);
  std::uniform_int_distribution<int> byte(0, 255);
  auto code = [&] {
    uint8_t b = static_cast<uint8_t>(byte(rng));
    if ((b & 0x7f) == 0x7f) b ^= 1;  // no NaN codes
    return b;
  };
  std::vector<double> decoded(256);
  for (int b = 0; b < 256; ++b) decoded[static_cast<size_t>(b)] = to_float(fp8_e4m3{static_cast<uint8_t>(b)});
  const std::vector<cuda::QuantGemvConfig> configs = {
      {3, true, 4, false},
      {2, false, 4, false},
      {2, true, 8, false},
      {2, true, 8, true},
      {3, true, 4, true},
      {2, true, 8, false, false, false, false, true},  // 16 rows of x per launch
      {2, false, 4, true, false, false, false, true}};
  struct Case {
    int n, k;
    bool per_channel;
  };
  const std::vector<Case> cases = {{33, 576, true}, {4097, 1024, false}, {48, 14336, true}, {70000, 128, true},
                                   {7, 16, false}};
  for (const Case& cs : cases) {
    std::vector<uint8_t> w(static_cast<size_t>(cs.n) * cs.k);
    for (auto& b : w) b = code();
    std::vector<float> ws(cs.per_channel ? cs.n : 1);
    for (auto& v : ws) v = std::uniform_real_distribution<float>(0.5f, 1.5f)(rng) / std::sqrt(float(cs.k));
    std::vector<float> bias = random_bf16(static_cast<size_t>(cs.n), rng, 0.5f);
    auto wd = gpu().upload(raw_view(w, DType::kFP8E4M3, Shape{cs.n, cs.k}), DType::kFP8E4M3);
    auto wsd = gpu().upload(raw_view(ws, DType::kF32, Shape{static_cast<int64_t>(ws.size())}), DType::kF32);
    auto bd = gpu().upload(host_view(bias, Shape{cs.n}), DType::kBF16);
    for (size_t ci = 0; ci < configs.size(); ++ci) {
      const int m = std::vector<int>{1, 8, 3, 13, 2, 16, 11}[ci];
      std::vector<uint8_t> xq(static_cast<size_t>(m) * cs.k);
      for (auto& b : xq) b = code();
      std::vector<float> xs(static_cast<size_t>(m));
      for (auto& v : xs) v = std::uniform_real_distribution<float>(0.5f, 1.5f)(rng) / 448.0f;
      auto xqd = gpu().upload(raw_view(xq, DType::kFP8E4M3, Shape{m, cs.k}), DType::kFP8E4M3);
      auto xsd = gpu().upload(raw_view(xs, DType::kF32, Shape{m}), DType::kF32);
      auto yd = gpu().allocate(DType::kF32, Shape{m, cs.n});
      poison(yd.view);
      const bool with_bias = ci % 2 == 0;
      cuda::launch_fp8_gemv({static_cast<const uint8_t*>(xqd.view.data), static_cast<const float*>(xsd.view.data),
                             static_cast<const uint8_t*>(wd.view.data), static_cast<const float*>(wsd.view.data),
                             cs.per_channel, with_bias ? static_cast<const __nv_bfloat16*>(bd.view.data) : nullptr,
                             yd.view.data, true, m, cs.n, cs.k},
                            gpu().stream(), configs[ci]);
      std::vector<float> ref(static_cast<size_t>(m) * cs.n);
      for (int t = 0; t < m; ++t)
        for (int j = 0; j < cs.n; ++j) {
          double acc = 0;
          for (int i = 0; i < cs.k; ++i)
            acc += decoded[xq[static_cast<size_t>(t) * cs.k + i]] * decoded[w[static_cast<size_t>(j) * cs.k + i]];
          acc *= static_cast<double>(xs[t]) * ws[cs.per_channel ? j : 0];
          if (with_bias) acc += bias[j];
          ref[static_cast<size_t>(t) * cs.n + j] = static_cast<float>(acc);
        }
      const Compare cmp = compare(download(gpu(), yd.view), ref);
      const std::string what = "fp8 gemv n=" + std::to_string(cs.n) + " k=" + std::to_string(cs.k) + " m=" +
                               std::to_string(m) + (cs.per_channel ? " channel " : " tensor ") + cuda::to_string(configs[ci]);
      EXPECT_EQ(cmp.nans, 0) << what << ": unwritten outputs";
      EXPECT_LT(cmp.rel_l2, 1e-5) << what;
    }
  }
}

// The CUDA-core FP8 GEMV (quant_dot_gemv.h launch_fp8_dot_gemv) in every compiled schedule, m 1..4, on e4m3 codes
// over the whole range (|x w| up to 448 * 448: the 2^-8 pre-scale keeps the f16 chunk sums finite) against f64
// dot products of the decoded values times both scales: f16 sums over 8 products, so 3e-3 relative L2 (n = 1:
// against sum |x w|, 1e-3 for f32 out and 4e-3 for bf16 out, whose rounding alone is up to 2^-8).
TEST(QuantLinear, Fp8DotGemvSchedulesMatchReference) {
  std::mt19937 rng(43);
  std::uniform_int_distribution<int> byte(0, 255);
  auto code = [&] {
    uint8_t b = static_cast<uint8_t>(byte(rng));
    if ((b & 0x7f) == 0x7f) b ^= 1;  // no NaN codes
    return b;
  };
  std::vector<double> decoded(256);
  for (int b = 0; b < 256; ++b) decoded[static_cast<size_t>(b)] = to_float(fp8_e4m3{static_cast<uint8_t>(b)});
  int count = 0;
  const cuda::DotGemvConfig* configs = cuda::dot_gemv_configs(&count);
  struct Case {
    int n, k;
    bool per_channel;
  };
  const std::vector<Case> cases = {{33, 576, true}, {4097, 1024, false}, {40, 14336, true}, {7, 16, false}, {1, 192, true}};
  int run = 0;
  double worst[2] = {0, 0};  // [bf16 out, f32 out]
  for (const Case& cs : cases) {
    std::vector<uint8_t> w(static_cast<size_t>(cs.n) * cs.k);
    for (auto& b : w) b = code();
    std::vector<float> ws(cs.per_channel ? cs.n : 1);
    for (auto& v : ws) v = std::uniform_real_distribution<float>(0.5f, 1.5f)(rng) / std::sqrt(float(cs.k));
    std::vector<float> bias = random_bf16(static_cast<size_t>(cs.n), rng, 0.5f);
    auto wd = gpu().upload(raw_view(w, DType::kFP8E4M3, Shape{cs.n, cs.k}), DType::kFP8E4M3);
    auto wsd = gpu().upload(raw_view(ws, DType::kF32, Shape{static_cast<int64_t>(ws.size())}), DType::kF32);
    auto bd = gpu().upload(host_view(bias, Shape{cs.n}), DType::kBF16);
    for (int ci = 0; ci < count; ++ci)
      for (int m = 1; m <= 4; ++m) {
        ASSERT_TRUE(cuda::fp8_dot_gemv_supports(cs.n, cs.k, m));
        cuda::DotGemvConfig config = configs[ci];
        config.pdl = (ci + m) % 2 == 1;
        if (config.smem_x && static_cast<size_t>(m) * cs.k * 2 > 48 * 1024) continue;
        std::vector<uint8_t> xq(static_cast<size_t>(m) * cs.k);
        for (auto& b : xq) b = code();
        std::vector<float> xs(static_cast<size_t>(m));
        for (auto& v : xs) v = std::uniform_real_distribution<float>(0.5f, 1.5f)(rng) / 448.0f;
        auto xqd = gpu().upload(raw_view(xq, DType::kFP8E4M3, Shape{m, cs.k}), DType::kFP8E4M3);
        auto xsd = gpu().upload(raw_view(xs, DType::kF32, Shape{m}), DType::kF32);
        const bool f32_out = run++ % 2 == 0, with_bias = (ci + m) % 3 == 0;
        auto yd = gpu().allocate(f32_out ? DType::kF32 : DType::kBF16, Shape{m, cs.n});
        poison(yd.view);
        cuda::launch_fp8_dot_gemv({static_cast<const uint8_t*>(xqd.view.data), static_cast<const float*>(xsd.view.data),
                                   static_cast<const uint8_t*>(wd.view.data), static_cast<const float*>(wsd.view.data),
                                   cs.per_channel, with_bias ? static_cast<const __nv_bfloat16*>(bd.view.data) : nullptr,
                                   yd.view.data, f32_out, m, cs.n, cs.k},
                                  gpu().stream(), config);
        std::vector<float> ref(static_cast<size_t>(m) * cs.n);
        double mag = 0;
        for (int t = 0; t < m; ++t)
          for (int j = 0; j < cs.n; ++j) {
            double acc = 0, a = 0;
            for (int i = 0; i < cs.k; ++i) {
              const double p = decoded[xq[static_cast<size_t>(t) * cs.k + i]] * decoded[w[static_cast<size_t>(j) * cs.k + i]];
              acc += p;
              a += std::abs(p);
            }
            const double sc = static_cast<double>(xs[t]) * ws[cs.per_channel ? j : 0];
            acc *= sc;
            if (with_bias) acc += bias[j];
            mag += (a * sc) * (a * sc);
            ref[static_cast<size_t>(t) * cs.n + j] = static_cast<float>(acc);
          }
        const std::vector<float> got = download(gpu(), yd.view);
        Compare cmp = compare(got, ref);
        const std::string what = "fp8 dot gemv n=" + std::to_string(cs.n) + " k=" + std::to_string(cs.k) + " m=" +
                                 std::to_string(m) + (cs.per_channel ? " channel " : " tensor ") +
                                 (f32_out ? "f32 " : "bf16 ") + cuda::to_string(config);
        EXPECT_EQ(cmp.nans, 0) << what << ": unwritten outputs";
        if (cs.n == 1) {  // one output may cancel: against sum |x w| (as the int test)
          double err = 0;
          for (size_t i = 0; i < got.size(); ++i) err += (static_cast<double>(got[i]) - ref[i]) * (got[i] - ref[i]);
          // bf16 out: its rounding alone is up to 2^-8 of |y| <= sum |x w| (gemv16-2: 1.4e-3 at n = 1, k = 192,
          // m = 1, bf16 out); f32 out: the f16 chunk sums only.
          EXPECT_LT(std::sqrt(err / mag), f32_out ? 1e-3 : 4e-3) << what;
        } else {
          EXPECT_LT(cmp.rel_l2, f32_out ? 3e-3 : 1e-2) << what;
          worst[f32_out ? 1 : 0] = std::max(worst[f32_out ? 1 : 0], cmp.rel_l2);
        }
      }
  }
  std::printf("[ dot   ] fp8: worst relative L2 vs f64: bf16 out %.3g, f32 out %.3g\n", worst[0], worst[1]);
}

// The FP8 dot GEMV with the activation quantization fused (launch_fp8_quant_dot_gemv) against the two-kernel
// path it replaces (launch_quantize_fp8_rows, then launch_fp8_dot_gemv with the same schedule): the same bits,
// for every smem_x schedule, m 1..4, dynamic and static activation scales, bf16 and f32 out, on bf16 x with an
// outlier channel and an all-zero row (scale 0: codes 0, y = bias); then the backend's m = 1 decode row takes it.
TEST(QuantLinear, Fp8FusedQuantDotGemvEqualsQuantizeThenGemv) {
  std::mt19937 rng(47);
  std::uniform_int_distribution<int> byte(0, 255);
  int count = 0;
  const cuda::DotGemvConfig* configs = cuda::dot_gemv_configs(&count);
  struct Case {
    int n, k;
    bool per_channel, static_scale;
  };
  const std::vector<Case> cases = {{33, 576, true, false},  {4097, 1024, false, false}, {40, 14336, true, false},
                                   {7, 16, false, true},    {1, 192, true, false},      {300, 4096, true, true}};
  int run = 0;
  for (const Case& cs : cases) {
    std::vector<uint8_t> w(static_cast<size_t>(cs.n) * cs.k);
    for (auto& b : w) {
      b = static_cast<uint8_t>(byte(rng));
      if ((b & 0x7f) == 0x7f) b ^= 1;  // no NaN codes
    }
    std::vector<float> ws(cs.per_channel ? cs.n : 1);
    for (auto& v : ws) v = std::uniform_real_distribution<float>(0.5f, 1.5f)(rng) / std::sqrt(float(cs.k));
    const std::vector<float> input_scale = {2.5f / 448.0f};  // |x| past 2.5 saturates
    std::vector<float> bias = random_bf16(static_cast<size_t>(cs.n), rng, 0.5f);
    auto wd = gpu().upload(raw_view(w, DType::kFP8E4M3, Shape{cs.n, cs.k}), DType::kFP8E4M3);
    auto wsd = gpu().upload(raw_view(ws, DType::kF32, Shape{static_cast<int64_t>(ws.size())}), DType::kF32);
    auto isd = gpu().upload(raw_view(input_scale, DType::kF32, Shape{1}), DType::kF32);
    auto bd = gpu().upload(host_view(bias, Shape{cs.n}), DType::kBF16);
    const float* in_scale = cs.static_scale ? static_cast<const float*>(isd.view.data) : nullptr;
    for (int m = 1; m <= 4; ++m) {
      std::vector<float> x = random_bf16(static_cast<size_t>(m) * cs.k, rng);
      for (int t = 0; t < m; ++t) x[static_cast<size_t>(t) * cs.k + (7 * t + 3) % cs.k] = 40.0f * (t + 1);  // outliers
      if (m == 3) std::fill(x.begin() + cs.k, x.begin() + 2 * cs.k, 0.0f);  // row 1: all zero
      auto xd = gpu().upload(host_view(x, Shape{m, cs.k}), DType::kBF16);
      auto xq = gpu().allocate(DType::kFP8E4M3, Shape{m, cs.k});
      auto xs = gpu().allocate(DType::kF32, Shape{m});
      cuda::launch_quantize_fp8_rows(static_cast<const __nv_bfloat16*>(xd.view.data), m, cs.k, in_scale,
                                     static_cast<uint8_t*>(xq.view.data), static_cast<float*>(xs.view.data), gpu().stream());
      for (int ci = 0; ci < count; ++ci) {
        cuda::DotGemvConfig config = configs[ci];
        if (!config.smem_x) {
          EXPECT_FALSE(cuda::fp8_quant_dot_gemv_supports(cs.n, cs.k, m, config)) << cuda::to_string(config);
          continue;
        }
        if (static_cast<size_t>(m) * cs.k * 2 > 48 * 1024) {
          EXPECT_FALSE(cuda::fp8_quant_dot_gemv_supports(cs.n, cs.k, m, config));
          continue;
        }
        ASSERT_TRUE(cuda::fp8_quant_dot_gemv_supports(cs.n, cs.k, m, config));
        config.pdl = (ci + m) % 2 == 1;
        const bool f32_out = run++ % 2 == 0, with_bias = (ci + m) % 3 != 1;
        const auto* b = with_bias ? static_cast<const __nv_bfloat16*>(bd.view.data) : nullptr;
        auto y1 = gpu().allocate(f32_out ? DType::kF32 : DType::kBF16, Shape{m, cs.n});
        auto y2 = gpu().allocate(f32_out ? DType::kF32 : DType::kBF16, Shape{m, cs.n});
        poison(y1.view);
        poison(y2.view);
        cuda::launch_fp8_dot_gemv({static_cast<const uint8_t*>(xq.view.data), static_cast<const float*>(xs.view.data),
                                   static_cast<const uint8_t*>(wd.view.data), static_cast<const float*>(wsd.view.data),
                                   cs.per_channel, b, y1.view.data, f32_out, m, cs.n, cs.k},
                                  gpu().stream(), config);
        cuda::launch_fp8_quant_dot_gemv({static_cast<const __nv_bfloat16*>(xd.view.data), in_scale,
                                         static_cast<const uint8_t*>(wd.view.data), static_cast<const float*>(wsd.view.data),
                                         cs.per_channel, b, y2.view.data, f32_out, m, cs.n, cs.k},
                                        gpu().stream(), config);
        const std::vector<float> a = download(gpu(), y1.view), c = download(gpu(), y2.view);
        const std::string what = "fused fp8 dot gemv n=" + std::to_string(cs.n) + " k=" + std::to_string(cs.k) +
                                 " m=" + std::to_string(m) + (cs.static_scale ? " static" : " dynamic") +
                                 (f32_out ? " f32 " : " bf16 ") + cuda::to_string(config);
        int differ = 0, nans = 0;
        for (size_t i = 0; i < a.size(); ++i) {
          differ += std::memcmp(&a[i], &c[i], sizeof(float)) != 0 ? 1 : 0;
          nans += std::isnan(c[i]) ? 1 : 0;
        }
        EXPECT_EQ(nans, 0) << what << ": unwritten outputs";
        EXPECT_EQ(differ, 0) << what << ": outputs differ from quantize + dot GEMV";
        if (m == 3) {
          for (int j = 0; j < cs.n; ++j) {  // the zero row: exactly the (bf16-valued) bias, or 0
            EXPECT_EQ(c[static_cast<size_t>(cs.n + j)], with_bias ? bias[static_cast<size_t>(j)] : 0.0f)
                << what << " zero row, output " << j;
          }
        }
      }
    }
  }
  // The Llama-3.1-8B shapes take the default rule's schedule at m = 1.
  for (const auto& [n, k] : std::vector<std::pair<int, int>>{{6144, 4096}, {4096, 4096}, {28672, 4096}, {4096, 14336}})
    EXPECT_TRUE(cuda::fp8_quant_dot_gemv_supports(n, k, 1, cuda::fp8_quant_dot_gemv_default_config(n, k, true)))
        << n << " x " << k;
}

// A weight and the rows linear() runs it at, for the tests of the paths past the GEMV; `tiled`: whether the
// tiled GEMM takes it (when enabled).
struct PathCase {
  quant::WeightFormat f;
  int64_t n, k;
  bool act_order;
  std::vector<int64_t> ms;
  bool tiled = false;
};

TEST(QuantLinear, DequantizePathMatchesCpuOracle) {
  std::mt19937 rng(13);
  const std::vector<PathCase> cases = {
      {quant::IntGroupFormat{4, 128, true}, 257, 512, false, {17, 33, 61}},
      {quant::IntGroupFormat{4, 32, false}, 64, 256, false, {20}},
      {quant::IntGroupFormat{8, 64, true}, 100, 384, false, {33}},
      {quant::Int8ChannelFormat{}, 129, 256, false, {18, 40}},
      {quant::IntGroupFormat{4, 128, true}, 96, 512, true, {1, 4, 20}},  // act-order: always this path
      {quant::IntGroupFormat{8, 128, false}, 31, 384, true, {1, 9}},
      {quant::IntGroupFormat{4, 128, false},
       37,
       520,
       false,
       {1, 17}},                                                     // k % 8 == 0, not % 128: vector dequant
      {quant::IntGroupFormat{4, 16, true}, 50, 256, false, {1, 3}},  // group 16: no GEMV
      {quant::IntGroupFormat{4, 32, true}, 40, 80, false, {1, 2}},   // k % 32 != 0
      {quant::Int8ChannelFormat{}, 5, 72, false, {1}},               // k % 64 != 0
  };
  for (const PathCase& cs : cases) {
    QuantCase c = make_case(cs.f, cs.n, cs.k, true, cs.act_order, rng);
    for (int64_t m : cs.ms) {
      const int64_t before = gpu().quant_dequant_gemms();
      const std::string what = name(c, m, m % 2 == 0) + (cs.act_order ? " g_idx" : "");
      run_linear(c, m, m % 2 == 0, 1e-2, rng, what);
      EXPECT_EQ(gpu().quant_dequant_gemms(), before + 1) << what << " did not run the dequantize path";
    }
  }
}

// The tiled GEMM (wq_gemm.h) through linear() once set_wq_gemm_max_rows lets it take m > 16: int4 groups of
// 32 / 64 / 128 with and without zero points, int8 per group and per channel, n and m not multiples of the
// tiles, bias, bf16 and f32 out, against the oracle at the bf16-weight tolerance (each width is also launched
// directly, with each kernel: mma.sync, and wgmma where it applies); weights it does not take (g_idx, k % 64
// != 0) still run the dequantize path, and m <= 16 the GEMV.
TEST(QuantLinear, TiledGemmMatchesCpuOracle) {
  std::mt19937 rng(29);
  const std::vector<PathCase> cases = {
      {quant::IntGroupFormat{4, 128, true}, 257, 512, false, {17, 33, 64, 65, 130}, true},
      {quant::IntGroupFormat{4, 128, false}, 128, 256, false, {64, 200}, true},
      {quant::IntGroupFormat{4, 32, false}, 64, 256, false, {20}, true},
      {quant::IntGroupFormat{4, 64, true}, 129, 192, false, {100}, true},
      {quant::IntGroupFormat{8, 64, true}, 100, 384, false, {33}, true},
      {quant::IntGroupFormat{8, 128, false}, 300, 256, false, {70}, true},
      {quant::Int8ChannelFormat{}, 129, 256, false, {18, 40, 130}, true},
      {quant::IntGroupFormat{4, 128, true}, 1, 128, false, {19}, true},      // one output column
      {quant::IntGroupFormat{4, 64, false}, 70, 64, false, {25}, true},      // k = 64: one step
      {quant::IntGroupFormat{4, 128, false}, 130, 4096, false, {70}, true},  // long k, the 8B model's width
      {quant::IntGroupFormat{4, 128, true}, 96, 512, true, {20}, false},     // g_idx: the dequantize path
      {quant::IntGroupFormat{4, 32, false}, 37, 96, false, {17}, false},  // k % 64 != 0: the dequantize path
      {quant::IntGroupFormat{4, 32, false, true}, 257, 512, false, {17, 65, 130}, true},  // mins (GGUF Q4_1 /
                                                                                          // Q4_K)
      {quant::IntGroupFormat{4, 64, false, true}, 100, 256, false, {40}, true},
      {quant::IntGroupFormat{8, 16, false}, 257, 512, false, {17, 65, 130}, true},  // groups of 16 (GGUF
                                                                                    // Q6_K)
      {quant::IntGroupFormat{8, 48, false}, 64, 192, false, {20}, true},
  };
  const int saved = gpu().wq_gemm_max_rows();
  gpu().set_wq_gemm_max_rows(1024);
  for (const PathCase& cs : cases) {
    QuantCase c = make_case(cs.f, cs.n, cs.k, true, cs.act_order, rng);
    for (int64_t m : cs.ms) {
      const int64_t tiled = gpu().quant_tiled_gemms(), dequant = gpu().quant_dequant_gemms();
      const std::string what = name(c, m, m % 2 == 0) + (cs.act_order ? " g_idx" : "");
      run_linear(c, m, m % 2 == 0, 1e-2, rng, what);
      EXPECT_EQ(gpu().quant_tiled_gemms(), tiled + (cs.tiled ? 1 : 0)) << what;
      EXPECT_EQ(gpu().quant_dequant_gemms(), dequant + (cs.tiled ? 0 : 1)) << what;
    }
  }
  // Each way of cutting k launched directly with each kernel (linear() picks by shape: the cases above are
  // one (m, n) tile or a few): one range, ranges of 128 and 256 columns (the last one partial where k is not
  // a multiple), f32 out with a bias and bf16 out without one. Twice each: the split launches must leave
  // their workspace zero for the next.
  for (const int split : {0, 128, 256, 128})
    for (const bool f32 : {true, false})
      for (const auto& [f, n, k, m] : std::vector<std::tuple<quant::WeightFormat, int64_t, int64_t, int64_t>>{
               {quant::IntGroupFormat{4, 128, true}, 257, 512, 65},
               {quant::IntGroupFormat{4, 32, false}, 200, 128, 17},
               {quant::Int8ChannelFormat{}, 129, 256, 40},
               {quant::IntGroupFormat{8, 64, true}, 96, 192, 130},
               {quant::IntGroupFormat{4, 32, false, true}, 130, 256, 70},
               {quant::IntGroupFormat{8, 16, false}, 130, 256, 70},
               {quant::IntGroupFormat{8, 48, true}, 130, 192, 70},
               {quant::IntGroupFormat{4, 128, false}, 130, 576, 40},  // k % 128 == 64 (SmolLM2's 576): the
               {quant::IntGroupFormat{4, 128, true}, 70, 704, 70},    // last step half past k
               {quant::IntGroupFormat{4, 128, false}, 256, 2048,
                20}}) {  // an o projection's shape: 16 ranges
        QuantCase c = make_case(f, n, k, /*bias=*/f32, false, rng);
        const std::vector<float> x = random_bf16(static_cast<size_t>(m * k), rng);
        auto xd = gpu().upload(host_view(x, Shape{m, k}), DType::kBF16);
        for (const cuda::WqGemmKernel kernel : {cuda::WqGemmKernel::kMma, cuda::WqGemmKernel::kWgmma}) {
          if (kernel == cuda::WqGemmKernel::kWgmma && !cuda::wq_gemm_wgmma_supports(gpu().quant_weight(c.lw)))
            continue;
          auto yd = gpu().allocate(f32 ? DType::kF32 : DType::kBF16, Shape{m, n});
          poison(yd.view);
          cuda::launch_wq_gemm({static_cast<const __nv_bfloat16*>(xd.view.data), gpu().quant_weight(c.lw),
                                c.bias.empty() ? nullptr : static_cast<const __nv_bfloat16*>(c.lw.bias.data),
                                yd.view.data, f32, static_cast<int>(m)},
                               gpu().wq_gemm_workspace(), gpu().stream(),
                               split == 0 ? static_cast<int>(k) : split, kernel);
          const std::vector<float> got = download(gpu(), yd.view);
          const Compare cmp = compare(got, oracle(c, x, m));
          const std::string what = name(c, m, f32) + " k ranges of " +
                                   std::to_string(split == 0 ? k : split) +
                                   (kernel == cuda::WqGemmKernel::kWgmma ? " (wgmma)" : " (mma.sync)");
          EXPECT_EQ(cmp.nans, 0) << what << ": unwritten outputs";
          EXPECT_LT(cmp.rel_l2, 1e-2) << what;
          if (!f32) continue;
          // Only the summation order parts the kernel from the f64 product of its weights, so a wrong
          // fragment, scale or column mapping cannot hide in the 1e-2: with scaled sums those are the exact
          // weights s (q
          // - z) (the oracle's, in f32 sums), else launch_dequantize_weight's bf16 values (checked bit for
          // bit against the CPU in DequantizedWeightMatchesReference).
          const cuda::QuantWeight qw = gpu().quant_weight(c.lw);
          std::vector<float> wb(static_cast<size_t>(n * k));
          if (cuda::wq_gemm_scaled_sums(qw)) {
            quant::dequantize_matrix(c.host(), wb.data());
          } else {
            auto wd = gpu().allocate(DType::kBF16, Shape{n, k});
            cuda::launch_dequantize_weight(qw, static_cast<__nv_bfloat16*>(wd.view.data), gpu().stream());
            wb = download(gpu(), wd.view);
          }
          std::vector<float> ref(static_cast<size_t>(m * n));
          for (int64_t r = 0; r < m; ++r)
            for (int64_t j = 0; j < n; ++j) {
              double s = c.bias.empty() ? 0.0 : c.bias[static_cast<size_t>(j)];
              for (int64_t i = 0; i < k; ++i)
                s += static_cast<double>(x[static_cast<size_t>(r * k + i)]) *
                     wb[static_cast<size_t>(j * k + i)];
              ref[static_cast<size_t>(r * n + j)] = static_cast<float>(s);
            }
          EXPECT_LT(compare(got, ref).rel_l2, 1e-5)
              << what << (cuda::wq_gemm_scaled_sums(qw) ? " (scaled sums)" : "")
              << " against the f64 product of its weights";
        }
      }
  EXPECT_EQ(cuda::wq_gemm_split_cols(64, 28672, 4096, 132), 4096);   // the 8B gate_up at 64 rows: 224 tiles
  EXPECT_EQ(cuda::wq_gemm_split_cols(64, 4096, 4096, 132), 1024);    // o: 32 tiles x 4 ranges (not shorter)
  EXPECT_EQ(cuda::wq_gemm_split_cols(64, 6144, 4096, 132), 1024);    // qkv: 48 x 4
  EXPECT_EQ(cuda::wq_gemm_split_cols(64, 4096, 14336, 132), 1024);   // down: 32 x 14
  EXPECT_EQ(cuda::wq_gemm_split_cols(256, 28672, 4096, 132), 4096);  // 896 tiles: no split
  // The wgmma kernel (one CTA per SM at 64 rows of x): gate_up's 224 tiles fill the SMs; o splits as before.
  EXPECT_EQ(cuda::wq_gemm_split_cols(64, 28672, 4096, 132, cuda::WqGemmKernel::kWgmma), 4096);
  EXPECT_EQ(cuda::wq_gemm_split_cols(64, 4096, 4096, 132, cuda::WqGemmKernel::kWgmma), 1024);

  // Measured per shape and row bucket ("auto"): whichever path each bucket took, linear() still matches the
  // oracle, and exactly one of the two paths runs per call.
  {
    gpu().set_wq_gemm_max_rows(cuda::CudaBackend::kWqGemmMeasured);
    QuantCase c = make_case(quant::IntGroupFormat{4, 128, false}, 384, 1024, true, false, rng);
    gpu().reserve_quant_workspace({&c.lw}, 256);
    gpu().measure_wq_gemms({&c.lw}, 256);
    for (const int64_t m : {17, 64, 100, 256}) {
      const int64_t tiled = gpu().quant_tiled_gemms(), dequant = gpu().quant_dequant_gemms();
      const bool want_tiled = gpu().wq_gemm_for(static_cast<int>(m), 384, 1024);
      run_linear(c, m, false, 1e-2, rng, name(c, m, false) + " measured");
      EXPECT_EQ(gpu().quant_tiled_gemms(), tiled + (want_tiled ? 1 : 0)) << m;
      EXPECT_EQ(gpu().quant_dequant_gemms(), dequant + (want_tiled ? 0 : 1)) << m;
    }
    EXPECT_FALSE(gpu().wq_gemm_for(16, 384, 1024));  // the GEMV's rows
    gpu().set_wq_gemm_max_rows(1024);
  }

  // At most 16 rows the GEMV runs whatever the setting.
  QuantCase c = make_case(quant::IntGroupFormat{4, 128, false}, 64, 256, false, false, rng);
  const int64_t tiled = gpu().quant_tiled_gemms();
  run_linear(c, 16, false, 1e-2, rng, name(c, 16, false));
  EXPECT_EQ(gpu().quant_tiled_gemms(), tiled);
  gpu().set_wq_gemm_max_rows(saved);
}

TEST(QuantLinear, DequantizedWeightMatchesReference) {
  std::mt19937 rng(17);
  for (const auto& [f, act] : std::vector<std::pair<quant::WeightFormat, bool>>{
           {quant::IntGroupFormat{4, 128, true}, true}, {quant::IntGroupFormat{4, 64, false}, false},
           {quant::IntGroupFormat{8, 32, true}, false}, {quant::Int8ChannelFormat{}, false},
           {quant::IntGroupFormat{4, 4, true}, false} /* group 4: the scalar kernel */}) {
    QuantCase c = make_case(f, 45, 256, false, act, rng);
    std::vector<float> ref(static_cast<size_t>(c.n * c.k));
    quant::dequantize_matrix(c.host(), ref.data());
    auto wd = gpu().allocate(DType::kBF16, Shape{c.n, c.k});
    cuda::launch_dequantize_weight(gpu().quant_weight(c.lw), static_cast<__nv_bfloat16*>(wd.view.data),
                                   gpu().stream());
    const std::vector<float> got = download(gpu(), wd.view);
    size_t bad = 0;
    for (size_t i = 0; i < ref.size(); ++i)
      if (got[i] != to_float(to_bf16(ref[i]))) ++bad;  // exactly the f32 reference rounded to bf16
    EXPECT_EQ(bad, 0u) << quant::format_name(f) << (act ? " g_idx" : "");
  }
}

TEST(QuantLinear, GraphReplayIsBitIdentical) {
  std::mt19937 rng(19);
  // The largest weight first (grows the workspace eagerly), then a recording with both paths.
  QuantCase big = make_case(quant::IntGroupFormat{4, 128, true}, 512, 1024, true, false, rng);
  QuantCase small = make_case(quant::IntGroupFormat{8, 64, false}, 200, 512, false, false, rng);
  QuantCase act = make_case(quant::IntGroupFormat{4, 128, false}, 300, 256, true, true, rng);
  struct Run {
    QuantCase* c;
    int64_t m;
  };
  const std::vector<Run> runs = {{&big, 1}, {&big, 24}, {&small, 4}, {&act, 2}, {&small, 12}, {&small, 20}};
  std::vector<backend::DeviceTensor> xs, eager, graph;
  for (const Run& r : runs) {
    const std::vector<float> x = random_bf16(static_cast<size_t>(r.m * r.c->k), rng);
    xs.push_back(gpu().upload(host_view(x, Shape{r.m, r.c->k}), DType::kBF16));
    eager.push_back(gpu().allocate(DType::kBF16, Shape{r.m, r.c->n}));
    graph.push_back(gpu().allocate(DType::kBF16, Shape{r.m, r.c->n}));
  }
  for (size_t i = 0; i < runs.size(); ++i) gpu().linear(xs[i].view, runs[i].c->lw, eager[i].view);
  upload_trivial_step();
  gpu().begin_capture();
  for (size_t i = 0; i < runs.size(); ++i) gpu().linear(xs[i].view, runs[i].c->lw, graph[i].view);
  ASSERT_TRUE(gpu().end_capture(0x9a17));
  for (int rep = 0; rep < 2; ++rep) {
    for (auto& g : graph) poison(g.view);
    ASSERT_TRUE(gpu().replay(0x9a17));
    for (size_t i = 0; i < runs.size(); ++i)
      expect_same_bits(graph[i].view, eager[i].view, name(*runs[i].c, runs[i].m, false) + " replay " + std::to_string(rep));
  }

  // A weight larger than the workspace: the recording fails, end_capture() grows the workspace (the old
  // recording, made with the old workspace, is dropped at its next replay), the next recording succeeds.
  QuantCase huge = make_case(quant::IntGroupFormat{4, 128, true}, 1024, 2048, false, false, rng);
  const std::vector<float> x = random_bf16(static_cast<size_t>(24 * huge.k), rng);
  auto xd = gpu().upload(host_view(x, Shape{24, huge.k}), DType::kBF16);
  auto yg = gpu().allocate(DType::kBF16, Shape{24, huge.n});
  auto ye = gpu().allocate(DType::kBF16, Shape{24, huge.n});
  gpu().begin_capture();
  gpu().linear(xd.view, huge.lw, yg.view);
  EXPECT_FALSE(gpu().end_capture(0x9a18));
  EXPECT_FALSE(gpu().replay(0x9a17)) << "a recording that holds the old workspace must not replay";
  gpu().begin_capture();
  gpu().linear(xd.view, huge.lw, yg.view);
  ASSERT_TRUE(gpu().end_capture(0x9a18));
  poison(yg.view);
  ASSERT_TRUE(gpu().replay(0x9a18));
  gpu().linear(xd.view, huge.lw, ye.view);
  expect_same_bits(yg.view, ye.view, "grown workspace replay");
  gpu().clear_graphs();
}

// W8A8-FP8: activations quantized per token (or with a static scale) bit-identically to the CPU oracle's, then
// our FP8 GEMV (m <= 16) or cuBLASLt's FP8 GEMM with per-token x per-channel (or per-tensor) scales.
TEST(QuantLinear, Fp8MatchesCpuOracle) {
  std::mt19937 rng(29);
  std::uniform_int_distribution<int> byte(0, 255);
  struct Case {
    int64_t n, k;
    bool per_channel;
    quant::ActScaleMode act;
  };
  const std::vector<Case> cases = {{64, 256, true, quant::ActScaleMode::kDynamicPerToken},
                                   {1008, 4096, true, quant::ActScaleMode::kDynamicPerToken},
                                   {4096, 1024, false, quant::ActScaleMode::kDynamicPerToken},
                                   {272, 512, true, quant::ActScaleMode::kStaticPerTensor},
                                   {48, 128, false, quant::ActScaleMode::kStaticPerTensor}};
  int64_t index = 0;
  for (const Case& cs : cases) {
    const quant::W8A8Fp8Format f{cs.per_channel, cs.act};
    std::vector<uint8_t> w(static_cast<size_t>(cs.n * cs.k));
    for (auto& b : w) {
      b = static_cast<uint8_t>(byte(rng));
      if ((b & 0x7f) == 0x7f) b ^= 1;  // no NaN codes
    }
    std::vector<float> scales(static_cast<size_t>(cs.per_channel ? cs.n : 1));
    for (auto& v : scales) v = std::uniform_real_distribution<float>(0.5f, 1.5f)(rng) / 100.0f / std::sqrt(float(cs.k));
    const std::vector<float> input_scale = {3.0f / 448.0f};  // |x| past 3 saturates (N(0, 1) inputs)
    std::vector<float> bias = random_bf16(static_cast<size_t>(cs.n), rng, 0.5f);
    backend::LinearWeights lw;
    std::vector<backend::DeviceTensor> owned;
    auto keep = [&](backend::DeviceTensor t) {
      owned.push_back(t);
      return t.view;
    };
    lw.format = f;
    lw.k = cs.k;
    lw.weight = keep(gpu().upload(raw_view(w, DType::kFP8E4M3, Shape{cs.n, cs.k}), DType::kFP8E4M3));
    lw.scales = keep(gpu().upload(raw_view(scales, DType::kF32, Shape{static_cast<int64_t>(scales.size())}), DType::kF32));
    if (cs.act == quant::ActScaleMode::kStaticPerTensor)
      lw.input_scale = keep(gpu().upload(raw_view(input_scale, DType::kF32, Shape{1}), DType::kF32));
    const bool with_bias = index % 2 == 0;
    if (with_bias) lw.bias = keep(gpu().upload(host_view(bias, Shape{cs.n}), DType::kBF16));
    quant::QuantizedMatrix hm;
    hm.format = f;
    hm.n = cs.n;
    hm.k = cs.k;
    hm.weight = w.data();
    hm.scales = scales.data();
    hm.input_scale = cs.act == quant::ActScaleMode::kStaticPerTensor ? input_scale.data() : nullptr;
    for (int64_t m : {1, 3, 8, 13, 17, 128}) {
      const bool f32_out = (index + m) % 2 == 1;
      const std::vector<float> x = random_bf16(static_cast<size_t>(m * cs.k), rng);
      std::vector<float> ref(static_cast<size_t>(m * cs.n));
      quant::quantized_matmul(hm, x.data(), m, ref.data(), nullptr);
      if (with_bias)
        for (int64_t t = 0; t < m; ++t)
          for (int64_t j = 0; j < cs.n; ++j) ref[static_cast<size_t>(t * cs.n + j)] += bias[static_cast<size_t>(j)];
      auto xd = gpu().upload(host_view(x, Shape{m, cs.k}), DType::kBF16);
      auto yd = gpu().allocate(f32_out ? DType::kF32 : DType::kBF16, Shape{m, cs.n});
      poison(yd.view);
      const int64_t before = gpu().fp8_gemms(), before_gemv = gpu().fp8_gemvs();
      gpu().linear(xd.view, lw, yd.view);
      if (m <= cuda::kQuantGemvMaxRows)  // decode rows: our FP8 GEMV; else cuBLASLt's FP8 GEMM
        EXPECT_EQ(gpu().fp8_gemvs(), before_gemv + 1);
      else
        EXPECT_EQ(gpu().fp8_gemms(), before + 1);
      const Compare cmp = compare(download(gpu(), yd.view), ref);
      const std::string what = quant::format_name(f) + " n=" + std::to_string(cs.n) + " k=" + std::to_string(cs.k) +
                               " m=" + std::to_string(m) + (f32_out ? " f32" : " bf16");
      EXPECT_EQ(cmp.nans, 0) << what;
      // cuBLASLt's rows run with fast accumulation (cublaslt_fp8_gemm.cpp): 1.4e-3 measured at k = 4096.
      const double f32_bound = m <= cuda::kQuantGemvMaxRows ? 1e-3 : 3e-3;
      EXPECT_LT(cmp.rel_l2, f32_out ? f32_bound : 1e-2) << what << " (max abs " << cmp.max_abs << ")";
      if (m == 17 || m == 128) std::printf("[ fp8 ] %s: rel L2 %.2e\n", what.c_str(), cmp.rel_l2);
      // The same rows through our FP8 wgmma GEMM (set_fp8_gemm; not under XINFER_FP8_FAST_ACCUM=0, where
      // cuBLASLt runs every FP8 GEMM).
      if (m > cuda::kQuantGemvMaxRows && cuda::fp8_fast_accumulation()) {
        struct RestoreDefault {
          ~RestoreDefault() { gpu().set_fp8_gemm("auto"); }
        } restore;
        for (const char* name : {"wgmma128x128s6pp", "wgmma256s4"}) {
          gpu().set_fp8_gemm(name);
          poison(yd.view);
          const int64_t wgmma_before = gpu().fp8_wgmma_gemms();
          gpu().linear(xd.view, lw, yd.view);
          EXPECT_EQ(gpu().fp8_wgmma_gemms(), wgmma_before + 1)
              << what << " " << name << ": not the wgmma GEMM";
          const Compare cw = compare(download(gpu(), yd.view), ref);
          EXPECT_EQ(cw.nans, 0) << what << " " << name;
          EXPECT_LT(cw.rel_l2, f32_out ? 3e-3 : 1e-2)
              << what << " " << name << " (max abs " << cw.max_abs << ")";
          if (m == 128) std::printf("[ fp8 ] %s %s: rel L2 %.2e\n", what.c_str(), name, cw.rel_l2);
        }
      }
    }
    ++index;
  }
}

// Random e4m3 codes, NaN codes excluded.
std::vector<uint8_t> random_e4m3_codes(size_t count, std::mt19937& rng) {
  std::uniform_int_distribution<int> byte(0, 255);
  std::vector<uint8_t> c(count);
  for (auto& b : c) {
    b = static_cast<uint8_t>(byte(rng));
    if ((b & 0x7f) == 0x7f) b ^= 1;
  }
  return c;
}

// y[t, j] = (x[t, :] . w[j, :]) * xs[t] * ws[j] (+ bias[j]) over the decoded e4m3 codes, the dot in f64.
std::vector<float> e4m3_product_reference(const std::vector<uint8_t>& xq, const std::vector<uint8_t>& wq,
                                          const std::vector<float>& xs, const std::vector<float>& ws,
                                          const std::vector<float>& bias, int m, int n, int k) {
  std::vector<float> wf(wq.size()), xf(xq.size()), ref(static_cast<size_t>(m) * n);
  convert_to_f32(DType::kFP8E4M3, wq.data(), wf.data(), wf.size());
  convert_to_f32(DType::kFP8E4M3, xq.data(), xf.data(), xf.size());
  for (int t = 0; t < m; ++t)
    for (int j = 0; j < n; ++j) {
      double acc = 0;
      for (int i = 0; i < k; ++i)
        acc += static_cast<double>(xf[static_cast<size_t>(t) * k + i]) * wf[static_cast<size_t>(j) * k + i];
      ref[static_cast<size_t>(t) * n + j] =
          static_cast<float>(acc * xs[static_cast<size_t>(t)] * ws[static_cast<size_t>(j)] +
                             (bias.empty() ? 0.0f : bias[static_cast<size_t>(j)]));
    }
  return ref;
}

// The FP8 GEMM's measured candidates at a decode graph bucket (the heuristic's first and its tile / cluster /
// split-K variants, cublaslt_algo_choice.h) each compute y = (sx sw) * (xq wq^T): against the f64 product of
// the codes. A decision from the tuning cache (add_known_choices) is what a new instance's first run of the
// shape takes, without timing.
TEST(QuantLinear, Fp8GemmCandidatesMatchReferenceAndKnownChoicesAreTaken) {
  const int m = 448, n = 1008, k = 512;  // 448: a decode graph bucket (measured); a shape no other test runs
  std::mt19937 rng(31);
  auto codes = [&](size_t count) { return random_e4m3_codes(count, rng); };
  const std::vector<uint8_t> wq = codes(static_cast<size_t>(n) * k), xq = codes(static_cast<size_t>(m) * k);
  std::vector<float> ws(n), xs(m);
  for (auto& v : ws) v = std::uniform_real_distribution<float>(0.5f, 1.5f)(rng) / 1000.0f;
  for (auto& v : xs) v = std::uniform_real_distribution<float>(0.5f, 1.5f)(rng) / 100.0f;
  const std::vector<float> ref = e4m3_product_reference(xq, wq, xs, ws, {}, m, n, k);
  auto wd = gpu().upload(raw_view(wq, DType::kFP8E4M3, Shape{n, k}), DType::kFP8E4M3);
  auto xd = gpu().upload(raw_view(xq, DType::kFP8E4M3, Shape{m, k}), DType::kFP8E4M3);
  auto wsd = gpu().upload(raw_view(ws, DType::kF32, Shape{n}), DType::kF32);
  auto xsd = gpu().upload(raw_view(xs, DType::kF32, Shape{m}), DType::kF32);
  auto yd = gpu().allocate(DType::kBF16, Shape{m, n});
  const cuda::Fp8GemmArgs args{static_cast<const uint8_t*>(xd.view.data),
                               static_cast<const float*>(xsd.view.data),
                               static_cast<const uint8_t*>(wd.view.data),
                               static_cast<const float*>(wsd.view.data),
                               nullptr,
                               yd.view.data,
                               false,
                               m,
                               n,
                               k};
  cuda::CublasLtFp8Gemm gemm;
  gemm.set_max_measured_rows(1024);  // as CudaBackend::measure_w8a8_gemms does for --max-num-seqs 1024
  ASSERT_TRUE(gemm.supported(args));
  const int count = gemm.algo_count(args);
  EXPECT_GT(count, 8) << "the variants of the heuristic's first";
  for (int i = 0; i < count; ++i) {
    gemm.set_algo(args, i);
    poison(yd.view);
    gemm.run(args, gpu().stream());
    const Compare cmp = compare(download(gpu(), yd.view), ref);
    EXPECT_EQ(cmp.nans, 0) << gemm.describe(args, i);
    EXPECT_LT(cmp.rel_l2, 1e-2) << gemm.describe(args, i);  // bf16 output, fast accumulation
  }
  const cublasLtMatmulAlgo_t last = gemm.algo(args, count - 1);
  cuda::GemmTuningEntry known;
  known.key = cuda::GemmTuningKey{n, k, false, false, m};
  known.choice.kind = cuda::GemmKind::kCublasLt;
  known.choice.algo = last;
  cuda::CublasLtFp8Gemm::add_known_choices({known});
  cuda::CublasLtFp8Gemm fresh, unmeasured;
  fresh.set_max_measured_rows(1024);
  fresh.run(args, gpu().stream());
  EXPECT_EQ(fresh.describe(args, fresh.chosen_algo(args)), gemm.describe(args, count - 1));
  bool listed = false;
  for (const cuda::GemmTuningEntry& e : cuda::CublasLtFp8Gemm::known_choices())
    listed = listed || (e.key == known.key && cuda::same_algo(e.choice.algo, last));
  EXPECT_TRUE(listed);
  // Past the measured buckets (the default 256) a plan keeps the heuristic's one algorithm: nothing is timed there.
  EXPECT_LT(unmeasured.algo_count(args), count);
}

// The FP8 wgmma GEMM (launch_w8a8_fp8_wgmma) in every compiled configuration, in the band by shape and in
// bands of 3 n tiles, on shapes with partial row / column tiles, odd n, k not a multiple of the 128-byte step
// and several tiles per persistent CTA, with and without bias: against the f64 product of the codes (fast
// accumulation: the f32 bound of cuBLASLt's rows), and every configuration's f32 output the first one's bits
// (one summation order). Then the measured choice: measure_fp8_gemms decides per (n, k, rows) between
// cuBLASLt and the wgmma kernels, fp8_wgmma_for takes the decision of the fewest measured rows >= m, and a
// graph replays linear() through it bit for bit.
TEST(QuantLinear, Fp8WgmmaGemmMatchesReference) {
  std::mt19937 rng(37);
  auto codes = [&](size_t count) { return random_e4m3_codes(count, rng); };
  struct Shape3 {
    int m, n, k;
  };
  const Shape3 shapes[] = {{17, 24, 16},      {130, 200, 144},    {333, 257, 512},
                           {481, 1000, 1040}, {1100, 2048, 1024}, {600, 4096, 2048}};
  int index = 0;
  for (const Shape3& sh : shapes) {
    const int m = sh.m, n = sh.n, k = sh.k;
    const bool with_bias = index++ % 2 == 0;
    const std::vector<uint8_t> wq = codes(static_cast<size_t>(n) * k), xq = codes(static_cast<size_t>(m) * k);
    std::vector<float> ws(static_cast<size_t>(n)), xs(static_cast<size_t>(m));
    for (auto& v : ws) v = std::uniform_real_distribution<float>(0.5f, 1.5f)(rng) / 1000.0f;
    for (auto& v : xs) v = std::uniform_real_distribution<float>(0.5f, 1.5f)(rng) / 100.0f;
    const std::vector<float> bias = random_bf16(static_cast<size_t>(n), rng, 0.5f);
    const std::vector<float> ref =
        e4m3_product_reference(xq, wq, xs, ws, with_bias ? bias : std::vector<float>{}, m, n, k);
    auto wd = gpu().upload(raw_view(wq, DType::kFP8E4M3, Shape{n, k}), DType::kFP8E4M3);
    auto xd = gpu().upload(raw_view(xq, DType::kFP8E4M3, Shape{m, k}), DType::kFP8E4M3);
    auto wsd = gpu().upload(raw_view(ws, DType::kF32, Shape{n}), DType::kF32);
    auto xsd = gpu().upload(raw_view(xs, DType::kF32, Shape{m}), DType::kF32);
    auto bd = gpu().upload(host_view(bias, Shape{n}), DType::kBF16);
    std::vector<cuda::Int8WgmmaConfig> configs;
    for (const cuda::Int8WgmmaConfig& config : cuda::kInt8WgmmaConfigs)
      for (const int band : {0, 3}) {
        configs.push_back(config);
        configs.back().band = band;
      }
    std::vector<float> first;
    for (const cuda::Int8WgmmaConfig& config : configs)
      for (const bool f32_out : {true, false}) {
        auto yd = gpu().allocate(f32_out ? DType::kF32 : DType::kBF16, Shape{m, n});
        poison(yd.view);
        const cuda::Fp8GemmArgs args{static_cast<const uint8_t*>(xd.view.data),
                                     static_cast<const float*>(xsd.view.data),
                                     static_cast<const uint8_t*>(wd.view.data),
                                     static_cast<const float*>(wsd.view.data),
                                     with_bias ? static_cast<const __nv_bfloat16*>(bd.view.data) : nullptr,
                                     yd.view.data,
                                     f32_out,
                                     m,
                                     n,
                                     k};
        cuda::launch_w8a8_fp8_wgmma(args, gpu().stream(), config);
        const std::string what = cuda::to_string(config) + " m=" + std::to_string(m) +
                                 " n=" + std::to_string(n) + " k=" + std::to_string(k) +
                                 (f32_out ? " f32" : " bf16") + (with_bias ? " bias" : "");
        const std::vector<float> got = download(gpu(), yd.view);
        const Compare cmp = compare(got, ref);
        EXPECT_EQ(cmp.nans, 0) << what;
        EXPECT_LT(cmp.rel_l2, f32_out ? 3e-3 : 1e-2) << what << " (max abs " << cmp.max_abs << ")";
        if (!f32_out) continue;
        if (first.empty()) {
          first = got;
          std::printf("[ fp8 wgmma ] %s: rel L2 %.2e\n", what.c_str(), cmp.rel_l2);
        } else {
          size_t differ = 0;
          for (size_t i = 0; i < got.size(); ++i)
            differ += std::memcmp(&got[i], &first[i], sizeof(float)) != 0;
          EXPECT_EQ(differ, 0u) << what << ": outputs differ from " << cuda::to_string(configs[0]) << "'s";
        }
      }
  }

  // The measured choice through linear(): a W8A8-FP8 weight no other test measures (n 1040 x k 2048).
  if (!cuda::fp8_fast_accumulation())
    GTEST_SKIP() << "XINFER_FP8_FAST_ACCUM=0: no measured wgmma choice (the kernels above were checked)";
  const int n = 1040, k = 2048;
  const std::vector<uint8_t> wq = codes(static_cast<size_t>(n) * k);
  std::vector<float> ws(static_cast<size_t>(n), 2e-4f);
  backend::LinearWeights lw;
  lw.format = quant::W8A8Fp8Format{true, quant::ActScaleMode::kDynamicPerToken};
  lw.k = k;
  auto wd = gpu().upload(raw_view(wq, DType::kFP8E4M3, Shape{n, k}), DType::kFP8E4M3);
  auto wsd = gpu().upload(raw_view(ws, DType::kF32, Shape{n}), DType::kF32);
  lw.weight = wd.view;
  lw.scales = wsd.view;
  gpu().measure_fp8_gemms({&lw}, 3000);  // buckets 32 .. 1024 (graph buckets), 2048, 4096 (timed at 3000)
  for (const int m : {17, 100, 256, 257, 1000, 2048, 2049, 3000})
    std::printf(
        "[ fp8 wgmma ] measured choice at m=%d: %s\n", m,
        gpu().fp8_wgmma_for(m, n, k) ? cuda::to_string(*gpu().fp8_wgmma_for(m, n, k)).c_str() : "cuBLASLt");
  // Every row count of an engine with max_tokens 3000 finds its bucket's decision (3001..4096 too: bucket
  // 4096, timed at 3000 rows), none past it; a decision may be cuBLASLt, which fp8_wgmma_for cannot tell from
  // none.
  for (int m = cuda::kQuantGemvMaxRows + 1; m <= 4096; ++m)
    ASSERT_TRUE(gpu().fp8_gemm_measured(m, n, k)) << m;
  EXPECT_FALSE(gpu().fp8_gemm_measured(4097, n, k));
  EXPECT_FALSE(gpu().fp8_gemm_measured(cuda::kQuantGemvMaxRows, n, k)) << "the GEMV's rows";
  EXPECT_FALSE(gpu().fp8_wgmma_for(4097, n, k).has_value()) << "past the measured buckets: cuBLASLt";
  EXPECT_FALSE(gpu().fp8_wgmma_for(64, n + 16, k).has_value()) << "an unmeasured shape: cuBLASLt";
  EXPECT_FALSE(gpu().fp8_wgmma_for(16, n, k).has_value()) << "the GEMV's rows";
  {
    struct RestoreDefault {
      ~RestoreDefault() { gpu().set_fp8_gemm("auto"); }
    } restore;
    gpu().set_fp8_gemm("cublaslt");
    EXPECT_FALSE(gpu().fp8_wgmma_for(256, n, k).has_value());
    gpu().set_fp8_gemm("wgmma256s4");
    ASSERT_TRUE(gpu().fp8_wgmma_for(256, n, k).has_value());
    EXPECT_EQ(cuda::config_name(*gpu().fp8_wgmma_for(256, n, k)), "wgmma256s4");
    EXPECT_DEATH(gpu().set_fp8_gemm("wgmma999"), "XINFER_FP8_GEMM");
  }
  const std::vector<int64_t> ms = {100, 256, 2048};
  std::vector<backend::DeviceTensor> xs, eager, replayed;
  for (const int64_t m : ms) {
    const std::vector<float> x = random_bf16(static_cast<size_t>(m * k), rng);
    xs.push_back(gpu().upload(host_view(x, Shape{m, k}), DType::kBF16));
    eager.push_back(gpu().allocate(DType::kBF16, Shape{m, n}));
    replayed.push_back(gpu().allocate(DType::kBF16, Shape{m, n}));
    gpu().linear(xs.back().view, lw, eager.back().view);
  }
  upload_trivial_step();
  gpu().begin_capture();
  for (size_t i = 0; i < ms.size(); ++i) gpu().linear(xs[i].view, lw, replayed[i].view);
  ASSERT_TRUE(gpu().end_capture(0x1f88));
  ASSERT_TRUE(gpu().replay(0x1f88));
  for (size_t i = 0; i < ms.size(); ++i)
    expect_same_bits(replayed[i].view, eager[i].view,
                     "measured FP8 GEMM replayed m=" + std::to_string(ms[i]));
  gpu().clear_graphs();
}

// GPTQ act order sorted at load (model::sort_act_order, as the loader does): decode rows gather x's columns
// and run the GEMVs (int4 at m = 1 the tensor-core decode GEMV), more rows dequantize the weight back into
// the input's column order; both against the oracle of the original g_idx weight.
TEST(QuantLinear, ActOrderSortedAtLoadMatchesCpuOracle) {
  std::mt19937 rng(37);
  // gemv: whether the GEMVs take the sorted weight (else decode rows dequantize too: group 16, k % 16 != 0).
  for (const auto& [f, n, k, gemv] : std::vector<std::tuple<quant::WeightFormat, int64_t, int64_t, bool>>{
           {quant::IntGroupFormat{4, 128, true}, 96, 512, true},
           {quant::IntGroupFormat{4, 128, false}, 130, 1024, true},
           {quant::IntGroupFormat{4, 32, false}, 40, 256, true},
           {quant::IntGroupFormat{8, 64, true}, 33, 192, true},
           {quant::IntGroupFormat{4, 16, true}, 48, 256, false},
           {quant::IntGroupFormat{8, 32, false}, 40, 200, false}}) {
    QuantCase c = make_case(f, n, k, true, /*act_order=*/true, rng);
    model::HostLinear h;
    h.format = f;
    h.n = n;
    h.k = k;
    auto tensor = [](DType dt, const Shape& shape, const void* data, size_t bytes) {
      HostTensor t(dt, shape);
      std::memcpy(t.data<uint8_t>(), data, bytes);
      return t;
    };
    const auto& g = std::get<quant::IntGroupFormat>(f);
    const int64_t groups = (k + g.group_size - 1) / g.group_size;
    h.weight = tensor(DType::kU8, Shape{n, g.bits == 4 ? k / 2 : k}, c.w.data(), c.w.size());
    h.scales = tensor(DType::kF32, Shape{n, groups}, c.scales.data(), c.scales.size() * 4);
    if (!c.zeros.empty()) h.zeros = tensor(DType::kU8, Shape{n, groups}, c.zeros.data(), c.zeros.size());
    h.g_idx = tensor(DType::kI32, Shape{k}, c.g_idx.data(), c.g_idx.size() * 4);
    ASSERT_TRUE(model::sort_act_order(h));
    model::UploadedLinear up = model::upload_linear(gpu(), h, DType::kBF16);
    up.weights.bias = c.lw.bias;
    for (const int64_t m : {1, 4, 16, 20, 40}) {
      const std::vector<float> x = random_bf16(static_cast<size_t>(m * k), rng);
      auto xd = gpu().upload(host_view(x, Shape{m, k}), DType::kBF16);
      const bool f32 = m % 2 == 0;
      auto yd = gpu().allocate(f32 ? DType::kF32 : DType::kBF16, Shape{m, n});
      poison(yd.view);
      const int64_t gemvs = gpu().quant_gemvs(), dequant = gpu().quant_dequant_gemms();
      gpu().linear(xd.view, up.weights, yd.view);
      const Compare cmp = compare(download(gpu(), yd.view), oracle(c, x, m));
      const std::string what = name(c, m, f32) + " act order sorted";
      EXPECT_EQ(cmp.nans, 0) << what;
      EXPECT_LT(cmp.rel_l2, 1e-2) << what;
      const bool by_gemv = gemv && m <= 16;
      EXPECT_EQ(gpu().quant_gemvs(), gemvs + (by_gemv ? 1 : 0)) << what << ": a GEMV on the gathered x";
      EXPECT_EQ(gpu().quant_dequant_gemms(), dequant + (by_gemv ? 0 : 1)) << what;
    }
  }
}

// GGUF Q4_0 / Q4_1 / Q5_0 / Q8_0 / Q4_K / Q6_K rows repacked at load (model/gguf_repack.h) run through the
// int kernels: against the float reference of the original blocks (dequantize_gguf, f64 dot products), at
// m = 1 and 8 (the GEMVs; Q4_1's and Q4_K's mins the int4 decode GEMV's, Q6_K's groups of 16 the int8 ones)
// and 40 (dequantize path); k 576 is SmolLM2's hidden size (a partial int4 step), 768 three super-blocks.
// n rows of random GGUF blocks of `type` over k columns with realistic block scales: Q4_K's d and dmin scale
// 6-bit sub-block scales and mins (random bytes: 0..63 each, so d / 32 and dmin / 32 about match the other
// types' ranges; the min about -8 times the scale on average); Q6_K's d (its last field) scales i8 sub-block
// scales; Q4_1's min about -8 d, as a Q4_1 quantizer makes it.
std::vector<uint8_t> random_gguf_rows(quant::GgufType type, int64_t n, int64_t k, std::mt19937& rng) {
  std::uniform_int_distribution<int> byte(0, 255);
  const bool k_quant = type == quant::GgufType::kQ4_K || type == quant::GgufType::kQ6_K;
  const auto block = static_cast<size_t>(quant::gguf_block_bytes(type));
  std::vector<uint8_t> rows(static_cast<size_t>(n) * *quant::gguf_row_bytes(type, k));
  for (auto& b : rows) b = static_cast<uint8_t>(byte(rng));
  for (size_t off = 0; off < rows.size(); off += block) {
    const float unit = k_quant ? 1.0f / 32 : 1.0f;
    const f16 d = to_f16(unit * std::uniform_real_distribution<float>(0.002f, 0.01f)(rng));
    std::memcpy(rows.data() + off + (type == quant::GgufType::kQ6_K ? 208 : 0), &d.bits, 2);
    if (type == quant::GgufType::kQ4_1) {
      const f16 m = to_f16(-8.0f * to_float(d) * std::uniform_real_distribution<float>(0.5f, 1.5f)(rng));
      std::memcpy(rows.data() + off + 2, &m.bits, 2);
    } else if (type == quant::GgufType::kQ4_K) {
      const f16 dmin = to_f16(8.0f * to_float(d) * std::uniform_real_distribution<float>(0.5f, 1.5f)(rng));
      std::memcpy(rows.data() + off + 2, &dmin.bits, 2);
    }
  }
  return rows;
}

// y[m, n] = x[m, k] @ w[n, k]^T in double.
std::vector<float> reference_matmul(const std::vector<float>& x, const std::vector<float>& w, int64_t m,
                                    int64_t n, int64_t k) {
  std::vector<float> y(static_cast<size_t>(m * n));
  for (int64_t t = 0; t < m; ++t)
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t i = 0; i < k; ++i) acc += static_cast<double>(x[t * k + i]) * w[j * k + i];
      y[static_cast<size_t>(t * n + j)] = static_cast<float>(acc);
    }
  return y;
}

TEST(QuantLinear, GgufRepackedRowsMatchTheGgufReference) {
  std::mt19937 rng(31);
  for (quant::GgufType type : {quant::GgufType::kQ4_0, quant::GgufType::kQ4_1, quant::GgufType::kQ5_0,
                               quant::GgufType::kQ8_0, quant::GgufType::kQ4_K, quant::GgufType::kQ6_K}) {
    const bool k_quant = type == quant::GgufType::kQ4_K || type == quant::GgufType::kQ6_K;
    const int64_t n = 100, k = k_quant ? 768 : 576;
    const size_t row_bytes = *quant::gguf_row_bytes(type, k);
    const std::vector<uint8_t> rows = random_gguf_rows(type, n, k, rng);
    std::vector<float> wf(static_cast<size_t>(n * k));
    for (int64_t r = 0; r < n; ++r) ASSERT_TRUE(quant::dequantize_gguf(type, rows.data() + r * row_bytes, k, wf.data() + r * k).ok());
    auto h = model::repack_gguf_rows(type, rows.data(), n, k);
    ASSERT_TRUE(h.ok()) << h.status().to_string();
    model::UploadedLinear up = model::upload_linear(gpu(), *h, DType::kBF16);
    for (int64_t m : {1, 8, 40}) {
      const std::vector<float> x = random_bf16(static_cast<size_t>(m * k), rng);
      const std::vector<float> ref = reference_matmul(x, wf, m, n, k);
      auto xd = gpu().upload(host_view(x, Shape{m, k}), DType::kBF16);
      auto yd = gpu().allocate(DType::kF32, Shape{m, n});
      poison(yd.view);
      const int64_t gemvs = gpu().quant_gemvs();
      gpu().linear(xd.view, up.weights, yd.view);
      const Compare cmp = compare(download(gpu(), yd.view), ref);
      EXPECT_EQ(cmp.nans, 0);
      EXPECT_LT(cmp.rel_l2, 1e-2) << quant::gguf_type_name(type) << " m=" << m;
      EXPECT_EQ(gpu().quant_gemvs(), gemvs + (m <= 16 ? 1 : 0)) << quant::gguf_type_name(type) << " m=" << m;
    }
  }
}

// A weight stored as segments (backend.h LinearWeights::segments; the GGUF loader's Q4_K_M qkv: q / k in
// Q4_K, v in Q6_K) matches the GGUF dequantizer's weights (and a bf16 segment's). Where each segment runs its
// own kernel (one row: in place; 2..16 rows: the GEMVs with a row stride; past 16 the tiled GEMM with one; a
// bf16 segment, or a dequantize path: through the workspace and a strided copy), each segment's columns equal
// that segment run alone, bit for bit, bf16 and f32 outputs. Prefill rows where every segment takes the
// dequantize path run one GEMM over the segments' weights dequantized side by side.
TEST(QuantLinear, SegmentedWeightEqualsItsSegments) {
  std::mt19937 rng(37);
  const int64_t k = 512;
  struct Seg {
    quant::GgufType type;
    int64_t n;
  };
  const std::vector<Seg> segs = {
      {quant::GgufType::kQ4_K, 96}, {quant::GgufType::kQ6_K, 40}, {quant::GgufType::kQ4_K, 24}};
  backend::LinearWeights w;
  std::vector<model::UploadedLinear> ups;
  std::vector<float> wf;
  int64_t n = 0;
  for (const Seg& sg : segs) {
    const std::vector<uint8_t> rows = random_gguf_rows(sg.type, sg.n, k, rng);
    const size_t row_bytes = *quant::gguf_row_bytes(sg.type, k);
    wf.resize(static_cast<size_t>((n + sg.n) * k));
    for (int64_t r = 0; r < sg.n; ++r)
      ASSERT_TRUE(
          quant::dequantize_gguf(sg.type, rows.data() + r * row_bytes, k, wf.data() + (n + r) * k).ok());
    auto h = model::repack_gguf_rows(sg.type, rows.data(), sg.n, k);
    ASSERT_TRUE(h.ok()) << h.status().to_string();
    ups.push_back(model::upload_linear(gpu(), *h, DType::kBF16));
    w.segments.push_back(ups.back().weights);
    n += sg.n;
  }
  ASSERT_EQ(w.out_features(), n);
  ASSERT_EQ(w.in_features(), k);
  ASSERT_FALSE(w.dense());
  // The same with a bf16 segment of 24 rows last (its kernels take no row stride: the copy path).
  backend::LinearWeights with_dense = w;
  const std::vector<float> dense_rows = random_bf16(static_cast<size_t>(24 * k), rng, 0.05f);
  backend::DeviceTensor dense_w = gpu().upload(host_view(dense_rows, Shape{24, k}), DType::kBF16);
  backend::LinearWeights dense_segment_weights;
  dense_segment_weights.weight = dense_w.view;
  with_dense.segments.push_back(dense_segment_weights);
  std::vector<float> wf_dense = wf;
  wf_dense.insert(wf_dense.end(), dense_rows.begin(), dense_rows.end());
  const int saved = gpu().wq_gemm_max_rows();
  for (const bool dense_segment : {false, true}) {
    const backend::LinearWeights& lw = dense_segment ? with_dense : w;
    const int64_t nn = lw.out_features();
    // (rows, wq_gemm_max_rows): decode rows; 40 rows on the tiled GEMM (max 1024) and on the dequantize path
    // (16).
    for (const auto& [m, max_rows] :
         std::vector<std::pair<int64_t, int>>{{1, 16}, {5, 16}, {16, 16}, {40, 1024}, {40, 16}}) {
      gpu().set_wq_gemm_max_rows(max_rows);
      const bool one_gemm = m > 16 && max_rows < m && !dense_segment;
      for (const DType out_dtype : {DType::kBF16, DType::kF32}) {
        const std::string what = "m=" + std::to_string(m) + " wq max rows " + std::to_string(max_rows) + " " +
                                 dtype_name(out_dtype) + (dense_segment ? " with a bf16 segment" : "");
        const std::vector<float> x = random_bf16(static_cast<size_t>(m * k), rng);
        auto xd = gpu().upload(host_view(x, Shape{m, k}), DType::kBF16);
        auto yd = gpu().allocate(out_dtype, Shape{m, nn});
        poison(yd.view);
        const int64_t dequant = gpu().quant_dequant_gemms();
        gpu().linear(xd.view, lw, yd.view);
        if (one_gemm) {
          EXPECT_EQ(gpu().quant_dequant_gemms(), dequant + 1) << what;
        }
        const std::vector<float> y = download(gpu(), yd.view);
        int64_t col = 0;
        for (const backend::LinearWeights& s : lw.segments) {
          const int64_t ns = s.out_features();
          auto alone = gpu().allocate(out_dtype, Shape{m, ns});
          gpu().linear(xd.view, s, alone.view);
          const std::vector<float> want = download(gpu(), alone.view);
          std::vector<float> mine(static_cast<size_t>(m * ns));
          for (int64_t t = 0; t < m; ++t)
            for (int64_t j = 0; j < ns; ++j)
              mine[static_cast<size_t>(t * ns + j)] = y[static_cast<size_t>(t * nn + col + j)];
          if (one_gemm) {  // another GEMM shape: the same products, summed in another order
            EXPECT_LT(compare(mine, want).rel_l2, 1e-2) << what;
          } else {
            for (size_t i = 0; i < mine.size(); ++i) {
              ASSERT_EQ(mine[i], want[i]) << what << " element " << i << " of segment columns " << col;
            }
          }
          col += ns;
        }
        const Compare cmp = compare(y, reference_matmul(x, dense_segment ? wf_dense : wf, m, nn, k));
        EXPECT_EQ(cmp.nans, 0) << what;
        EXPECT_LT(cmp.rel_l2, 1e-2) << what;
      }
    }
  }
  gpu().set_wq_gemm_max_rows(saved);
}

TEST(QuantLinear, SupportsAndBadWeights) {
  EXPECT_TRUE(gpu().supports(quant::IntGroupFormat{4, 128, true}));
  EXPECT_TRUE(gpu().supports(quant::IntGroupFormat{8, 32, false}));
  EXPECT_TRUE(gpu().supports(quant::IntGroupFormat{4, 32, false, true}));   // mins (GGUF Q4_1)
  EXPECT_FALSE(gpu().supports(quant::IntGroupFormat{8, 32, false, true}));  // mins are int4's only
  EXPECT_FALSE(gpu().supports(quant::IntGroupFormat{4, 32, true, true}));   // not with zero points
  EXPECT_TRUE(gpu().supports(quant::Int8ChannelFormat{}));
  EXPECT_TRUE(gpu().supports(quant::DenseFormat{DType::kBF16}));
  EXPECT_TRUE(gpu().supports(quant::W8A8Fp8Format{}));
  EXPECT_TRUE(gpu().supports(quant::W8A8Int8Format{}));  // quant_w8a8_int8_test.cpp
  EXPECT_FALSE(gpu().supports(quant::GgufFormat{quant::GgufType::kQ4_0}));
  std::mt19937 rng(23);
  QuantCase c = make_case(quant::IntGroupFormat{4, 128, true}, 16, 256, false, false, rng);
  backend::LinearWeights bad = c.lw;
  bad.zeros = {};
  EXPECT_DEATH(gpu().quant_weight(bad), "int4-g128-zp: missing zeros");
  bad = c.lw;
  bad.scales.shape = Shape{16, 1};
  EXPECT_DEATH(gpu().quant_weight(bad), "int4-g128-zp: scales");
}

}  // namespace
}  // namespace xinfer::gpu_test
