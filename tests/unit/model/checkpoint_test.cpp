// Quantized Hugging Face checkpoints (compressed-tensors, GPTQ, AWQ): quantization_config parsing, the
// per-linear reader (model/checkpoint_linear.h) and whole-model logits on the CPU backend, against
// tests/golden/checkpoints/ (tools/make_checkpoint_golden.py: compressed-tensors checkpoints packed by the
// compressed-tensors package, GPTQ / AWQ by numpy packers from the published definitions, logits from
// transformers), plus every bad-input error with its message.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "temp_dir.h"
#include "xinfer/backend/cpu/cpu_backend.h"
#include "xinfer/engine/model_runner.h"
#include "xinfer/model/checkpoint_linear.h"
#include "xinfer/model/gguf_config.h"
#include "xinfer/model/llama.h"
#include "xinfer/model/model_config.h"
#include "xinfer/model/preset_configs.h"
#include "xinfer/model/quantization_config.h"
#include "xinfer/model/safetensors.h"

namespace xinfer::model {
namespace {

using json = nlohmann::json;
using testing::TempDir;

std::string golden_root() {
  const char* src = std::getenv("XINFER_SOURCE_DIR");
  return std::string(src ? src : ".") + "/tests/golden/checkpoints";
}

std::vector<std::string> golden_names() {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(golden_root()))
    if (std::filesystem::exists(e.path() / "golden.safetensors")) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

json read_json(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}
void write_json(const std::string& path, const json& j) { std::ofstream(path) << j.dump(2); }

// The tiny model of the goldens: hidden 64, 4 heads / 2 KV heads of 16, intermediate 128.
constexpr int64_t kH = 64, kQ = 64, kKv = 32, kI = 128;

// What each golden checkpoint must load as (format_name of qkv, gate_up, and layer 1's down).
struct Expected {
  const char* qkv;
  const char* gate_up;
  const char* down1;
};
Expected expected_formats(const std::string& name) {
  if (name == "ct_w4a16_g32") return {"int4-g32", "int4-g32", "int4-g32"};
  if (name == "ct_mixed_w4asym_w8") return {"int4-g32-zp", "int8-channel", "dense(f32)"};  // down ignored
  if (name == "ct_w8a8_int8") return {"w8a8-int8-static", "w8a8-int8-dynamic", "w8a8-int8-dynamic"};
  if (name == "ct_fp8") return {"w8a8-fp8-channel-static", "w8a8-fp8-channel-dynamic", "w8a8-fp8-channel-dynamic"};
  if (name == "gptq_w4_g32_actorder") return {"int4-g32-zp", "int4-g32-zp", "int4-g32-zp"};
  if (name == "gptq_w8_channel_asym") return {"int8-g64-zp", "int8-g64-zp", "int8-g128-zp"};
  if (name == "gptq_w4_g32_asym_v2") return {"int4-g32-zp", "int4-g32-zp", "int4-g32-zp"};
  if (name == "awq_w4_g32") return {"int4-g32-zp", "int4-g32-zp", "int4-g32-zp"};
  return {"?", "?", "?"};
}

std::vector<float> floats(const WeightFiles& f, const std::string& name) {
  TensorView v = *f.get(name);
  std::vector<float> out(static_cast<size_t>(v.numel()));
  convert_to_f32(v.dtype, v.data, out.data(), out.size());
  return out;
}

class CheckpointGolden : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = golden_root() + "/" + GetParam();
    auto cfg = load_model_config(dir_);
    ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
    config_ = *cfg;
    auto files = WeightFiles::open(dir_);
    ASSERT_TRUE(files.ok()) << files.status().to_string();
    files_.emplace(std::move(*files));
    auto golden = WeightFiles::open_file(dir_ + "/golden.safetensors");
    ASSERT_TRUE(golden.ok()) << golden.status().to_string();
    golden_.emplace(std::move(*golden));
  }
  HostLinear read(const std::vector<LinearPart>& parts, int64_t k) {
    auto r = read_checkpoint_linear(*files_, config_.quantization, parts, k);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r.ok() ? std::move(*r) : HostLinear{};
  }
  std::string dir_;
  ModelConfig config_;
  std::optional<WeightFiles> files_, golden_;
};

// The dequantized weights equal the reference floats exactly: every reference value is scale * (q - zero)
// with an f16 scale and an integer (or e4m3) code of <= 8 bits, a product that f32 represents exactly, so
// any difference is a packing, order, zero-point or scale-index error.
TEST_P(CheckpointGolden, DequantizedWeightsEqualTheReference) {
  ASSERT_TRUE(config_.quantization.quantized());
  const std::string l0 = "model.layers.0.";
  struct One {
    std::string module;
    int64_t n, k;
  };
  for (const One& o : {One{l0 + "self_attn.k_proj", kKv, kH}, One{l0 + "self_attn.v_proj", kKv, kH},
                       One{l0 + "mlp.down_proj", kH, kI}}) {
    HostLinear w = dequantize_linear(read({{o.module, o.n}}, o.k));
    ASSERT_EQ(w.n, o.n);
    const std::vector<float> ref = floats(*golden_, "ref." + o.module + ".weight");
    ASSERT_EQ(ref.size(), static_cast<size_t>(o.n * o.k));
    size_t bad = 0;
    for (size_t i = 0; i < ref.size(); ++i) bad += w.weight.data<float>()[i] != ref[i];
    EXPECT_EQ(bad, 0u) << GetParam() << " " << o.module << ": " << bad << " of " << ref.size() << " differ";
  }
  // Fused q/k/v: the k and v rows of the joined linear are the same floats.
  HostLinear qkv = read({{l0 + "self_attn.q_proj", kQ}, {l0 + "self_attn.k_proj", kKv}, {l0 + "self_attn.v_proj", kKv}},
                        kH);
  EXPECT_EQ(quant::format_name(qkv.format), expected_formats(GetParam()).qkv) << qkv.note;
  HostLinear fused = dequantize_linear(qkv);
  const std::vector<float> k_ref = floats(*golden_, "ref." + l0 + "self_attn.k_proj.weight");
  const std::vector<float> v_ref = floats(*golden_, "ref." + l0 + "self_attn.v_proj.weight");
  const float* rows = fused.weight.data<float>();
  EXPECT_TRUE(std::equal(k_ref.begin(), k_ref.end(), rows + kQ * kH)) << GetParam() << " fused k rows";
  EXPECT_TRUE(std::equal(v_ref.begin(), v_ref.end(), rows + (kQ + kKv) * kH)) << GetParam() << " fused v rows";
}

