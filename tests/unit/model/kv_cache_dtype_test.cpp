// --kv-cache-dtype (engine/kv_cache_dtype.h): parsing, resolution per backend, Engine::create refusing
// what the CPU backend cannot run (with the message naming the backend) and planning an FP8 cache (1 byte an
// element: 4x the f32 blocks in the same kv_cache_memory), and the FP8 scales: --kv-cache-scale, the
// checkpoint's self_attn.k_scale / v_scale tensors (per tensor or per KV head), 1.0, the key rotation's
// choices, and the errors for bad scales.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "xinfer/backend/cpu/cpu_backend.h"

#include "xinfer/engine/engine.h"
#include "xinfer/engine/kv_cache_dtype.h"
#include "xinfer/model/model_config.h"

namespace xinfer::engine {
namespace {

TEST(KvCacheDtype, ParsesTheDocumentedNames) {
  EXPECT_EQ(*parse_kv_cache_dtype("auto"), KvCacheDtype::kAuto);
  EXPECT_EQ(*parse_kv_cache_dtype("bf16"), KvCacheDtype::kBF16);
  EXPECT_EQ(*parse_kv_cache_dtype("fp16"), KvCacheDtype::kF16);
  EXPECT_EQ(*parse_kv_cache_dtype("f32"), KvCacheDtype::kF32);
  EXPECT_EQ(*parse_kv_cache_dtype("fp8"), KvCacheDtype::kFP8);
  Status s = parse_kv_cache_dtype("int4").status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "kv_cache_dtype must be one of auto, bf16, fp16, f32, fp8; got 'int4'");
}

TEST(KvCacheDtype, ResolvesToTheActivationDtypeOrRefuses) {
  EXPECT_EQ(*resolve_kv_cache_dtype(KvCacheDtype::kAuto, DType::kF32, "cpu"), DType::kF32);
  EXPECT_EQ(*resolve_kv_cache_dtype(KvCacheDtype::kAuto, DType::kBF16, "cuda:0"), DType::kBF16);
  EXPECT_EQ(*resolve_kv_cache_dtype(KvCacheDtype::kF32, DType::kF32, "cpu"), DType::kF32);
  EXPECT_EQ(*resolve_kv_cache_dtype(KvCacheDtype::kBF16, DType::kBF16, "cuda:0"), DType::kBF16);
  EXPECT_EQ(*resolve_kv_cache_dtype(KvCacheDtype::kFP8, DType::kF32, "cpu", true), DType::kFP8E4M3);
  EXPECT_EQ(*resolve_kv_cache_dtype(KvCacheDtype::kFP8, DType::kBF16, "cuda:0", true), DType::kFP8E4M3);
  Status s = resolve_kv_cache_dtype(KvCacheDtype::kFP8, DType::kBF16, "other").status();
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_EQ(s.message(), "kv_cache_dtype fp8 is not supported on other: its rope_kv_write and attention kernels "
                         "read and write the KV cache in bf16 only; use auto or bf16");
  s = resolve_kv_cache_dtype(KvCacheDtype::kBF16, DType::kF32, "cpu").status();
  EXPECT_EQ(s.message(), "kv_cache_dtype bf16 is not supported on cpu: its attention reads the KV cache in its "
                         "activation dtype f32 only; use auto or f32");
}

std::string golden_model() {
  const char* src = std::getenv("XINFER_SOURCE_DIR");
  return std::string(src ? src : ".") + "/tests/golden/checkpoints/ct_w4a16_g32";
}

TEST(KvCacheDtype, EngineRefusesBf16OnTheCpuAndPrintsTheSetting) {
  EngineConfig c;
  c.model_dir = golden_model();
  c.kv_cache_memory = size_t{1} << 20;
  c.kv_cache_dtype = KvCacheDtype::kBF16;
  auto e = Engine::create(c);
  ASSERT_FALSE(e.ok());
  const std::string m = e.status().message();  // the backend's name: "cpu (N threads, ...)"
  EXPECT_EQ(m.rfind("kv_cache_dtype bf16 is not supported on cpu (", 0), 0u) << m;
  const std::string tail = ": its attention reads the KV cache in its activation dtype f32 only; use auto or f32";
  EXPECT_EQ(m.substr(m.size() - std::min(m.size(), tail.size())), tail) << m;
  c.kv_cache_dtype = KvCacheDtype::kF32;
  EXPECT_NE(c.to_string().find(" kv_cache_dtype=f32 "), std::string::npos) << c.to_string();
  auto ok = Engine::create(c);
  EXPECT_TRUE(ok.ok()) << ok.status().to_string();
}

// FP8 on the CPU: 1 byte per element against f32's 4, so the same kv_cache_memory holds 4x the blocks
// (blocks are whole: floor(budget / bytes_per_block) each), and the engine generates.
TEST(KvCacheDtype, EnginePlansFourTimesTheF32BlocksInFp8) {
  EngineConfig c;
  c.model_dir = golden_model();
  c.kv_cache_memory = size_t{1} << 20;
  auto f32 = Engine::create(c);
  ASSERT_TRUE(f32.ok()) << f32.status().to_string();
  c.kv_cache_dtype = KvCacheDtype::kFP8;
  c.kv_cache_scale = 0.5f;
  EXPECT_NE(c.to_string().find(" kv_cache_dtype=fp8 kv_cache_scale=0.5 "), std::string::npos) << c.to_string();
  auto fp8 = Engine::create(c);
  ASSERT_TRUE(fp8.ok()) << fp8.status().to_string();
  const MemoryPlan& a = (*f32)->memory_plan();
  const MemoryPlan& b = (*fp8)->memory_plan();
  EXPECT_GE(b.num_blocks, 4 * a.num_blocks - 4) << a.num_blocks << " f32 blocks";
  EXPECT_LE(b.num_blocks, 4 * a.num_blocks + 4) << a.num_blocks << " f32 blocks";
  EXPECT_LE(b.kv_bytes, c.kv_cache_memory);
}

// A copy of the golden checkpoint whose config and tensors carry KV scales: `scales` per layer (each a tensor
// of `per` F32 values, or none when empty) in a second safetensors file, listed by an index.
std::string checkpoint_with_scales(const std::string& name, const std::vector<float>& scales, int per,
                                   bool scheme) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("xinfer_kv_scales_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(golden_model())) fs::copy(e.path(), dir / e.path().filename());
  nlohmann::json cfg = nlohmann::json::parse(std::ifstream(dir / "config.json"));
  if (scheme)
    cfg["quantization_config"]["kv_cache_scheme"] = {{"num_bits", 8}, {"type", "float"}, {"strategy", "tensor"},
                                                     {"dynamic", false}, {"symmetric", true}};
  std::ofstream(dir / "config.json") << cfg.dump(2);
  if (scales.empty()) return dir.string();
  // Index: the tensors of model.safetensors (renamed) and the scales in kv_scales.safetensors.
  nlohmann::json header = nlohmann::json::object(), index = {{"weight_map", nlohmann::json::object()}};
  std::vector<float> data;
  for (size_t l = 0; l < scales.size(); ++l)
    for (const char* what : {"k_scale", "v_scale"}) {
      const std::string t = "model.layers." + std::to_string(l) + ".self_attn." + what;
      const size_t begin = data.size() * 4;
      for (int i = 0; i < per; ++i)  // head i: (i + 1) x the layer's scale
        data.push_back(static_cast<float>(i + 1) * (std::string(what) == "k_scale" ? scales[l] : 2 * scales[l]));
      header[t] = {{"dtype", "F32"}, {"shape", per == 1 ? nlohmann::json::array() : nlohmann::json::array({per})},
                   {"data_offsets", {begin, data.size() * 4}}};
      index["weight_map"][t] = "kv_scales.safetensors";
    }
  std::string h = header.dump();
  h.resize((h.size() + 7) / 8 * 8, ' ');  // the data section 8-byte aligned, as safetensors writers pad it
  std::ofstream out(dir / "kv_scales.safetensors", std::ios::binary);
  const uint64_t n = h.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out.write(h.data(), static_cast<std::streamsize>(h.size()));
  out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size() * 4));
  out.close();
  // The original tensors, by name, from model.safetensors.
  nlohmann::json st_header;
  {
    std::ifstream in(dir / "model.safetensors", std::ios::binary);
    uint64_t len = 0;
    in.read(reinterpret_cast<char*>(&len), 8);
    std::string text(len, '\0');
    in.read(text.data(), static_cast<std::streamsize>(len));
    st_header = nlohmann::json::parse(text);
  }
  for (const auto& [t, v] : st_header.items())
    if (t != "__metadata__") index["weight_map"][t] = "model-00001-of-00002.safetensors";
  fs::rename(dir / "model.safetensors", dir / "model-00001-of-00002.safetensors");  // a single file hides an index
  std::ofstream(dir / "model.safetensors.index.json") << index.dump(2);
  return dir.string();
}

