// GEMMs of linears (kernels/gemm) against a host reference accumulated in double on the same bf16 values:
// the GEMV kernel in every configuration (m <= 8 in one launch, more rows in chunks of 8), every cuBLASLt
// algorithm the tuner may pick (split-K variants included), and the tuned dispatch (GemmTuner::run,
// CudaBackend::linear after tune_linears and untuned) for m on, between and past the tuned row counts,
// including shapes cuBLASLt has no algorithm for (n = 1 with bias and f32 output: the GEMV fallback) and
// the clear failure when nothing can compute a shape; a PDL GEMV chain and tuned GEMMs inside a CUDA
// graph; the tuning cache's round trip, merge, and corrupt-file handling. Outputs are NaN-poisoned first.
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <tuple>

#include "gpu_test_util.h"
#include "xinfer/backend/counter_rng.h"
#include "xinfer/backend/cuda/kernels/gemm/gemm_tuner.h"
#include "xinfer/backend/cuda/kernels/gemm/gemm_tuning_cache.h"
#include "xinfer/backend/cuda/kernels/gemm/gemv.h"
#include "xinfer/backend/cuda/kernels/random/random_normal.h"

namespace xinfer::gpu_test {
namespace {

using cuda::GemmArgs;
using cuda::GemmChoice;
using cuda::GemmKind;
using cuda::GemmShape;
using cuda::GemmTuner;
using cuda::GemmTunerOptions;
using cuda::GemmTuningEntry;
using cuda::GemmTuningKey;
using cuda::GemvConfig;

// y[m, n] = x[m, k] w[n, k]^T + bias in double, then rounded to bf16 when the device writes bf16.
std::vector<float> reference(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& bias,
                             int m, int n, int k, bool bf16_out) {
  std::vector<float> y(static_cast<size_t>(m) * n);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      const float* xr = &x[static_cast<size_t>(i) * k];
      const float* wr = &w[static_cast<size_t>(j) * k];
      double s = bias.empty() ? 0.0 : bias[static_cast<size_t>(j)];
      for (int t = 0; t < k; ++t) s += static_cast<double>(xr[t]) * wr[t];
      const float f = static_cast<float>(s);
      y[static_cast<size_t>(i) * n + j] = bf16_out ? to_float(to_bf16(f)) : f;
    }
  return y;
}

// Element-wise |a - ref| <= atol + rtol |ref| with atol relative to the output's RMS: f32 outputs differ
// from the reference only by f32 summation order; bf16 outputs also by one rounding (and by bf16 split-K
// reductions in cuBLASLt). Also no NaN (every element written). Returns a description of the failure.
std::string mismatch(const std::vector<float>& a, const std::vector<float>& ref, bool f32_out) {
  double ms = 0;
  for (float r : ref) ms += static_cast<double>(r) * r;
  const double rms = std::sqrt(ms / static_cast<double>(std::max<size_t>(ref.size(), 1)));
  const double atol = (f32_out ? 1e-4 : 2e-2) * rms + 1e-6, rtol = f32_out ? 1e-5 : 1.0 / 128;
  int64_t bad = 0;
  std::string first;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = std::abs(static_cast<double>(a[i]) - ref[i]);
    if (std::isnan(a[i]) || d > atol + rtol * std::abs(ref[i])) {
      if (bad++ == 0) first = "element " + std::to_string(i) + ": " + std::to_string(a[i]) + " vs " + std::to_string(ref[i]);
    }
  }
  return bad == 0 ? "" : std::to_string(bad) + " of " + std::to_string(ref.size()) + " elements off; first " + first;
}

// One GEMM's random bf16-valued operands on the device and its host reference.
struct Problem {
  int m, n, k;
  bool bias, f32;
  std::vector<float> x, w, b, ref;
  backend::DeviceTensor dx, dw, db, dy;