TEST_P(CheckpointGolden, LoadsInTheExpectedFormats) {
  const Expected e = expected_formats(GetParam());
  HostLinear gu = read({{"model.layers.0.mlp.gate_proj", kI}, {"model.layers.0.mlp.up_proj", kI}}, kH);
  EXPECT_EQ(quant::format_name(gu.format), e.gate_up) << gu.note;
  HostLinear d1 = read({{"model.layers.1.mlp.down_proj", kH}}, kI);
  EXPECT_EQ(quant::format_name(d1.format), e.down1) << d1.note;
  if (GetParam() == "gptq_w4_g32_actorder") {
    EXPECT_FALSE(d1.g_idx.view().empty()) << "desc_act: the act-order g_idx is kept";
  } else {
    EXPECT_TRUE(d1.g_idx.view().empty()) << "g_idx equal to k / group is dropped";
  }
}

// GPTQ act order sorted at load (sort_act_order, what the model loader does before upload): the same weight
// exactly (dequantized in the input's column order), g_idx dropped for input_perm, and the kernels' products
// on the gathered input equal those of the g_idx path up to summation order. The whole model through it:
// LogitsMatchTransformers below.
TEST(ActOrder, SortedColumnsAreTheSameWeight) {
  std::mt19937 rng(5);
  for (const auto& [bits, group, zp, n, k] : std::vector<std::tuple<int, int, bool, int64_t, int64_t>>{
           {4, 32, true, 7, 128},
           {4, 128, false, 5, 384},
           {8, 64, true, 3, 192},
           {4, 32, false, 4, 96},
           {4, 32, true, 3, 100} /* a last group of 4 */,
           {8, 48, false, 2, 100}}) {
    const int64_t groups = (k + group - 1) / group;
    HostLinear w;
    w.format = quant::IntGroupFormat{bits, group, zp};
    w.n = n;
    w.k = k;
    w.weight = HostTensor(DType::kU8, Shape{n, bits == 4 ? k / 2 : k});
    for (int64_t i = 0; i < w.weight.numel(); ++i) w.weight.data<uint8_t>()[i] = static_cast<uint8_t>(rng());
    w.scales = HostTensor(DType::kF32, Shape{n, groups});
    for (int64_t i = 0; i < w.scales.numel(); ++i)
      w.scales.data<float>()[i] = 0.01f * static_cast<float>(1 + rng() % 50);
    if (zp) {
      w.zeros = HostTensor(DType::kU8, Shape{n, groups});
      for (int64_t i = 0; i < w.zeros.numel(); ++i)
        w.zeros.data<uint8_t>()[i] = static_cast<uint8_t>(rng() % (bits == 4 ? 16 : 256));
    }
    std::vector<int32_t> g(static_cast<size_t>(k));
    for (int64_t c = 0; c < k; ++c) g[static_cast<size_t>(c)] = static_cast<int32_t>(c / group);
    std::shuffle(g.begin(), g.end(), rng);
    w.g_idx = HostTensor(DType::kI32, Shape{k});
    std::copy(g.begin(), g.end(), w.g_idx.data<int32_t>());
    auto copy = [](const HostTensor& t) {  // HostTensor is move-only
      if (t.view().empty()) return HostTensor();
      HostTensor c(t.dtype(), t.shape());
      std::memcpy(c.data<uint8_t>(), t.data<uint8_t>(), t.view().bytes());
      return c;
    };
    HostLinear sorted;
    sorted.format = w.format;
    sorted.n = n;
    sorted.k = k;
    sorted.weight = copy(w.weight);
    sorted.scales = copy(w.scales);
    sorted.zeros = copy(w.zeros);
    sorted.g_idx = copy(w.g_idx);
    const std::string what =
        quant::format_name(w.format) + " [" + std::to_string(n) + ", " + std::to_string(k) + "]";
    ASSERT_TRUE(sort_act_order(sorted)) << what;
    EXPECT_TRUE(sorted.g_idx.view().empty()) << what;
    ASSERT_FALSE(sorted.input_perm.view().empty()) << what;
    EXPECT_FALSE(sort_act_order(sorted)) << what << ": sorted twice";
    const HostLinear a = dequantize_linear(w), b = dequantize_linear(sorted);
    EXPECT_EQ(std::memcmp(a.weight.data<float>(), b.weight.data<float>(), static_cast<size_t>(n * k) * 4), 0)
        << what;
    const int64_t rows = 3;
    std::vector<float> x(static_cast<size_t>(rows * k)), y1(static_cast<size_t>(rows * n)), y2(y1.size());
    std::normal_distribution<float> nd;
    for (float& v : x) v = nd(rng);
    quant::quantized_matmul(w.matrix(), x.data(), rows, y1.data(), nullptr);
    quant::quantized_matmul(sorted.matrix(), x.data(), rows, y2.data(), nullptr);
    for (size_t i = 0; i < y1.size(); ++i)
      EXPECT_NEAR(y2[i], y1[i], 1e-4 * (1 + std::fabs(y1[i]))) << what << " " << i;
  }
  // Left as they are: groups of unequal sizes (not what GPTQ writes), a g_idx naming a group that does not
  // exist, a g_idx of the wrong length. One row of int8 g32, k = 64.
  const auto one_row = [](const std::vector<int32_t>& g_idx) {
    HostLinear w;
    w.format = quant::IntGroupFormat{8, 32, false};
    w.n = 1;
    w.k = 64;
    w.weight = HostTensor(DType::kU8, Shape{1, 64});
    w.scales = HostTensor(DType::kF32, Shape{1, 2});
    w.g_idx = HostTensor(DType::kI32, Shape{static_cast<int64_t>(g_idx.size())});
    std::copy(g_idx.begin(), g_idx.end(), w.g_idx.data<int32_t>());
    return w;
  };
  std::vector<int32_t> halves(64);
  for (int c = 0; c < 64; ++c) halves[static_cast<size_t>(c)] = c < 32 ? 0 : 1;
  std::vector<int32_t> no_group = halves;
  no_group[7] = 2;
  for (const std::vector<int32_t>& g : {std::vector<int32_t>(64, 0), no_group, std::vector<int32_t>(63, 0)}) {
    HostLinear w = one_row(g);
    EXPECT_FALSE(sort_act_order(w));
    EXPECT_FALSE(w.g_idx.view().empty());
    EXPECT_TRUE(w.input_perm.view().empty());
  }
  HostLinear fine = one_row(halves);  // the control: the same row with a valid g_idx is sorted
  EXPECT_TRUE(sort_act_order(fine));
}