// An Engine on `model_dir` with an FP8 KV cache starts (its scales resolved and its cache allocated).
void expect_fp8_engine_starts(const std::string& model_dir) {
  EngineConfig ec;
  ec.model_dir = model_dir;
  ec.kv_cache_memory = size_t{1} << 20;
  ec.kv_cache_dtype = KvCacheDtype::kFP8;
  auto e = Engine::create(ec);
  EXPECT_TRUE(e.ok()) << e.status().to_string();
}

model::ModelConfig golden_config() {
  auto c = model::load_model_config(golden_model());
  XI_CHECK(c.ok()) << c.status().to_string();
  return *c;  // 2 layers, 2 KV heads, head_dim 16
}

TEST(KvCacheScales, FromTheFlagTheCheckpointOrOne) {
  cpu::CpuBackend be{cpu::CpuBackendOptions{1}};
  const model::ModelConfig mc = golden_config();
  const KvCacheRequest fp8{KvCacheDtype::kFP8};
  // Default: 1.0 for every layer and KV head; the flag overrides everything.
  auto d = resolve_kv_cache(fp8, golden_model(), mc, true, be);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->dtype, DType::kFP8E4M3);
  EXPECT_EQ(d->num_kv_heads, 2);
  EXPECT_EQ(d->k_scales, (std::vector<float>{1.0f, 1.0f, 1.0f, 1.0f}));
  EXPECT_EQ(d->v_scales, (std::vector<float>{1.0f, 1.0f, 1.0f, 1.0f}));
  EXPECT_EQ(d->to_string(), "fp8_e4m3 (scales: 1.0 (default), k 1..1, v 1..1; keys rotated: hadamard)");
  auto f = resolve_kv_cache({KvCacheDtype::kFP8, 0.25f}, golden_model(), mc, true, be);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->k_scales, (std::vector<float>{0.25f, 0.25f, 0.25f, 0.25f}));
  // The checkpoint's per-tensor scales (k_scale, v_scale = 2 * k_scale here), with its kv_cache_scheme.
  const std::string ck = checkpoint_with_scales("ok", {0.5f, 0.125f}, 1, true);
  auto c = resolve_kv_cache(fp8, ck, mc, true, be);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->k_scales, (std::vector<float>{0.5f, 0.5f, 0.125f, 0.125f}));
  EXPECT_EQ(c->v_scales, (std::vector<float>{1.0f, 1.0f, 0.25f, 0.25f}));
  EXPECT_EQ(c->scales_source, "checkpoint k_scale / v_scale");
  auto o = resolve_kv_cache({KvCacheDtype::kFP8, 3.0f}, ck, mc, true, be);  // the flag wins
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->k_scales, (std::vector<float>{3.0f, 3.0f, 3.0f, 3.0f}));
  expect_fp8_engine_starts(ck);  // the engine loads that checkpoint with its scales
  // A bf16 / f32 cache ignores the scales.
  auto a = resolve_kv_cache({KvCacheDtype::kAuto}, ck, mc, true, be);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->dtype, DType::kF32);
  EXPECT_TRUE(a->k_scales.empty());
  EXPECT_EQ(a->k_rotation, backend::KvRotation::kNone);
}

