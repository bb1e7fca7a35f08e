// The fused decode op add_rms_norm_linear (backend.h) and its CUDA kernel (gemv.h: launch_fused_gemv):
//  - the kernel against add_rms_norm -> launch_gemv (-> silu_mul) launched with the same GEMV configuration,
//    bit for bit (residual, normed x, y, act), for every configuration, few and many CTAs (the persistent
//    loop), with and without delta / bias / SwiGLU, awkward sizes, repeated launches sharing one ticket
//    counter, and a CUDA graph of PDL launches replayed twice;
//  - CudaBackend::add_rms_norm_linear against the CPU backend (m = 1, 3, 8 fused; m = 9 composed), and
//    against its own composition (kOff): residual and normed x bit-identical, y and act within bf16 noise;
//  - a tuned CudaBackend (kWhenGemv): fused exactly where the tuner chose the GEMV, and then bit-identical
//    to the composition.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <optional>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "xinfer/backend/cuda/kernels/elementwise/silu_mul.h"
#include "xinfer/backend/cuda/kernels/gemm/gemm_tuner.h"
#include "xinfer/backend/cuda/kernels/gemm/gemv.h"
#include "xinfer/backend/cuda/kernels/norm/rms_norm.h"

namespace xinfer::gpu_test {
namespace {

using cuda::GemvConfig;
constexpr float kEps = 1e-5f;
constexpr double kTol = 1e-2;  // relative L2 of bf16 results vs the f32 CPU backend (ops_test.cpp's)

// Norm weights near 1, as models have them.
std::vector<float> norm_weights(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> d(1.0f, 0.1f);
  std::vector<float> v(n);
  for (auto& x : v) x = to_float(to_bf16(d(rng)));
  return v;
}

std::vector<uint16_t> raw_bf16(backend::Backend& b, const TensorView& t) {
  std::vector<uint16_t> out(static_cast<size_t>(t.numel()));
  b.to_host_raw(t, out.data());
  return out;
}

// Bitwise equality of two bf16 device tensors; names the first difference.
void expect_same_bits(backend::Backend& b, const TensorView& got, const TensorView& want, const std::string& what) {
  const auto g = raw_bf16(b, got), w = raw_bf16(b, want);
  ASSERT_EQ(g.size(), w.size()) << what;
  size_t diff = 0, first = 0;
  for (size_t i = 0; i < g.size(); ++i)
    if (g[i] != w[i] && diff++ == 0) first = i;
  EXPECT_EQ(diff, 0u) << what << ": " << diff << " of " << g.size() << " elements differ, first at " << first
                      << " (bits " << g[first] << " vs " << w[first] << ")";
}

struct Case {
  int m, n, k;
  bool bias, delta, act;
  std::string name() const {
    return "m" + std::to_string(m) + "_n" + std::to_string(n) + "_k" + std::to_string(k) + (bias ? "_bias" : "") +
           (delta ? "_delta" : "") + (act ? "_silu" : "");
  }
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name(); }

// One problem on one backend: host values, device tensors for the fused op and for the reference.
struct Problem {
  Case c;
  std::vector<float> residual, delta, norm_w, w, bias;
  Problem(const Case& cs, uint32_t seed) : c(cs) {
    std::mt19937 rng(seed);
    const auto mk = static_cast<size_t>(c.m) * c.k;
    residual = random_bf16(mk, rng);
    delta = random_bf16(mk, rng, 0.5f);
    norm_w = norm_weights(static_cast<size_t>(c.k), rng);
    w = random_bf16(static_cast<size_t>(c.n) * c.k, rng, 0.05f);
    bias = random_bf16(static_cast<size_t>(c.n), rng, 0.5f);
  }
};

// Device tensors of one run (fused or reference) of a Problem; the read-only inputs (delta, weights) may be
// shared with another run on the same backend.
struct Buffers {
  backend::DeviceTensor residual, delta, norm_w, w, bias, normed, out, act;
  Buffers(backend::Backend& b, const Problem& p, const Buffers* share = nullptr) {
    const Case& c = p.c;
    const DType dt = b.info().activation_dtype;
    residual = b.upload(host_view(p.residual, Shape{c.m, c.k}), dt);
    if (share) {
      delta = share->delta;
      norm_w = share->norm_w;
      w = share->w;
      bias = share->bias;
    } else {
      delta = b.upload(host_view(p.delta, Shape{c.m, c.k}), dt);
      norm_w = b.upload(host_view(p.norm_w, Shape{c.k}), dt);
      w = b.upload(host_view(p.w, Shape{c.n, c.k}), dt);
      bias = b.upload(host_view(p.bias, Shape{c.n}), dt);
    }
    normed = b.allocate(dt, Shape{c.m, c.k});
    out = b.allocate(dt, Shape{c.m, c.n});
    act = b.allocate(dt, Shape{c.m, c.n / 2});
  }
  // residual = src (device copy on the CUDA backend's stream)
  void set_residual(const backend::DeviceTensor& src) const {
    XI_CUDA_CHECK(cudaMemcpyAsync(residual.view.data, src.view.data, src.view.bytes(), cudaMemcpyDeviceToDevice,
                                  gpu().stream()));
  }
  backend::NormLinearArgs args(const Case& c) const {
    return {residual.view, c.delta ? delta.view : TensorView{}, norm_w.view, kEps,
            {w.view, c.bias ? bias.view : TensorView{}}, normed.view, out.view, c.act ? act.view : TensorView{}};
  }
  template <typename T>
  static T* p(const backend::DeviceTensor& t) {
    return static_cast<T*>(t.view.data);
  }
  cuda::FusedGemvArgs fused(const Case& c, unsigned* counter, int num_sms) const {
    cuda::FusedGemvArgs f;
    f.gemm = {nullptr, p<__nv_bfloat16>(w), c.bias ? p<__nv_bfloat16>(bias) : nullptr, out.view.data, false, c.m, c.n, c.k};
    f.residual = p<__nv_bfloat16>(residual);
    f.delta = c.delta ? p<__nv_bfloat16>(delta) : nullptr;
    f.norm_weight = p<__nv_bfloat16>(norm_w);
    f.eps = kEps;
    f.normed_out = p<__nv_bfloat16>(normed);
    f.counter = counter;
    f.act = c.act ? p<__nv_bfloat16>(act) : nullptr;
    f.num_sms = num_sms;
    return f;
  }
  // add_rms_norm -> launch_gemv(config) -> silu_mul: what the fused kernel must equal bit for bit.
  void reference(const Case& c, const GemvConfig& config, cudaStream_t s) const {
    cuda::launch_add_rms_norm({p<__nv_bfloat16>(residual), c.delta ? p<__nv_bfloat16>(delta) : nullptr,
                               p<__nv_bfloat16>(norm_w), p<__nv_bfloat16>(normed), c.m, c.k, kEps},
                              s);
    cuda::launch_gemv({p<__nv_bfloat16>(normed), p<__nv_bfloat16>(w), c.bias ? p<__nv_bfloat16>(bias) : nullptr,
                       out.view.data, false, c.m, c.n, c.k},
                      config, s);
    if (c.act) cuda::launch_silu_mul({p<__nv_bfloat16>(out), p<__nv_bfloat16>(act), c.m, c.n / 2}, s);
  }
  void expect_same(backend::Backend& b, const Buffers& ref, const Case& c, const std::string& what) const {
    expect_same_bits(b, residual.view, ref.residual.view, what + " residual");
    expect_same_bits(b, normed.view, ref.normed.view, what + " normed_out");
    expect_same_bits(b, out.view, ref.out.view, what + " out");
    if (c.act) expect_same_bits(b, act.view, ref.act.view, what + " act");
  }
};

unsigned counter_value(const backend::DeviceTensor& counter) {
  unsigned v = 1;
  gpu().to_host_raw(counter.view, &v);
  return v;
}

class FusedGemvTest : public ::testing::TestWithParam<Case> {};

TEST_P(FusedGemvTest, EveryConfigMatchesComposition) {
  const Case c = GetParam();
  const Problem prob(c, static_cast<uint32_t>(c.m * 131 + c.n * 7 + c.k));
  const auto counter = gpu().allocate(DType::kI32, Shape{1});  // zeroed; shared by every launch below
  unsigned* cnt = static_cast<unsigned*>(counter.view.data);
  cudaStream_t s = gpu().stream();
  int tested = 0;
  const Buffers fused(gpu(), prob), ref(gpu(), prob, &fused);
  const auto residual0 = gpu().upload(host_view(prob.residual, Shape{c.m, c.k}), DType::kBF16);
  for (int r : {1, 2, 4})
    for (int ks : {1, 2, 4, 8})
      for (int num_sms : {1, 3, gpu().num_sms()}) {
        const GemvConfig config{r, ks, num_sms == 3};  // PDL on one of them
        if (!cuda::fused_gemv_supports(fused.fused(c, cnt, num_sms), config)) {
          // Only the SwiGLU pairing may refuse a configuration for these shapes.
          EXPECT_TRUE(c.act && (8 / ks * r) % 2 != 0) << cuda::to_string(config);
          continue;
        }
        fused.set_residual(residual0);
        ref.set_residual(residual0);
        for (auto* t : {&fused.normed, &fused.out, &fused.act}) poison(t->view);
        ref.reference(c, config, s);
        cuda::launch_fused_gemv(fused.fused(c, cnt, num_sms), config, s);
        const std::string what = cuda::to_string(config) + " sms " + std::to_string(num_sms);
        fused.expect_same(gpu(), ref, c, what);
        // Launch again on the updated residual: the counter must have been reset for the ticket to work.
        ref.reference(c, config, s);
        cuda::launch_fused_gemv(fused.fused(c, cnt, num_sms), config, s);
        fused.expect_same(gpu(), ref, c, what + " (second launch)");
        ++tested;
      }
  EXPECT_GT(tested, 0);
  EXPECT_EQ(counter_value(counter), 0u) << "the ticket counter must be left at 0";
}

INSTANTIATE_TEST_SUITE_P(Shapes, FusedGemvTest,
                         ::testing::Values(Case{1, 6144, 4096, false, true, false},   // Llama-3.1-8B qkv
                                           Case{1, 28672, 4096, false, true, true},   // 8B gate_up + SwiGLU
                                           Case{3, 2000, 4096, true, true, true},
                                           Case{1, 270, 136, true, true, true},
                                           Case{5, 1554, 4104, false, true, true},
                                           Case{8, 520, 4104, true, true, false},    // 66 KB of x in smem
                                           Case{8, 1024, 4096, false, true, true},
                                           Case{2, 96, 4096, false, false, false},   // plain rms_norm
                                           Case{7, 33, 64, true, true, false}),
                         [](const auto& param_info) { return param_info.param.name(); });

// Three fused launches (PDL) recorded in one graph and replayed twice: six updates of the residual, as
// six eager reference steps make them.
TEST(FusedGemvGraphTest, ReplaysMatchComposition) {
  const Case c{1, 6144, 4096, false, true, true};
  const Problem prob(c, 77);
  const auto counter = gpu().allocate(DType::kI32, Shape{1});
  unsigned* cnt = static_cast<unsigned*>(counter.view.data);
  const GemvConfig config{2, 2, true};
  Buffers fused(gpu(), prob), ref(gpu(), prob, &fused);
  cudaStream_t s = gpu().stream();
  gpu().synchronize();
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed), cudaSuccess);
  for (int i = 0; i < 3; ++i) cuda::launch_fused_gemv(fused.fused(c, cnt, gpu().num_sms()), config, s);
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int i = 0; i < 2; ++i) ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
  for (int i = 0; i < 6; ++i) ref.reference(c, config, s);
  fused.expect_same(gpu(), ref, c, "graph");
  EXPECT_EQ(counter_value(counter), 0u);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