// The whole model on the CPU backend (every format runs as it is) vs transformers on the dequantized weights.
// Weight-only formats: the CPU kernels dequantize in registers and sum in f32, as transformers' float32
// matmuls on the same floats do: 1e-4, the tolerance of the float goldens (tests/golden/README.md); measured
// 0.6-3.4e-5. W8A8: the golden applies vLLM's activation quantization (int8: max|x_t|/127 or the static
// scale; fp8: e4m3 of x / scale) in the linears' pre-hooks, the arithmetic of our kernels, so the same bound
// holds (measured 3-4e-6) although activation quantization itself moves these logits by 0.25 (int8) and
// 1.27 (fp8): a kernel that skipped or mis-scaled it would fail by orders of magnitude. (Our kernels scale
// by 1 / s where torch divides by s: a value within an ulp of a rounding boundary could move one step; none
// does in these goldens.)
// Prompt logits (every position) of the model at `path` loaded on `backend` with `opts` (its limits set
// here); the model stays in m.
std::vector<float> load_and_run_prompt(const std::string& path, backend::Backend& backend, LoadOptions opts,
                                       const std::vector<int32_t>& prompt, std::unique_ptr<LlamaModel>& m) {
  opts.max_tokens = 64;
  opts.max_logit_rows = 64;
  opts.show_progress = false;
  auto loaded = LlamaModel::load(path, backend, opts);
  EXPECT_TRUE(loaded.ok()) << loaded.status().to_string();
  if (!loaded.ok()) return {};
  m = std::move(*loaded);
  const ModelConfig& c = m->config();
  backend::KvCacheSpec spec{c.num_layers, 16, 4, c.num_kv_heads, c.head_dim, DType::kF32};
  std::vector<int32_t> table(15);
  std::iota(table.begin(), table.end(), 1);
  backend::StepPlan plan = engine::ModelRunner::plan(std::vector<engine::SequenceChunk>{{prompt, 0, table, true}}, 4);
  plan.logit_rows.resize(prompt.size());
  std::iota(plan.logit_rows.begin(), plan.logit_rows.end(), 0);
  backend::KvCache kv = backend.allocate_kv_cache(spec);
  TensorView logits = m->forward(backend.upload_step(plan), kv);
  return std::vector<float>(logits.as<float>(), logits.as<float>() + logits.numel());
}

// The golden prompt's logits (every position) from the checkpoint loaded on `backend`; the model stays in m.
std::vector<float> golden_logits(const std::string& dir, const WeightFiles& golden, backend::Backend& backend,
                                 std::unique_ptr<LlamaModel>& m) {
  TensorView pv = *golden.get("prompt");
  std::vector<int32_t> prompt(pv.as<int32_t>(), pv.as<int32_t>() + pv.numel());
  return load_and_run_prompt(dir, backend, LoadOptions{}, prompt, m);
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float d = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
  return d;
}

TEST_P(CheckpointGolden, LogitsMatchTransformers) {
  ASSERT_TRUE(golden_->contains("logits")) << "golden made without --torch: no transformers logits";
  const std::vector<float> want = floats(*golden_, "logits");
  const std::vector<float> want_float = floats(*golden_, "logits_float");
  cpu::CpuBackend backend{cpu::CpuBackendOptions{2}};
  std::unique_ptr<LlamaModel> m;
  const std::vector<float> got = golden_logits(dir_, *golden_, backend, m);
  ASSERT_TRUE(m != nullptr);
  const float err = max_abs_diff(got, want), effect = max_abs_diff(want, want_float);
  std::printf("%s: max |logit - transformers| %.2e (activation quantization moves them by %.2e)\n",
              GetParam().c_str(), static_cast<double>(err), static_cast<double>(effect));
  EXPECT_LE(err, 1e-4f) << GetParam();
  // The memory plan's estimate from the formats (checkpoint_weight_bytes) vs what was uploaded: equal up to
  // g_idx, input scales and per-tensor FP8 scales, which format_weight_bytes does not count.
  const size_t planned = checkpoint_weight_bytes(m->config(), DType::kF32,
                                                 [&](const quant::WeightFormat& f, int64_t n, int64_t k) {
                                                   return backend.supports_linear(f, n, k);
                                                 });
  const double rel = std::fabs(static_cast<double>(planned) - static_cast<double>(m->weight_bytes())) /
                     static_cast<double>(m->weight_bytes());
  EXPECT_LT(rel, 0.02) << GetParam() << ": planned " << planned << " loaded " << m->weight_bytes();
}

// A backend whose W8A8 kernels refuse the shapes (as CUDA's cuBLASLt GEMMs refuse FP8 widths that are not
// multiples of 16): the loader dequantizes those linears at load (one log line each), so the model serves,
// as the dequantized weights with float activations: transformers' logits_float within the weight-only
// bound; the memory plan counts them dense.
class NoW8a8ShapesBackend : public cpu::CpuBackend {
 public:
  NoW8a8ShapesBackend() : cpu::CpuBackend(cpu::CpuBackendOptions{2}) {}
  bool supports_linear(const quant::WeightFormat& f, int64_t n, int64_t k) const override {
    return !std::holds_alternative<quant::W8A8Fp8Format>(f) && !std::holds_alternative<quant::W8A8Int8Format>(f) &&
           cpu::CpuBackend::supports_linear(f, n, k);
  }
};

class W8a8Golden : public CheckpointGolden {};

TEST_P(W8a8Golden, RefusedShapesAreDequantizedAtLoad) {
  NoW8a8ShapesBackend backend;
  std::unique_ptr<LlamaModel> m;
  const std::vector<float> got = golden_logits(dir_, *golden_, backend, m);
  ASSERT_TRUE(m != nullptr);
  const float err = max_abs_diff(got, floats(*golden_, "logits_float"));
  std::printf("%s dequantized at load: max |logit - transformers (float activations)| %.2e\n", GetParam().c_str(),
              static_cast<double>(err));
  EXPECT_LE(err, 1e-4f) << GetParam();
  const size_t planned = checkpoint_weight_bytes(m->config(), DType::kF32,
                                                 [&](const quant::WeightFormat& f, int64_t n, int64_t k) {
                                                   return backend.supports_linear(f, n, k);
                                                 });
  EXPECT_EQ(planned, static_cast<size_t>(LlamaModel::parameter_count(m->config())) * 4) << GetParam();
  EXPECT_EQ(m->weight_bytes(), planned) << GetParam();
}

INSTANTIATE_TEST_SUITE_P(Goldens, CheckpointGolden, ::testing::ValuesIn(golden_names()),
                         [](const auto& p) { return p.param; });
INSTANTIATE_TEST_SUITE_P(Goldens, W8a8Golden, ::testing::Values("ct_fp8", "ct_w8a8_int8"),
                         [](const auto& p) { return p.param; });

TEST(CheckpointGoldens, AllFormatsArePresent) {
  EXPECT_EQ(golden_names().size(), 8u);
}

// ---- quantization_config parsing ----

Status parse_status(const json& qc) { return parse_quantization_config(qc).status(); }

