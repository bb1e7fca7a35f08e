// --kv-cache-dtype (engine/kv_cache_dtype.h): parsing, resolution per backend, and Engine::create refusing
// what the CPU backend cannot run, with the message naming the backend.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "xinfer/engine/engine.h"
#include "xinfer/engine/kv_cache_dtype.h"

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
  Status s = resolve_kv_cache_dtype(KvCacheDtype::kFP8, DType::kF32, "cpu").status();
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_EQ(s.message(), "kv_cache_dtype fp8 is not supported on cpu (the FP8 KV cache comes with the quantized "
                         "CUDA kernels); use auto or f32");
  s = resolve_kv_cache_dtype(KvCacheDtype::kBF16, DType::kF32, "cpu").status();
  EXPECT_EQ(s.message(), "kv_cache_dtype bf16 is not supported on cpu: its attention reads the KV cache in its "
                         "activation dtype f32 only; use auto or f32");
}

std::string golden_model() {
  const char* src = std::getenv("XINFER_SOURCE_DIR");
  return std::string(src ? src : ".") + "/tests/golden/checkpoints/ct_w4a16_g32";
}

TEST(KvCacheDtype, EngineRefusesFp8OnTheCpuAndPrintsTheSetting) {
  EngineConfig c;
  c.model_dir = golden_model();
  c.kv_cache_memory = size_t{1} << 20;
  c.kv_cache_dtype = KvCacheDtype::kFP8;
  auto e = Engine::create(c);
  ASSERT_FALSE(e.ok());
  const std::string m = e.status().message();  // the backend's name: "cpu (N threads, ...)"
  EXPECT_EQ(m.rfind("kv_cache_dtype fp8 is not supported on cpu (", 0), 0u) << m;
  const std::string tail = " (the FP8 KV cache comes with the quantized CUDA kernels); use auto or f32";
  EXPECT_EQ(m.substr(m.size() - std::min(m.size(), tail.size())), tail) << m;
  c.kv_cache_dtype = KvCacheDtype::kF32;
  EXPECT_NE(c.to_string().find(" kv_cache_dtype=f32 "), std::string::npos) << c.to_string();
  auto ok = Engine::create(c);
  EXPECT_TRUE(ok.ok()) << ok.status().to_string();
}

}  // namespace
}  // namespace xinfer::engine