// Sets the shared CUDA backend's fusion policy for one scope.
class FusionScope {
 public:
  explicit FusionScope(cuda::LinearFusion f) : old_(gpu().linear_fusion()) { gpu().set_linear_fusion(f); }
  ~FusionScope() { gpu().set_linear_fusion(old_); }

 private:
  cuda::LinearFusion old_;
};

class AddRmsNormLinearTest : public ::testing::TestWithParam<Case> {};

TEST_P(AddRmsNormLinearTest, MatchesCpuAndComposition) {
  const Case c = GetParam();
  const Problem prob(c, static_cast<uint32_t>(c.m * 17 + c.n + c.k * 3));
  Buffers fused(gpu(), prob), composed(gpu(), prob, &fused), ref(cpu(), prob);
  for (auto* t : {&fused.normed, &fused.out, &fused.act}) poison(t->view);
  {
    FusionScope scope(cuda::LinearFusion::kAlways);
    const bool fits = static_cast<size_t>(c.m) * c.k * 2 <= cuda::kFusedGemvMaxSmemBytes;
    EXPECT_EQ(gpu().fused_linear_config(fused.args(c)).has_value(), c.m <= 8 && fits)
        << "kAlways fuses every m <= 8 the kernel takes; m > 8 is the composition";
    gpu().add_rms_norm_linear(fused.args(c));
  }
  {
    FusionScope scope(cuda::LinearFusion::kOff);
    EXPECT_FALSE(gpu().fused_linear_config(composed.args(c)).has_value());
    gpu().add_rms_norm_linear(composed.args(c));
  }
  cpu().add_rms_norm_linear(ref.args(c));
  expect_close(fused.residual.view, ref.residual.view, kTol, "residual vs cpu");
  expect_close(fused.normed.view, ref.normed.view, kTol, "normed_out vs cpu");
  expect_close(fused.out.view, ref.out.view, kTol, "out vs cpu");
  if (c.act) expect_close(fused.act.view, ref.act.view, kTol, "act vs cpu");
  // The norm is the same arithmetic in both paths; the linear may differ (GEMV vs cuBLASLt) within bf16 noise.
  expect_same_bits(gpu(), fused.residual.view, composed.residual.view, "residual vs composition");
  expect_same_bits(gpu(), fused.normed.view, composed.normed.view, "normed_out vs composition");
  const Compare co = compare(download(gpu(), fused.out.view), download(gpu(), composed.out.view));
  EXPECT_EQ(co.nans, 0);
  EXPECT_LT(co.rel_l2, 1e-2) << "out vs composition";
  if (c.act) {
    const Compare ca = compare(download(gpu(), fused.act.view), download(gpu(), composed.act.view));
    EXPECT_EQ(ca.nans, 0);
    EXPECT_LT(ca.rel_l2, 1e-2) << "act vs composition";
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, AddRmsNormLinearTest,
                         ::testing::Values(Case{1, 6144, 4096, false, true, false}, Case{3, 6144, 4096, true, true, false},
                                           Case{8, 4096, 4096, false, true, true}, Case{9, 4096, 4096, false, true, true},
                                           Case{1, 272, 136, true, true, true}, Case{3, 200, 136, false, false, false},
                                           Case{9, 272, 136, true, true, true}, Case{1, 1000, 4104, false, true, true},
                                           Case{8, 1000, 4104, true, true, false}),
                         [](const auto& param_info) { return param_info.param.name(); });

// The kWhenGemv policy on a tuned backend: fused exactly where the tuner runs the linear as the GEMV at that
// m (with the tuned configuration), and then bit-identical to the composition.
TEST(AddRmsNormLinearTunedTest, FusedWhereGemvAndBitIdentical) {
  cuda::CudaBackendOptions o;
  o.gemm_tuning_cache = "off";
  o.linear_fusion = cuda::LinearFusion::kWhenGemv;
  cuda::CudaBackend be(o);
  ASSERT_EQ(be.linear_fusion(), cuda::LinearFusion::kWhenGemv);
  const std::vector<Case> cases = {{1, 6144, 4096, false, true, false}, {1, 4096, 4096, true, true, true},
                                   {2, 6144, 4096, false, true, false}, {3, 4096, 4096, true, true, true},
                                   {8, 6144, 4096, false, true, false}};
  be.tune_linears({{6144, 4096, false, false, 8}, {4096, 4096, false, true, 8}}, false);
  int fused_cases = 0;
  for (const Case& c : cases) {
    const Problem prob(c, static_cast<uint32_t>(c.m + c.n));
    Buffers fused(be, prob), composed(be, prob, &fused);
    const std::optional<GemvConfig> config = be.fused_linear_config(fused.args(c));
    const cuda::GemmChoice choice =
        be.gemm().choice_for({static_cast<const __nv_bfloat16*>(fused.normed.view.data),
                              static_cast<const __nv_bfloat16*>(fused.w.view.data),
                              c.bias ? static_cast<const __nv_bfloat16*>(fused.bias.view.data) : nullptr,
                              fused.out.view.data, false, c.m, c.n, c.k});
    if (choice.kind != cuda::GemmKind::kGemv) {
      EXPECT_FALSE(config.has_value()) << c.name() << ": fused although the tuner chose " << cuda::gemm_kind_name(choice.kind);
    } else if (config) {
      EXPECT_EQ(*config, choice.gemv) << c.name();
      ++fused_cases;
    } else {
      // Only the SwiGLU pairing may refuse the tuned GEMV configuration.
      EXPECT_TRUE(c.act && (8 / choice.gemv.k_split * choice.gemv.rows_per_warp) % 2 != 0) << c.name();
    }
    std::printf("[ fused ] %-28s tuner: %-18s -> %s\n", c.name().c_str(),
                choice.kind == cuda::GemmKind::kGemv ? cuda::to_string(choice.gemv).c_str()
                                                     : cuda::gemm_kind_name(choice.kind),
                config ? "fused" : "composed");
    be.add_rms_norm_linear(fused.args(c));
    be.set_linear_fusion(cuda::LinearFusion::kOff);
    be.add_rms_norm_linear(composed.args(c));
    be.set_linear_fusion(cuda::LinearFusion::kWhenGemv);
    fused.expect_same(be, composed, c, c.name());
  }
  std::printf("[ fused ] %d of %zu cases ran fused\n", fused_cases, cases.size());
}

}  // namespace
}  // namespace xinfer::gpu_test
