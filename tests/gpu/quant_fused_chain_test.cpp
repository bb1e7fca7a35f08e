// The fused decode chain on weight-only quantized linears (quant_linear.h QuantGemvFusion,
// CudaBackend::add_rms_norm_linear -> quant_fused_chain):
//  - add_to_y: bit for bit the same GEMV's plain output added to y0 on the host with one bf16 rounding;
//  - norm_weight (the RMSNorm folded into the x loads): against an f64 host reference
//    (rms_norm(x) * g) @ dequantize(W)^T + b, rows with spikes at both ends (a missed or doubled chunk of the
//    sum of squares would move the RMS far past the tolerance);
//  - swiglu_out: y equal to the normed launch's, act against silu(gate) * up of those bf16 outputs;
//  - the backend's chain (LinearFusion::kAlways: producer o/down + consumer qkv/gate_up with SwiGLU) against
//    its own composition (GEMV, add_rms_norm, GEMV, silu_mul) within bf16 noise, and the counters say which
//    ran; m = 9, a delta given as input and the default policy (kWhenGemv: measured slower on the H200) run
//    the composition.
// Formats: int4 g128 (symmetric, zero points), int4 g32 zero points (folded scales), int8 per channel, int8
// g64 zero points; n even (SwiGLU pairs), k with a partial int4 step (576) and long rows (4224).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "xinfer/backend/cuda/kernels/gemm/quant_linear.h"
#include "xinfer/quant/quantized_linear.h"