TEST(QuantizationConfig, TargetsAndIgnore) {
  json qc = {{"quant_method", "compressed-tensors"},
             {"format", "pack-quantized"},
             {"config_groups",
              {{"attn", {{"targets", {"re:.*self_attn\\.(q|k|v)_proj$"}},
                         {"weights", {{"num_bits", 4}, {"type", "int"}, {"symmetric", true}, {"strategy", "group"},
                                      {"group_size", 128}}}}},
               {"rest", {{"targets", {"Linear"}},
                         {"weights", {{"num_bits", 8}, {"type", "int"}, {"symmetric", true}, {"strategy", "channel"}}}}}}},
             {"ignore", {"lm_head", "re:.*layers\\.3\\..*"}}};
  auto r = parse_quantization_config(qc);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const QuantizationConfig& c = *r;
  ASSERT_NE(c.ct_scheme_for("model.layers.0.self_attn.q_proj"), nullptr);
  EXPECT_EQ(c.ct_scheme_for("model.layers.0.self_attn.q_proj")->name, "attn");
  EXPECT_EQ(c.ct_scheme_for("model.layers.0.self_attn.o_proj")->name, "rest");  // regex does not match o
  EXPECT_EQ(c.ct_scheme_for("model.layers.3.mlp.up_proj"), nullptr);           // ignored by regex
  EXPECT_FALSE(c.quantizes("lm_head"));
  // re: is anchored at the start (Python's re.match), not at the end.
  auto one = [](const char* target) {
    json q = {{"quant_method", "compressed-tensors"}, {"format", "pack-quantized"}, {"ignore", {"lm_head"}},
              {"config_groups", {{"g", {{"targets", {target}}, {"weights", {{"num_bits", 4}, {"strategy", "channel"}}}}}}}};
    return *parse_quantization_config(q);
  };
  EXPECT_EQ(one("re:layers\\.0\\.").ct_scheme_for("model.layers.0.mlp.up_proj"), nullptr);
  EXPECT_NE(one("re:model\\.layers\\.0\\.").ct_scheme_for("model.layers.0.mlp.up_proj"), nullptr);
  EXPECT_NE(one("model.layers.0.mlp.up_proj").ct_scheme_for("model.layers.0.mlp.up_proj"), nullptr);
  EXPECT_EQ(one("model.layers.0.mlp.up").ct_scheme_for("model.layers.0.mlp.up_proj"), nullptr);
  EXPECT_EQ(c.to_string(), "compressed-tensors [attn: pack-quantized w int4 group 128; rest: pack-quantized w int8 "
                           "channel] ignore [lm_head, re:.*layers\\.3\\..*]");
}

TEST(QuantizationConfig, GptqAndAwq) {
  auto g = parse_quantization_config({{"quant_method", "gptq"}, {"bits", 4}, {"group_size", 128}, {"desc_act", true},
                                      {"sym", false}, {"checkpoint_format", "gptq_v2"}});
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  EXPECT_EQ(g->to_string(), "gptq 4-bit g128 desc_act asym v2");
  EXPECT_TRUE(g->quantizes("model.layers.0.mlp.down_proj"));
  EXPECT_FALSE(g->quantizes("lm_head"));
  auto a = parse_quantization_config({{"quant_method", "awq"}, {"bits", 4}, {"group_size", 64}, {"version", "GEMM"},
                                      {"zero_point", true}, {"modules_to_not_convert", {"mlp.down_proj"}}});
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  EXPECT_FALSE(a->quantizes("model.layers.2.mlp.down_proj"));
  EXPECT_TRUE(a->quantizes("model.layers.2.mlp.up_proj"));
}

TEST(QuantizationConfig, UnsupportedValuesNameTheField) {
  Status s = parse_status({{"quant_method", "bitsandbytes"}});
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_EQ(s.message(),
            "quantization_config.quant_method: \"bitsandbytes\" is not supported (supported: compressed-tensors, "
            "gptq, awq)");
  s = parse_status({{"quant_method", "gptq"}, {"bits", 3}, {"group_size", 128}});
  EXPECT_EQ(s.message(), "quantization_config.bits: 3 is not supported (supported: 4, 8)");
  s = parse_status({{"quant_method", "gptq"}, {"bits", 4}, {"checkpoint_format", "marlin"}});
  EXPECT_EQ(s.message(), "quantization_config.checkpoint_format: \"marlin\" is not supported (supported: gptq, gptq_v2)");
  s = parse_status({{"quant_method", "gptq"}, {"bits", 4}, {"lm_head", true}});
  EXPECT_EQ(s.message(), "quantization_config.lm_head: true is not supported (supported: false (a quantized lm_head))");
  s = parse_status({{"quant_method", "awq"}, {"bits", 4}, {"version", "gemv"}});
  EXPECT_EQ(s.message(), "quantization_config.version: \"gemv\" is not supported (supported: gemm)");
  auto ct = [](json weights, json acts, const char* format) {
    json g = {{"targets", {"Linear"}}, {"weights", weights}};
    if (!acts.is_null()) g["input_activations"] = acts;
    return json{{"quant_method", "compressed-tensors"}, {"format", format}, {"config_groups", {{"group_0", g}}},
                {"ignore", {"lm_head"}}};
  };
  const json int4g = {{"num_bits", 4}, {"type", "int"}, {"strategy", "group"}, {"group_size", 128}};
  s = parse_status(ct({{"num_bits", 8}, {"type", "float"}, {"strategy", "block"}, {"block_structure", {128, 128}}},
                      nullptr, "float-quantized"));
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_EQ(s.message(), "quantization_config.config_groups.group_0.weights.strategy: \"block\" is not supported "
                         "(supported: tensor, channel, group)");
  s = parse_status(ct({{"num_bits", 2}, {"type", "int"}, {"strategy", "channel"}}, nullptr, "pack-quantized"));
  EXPECT_EQ(s.message(), "quantization_config.config_groups.group_0.weights.num_bits: 2 is not supported (supported: 4, 8)");
  s = parse_status(ct(int4g, nullptr, "nvfp4-pack-quantized"));
  EXPECT_EQ(s.message(), "quantization_config.format: \"nvfp4-pack-quantized\" is not supported (supported: "
                         "pack-quantized, int-quantized, naive-quantized, float-quantized)");
  s = parse_status(ct({{"num_bits", 8}, {"type", "int"}, {"strategy", "channel"}},
                      {{"num_bits", 8}, {"type", "int"}, {"strategy", "group"}, {"group_size", 32}}, "int-quantized"));
  EXPECT_EQ(s.message(), "quantization_config.config_groups.group_0.input_activations.strategy: \"group\" is not "
                         "supported (supported: token (dynamic), tensor (static))");
  s = parse_status(ct({{"num_bits", 8}, {"type", "int"}, {"strategy", "channel"}},
                      {{"num_bits", 8}, {"type", "int"}, {"strategy", "token"}, {"dynamic", false}}, "int-quantized"));
  EXPECT_EQ(s.message(), "quantization_config.config_groups.group_0.input_activations.dynamic: false is not "
                         "supported (supported: true for strategy token)");
  // A quantized lm_head not in ignore.
  json no_ignore = ct(int4g, nullptr, "pack-quantized");
  no_ignore["ignore"] = json::array();
  s = parse_status(no_ignore);
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_EQ(s.message(), "quantization_config: lm_head is quantized (config_groups.group_0 targets it and ignore "
                         "does not list it): a quantized lm_head is not supported");
  json bad_regex = ct(int4g, nullptr, "pack-quantized");
  bad_regex["ignore"] = {"lm_head", "re:(unclosed"};
  s = parse_status(bad_regex);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("quantization_config.ignore: 're:(unclosed' is not a valid regular expression"),
            std::string::npos)
      << s.message();
}