// compressed-tensors' attn_head strategy: one scale per KV head ([heads] tensors); each rank of a
// tensor-parallel model takes its own heads'.
TEST(KvCacheScales, PerHeadScalesFromTheCheckpoint) {
  cpu::CpuBackend be{cpu::CpuBackendOptions{1}};
  const model::ModelConfig mc = golden_config();
  const std::string ck = checkpoint_with_scales("per_head_ok", {0.5f, 0.125f}, 2, true);
  auto c = resolve_kv_cache({KvCacheDtype::kFP8}, ck, mc, true, be);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->k_scales, (std::vector<float>{0.5f, 1.0f, 0.125f, 0.25f}));
  EXPECT_EQ(c->v_scales, (std::vector<float>{1.0f, 2.0f, 0.25f, 0.5f}));
  EXPECT_EQ(c->scales_source, "checkpoint k_scale / v_scale per head");
  backend::KvCacheSpec spec{mc.num_layers, 4, 16, 1, mc.head_dim, DType::kF32};
  c->apply_to(spec);
  spec.kv_head_begin = 1;  // the second of two ranks, one KV head each
  const backend::KvCache cache = be.allocate_kv_cache(spec);
  ASSERT_EQ(cache.layers.size(), 2u);
  EXPECT_FALSE(cache.layers[0].per_head_scales());  // one head: a layer scale
  EXPECT_EQ(cache.layers[0].k_scale, 1.0f);
  EXPECT_EQ(cache.layers[1].v_scale, 0.5f);
  EXPECT_EQ(cache.layers[0].k_rotation, backend::KvRotation::kHadamard);
  spec.num_kv_heads = 2;
  spec.kv_head_begin = 0;
  const backend::KvCache both = be.allocate_kv_cache(spec);
  ASSERT_TRUE(both.layers[1].per_head_scales());
  EXPECT_EQ(both.layers[1].host_k_scale(0), 0.125f);
  EXPECT_EQ(both.layers[1].host_k_scale(1), 0.25f);
  EXPECT_EQ(both.layers[1].host_v_scale(1), 0.5f);
  expect_fp8_engine_starts(ck);  // per-head scales on the CPU backend
}