namespace xinfer::gpu_test {
namespace {

constexpr float kEps = 1e-5f;

// A random quantized weight on the host and the GPU (values uniform, scales ~1 / sqrt(k) / range).
struct QWeight {
  quant::WeightFormat format;
  int64_t n = 0, k = 0;
  std::vector<uint8_t> w, zeros;
  std::vector<float> scales;
  std::vector<backend::DeviceTensor> owned;
  backend::LinearWeights lw;
  std::vector<float> dequantized() const {
    quant::QuantizedMatrix q;
    q.format = format;
    q.n = n;
    q.k = k;
    q.weight = w.data();
    q.scales = scales.data();
    q.zeros = zeros.empty() ? nullptr : zeros.data();
    std::vector<float> out(static_cast<size_t>(n * k));
    quant::dequantize_matrix(q, out.data());
    return out;
  }
};

template <typename T>
TensorView raw(const std::vector<T>& v, DType dt, const Shape& s) {
  return TensorView{const_cast<T*>(v.data()), dt, s, Device::kCpu};
}

QWeight make_weight(const quant::WeightFormat& f, int64_t n, int64_t k, bool bias, std::mt19937& rng) {
  QWeight q;
  q.format = f;
  q.n = n;
  q.k = k;
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> sd(0.5f, 1.5f);
  auto keep = [&](backend::DeviceTensor t) {
    q.owned.push_back(t);
    return t.view;
  };
  if (std::holds_alternative<quant::Int8ChannelFormat>(f)) {
    q.w.resize(static_cast<size_t>(n * k));
    for (auto& b : q.w) b = static_cast<uint8_t>(byte(rng));
    q.scales.resize(static_cast<size_t>(n));
    for (auto& s : q.scales) s = sd(rng) / 127.0f / std::sqrt(static_cast<float>(k));
    q.lw.weight = keep(gpu().upload(raw(q.w, DType::kI8, Shape{n, k}), DType::kI8));
    q.lw.scales = keep(gpu().upload(raw(q.scales, DType::kF32, Shape{n}), DType::kF32));
  } else {
    const auto& g = std::get<quant::IntGroupFormat>(f);
    const int64_t groups = (k + g.group_size - 1) / g.group_size, row_bytes = g.bits == 4 ? k / 2 : k;
    q.w.resize(static_cast<size_t>(n * row_bytes));
    for (auto& b : q.w) b = static_cast<uint8_t>(byte(rng));
    q.scales.resize(static_cast<size_t>(n * groups));
    for (auto& s : q.scales) s = sd(rng) / (g.bits == 4 ? 7.5f : 127.5f) / std::sqrt(static_cast<float>(k));
    q.lw.weight = keep(gpu().upload(raw(q.w, DType::kU8, Shape{n, row_bytes}), DType::kU8));
    q.lw.scales = keep(gpu().upload(raw(q.scales, DType::kF32, Shape{n, groups}), DType::kF32));
    if (g.zero_point) {
      q.zeros.resize(static_cast<size_t>(n * groups));
      std::uniform_int_distribution<int> zd(0, g.bits == 4 ? 15 : 255);
      for (auto& z : q.zeros) z = static_cast<uint8_t>(zd(rng));
      q.lw.zeros = keep(gpu().upload(raw(q.zeros, DType::kU8, Shape{n, groups}), DType::kU8));
    }
  }
  q.lw.format = f;
  q.lw.k = k;
  if (bias) q.lw.bias = keep(gpu().upload(host_view(random_bf16(static_cast<size_t>(n), rng, 0.5f), Shape{n}), DType::kBF16));
  return q;
}

const std::vector<quant::WeightFormat>& formats() {
  static const std::vector<quant::WeightFormat> f = {
      quant::IntGroupFormat{4, 128, false}, quant::IntGroupFormat{4, 128, true}, quant::IntGroupFormat{4, 32, true},
      quant::Int8ChannelFormat{}, quant::IntGroupFormat{8, 64, true}};
  return f;
}

const __nv_bfloat16* bf16(const backend::DeviceTensor& t) { return static_cast<const __nv_bfloat16*>(t.view.data); }

TEST(QuantFusedChain, KernelsMatchReference) {
  std::mt19937 rng(41);
  struct Shape2 {
    int64_t n, k;
  };
  const std::vector<Shape2> shapes = {{64, 576}, {4098, 1024}, {130, 4224}};
  cudaStream_t s = gpu().stream();
  int index = 0;
  for (const auto& f : formats())
    for (const Shape2& sh : shapes) {
      const bool with_bias = index % 2 == 0;
      QWeight q = make_weight(f, sh.n, sh.k, with_bias, rng);
      const cuda::QuantWeight qw = gpu().quant_weight(q.lw);
      // The norm / SwiGLU in each batch configuration (2, 3 CTAs per SM, wide); add_to_y runs pipelined.
      const bool pdl = index % 3 != 0;
      const cuda::QuantGemvConfig config = std::vector<cuda::QuantGemvConfig>{
          {2, pdl, 0, false, false, false}, {3, pdl, 0, false, false, false}, {2, pdl, 0, false, true, false}}[index % 3];
      const cuda::QuantGemvConfig add_config{2, pdl, index % 2 == 0 ? 8 : 4, false, false, false};
      const auto* bias = with_bias ? static_cast<const __nv_bfloat16*>(q.lw.bias.data) : nullptr;
      const std::vector<float> wd = q.dequantized();
      std::vector<float> b_h = with_bias ? download(gpu(), q.lw.bias) : std::vector<float>(static_cast<size_t>(sh.n), 0.f);
      for (int m : {1, 3, 8}) {
        const std::string what = quant::format_name(f) + " n=" + std::to_string(sh.n) + " k=" + std::to_string(sh.k) +
                                 " m=" + std::to_string(m) + " " + cuda::to_string(config);
        // add_to_y
        const auto x_h = random_bf16(static_cast<size_t>(m * sh.k), rng);
        const auto y0_h = random_bf16(static_cast<size_t>(m * sh.n), rng, 2.0f);
        const auto x = gpu().upload(host_view(x_h, Shape{m, sh.k}), DType::kBF16);
        const auto plain = gpu().allocate(DType::kBF16, Shape{m, sh.n});
        const auto y = gpu().upload(host_view(y0_h, Shape{m, sh.n}), DType::kBF16);
        cuda::launch_quant_gemv({bf16(x), qw, bias, plain.view.data, false, m}, s, add_config);
        cuda::launch_quant_gemv({bf16(x), qw, bias, y.view.data, false, m}, s, add_config, {true, nullptr, 0.f, nullptr});
        const auto p = download(gpu(), plain.view), got = download(gpu(), y.view);
        size_t diff = 0;
        for (size_t i = 0; i < got.size(); ++i) diff += got[i] != to_float(to_bf16(y0_h[i] + p[i]));
        EXPECT_EQ(diff, 0u) << what << ": add_to_y differs from bf16(y0 + gemv)";

        // norm_weight, then with the SwiGLU epilogue
        auto r_h = random_bf16(static_cast<size_t>(m * sh.k), rng, 3.0f);
        for (int t = 0; t < m; ++t) {
          r_h[static_cast<size_t>(t * sh.k)] = 64.0f;
          r_h[static_cast<size_t>((t + 1) * sh.k - 1)] = -48.0f;
        }
        std::vector<float> g_h(static_cast<size_t>(sh.k));
        std::normal_distribution<float> gd(1.0f, 0.1f);
        for (auto& v : g_h) v = to_float(to_bf16(gd(rng)));
        const auto r = gpu().upload(host_view(r_h, Shape{m, sh.k}), DType::kBF16);
        const auto g = gpu().upload(host_view(g_h, Shape{sh.k}), DType::kBF16);
        std::vector<float> ref(static_cast<size_t>(m * sh.n));
        for (int t = 0; t < m; ++t) {
          const float* xr = r_h.data() + static_cast<size_t>(t * sh.k);
          double ss = 0;
          for (int64_t j = 0; j < sh.k; ++j) ss += static_cast<double>(xr[j]) * xr[j];
          const double inv = 1.0 / std::sqrt(ss / static_cast<double>(sh.k) + kEps);
          for (int64_t o = 0; o < sh.n; ++o) {
            double acc = 0;
            const float* wr = wd.data() + static_cast<size_t>(o * sh.k);
            for (int64_t j = 0; j < sh.k; ++j) acc += static_cast<double>(xr[j]) * inv * g_h[static_cast<size_t>(j)] * wr[j];
            ref[static_cast<size_t>(t * sh.n + o)] = static_cast<float>(acc + b_h[static_cast<size_t>(o)]);
          }
        }
        const auto normed = gpu().allocate(DType::kBF16, Shape{m, sh.n});
        const auto swiglu_y = gpu().allocate(DType::kBF16, Shape{m, sh.n});
        const auto act = gpu().allocate(DType::kBF16, Shape{m, sh.n / 2});
        poison(normed.view);
        poison(swiglu_y.view);
        poison(act.view);
        cuda::launch_quant_gemv({bf16(r), qw, bias, normed.view.data, false, m}, s, config, {false, bf16(g), kEps, nullptr});
        cuda::launch_quant_gemv({bf16(r), qw, bias, swiglu_y.view.data, false, m}, s, config,
                                {false, bf16(g), kEps, static_cast<__nv_bfloat16*>(act.view.data)});
        const auto ng = download(gpu(), normed.view), sg = download(gpu(), swiglu_y.view), ag = download(gpu(), act.view);
        const Compare cn = compare(ng, ref);
        EXPECT_EQ(cn.nans, 0) << what << ": normed outputs unwritten";
        EXPECT_LT(cn.rel_l2, 1e-2) << what << ": normed vs f64";
        const Compare cs = compare(sg, ng);
        EXPECT_EQ(cs.nans, 0) << what << ": SwiGLU-layout outputs unwritten";
        EXPECT_LT(cs.rel_l2, 1e-6) << what << ": SwiGLU-layout y vs normed y";
        std::vector<float> act_ref(static_cast<size_t>(m * sh.n / 2));
        const int64_t half = sh.n / 2;
        for (int t = 0; t < m; ++t)
          for (int64_t j = 0; j < half; ++j) {
            const float gv = sg[static_cast<size_t>(t * sh.n + j)], uv = sg[static_cast<size_t>(t * sh.n + half + j)];
            act_ref[static_cast<size_t>(t * half + j)] = gv / (1.0f + std::exp(-gv)) * uv;
          }
        const Compare ca = compare(ag, act_ref);
        EXPECT_EQ(ca.nans, 0) << what << ": act unwritten";
        EXPECT_LT(ca.rel_l2, 1e-2) << what << ": act vs silu(gate) * up";
      }
      ++index;
    }
}

// Sets the shared CUDA backend's fusion policy for one scope.
class FusionScope {
 public:
  explicit FusionScope(cuda::LinearFusion f) : old_(gpu().linear_fusion()) { gpu().set_linear_fusion(f); }
  ~FusionScope() { gpu().set_linear_fusion(old_); }