TEST(QuantizationConfig, AQuantizedModelWhereADenseOneIsNeeded) {
  auto cfg = load_model_config(golden_root() + "/gptq_w4_g32_actorder");
  ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
  Status s = require_dense_checkpoint(cfg->quantization, "DIR", "xinfer quantize");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "xinfer quantize needs a dense (unquantized) checkpoint, but DIR/config.json has "
                         "quantization_config (gptq 4-bit g32 desc_act sym v1)");
  EXPECT_TRUE(require_dense_checkpoint(QuantizationConfig{}, "DIR", "xinfer quantize").ok());
}

// ---- broken checkpoints: copies of a golden with one thing changed ----

class BrokenCheckpoint : public ::testing::Test {
 protected:
  // Copies golden `name` into the temp dir; `edit_config` changes quantization_config; `edit_tensors` the
  // tensor list (name -> host tensor).
  void make(const std::string& name, const std::function<void(json&)>& edit_config,
            const std::function<void(std::vector<std::pair<std::string, HostTensor>>&)>& edit_tensors = nullptr) {
    const std::string src = golden_root() + "/" + name;
    json cfg = read_json(src + "/config.json");
    if (edit_config) edit_config(cfg["quantization_config"]);
    write_json(dir_.file("config.json"), cfg);
    auto files = WeightFiles::open(src);
    ASSERT_TRUE(files.ok());
    std::vector<std::pair<std::string, HostTensor>> tensors;
    for (const std::string& n : files->names()) {
      TensorView v = *files->get(n);
      HostTensor t(v.dtype, v.shape);
      std::memcpy(t.data<void>(), v.data, v.bytes());
      tensors.emplace_back(n, std::move(t));
    }
    if (edit_tensors) edit_tensors(tensors);
    std::vector<std::pair<std::string, TensorView>> views;
    for (auto& [n, t] : tensors) views.emplace_back(n, t.view());
    ASSERT_TRUE(write_safetensors(dir_.file("model.safetensors"), views, nullptr).ok());
  }
  Status load() {
    LoadOptions opts;
    opts.show_progress = false;
    opts.max_tokens = 16;
    opts.max_logit_rows = 16;
    return LlamaModel::load(dir_.path(), backend_, opts).status();
  }
  static void replace(std::vector<std::pair<std::string, HostTensor>>& ts, const std::string& name, HostTensor t) {
    for (auto& [n, v] : ts)
      if (n == name) v = std::move(t);
  }
  static void drop(std::vector<std::pair<std::string, HostTensor>>& ts, const std::string& name) {
    ts.erase(std::remove_if(ts.begin(), ts.end(), [&](const auto& p) { return p.first == name; }), ts.end());
  }
  TempDir dir_;
  cpu::CpuBackend backend_{cpu::CpuBackendOptions{1}};
};

const std::string kQ0 = "model.layers.0.self_attn.q_proj";

TEST_F(BrokenCheckpoint, UnsupportedQuantMethodNamesTheFile) {
  make("ct_w4a16_g32", [](json& qc) { qc = {{"quant_method", "hqq"}}; });
  Status s = load();
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_EQ(s.message(), dir_.file("config.json") +
                             ": quantization_config.quant_method: \"hqq\" is not supported (supported: "
                             "compressed-tensors, gptq, awq)");
}

TEST_F(BrokenCheckpoint, MissingWeightScale) {
  make("ct_w4a16_g32", nullptr, [](auto& ts) { drop(ts, kQ0 + ".weight_scale"); });
  Status s = load();
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message().rfind("tensor '" + kQ0 + ".weight_scale' not found in " + dir_.path(), 0), 0u) << s.message();
}

TEST_F(BrokenCheckpoint, PackedTensorOfTheWrongShape) {
  make("ct_w4a16_g32", nullptr, [](auto& ts) { replace(ts, kQ0 + ".weight_packed", HostTensor(DType::kI32, Shape{64, 7})); });
  Status s = load();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), kQ0 + ".weight_packed in model.safetensors: expected shape [64, 8], found [64, 7]");
}

TEST_F(BrokenCheckpoint, PackedTensorOfTheWrongDtype) {
  make("awq_w4_g32", nullptr, [](auto& ts) { replace(ts, kQ0 + ".qweight", HostTensor(DType::kF32, Shape{64, 8})); });
  Status s = load();
  EXPECT_EQ(s.message(), kQ0 + ".qweight in model.safetensors: dtype F32, expected I32");
}

TEST_F(BrokenCheckpoint, PerRowZeroPointsOnAGroupScheme) {
  // An unpacked [N] zero point is one per row: with groups (here 2 per row) it would leave half the groups
  // without one (and the unpacking would read past the tensor), so it is refused by shape.
  make("ct_mixed_w4asym_w8", nullptr, [](auto& ts) { replace(ts, kQ0 + ".weight_zero_point", HostTensor(DType::kI8, Shape{64})); });
  Status s = load();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), kQ0 + ".weight_zero_point in model.safetensors: expected shape [64, 2], found [64]");
}

TEST_F(BrokenCheckpoint, GIdxOfTheWrongLength) {
  make("gptq_w4_g32_actorder", nullptr, [](auto& ts) { replace(ts, kQ0 + ".g_idx", HostTensor(DType::kI32, Shape{63})); });
  Status s = load();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), kQ0 + ".g_idx in model.safetensors: expected shape [64], found [63]");
}

TEST_F(BrokenCheckpoint, GIdxNamingAGroupThatDoesNotExist) {
  make("gptq_w4_g32_actorder", nullptr, [](auto& ts) {
    HostTensor g(DType::kI32, Shape{64});
    g.data<int32_t>()[5] = 2;  // K 64 / group 32: groups 0 and 1
    replace(ts, kQ0 + ".g_idx", std::move(g));
  });
  Status s = load();
  EXPECT_EQ(s.message(), kQ0 + ".g_idx in model.safetensors: g_idx[5] = 2 is not a group (0..1)");
}