TEST(KvCacheScales, RotationChoices) {
  cpu::CpuBackend be{cpu::CpuBackendOptions{1}};
  model::ModelConfig mc = golden_config();
  EXPECT_EQ(*parse_kv_cache_rotation("auto"), KvRotationChoice::kAuto);
  EXPECT_EQ(*parse_kv_cache_rotation("hadamard"), KvRotationChoice::kHadamard);
  EXPECT_EQ(*parse_kv_cache_rotation("none"), KvRotationChoice::kNone);
  EXPECT_EQ(parse_kv_cache_rotation("random").status().message(),
            "kv_cache_rotation must be one of auto, hadamard, none; got 'random'");
  auto none = resolve_kv_cache({KvCacheDtype::kFP8, 0.0f, KvRotationChoice::kNone}, golden_model(), mc, true, be);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->k_rotation, backend::KvRotation::kNone);
  mc.head_dim = 24;  // not a power of two: auto gives none, hadamard is refused
  auto a = resolve_kv_cache({KvCacheDtype::kFP8}, golden_model(), mc, true, be);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->k_rotation, backend::KvRotation::kNone);
  Status s = resolve_kv_cache({KvCacheDtype::kFP8, 0.0f, KvRotationChoice::kHadamard}, golden_model(), mc, true, be)
                 .status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "kv_cache_rotation hadamard needs a power-of-two head_dim in [16, 256]; the model's is 24 "
                         "(use auto or none)");
}

TEST(KvCacheScales, BadScalesNameTheTensorOrField) {
  cpu::CpuBackend be{cpu::CpuBackendOptions{1}};
  const model::ModelConfig mc = golden_config();
  Status s = resolve_kv_cache({KvCacheDtype::kFP8, -1.0f}, golden_model(), mc, true, be).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "kv_cache_scale must be positive (0: the checkpoint's scales or 1.0), got -1.000000");
  const std::string three = checkpoint_with_scales("three_heads", {0.5f, 0.5f}, 3, true);
  s = resolve_kv_cache({KvCacheDtype::kFP8}, three, mc, true, be).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "KV-cache scale model.layers.0.self_attn.k_scale in " + three +
                             " has 3 elements (shape [3]): expected 1 (per tensor) or 2 (one per KV head)");
  const std::string zero = checkpoint_with_scales("zero", {0.0f, 0.5f}, 1, true);
  s = resolve_kv_cache({KvCacheDtype::kFP8}, zero, mc, true, be).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "KV-cache scale model.layers.0.self_attn.k_scale in " + zero +
                             " is 0.000000: must be positive and finite");
  const std::string missing = checkpoint_with_scales("missing", {}, 1, true);
  s = resolve_kv_cache({KvCacheDtype::kFP8}, missing, mc, true, be).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("quantization_config.kv_cache_scheme"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("has no model.layers.0.self_attn.k_scale / model.layers.0.self_attn.v_scale tensors"),
            std::string::npos)
      << s.message();
}

}  // namespace
}  // namespace xinfer::engine