 private:
  cuda::LinearFusion old_;
};

TEST(QuantFusedChain, BackendChainMatchesComposition) {
  std::mt19937 rng(43);
  const int64_t h = 576, inter = 1536;  // hidden (a partial int4 step) and intermediate widths
  for (const auto& f : formats())
    for (int m : {1, 4, 8, 9}) {
      for (int variant = 0; variant < 3; ++variant) {
        // 0: o -> add -> norm -> gate_up + SwiGLU; 1: down -> add -> norm -> qkv; 2: a delta given as input
        const int64_t n = variant == 0 ? 2 * inter : 3 * h, kd = variant == 0 ? h : inter;
        QWeight w = make_weight(f, n, h, variant == 1, rng);
        QWeight wdl = make_weight(f, h, kd, variant == 0, rng);
        const auto res_h = random_bf16(static_cast<size_t>(m * h), rng, 2.0f);
        const auto dx_h = random_bf16(static_cast<size_t>(m * kd), rng);
        const auto delta_h = random_bf16(static_cast<size_t>(m * h), rng);
        std::vector<float> g_h(static_cast<size_t>(h));
        std::normal_distribution<float> gd(1.0f, 0.1f);
        for (auto& v : g_h) v = to_float(to_bf16(gd(rng)));
        const auto g = gpu().upload(host_view(g_h, Shape{h}), DType::kBF16);
        const auto dx = gpu().upload(host_view(dx_h, Shape{m, kd}), DType::kBF16);
        struct Run {
          backend::DeviceTensor residual, delta, normed, out, act;
        };
        auto run = [&](cuda::LinearFusion policy) {
          Run r{gpu().upload(host_view(res_h, Shape{m, h}), DType::kBF16),
                gpu().upload(host_view(delta_h, Shape{m, h}), DType::kBF16), gpu().allocate(DType::kBF16, Shape{m, h}),
                gpu().allocate(DType::kBF16, Shape{m, n}), gpu().allocate(DType::kBF16, Shape{m, n / 2})};
          poison(r.out.view);
          poison(r.act.view);
          backend::NormLinearArgs a{r.residual.view, r.delta.view, g.view, kEps, w.lw, r.normed.view, r.out.view,
                                    variant == 0 ? r.act.view : TensorView{}, {}, {}};
          if (variant != 2) {
            a.delta_x = dx.view;
            a.delta_linear = wdl.lw;
          }
          FusionScope scope(policy);
          const int64_t before = gpu().fused_linears();
          gpu().add_rms_norm_linear(a);
          const bool fusable = policy == cuda::LinearFusion::kAlways && m <= 8 && variant != 2;
          EXPECT_EQ(gpu().fused_linears() - before, fusable ? 1 : 0)
              << quant::format_name(f) << " m=" << m << " variant " << variant;
          return r;
        };
        const Run fused = run(cuda::LinearFusion::kAlways), composed = run(cuda::LinearFusion::kOff);
        run(cuda::LinearFusion::kWhenGemv);  // the default policy: the composition (counted as not fused)
        const std::string what = quant::format_name(f) + " m=" + std::to_string(m) + " variant " + std::to_string(variant);
        const Compare cr = compare(download(gpu(), fused.residual.view), download(gpu(), composed.residual.view));
        EXPECT_LT(cr.rel_l2, variant == 2 ? 1e-6 : 1e-2) << what << ": residual";
        const Compare co = compare(download(gpu(), fused.out.view), download(gpu(), composed.out.view));
        EXPECT_EQ(co.nans, 0) << what << ": out unwritten";
        EXPECT_LT(co.rel_l2, 2e-2) << what << ": out";
        if (variant == 0) {
          const Compare ca = compare(download(gpu(), fused.act.view), download(gpu(), composed.act.view));
          EXPECT_EQ(ca.nans, 0) << what << ": act unwritten";
          EXPECT_LT(ca.rel_l2, 2e-2) << what << ": act";
        }
      }
    }
}

}  // namespace
}  // namespace xinfer::gpu_test