TEST_F(BrokenCheckpoint, DescActWithoutGIdx) {
  make("gptq_w4_g32_actorder", nullptr, [](auto& ts) { drop(ts, kQ0 + ".g_idx"); });
  Status s = load();
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message(), kQ0 + ".g_idx: quantization_config has desc_act true but the tensor is not in " + dir_.path());
}

TEST_F(BrokenCheckpoint, GroupSizeNotDividingK) {
  make("gptq_w4_g32_asym_v2", [](json& qc) { qc["group_size"] = 48; });
  Status s = load();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), kQ0 + ": group_size 48 does not divide in_features 64");
}

TEST_F(BrokenCheckpoint, UnsupportedBits) {
  make("gptq_w4_g32_asym_v2", [](json& qc) { qc["bits"] = 2; });
  Status s = load();
  EXPECT_EQ(s.message(), dir_.file("config.json") + ": quantization_config.bits: 2 is not supported (supported: 4, 8)");
}

TEST_F(BrokenCheckpoint, QuantizedLmHeadNotInIgnore) {
  make("ct_w4a16_g32", [](json& qc) { qc["ignore"] = json::array(); });
  Status s = load();
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_EQ(s.message(), dir_.file("config.json") +
                             ": quantization_config: lm_head is quantized (config_groups.group_0 targets it and "
                             "ignore does not list it): a quantized lm_head is not supported");
}

TEST_F(BrokenCheckpoint, WeightShapeThatDisagrees) {
  make("ct_w4a16_g32", nullptr, [](auto& ts) {
    HostTensor s(DType::kI64, Shape{2});
    s.data<int64_t>()[0] = 64;
    s.data<int64_t>()[1] = 65;
    replace(ts, kQ0 + ".weight_shape", std::move(s));
  });
  Status s = load();
  EXPECT_EQ(s.message(), kQ0 + ".weight_shape in model.safetensors: [64, 65], expected [64, 64]");
}

TEST_F(BrokenCheckpoint, StaticActivationsWithoutInputScale) {
  make("ct_w8a8_int8", nullptr, [](auto& ts) { drop(ts, kQ0 + ".input_scale"); });
  Status s = load();
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message().rfind("tensor '" + kQ0 + ".input_scale' not found", 0), 0u) << s.message();
}

// Differing static input scales of q, k and v: the largest is used.
TEST_F(BrokenCheckpoint, DifferentInputScalesOfFusedPartsUseTheLargest) {
  make("ct_w8a8_int8", nullptr, [](auto& ts) {
    HostTensor s(DType::kF32, Shape{1});
    s.data<float>()[0] = 0.5f;
    replace(ts, "model.layers.0.self_attn.v_proj.input_scale", std::move(s));
  });
  auto files = WeightFiles::open(dir_.path());
  ASSERT_TRUE(files.ok());
  auto cfg = load_model_config(dir_.path());
  ASSERT_TRUE(cfg.ok());
  auto w = read_checkpoint_linear(*files, cfg->quantization,
                                  {{kQ0, kQ}, {"model.layers.0.self_attn.k_proj", kKv}, {"model.layers.0.self_attn.v_proj", kKv}},
                                  kH);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  EXPECT_EQ(w->input_scale.data<float>()[0], 0.5f);
  EXPECT_NE(w->note.find("input_scale differs between"), std::string::npos) << w->note;
}

}  // namespace
}  // namespace xinfer::model

namespace xinfer::model {
namespace {

// Parts that cannot share one format (here: q's act-order g_idx and a k whose g_idx is plain k / group) are
// dequantized together; each part's rows are its own dequantized weights.
TEST_F(BrokenCheckpoint, PartsThatCannotBeJoinedAreDequantizedTogether) {
  make("gptq_w4_g32_actorder", nullptr, [](auto& ts) {
    HostTensor g(DType::kI32, Shape{64});
    for (int i = 0; i < 64; ++i) g.data<int32_t>()[i] = i / 32;
    replace(ts, "model.layers.0.self_attn.k_proj.g_idx", std::move(g));
  });
  auto files = WeightFiles::open(dir_.path());
  ASSERT_TRUE(files.ok());
  auto cfg = load_model_config(dir_.path());
  ASSERT_TRUE(cfg.ok());
  const std::string k = "model.layers.0.self_attn.k_proj";
  auto qkv = read_checkpoint_linear(*files, cfg->quantization, {{kQ0, kQ}, {k, kKv}, {"model.layers.0.self_attn.v_proj", kKv}}, kH);
  ASSERT_TRUE(qkv.ok()) << qkv.status().to_string();
  EXPECT_EQ(quant::format_name(qkv->format), "dense(f32)");
  EXPECT_EQ(qkv->note, "parts have different g_idx: dequantized to f32 at load");
  auto alone = read_checkpoint_linear(*files, cfg->quantization, {{k, kKv}}, kH);
  ASSERT_TRUE(alone.ok());
  HostLinear ka = dequantize_linear(*alone);
  EXPECT_TRUE(std::equal(ka.weight.data<float>(), ka.weight.data<float>() + kKv * kH,
                         qkv->weight.data<float>() + kQ * kH));
}

}  // namespace
}  // namespace xinfer::model

namespace xinfer::model {
namespace {

// compressed-tensors' weight_g_idx (act order, older writers): a g_idx equal to k / group is dropped; one that
// swaps the two groups of K = 64 makes column k use the other group's scale: W'[n, k] = ref[n, k] *
// s[n, 1 - g] / s[n, g] (symmetric int4: the code and zero are unchanged).
TEST_F(BrokenCheckpoint, CompressedTensorsGIdx) {
  make("ct_w4a16_g32", nullptr, [](auto& ts) {
    HostTensor g(DType::kI32, Shape{64});
    for (int i = 0; i < 64; ++i) g.data<int32_t>()[i] = 1 - i / 32;
    ts.emplace_back("model.layers.0.self_attn.k_proj.weight_g_idx", std::move(g));
  });
  auto files = WeightFiles::open(dir_.path());
  ASSERT_TRUE(files.ok());
  auto cfg = load_model_config(dir_.path());
  ASSERT_TRUE(cfg.ok());
  const std::string k = "model.layers.0.self_attn.k_proj";
  auto w = read_checkpoint_linear(*files, cfg->quantization, {{k, kKv}}, kH);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  ASSERT_FALSE(w->g_idx.view().empty());
  HostLinear d = dequantize_linear(*w);
  auto golden = WeightFiles::open_file(golden_root() + "/ct_w4a16_g32/golden.safetensors");
  ASSERT_TRUE(golden.ok());
  const std::vector<float> ref = floats(*golden, "ref." + k + ".weight");
  const std::vector<float> s = floats(*files, k + ".weight_scale");  // [32, 2]
  for (int64_t n = 0; n < kKv; ++n)
    for (int64_t c = 0; c < kH; ++c) {
      const int64_t g = c / 32;
      const float want = ref[static_cast<size_t>(n * kH + c)] / s[static_cast<size_t>(n * 2 + g)] *
                         s[static_cast<size_t>(n * 2 + 1 - g)];
      ASSERT_NEAR(d.weight.data<float>()[n * kH + c], want, 1e-6f * std::fabs(want) + 1e-12f) << n << ", " << c;
    }
}

}  // namespace
}  // namespace xinfer::model