  Problem(int m_, int n_, int k_, bool bias_, bool f32_, uint32_t seed) : m(m_), n(n_), k(k_), bias(bias_), f32(f32_) {
    std::mt19937 rng(seed);
    x = random_bf16(static_cast<size_t>(m) * k, rng);
    w = random_bf16(static_cast<size_t>(n) * k, rng, 0.05f);
    if (bias) b = random_bf16(static_cast<size_t>(n), rng);
    dx = gpu().upload(host_view(x, Shape{m, k}), DType::kBF16);
    dw = gpu().upload(host_view(w, Shape{n, k}), DType::kBF16);
    if (bias) db = gpu().upload(host_view(b, Shape{n}), DType::kBF16);
    dy = gpu().allocate(f32 ? DType::kF32 : DType::kBF16, Shape{m, n});
    ref = reference(x, w, b, m, n, k, !f32);
  }
  GemmArgs args() const {
    return GemmArgs{static_cast<const __nv_bfloat16*>(dx.view.data), static_cast<const __nv_bfloat16*>(dw.view.data),
                    bias ? static_cast<const __nv_bfloat16*>(db.view.data) : nullptr, dy.view.data, f32, m, n, k};
  }
  std::string name() const {
    return "m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k) + (bias ? " +bias" : "") +
           (f32 ? " f32" : " bf16");
  }
  void poison() const { gpu_test::poison(dy.view); }
  // Downloads y (synchronizing the backend stream) and compares it with the reference.
  std::string check() const { return mismatch(download(gpu(), dy.view), ref, f32); }
};

std::vector<GemvConfig> all_gemv_configs() {
  std::vector<GemvConfig> out;
  for (bool pdl : {false, true})
    for (int r : {1, 2, 4})
      for (int ks : {1, 2, 4, 8}) out.push_back(GemvConfig{r, ks, pdl});
  return out;
}