namespace xinfer::model {
namespace {

// The CPU backend without its GGUF kernels: a backend with int kernels only, as CUDA is for GGUF files.
class NoGgufCpuBackend : public cpu::CpuBackend {
 public:
  using cpu::CpuBackend::CpuBackend;
  bool supports(const quant::WeightFormat& f) const override {
    return !std::holds_alternative<quant::GgufFormat>(f) && cpu::CpuBackend::supports(f);
  }
};

// A GGUF's Q4_1 linears on a backend without GGUF kernels: repacked at load into int4-g32-min (the loader's
// path on CUDA), run by the backend's int kernel (here the CPU's, whose dequantization of the repacked rows
// is dequantize_gguf's bit for bit), they give the logits of the weights dequantized at load (float32 both:
// summation order apart), and the memory plan's estimate is the bytes loaded.
TEST(GgufRepack, LoadedOnABackendWithoutGgufKernels) {
  const char* src = std::getenv("XINFER_SOURCE_DIR");
  const std::string path = std::string(src ? src : ".") + "/tests/unit/model/data/tiny_llama_q4_1.gguf";
  const std::vector<int32_t> prompt = {1, 5, 9, 13, 17, 21, 25, 40, 41, 7};
  NoGgufCpuBackend int_only{cpu::CpuBackendOptions{1}};
  cpu::CpuBackend plain{cpu::CpuBackendOptions{1}};
  std::unique_ptr<LlamaModel> repacked, dequantized;
  const std::vector<float> got = load_and_run_prompt(path, int_only, LoadOptions{}, prompt, repacked);
  LoadOptions deq;
  deq.dequantize_gguf = true;
  const std::vector<float> want = load_and_run_prompt(path, plain, deq, prompt, dequantized);
  ASSERT_TRUE(repacked != nullptr && dequantized != nullptr);
  const size_t repacked_bytes = repacked->weight_bytes(), dequantized_bytes = dequantized->weight_bytes();
  ASSERT_EQ(got.size(), want.size());
  ASSERT_FALSE(got.empty());
  float diff = 0, scale = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    diff = std::max(diff, std::fabs(got[i] - want[i]));
    scale = std::max(scale, std::fabs(want[i]));
  }
  EXPECT_LT(diff, 1e-5f * std::max(1.0f, scale)) << "logits up to " << scale;
  EXPECT_LT(repacked_bytes, dequantized_bytes) << "the linears stayed quantized";
  const Result<ModelConfig> c = load_gguf_model_config(path);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  auto supported = [&](const quant::WeightFormat& f, int64_t n, int64_t k) {
    return int_only.supports_linear(f, n, k);
  };
  EXPECT_EQ(planned_weight_bytes(path, *c, DType::kF32, supported), repacked_bytes);
}

// The memory plan's estimate for a GGUF file: the block formats the CPU backend keeps, as loaded.
TEST(PlannedWeightBytes, GgufFileAsLoaded) {
  const char* src = std::getenv("XINFER_SOURCE_DIR");
  const std::string path = std::string(src ? src : ".") + "/tests/unit/model/data/tiny_llama_q4_1.gguf";
  cpu::CpuBackend backend{cpu::CpuBackendOptions{1}};
  LoadOptions opts;
  opts.show_progress = false;
  opts.max_tokens = 16;
  opts.max_logit_rows = 16;
  auto m = LlamaModel::load(path, backend, opts);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  auto supported = [&](const quant::WeightFormat& f, int64_t n, int64_t k) { return backend.supports_linear(f, n, k); };
  EXPECT_EQ(planned_weight_bytes(path, (*m)->config(), DType::kF32, supported), (*m)->weight_bytes());
  // A backend without block kernels: everything dense, as the loader dequantizes it.
  auto dense_only = [](const quant::WeightFormat& f, int64_t, int64_t) {
    return std::holds_alternative<quant::DenseFormat>(f);
  };
  EXPECT_EQ(planned_weight_bytes(path, (*m)->config(), DType::kF32, dense_only),
            static_cast<size_t>(LlamaModel::parameter_count((*m)->config())) * 4);
  // A backend with int kernels but none for GGUF blocks (CUDA): the Q4_1 linears at their repacked size
  // (int4-g32-min: half a byte per weight, an f32 scale and min per 32), the Q8_0 embedding table and the
  // norms dense; sharded models are not repacked.
  auto int_only = [](const quant::WeightFormat& f, int64_t, int64_t) {
    return std::holds_alternative<quant::DenseFormat>(f) || std::holds_alternative<quant::IntGroupFormat>(f);
  };
  const ModelConfig& c = (*m)->config();
  const int64_t H = c.hidden_size, D = c.head_dim, I = c.intermediate_size;
  const int64_t linear =
      c.num_layers * (H * (c.num_heads + 2 * c.num_kv_heads) * D + c.num_heads * D * H + 3 * H * I);
  const size_t dense = static_cast<size_t>(LlamaModel::parameter_count(c)) * 4;
  EXPECT_EQ(planned_weight_bytes(path, c, DType::kF32, int_only), dense - static_cast<size_t>(linear) * 4 +
                                                                      static_cast<size_t>(linear) / 2 +
                                                                      static_cast<size_t>(linear) / 32 * 8);
  EXPECT_EQ(planned_weight_bytes(path, c, DType::kF32, int_only, std::nullopt, /*sharded=*/true), dense);
}

// Loads the committed GGUF fixture tests/unit/model/data/<name> on the CPU backend (GGUF kernels) and on one
// without GGUF kernels (CUDA's case), checks on each that the memory plan's estimate equals the loaded bytes,
// and hands each model to check(model, backend, cpu).
template <typename Check>
void load_with_and_without_gguf_kernels(const std::string& name, Check check) {
  const char* src = std::getenv("XINFER_SOURCE_DIR");
  const std::string path = std::string(src ? src : ".") + "/tests/unit/model/data/" + name;
  cpu::CpuBackend plain{cpu::CpuBackendOptions{1}};
  NoGgufCpuBackend int_only{cpu::CpuBackendOptions{1}};
  for (backend::Backend* be : std::initializer_list<backend::Backend*>{&plain, &int_only}) {
    SCOPED_TRACE(name + (be == &plain ? " on the cpu" : " without gguf kernels"));
    LoadOptions opts;
    opts.show_progress = false;
    opts.max_tokens = 16;
    opts.max_logit_rows = 16;
    auto m = LlamaModel::load(path, *be, opts);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    auto supported = [&](const quant::WeightFormat& f, int64_t n, int64_t k) { return be->supports_linear(f, n, k); };
    auto repack = [&](quant::GgufType t) { return be->prefers_repacked_gguf(t); };
    EXPECT_EQ(planned_weight_bytes(path, (*m)->config(), DType::kF32, supported, std::nullopt, false, repack),
              (*m)->weight_bytes());
    check(**m, path, supported, repack, be == &plain);
  }
}

// A GGUF whose concatenated weights mix types (q / k in Q4_1 with v in Q8_0, as llama.cpp's Q4_K_M puts v in
// another type than q / k; down in Q5_0): the loader runs such a qkv as two segments, each in its type's
// format, and the estimate follows it, on the CPU (which keeps Q4_1 / Q8_0 blocks and repacks Q5_0) and on a
// backend without GGUF kernels (CUDA's case: Q4_1, Q8_0 and Q5_0 repacked).
TEST(PlannedWeightBytes, GgufWithMixedTypesAsLoaded) {
  load_with_and_without_gguf_kernels("tiny_llama_mixed.gguf", [](const LlamaModel& m, const std::string& path,
                                                                 const auto& supported, const auto& repack, bool cpu) {
    const ModelConfig& c = m.config();
    const std::vector<std::string> want = cpu ? std::vector<std::string>{"gguf(Q4_1)", "gguf(Q8_0)"}
                                              : std::vector<std::string>{"int4-g32-min", "int8-g32"};
    for (int l = 0; l < c.num_layers; ++l) {
      const backend::LinearWeights& qkv = m.layer(l).qkv;
      ASSERT_EQ(qkv.segments.size(), 2u) << "layer " << l;
      EXPECT_EQ(quant::format_name(qkv.segments[0].format), want[0]);
      EXPECT_EQ(quant::format_name(qkv.segments[1].format), want[1]);
      EXPECT_EQ(qkv.segments[0].out_features(), static_cast<int64_t>(c.num_heads + c.num_kv_heads) * c.head_dim);
      EXPECT_EQ(qkv.out_features(), static_cast<int64_t>(c.num_heads + 2 * c.num_kv_heads) * c.head_dim);
      EXPECT_FALSE(qkv.dense());
    }
    // Sharded, the mixed qkv loads dense: the estimate counts it so.
    const int64_t qkv_numel =
        static_cast<int64_t>(c.num_layers) * c.hidden_size * (c.num_heads + 2 * c.num_kv_heads) * c.head_dim;
    EXPECT_GT(planned_weight_bytes(path, c, DType::kF32, supported, std::nullopt, true, repack),
              m.weight_bytes() + static_cast<size_t>(qkv_numel) * 2);  // 4 bytes against 0.6-1.1
  });
}

// v in Q5_1 beside q / k in Q4_1: on a backend without GGUF kernels Q5_1 has no int format, so the qkv would
// be a dense segment beside a packed one; it loads dense, joined, as before segments (and the estimate says
// so). The CPU keeps both blocks: segments.
TEST(PlannedWeightBytes, GgufMixedWithADensePartLoadsJoined) {
  load_with_and_without_gguf_kernels("tiny_llama_mixed_q5_1.gguf", [](const LlamaModel& m, const std::string&,
                                                                      const auto&, const auto&, bool cpu) {
    for (int l = 0; l < m.config().num_layers; ++l) {
      const backend::LinearWeights& qkv = m.layer(l).qkv;
      if (cpu) {
        ASSERT_EQ(qkv.segments.size(), 2u) << "layer " << l;
        EXPECT_EQ(quant::format_name(qkv.segments[1].format), "gguf(Q5_1)");
      } else {
        EXPECT_FALSE(qkv.segmented()) << "layer " << l;
        EXPECT_TRUE(qkv.dense()) << "layer " << l;
      }
    }
  });
}

}  // namespace
}  // namespace xinfer::model

namespace xinfer::model {
namespace {

// The memory plan of dummy weights in a quantized format (`xinfer bench --quantization`): every decoder linear
// at that format's size, the embedding, norms and lm_head dense. Llama-3.1-70B in FP8 fits one 141 GB GPU only
// if the plan counts ~1 byte per linear weight (it counted bf16 before: 131 GiB, refused).
TEST(CheckpointWeightBytes, DummyLinearFormat) {
  auto c = resolve_model_config("llama-3.1-70b");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  auto all = [](const quant::WeightFormat&, int64_t, int64_t) { return true; };
  const size_t dense = checkpoint_weight_bytes(*c, DType::kBF16, all);
  const int64_t H = c->hidden_size, I = c->intermediate_size;
  const int64_t q = static_cast<int64_t>(c->num_heads) * c->head_dim, kv = static_cast<int64_t>(c->num_kv_heads) * c->head_dim;
  const int64_t linear = static_cast<int64_t>(c->num_layers) * (H * (q + 2 * kv) + q * H + 2 * I * H + H * I);
  const int64_t rows = static_cast<int64_t>(c->num_layers) * ((q + 2 * kv) + H + 2 * I + H);  // output channels
  EXPECT_EQ(dense, static_cast<size_t>(2 * model::LlamaModel::parameter_count(*c)));
  const size_t fp8 = checkpoint_weight_bytes(*c, DType::kBF16, all, quant::W8A8Fp8Format{});
  EXPECT_EQ(fp8, dense - static_cast<size_t>(linear) + static_cast<size_t>(4 * rows));  // 1 byte + [n] f32 scales
  const size_t w4 = planned_weight_bytes("llama-3.1-70b", *c, DType::kBF16, all, quant::IntGroupFormat{4, 128, false});
  EXPECT_LT(w4, fp8);
  EXPECT_LT(static_cast<double>(fp8) / (1 << 30), 70.0);
  // A format the backend has no kernel for is planned dense, as it loads.
  EXPECT_EQ(checkpoint_weight_bytes(*c, DType::kBF16, [](const quant::WeightFormat& f, int64_t, int64_t) {
              return std::holds_alternative<quant::DenseFormat>(f);
            }, quant::W8A8Fp8Format{}),
            dense);
}

}  // namespace
}  // namespace xinfer::model