std::string temp_path(const std::string& name) {
  const auto dir = std::filesystem::path(::testing::TempDir()) / ("xinfer_gemm_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

// A shape's arguments without data (what cuBLASLt's heuristic looks at: sizes, dtype, whether a bias).
GemmArgs shape_only(const GemmTuningKey& key) {
  static const uint4 some_bias{};
  return GemmArgs{nullptr, nullptr, key.bias ? reinterpret_cast<const __nv_bfloat16*>(&some_bias) : nullptr, nullptr,
                  key.y_f32, key.m, key.n, key.k};
}

// The shape cuBLASLt 13 on the H200 has no algorithm for at any m (found on the device): n = 1, k = 8,
// bias, f32 output. Tests that need such a shape check that it still has none (and skip otherwise).
constexpr GemmShape kNoCublasLtShape{1, 8, true, true, 9};

GemmTunerOptions quiet_options(const std::string& cache_path = "") {
  GemmTunerOptions o;
  o.show_progress = false;
  o.cache_path = cache_path;
  o.reuse_process_choices = false;  // these tests count what was measured
  return o;
}

// ---- GEMV kernel ----

struct GemmCase {
  int m, n, k;
  bool bias, f32;
};
std::string case_name(const ::testing::TestParamInfo<GemmCase>& info) {
  const GemmCase& c = info.param;
  std::ostringstream os;
  os << 'm' << c.m << "_n" << c.n << "_k" << c.k << (c.bias ? "_bias" : "") << (c.f32 ? "_f32" : "_bf16");
  return os.str();
}

class GemvTest : public ::testing::TestWithParam<GemmCase> {};
TEST_P(GemvTest, EveryConfigMatchesReference) {
  const GemmCase c = GetParam();
  const Problem p(c.m, c.n, c.k, c.bias, c.f32, static_cast<uint32_t>(c.m * 7919 + c.n * 31 + c.k));
  ASSERT_TRUE(cuda::gemv_supports(p.args()));
  // Every configuration must be right, also those the tuner would skip (warps without any k); m > 8
  // runs in chunks of 8 rows.
  for (const GemvConfig& g : all_gemv_configs()) {
    p.poison();
    cuda::launch_gemv(p.args(), g, gpu().stream());
    const std::string err = p.check();
    EXPECT_EQ(err, "") << p.name() << " " << cuda::to_string(g);
  }
}
INSTANTIATE_TEST_SUITE_P(Shapes, GemvTest,
                         ::testing::Values(GemmCase{1, 4097, 4104, false, false}, GemmCase{1, 7, 136, true, true},
                                           GemmCase{1, 1, 8, false, true}, GemmCase{3, 4097, 136, true, false},
                                           GemmCase{3, 1, 4104, false, false}, GemmCase{7, 7, 4104, true, true},
                                           GemmCase{7, 4097, 136, false, true}, GemmCase{8, 4097, 8, false, false},
                                           GemmCase{8, 4097, 4104, true, true}, GemmCase{8, 1, 136, true, false},
                                           GemmCase{2, 7, 8, true, true}, GemmCase{1, 4096, 4096, false, false},
                                           GemmCase{9, 4097, 136, true, false}, GemmCase{17, 7, 264, false, true},
                                           GemmCase{40, 1, 8, true, true}),
                         case_name);

TEST(GemvSupportsTest, Limits) {
  const Problem p(8, 7, 136, false, false, 1);
  GemmArgs a = p.args();
  EXPECT_TRUE(cuda::gemv_supports(a));
  a.m = 9;
  EXPECT_TRUE(cuda::gemv_supports(a)) << "m > 8 runs in chunks of 8 rows";
  a.m = 1000;
  EXPECT_TRUE(cuda::gemv_supports(a));
  a.m = 0;
  EXPECT_FALSE(cuda::gemv_supports(a)) << "m == 0";
  a = p.args();
  a.k = 132;
  EXPECT_FALSE(cuda::gemv_supports(a)) << "k % 8 != 0";
  a = p.args();
  a.x = a.x + 1;
  EXPECT_FALSE(cuda::gemv_supports(a)) << "x not 16-byte aligned";
  a = p.args();
  a.w = a.w + 4;
  EXPECT_FALSE(cuda::gemv_supports(a)) << "w not 16-byte aligned";
  EXPECT_TRUE(cuda::gemv_candidates(a, false).empty());
  // k = 136: one 256-element warp step, so only k_split 1 is worth timing.
  for (const GemvConfig& g : cuda::gemv_candidates(p.args(), true)) {
    EXPECT_EQ(g.k_split, 1) << cuda::to_string(g);
    EXPECT_TRUE(g.pdl);
  }
  EXPECT_EQ(cuda::gemv_candidates(p.args(), false).size(), 3u);
  // The untuned configuration: k split over as many warps as have a full 256-element step.
  a = p.args();
  EXPECT_EQ(cuda::gemv_default_config(a), (GemvConfig{1, 1, false}));
  a.k = 512;
  EXPECT_EQ(cuda::gemv_default_config(a), (GemvConfig{1, 2, false}));
  a.k = 1016;
  EXPECT_EQ(cuda::gemv_default_config(a), (GemvConfig{1, 2, false}));
  a.k = 4104;
  EXPECT_EQ(cuda::gemv_default_config(a), (GemvConfig{1, 8, false}));
  for (int k : {8, 136, 512, 1016, 2048, 4104}) {
    a.k = k;
    const auto configs = cuda::gemv_candidates(a, false);
    EXPECT_NE(std::find(configs.begin(), configs.end(), cuda::gemv_default_config(a)), configs.end()) << "k=" << k;
  }
}

// ---- cuBLASLt candidates ----

// model_like: shapes like a model's linears (large n and k), for which cuBLASLt must offer algorithms.
struct LtCase {
  GemmCase shape;
  bool model_like;
};
std::string lt_case_name(const ::testing::TestParamInfo<LtCase>& info) {
  return case_name(::testing::TestParamInfo<GemmCase>(info.param.shape, info.index));
}

class CublasLtCandidatesTest : public ::testing::TestWithParam<LtCase> {};
TEST_P(CublasLtCandidatesTest, EveryCandidateMatchesReference) {
  const GemmCase c = GetParam().shape;
  const Problem p(c.m, c.n, c.k, c.bias, c.f32, static_cast<uint32_t>(c.m * 131 + c.n + c.k));
  // Whatever cuBLASLt offers, the library computes the shape (untuned dispatch: the heuristic, or the
  // GEMV where cuBLASLt has nothing).
  {
    GemmTuner untuned;
    const GemmChoice choice = untuned.choice_for(p.args());
    EXPECT_NE(choice.kind, GemmKind::kNone) << p.name();
    EXPECT_EQ(choice.kind == GemmKind::kGemv, untuned.cublaslt().find_heuristic(p.args()) == nullptr) << p.name();
    p.poison();
    untuned.run(p.args(), gpu().stream());
    const std::string err = p.check();
    EXPECT_EQ(err, "") << p.name() << " through GemmTuner::run (" << cuda::gemm_kind_name(choice.kind) << ")";
  }
  cuda::CublasLtGemm gemm;
  if (gemm.candidates(p.args(), 1).empty()) {
    ASSERT_FALSE(GetParam().model_like) << "cuBLASLt has no algorithm for the model-like " << p.name();
    EXPECT_EQ(gemm.find_heuristic(p.args()), nullptr);
    EXPECT_TRUE(gemm.candidates(p.args(), 16).empty());
    GTEST_SKIP() << "cuBLASLt has no algorithm for " << p.name() << " (GemmTuner::run computed it with the GEMV)";
  }
  std::vector<cublasLtMatmulAlgo_t> algos = gemm.candidates(p.args(), 16);
  ASSERT_NE(gemm.find_heuristic(p.args()), nullptr);
  algos.push_back(gemm.heuristic(p.args()));
  for (const cublasLtMatmulAlgo_t& algo : algos) {
    EXPECT_TRUE(gemm.check(p.args(), algo)) << cuda::CublasLtGemm::describe(algo);
    p.poison();
    ASSERT_TRUE(gemm.try_run(p.args(), algo, gpu().stream())) << cuda::CublasLtGemm::describe(algo);
    const std::string err = p.check();
    EXPECT_EQ(err, "") << p.name() << " " << cuda::CublasLtGemm::describe(algo);
  }
  std::printf("[ gemm ] %s: %zu cuBLASLt candidates checked\n", p.name().c_str(), algos.size());
}
INSTANTIATE_TEST_SUITE_P(Shapes, CublasLtCandidatesTest,
                         ::testing::Values(LtCase{{1, 4097, 4104, true, false}, true},
                                           LtCase{{9, 4097, 4104, false, true}, true},
                                           LtCase{{33, 4097, 4104, true, false}, true},
                                           LtCase{{16, 1024, 4096, false, false}, true},
                                           LtCase{{7, 7, 136, true, true}, false}, LtCase{{3, 1, 8, false, false}, false},
                                           LtCase{{9, 1, 8, true, true}, false}),
                         lt_case_name);

// ---- the tuner ----

TEST(GemmTunerTest, TunedMs) {
  EXPECT_EQ(GemmTuner::tuned_ms(1), (std::vector<int>{1}));
  EXPECT_EQ(GemmTuner::tuned_ms(2), (std::vector<int>{1, 2}));
  EXPECT_EQ(GemmTuner::tuned_ms(33), (std::vector<int>{1, 2, 4, 8, 16, 32, 33}));
  EXPECT_EQ(GemmTuner::tuned_ms(2048).size(), 12u);
  EXPECT_EQ(GemmTuner::tuned_ms(2048).back(), 2048);
}

// run() for m on, between and past the tuned row counts matches the reference, eagerly and in a graph;
// where cuBLASLt has no algorithm the tuner records that (no heuristic time) and times the GEMV instead.
TEST(GemmTunerTest, TunedRunMatchesReference) {
  GemmTuner tuner;
  const std::vector<GemmShape> shapes = {{4097, 4104, false, true, 33}, {7, 136, true, false, 33}, kNoCublasLtShape};
  const cuda::GemmTuneSummary sum = tuner.tune(shapes, quiet_options(), gpu().stream());
  std::printf("[ gemm ] %s\n", sum.to_string().c_str());
  EXPECT_EQ(sum.points, 7 + 7 + 5);
  EXPECT_EQ(sum.tuned, sum.points);
  EXPECT_EQ(sum.cached, 0);
  EXPECT_EQ(sum.none, 0) << "every shape here has k % 8 == 0: the GEMV can always take it";
  EXPECT_EQ(sum.gemv + sum.cublaslt + sum.heuristic, sum.points);
  int without_cublaslt = 0;
  for (const auto& [key, c] : tuner.table()) {
    const std::string where = "n=" + std::to_string(key.n) + " k=" + std::to_string(key.k) + " m=" + std::to_string(key.m);
    EXPECT_NE(c.kind, GemmKind::kNone) << where;
    EXPECT_GT(c.us, 0.0f) << where;
    // The heuristic time is absent exactly when cuBLASLt has no algorithm; then the GEMV is the choice.
    const bool cublaslt_has_one = tuner.cublaslt().find_heuristic(shape_only(key)) != nullptr;
    EXPECT_EQ(c.heuristic_us.has_value(), cublaslt_has_one) << where;
    if (c.heuristic_us) {
      EXPECT_GT(*c.heuristic_us, 0.0f) << where;
      EXPECT_LE(c.us, *c.heuristic_us) << "a choice slower than the heuristic, " << where;
      if (c.kind == GemmKind::kGemv) {
        EXPECT_LE(key.m, 8) << "past 8 rows the GEMV is only the fallback, " << where;
      }
    } else {
      ++without_cublaslt;
      EXPECT_EQ(c.kind, GemmKind::kGemv) << where;
    }
    std::printf("[ gemm ] n=%d k=%d m=%d: %s %.1f us (heuristic %s)\n", key.n, key.k, key.m,
                c.kind == GemmKind::kGemv       ? cuda::to_string(c.gemv).c_str()
                : c.kind == GemmKind::kCublasLt ? cuda::CublasLtGemm::describe(c.algo).c_str()
                                                : "heuristic",
                c.us, c.heuristic_us ? (std::to_string(*c.heuristic_us) + " us").c_str() : "none: no cuBLASLt algorithm");
  }
  EXPECT_EQ(sum.no_cublaslt, without_cublaslt);
  std::printf("[ gemm ] %d tuned points without a cuBLASLt algorithm (GEMV fallback)\n", without_cublaslt);

  for (const GemmShape& sh : shapes)
    for (int m : {1, 3, 7, 8, 9, 16, 33, 40}) {
      const Problem p(m, sh.n, sh.k, sh.bias, sh.y_f32, static_cast<uint32_t>(m + sh.n));
      const GemmChoice choice = tuner.choice_for(p.args());
      ASSERT_NE(choice.kind, GemmKind::kNone) << p.name();
      if (tuner.cublaslt().find_heuristic(p.args()) == nullptr) {
        EXPECT_EQ(choice.kind, GemmKind::kGemv) << "no cuBLASLt algorithm for " << p.name();
      }
      p.poison();
      tuner.run(p.args(), gpu().stream());
      const std::string err = p.check();
      EXPECT_EQ(err, "") << p.name() << " choice " << cuda::gemm_kind_name(choice.kind);
    }

  // The same dispatch recorded in a CUDA graph (after a first eager call per shape) and replayed,
  // including the fallback shape past 8 rows (chunked GEMV launches).
  const Problem p1(1, 4097, 4104, true, false, 11), p33(33, 4097, 4104, true, false, 12), p5(5, 7, 136, false, true, 13),
      pn3(3, 1, 8, true, true, 14), pn40(40, 1, 8, true, true, 15);
  const std::vector<const Problem*> graph_problems = {&p1, &p33, &p5, &pn3, &pn40};
  for (const Problem* p : graph_problems) tuner.run(p->args(), gpu().stream());
  cudaStream_t s = nullptr;
  XI_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  gpu().synchronize();
  XI_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  for (const Problem* p : graph_problems) tuner.run(p->args(), s);
  cudaGraph_t graph = nullptr;
  XI_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
  cudaGraphExec_t exec = nullptr;
  XI_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (const Problem* p : graph_problems) p->poison();
  gpu().synchronize();
  XI_CUDA_CHECK(cudaGraphLaunch(exec, s));
  XI_CUDA_CHECK(cudaStreamSynchronize(s));
  for (const Problem* p : graph_problems) {
    const std::string err = p->check();
    EXPECT_EQ(err, "") << "graph replay " << p->name();
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
}

// Untuned dispatch of a shape cuBLASLt has nothing for runs the GEMV at every m; when the GEMV cannot take
// the arguments either (x not 16-byte aligned; k % 8 != 0) the choice is kNone and run() fails naming the
// shape, and tune() records kNone.
TEST(GemmTunerTest, NoCublasLtAlgorithm) {
  GemmTuner tuner;
  const GemmTuningKey no_lt{kNoCublasLtShape.n, kNoCublasLtShape.k, kNoCublasLtShape.y_f32, kNoCublasLtShape.bias, 1};
  if (tuner.cublaslt().find_heuristic(shape_only(no_lt)) != nullptr)
    GTEST_SKIP() << "this cuBLASLt has an algorithm for n=1 k=8 +bias f32: pick another shape for this test";
  for (int m : {1, 5, 8, 9, 24, 61}) {
    const Problem p(m, 1, 8, true, true, static_cast<uint32_t>(100 + m));
    const GemmChoice choice = tuner.choice_for(p.args());
    EXPECT_EQ(choice.kind, GemmKind::kGemv) << p.name();
    EXPECT_FALSE(choice.heuristic_us.has_value());
    p.poison();
    tuner.run(p.args(), gpu().stream());
    const std::string err = p.check();
    EXPECT_EQ(err, "") << "untuned " << p.name();
  }

  // x one element off 16-byte alignment: neither implementation can run it.
  const Problem p(2, 1, 8, true, true, 3);
  auto dx = gpu().allocate(DType::kBF16, Shape{2 * 8 + 8});
  GemmArgs misaligned = p.args();
  misaligned.x = static_cast<const __nv_bfloat16*>(dx.view.data) + 1;
  EXPECT_FALSE(cuda::gemv_supports(misaligned));
  EXPECT_EQ(tuner.choice_for(misaligned).kind, GemmKind::kNone);
  EXPECT_EQ(tuner.choice_for(p.args()).kind, GemmKind::kGemv) << "the aligned call of the same shape still runs";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(tuner.run(misaligned, gpu().stream()),
               "no GEMM implementation for bf16 GEMM m=2 n=1 k=8 f32 out \\+bias: cuBLASLt has no algorithm");

  // k % 8 != 0 as well: tune() records kNone (no time) and says so in its summary.
  const GemmTuningKey odd{1, 12, true, true, 1};
  if (tuner.cublaslt().find_heuristic(shape_only(odd)) != nullptr) return;
  const cuda::GemmTuneSummary sum = tuner.tune({{1, 12, true, true, 2}}, quiet_options(), gpu().stream());
  std::printf("[ gemm ] %s\n", sum.to_string().c_str());
  EXPECT_EQ(sum.none, 2);
  EXPECT_NE(sum.to_string().find("2 with NO implementation"), std::string::npos) << sum.to_string();
  for (int m : {1, 2}) {
    GemmTuningKey key = odd;
    key.m = m;
    ASSERT_EQ(tuner.table().count(key), 1u);
    EXPECT_EQ(tuner.table().at(key).kind, GemmKind::kNone);
    EXPECT_FALSE(tuner.table().at(key).heuristic_us.has_value());
  }
  GemmArgs a = shape_only(odd);
  EXPECT_EQ(tuner.choice_for(a).kind, GemmKind::kNone);
}

// Two PDL GEMVs in a chain (the second reads what the first writes) after a kernel that writes the first
// input, recorded in a graph and replayed over poisoned buffers.
TEST(GemmTunerTest, PdlGemvChainInGraph) {
  const int m = 4, k0 = 1024, k1 = 2048, n = 520;
  std::mt19937 rng(5);
  const std::vector<float> w1 = random_bf16(static_cast<size_t>(k1) * k0, rng, 0.05f);
  const std::vector<float> w2 = random_bf16(static_cast<size_t>(n) * k1, rng, 0.05f);
  std::vector<float> x(static_cast<size_t>(m) * k0);
  for (size_t i = 0; i < x.size(); ++i) x[i] = to_float(to_bf16(backend::counter_normal(77, i, 1.0f)));
  const std::vector<float> h = reference(x, w1, {}, m, k1, k0, true);
  const std::vector<float> y = reference(h, w2, {}, m, n, k1, true);

  auto dw1 = gpu().upload(host_view(w1, Shape{k1, k0}), DType::kBF16);
  auto dw2 = gpu().upload(host_view(w2, Shape{n, k1}), DType::kBF16);
  auto dx = gpu().allocate(DType::kBF16, Shape{m, k0});
  auto dh = gpu().allocate(DType::kBF16, Shape{m, k1});
  auto dy = gpu().allocate(DType::kBF16, Shape{m, n});
  auto bf = [](const backend::DeviceTensor& t) { return static_cast<__nv_bfloat16*>(t.view.data); };
  const GemmArgs a1{bf(dx), bf(dw1), nullptr, dh.view.data, false, m, k1, k0};
  const GemmArgs a2{bf(dh), bf(dw2), nullptr, dy.view.data, false, m, n, k1};
  const GemvConfig pdl{1, 2, true};
  cudaStream_t s = nullptr;
  XI_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  gpu().synchronize();
  XI_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  cuda::launch_random_normal({dx.view.data, false, static_cast<size_t>(m) * k0, 77, 1.0f}, s);
  cuda::launch_gemv(a1, pdl, s);
  cuda::launch_gemv(a2, pdl, s);
  cudaGraph_t graph = nullptr;
  XI_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
  cudaGraphExec_t exec = nullptr;
  XI_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int rep = 0; rep < 3; ++rep) {
    for (const auto* t : {&dx, &dh, &dy}) poison(t->view);
    gpu().synchronize();
    XI_CUDA_CHECK(cudaGraphLaunch(exec, s));
    XI_CUDA_CHECK(cudaStreamSynchronize(s));
    EXPECT_EQ(mismatch(download(gpu(), dh.view), h, false), "") << "first GEMV, replay " << rep;
    // h may differ from the host's by a bf16 rounding step; that propagates into y within the bf16 bounds.
    EXPECT_EQ(mismatch(download(gpu(), dy.view), y, false), "") << "second GEMV, replay " << rep;
  }
  // Eagerly with PDL too.
  for (const auto* t : {&dx, &dh, &dy}) poison(t->view);
  cuda::launch_random_normal({dx.view.data, false, static_cast<size_t>(m) * k0, 77, 1.0f}, gpu().stream());
  cuda::launch_gemv(a1, pdl, gpu().stream());
  cuda::launch_gemv(a2, pdl, gpu().stream());
  EXPECT_EQ(mismatch(download(gpu(), dy.view), y, false), "") << "eager PDL chain";
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
}

// CudaBackend::linear after tune_linears (own backend: its own tuning cache file), for tuned shapes, the
// shape cuBLASLt has nothing for (tuned, and past its tuned rows) and untuned shapes.
TEST(GemmTunerTest, BackendLinearAfterTuning) {
  const std::string path = temp_path("backend_cache.json");
  std::filesystem::remove(path);
  cuda::CudaBackendOptions o;
  o.gemm_tuning_cache = path;
  cuda::CudaBackend be(o);
  be.tune_linears({{4097, 4104, false, true, 8, false}, {300, 264, true, false, 16, false}, {1, 8, true, true, 4, false}},
                  false);
  EXPECT_EQ(be.gemm().table().size(), 4u + 5u + 3u);
  EXPECT_TRUE(std::filesystem::exists(path));
  for (auto [m, n, k, bias, f32] :
       {std::tuple{1, 4097, 4104, true, false}, std::tuple{6, 4097, 4104, true, false}, std::tuple{3, 300, 264, false, true},
        std::tuple{16, 300, 264, false, true}, std::tuple{3, 1, 8, true, true}, std::tuple{13, 1, 8, true, true},
        std::tuple{7, 7, 136, true, true}, std::tuple{20, 7, 136, true, true}, std::tuple{2, 520, 1024, true, false}}) {
    std::mt19937 rng(static_cast<uint32_t>(m * n));
    const auto x = random_bf16(static_cast<size_t>(m) * k, rng), w = random_bf16(static_cast<size_t>(n) * k, rng, 0.05f);
    const auto b = bias ? random_bf16(static_cast<size_t>(n), rng) : std::vector<float>{};
    auto dx = be.upload(host_view(x, Shape{m, k}), DType::kBF16), dw = be.upload(host_view(w, Shape{n, k}), DType::kBF16);
    backend::DeviceTensor db;
    if (bias) db = be.upload(host_view(b, Shape{n}), DType::kBF16);
    auto dy = be.allocate(f32 ? DType::kF32 : DType::kBF16, Shape{m, n});
    XI_CUDA_CHECK(cudaMemsetAsync(dy.view.data, 0xff, dy.view.bytes(), be.stream()));
    be.linear(dx.view, {dw.view, bias ? db.view : TensorView{}}, dy.view);
    std::vector<float> got(static_cast<size_t>(m) * n);
    be.to_host_f32(dy.view, got.data());
    EXPECT_EQ(mismatch(got, reference(x, w, b, m, n, k, !f32), f32), "") << "m=" << m << " n=" << n;
  }
}

// ---- the tuning cache ----

// The file format is tested on the CPU (tests/unit/attention_plan/gemm_tuning_cache_test.cpp); here: a
// cuBLASLt algorithm stored and read back is one cuBLASLt still accepts for its shape.
TEST(GemmTuningCacheTest, RestoredCublasLtAlgorithmRuns) {
  const std::string path = temp_path("cache.json");
  std::filesystem::remove(path);
  cuda::CublasLtGemm gemm;
  const Problem p(3, 96, 64, true, false, 3);
  GemmTuningEntry lt_e{{96, 64, false, true, 3}, {}};
  lt_e.choice.kind = GemmKind::kCublasLt;
  lt_e.choice.algo = gemm.heuristic(p.args());
  ASSERT_TRUE(cuda::save_gemm_tuning_cache(path, "devA", {lt_e}).ok());
  auto loaded = cuda::load_gemm_tuning_cache(path, "devA");
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  ASSERT_EQ(loaded->size(), 1u);
  EXPECT_TRUE(cuda::CublasLtGemm::same((*loaded)[0].choice.algo, lt_e.choice.algo));
  EXPECT_TRUE(gemm.check(p.args(), (*loaded)[0].choice.algo)) << "a restored algorithm is usable";
}

// A second tuner takes every choice from the file; a corrupt file means retuning (and a rewritten file);
// an entry that fails validation is measured again.
TEST(GemmTuningCacheTest, TunerUsesAndRepairsTheCache) {
  const std::string path = temp_path("tuner_cache.json");
  std::filesystem::remove(path);
  const std::vector<GemmShape> shapes = {{96, 264, false, true, 8}, {33, 64, true, false, 3}, kNoCublasLtShape};
  const int points = 4 + 3 + 5;

  GemmTuner first;
  cuda::GemmTuneSummary s = first.tune(shapes, quiet_options(path), gpu().stream());
  EXPECT_EQ(s.points, points);
  EXPECT_EQ(s.tuned, points);
  ASSERT_TRUE(std::filesystem::exists(path)) << s.cache;

  GemmTuner second;
  s = second.tune(shapes, quiet_options(path), gpu().stream());
  EXPECT_EQ(s.cached, points) << s.to_string();
  EXPECT_EQ(s.tuned, 0);
  ASSERT_EQ(second.table().size(), first.table().size());
  for (const auto& [key, c] : first.table()) {
    const GemmChoice& d = second.table().at(key);
    EXPECT_EQ(c.kind, d.kind);
    if (c.kind == GemmKind::kCublasLt) {
      EXPECT_TRUE(cuda::CublasLtGemm::same(c.algo, d.algo));
    }
    if (c.kind == GemmKind::kGemv) {
      EXPECT_EQ(c.gemv, d.gemv);
    }
    EXPECT_FLOAT_EQ(c.us, d.us);
    EXPECT_EQ(c.heuristic_us, d.heuristic_us) << "n=" << key.n << " m=" << key.m;
  }
  // A tuner that already holds the points does not read them again.
  s = second.tune(shapes, quiet_options(path), gpu().stream());
  EXPECT_EQ(s.cached, points);

  write_file(path, "{\"format\": 1, \"devices\": ");  // truncated
  GemmTuner third;
  s = third.tune(shapes, quiet_options(path), gpu().stream());
  EXPECT_EQ(s.tuned, points) << s.to_string();
  ASSERT_TRUE(cuda::load_gemm_tuning_cache(path, third.device_key()).ok()) << "rewritten after a corrupt read";

  // An invalid GEMV configuration in the file (k_split 3) is retuned, and so is an entry claiming that
  // cuBLASLt has no algorithm where it has one; the rest is taken.
  auto entries = cuda::load_gemm_tuning_cache(path, third.device_key());
  ASSERT_TRUE(entries.ok());
  std::vector<GemmTuningEntry> edited = *entries;
  ASSERT_EQ(edited.size(), static_cast<size_t>(points));
  edited[0].choice.kind = GemmKind::kGemv;
  edited[0].choice.gemv = GemvConfig{1, 3, false};
  auto with_lt = std::find_if(edited.begin() + 1, edited.end(),
                              [](const GemmTuningEntry& e) { return e.choice.heuristic_us.has_value(); });
  ASSERT_NE(with_lt, edited.end()) << "cuBLASLt has an algorithm for the 96 x 264 and 33 x 64 shapes";
  with_lt->choice.heuristic_us.reset();
  std::filesystem::remove(path);
  ASSERT_TRUE(cuda::save_gemm_tuning_cache(path, third.device_key(), edited).ok());
  GemmTuner fourth;
  s = fourth.tune(shapes, quiet_options(path), gpu().stream());
  EXPECT_EQ(s.tuned, 2) << s.to_string();
  EXPECT_EQ(s.cached, points - 2);

  // Tuning off the cache ("" path) neither reads nor writes.
  std::filesystem::remove(path);
  GemmTuner fifth;
  s = fifth.tune(shapes, quiet_options(""), gpu().stream());
  EXPECT_EQ(s.tuned, points);
  EXPECT_FALSE(std::filesystem::exists(path));

  // A tuner that may reuse this process's measurements takes fifth's choices without measuring.
  GemmTuner sixth;
  GemmTunerOptions reuse = quiet_options("");
  reuse.reuse_process_choices = true;
  s = sixth.tune(shapes, reuse, gpu().stream());
  EXPECT_EQ(s.tuned, 0) << s.to_string();
  for (const auto& [key, c] : fifth.table()) {
    EXPECT_EQ(sixth.table().at(key).kind, c.kind);
    EXPECT_FLOAT_EQ(sixth.table().at(key).us, c.us);
    EXPECT_EQ(sixth.table().at(key).heuristic_us, c.heuristic_us);
  }
}

}  // namespace
}  // namespace xinfer::gpu_test
