// The GEMM tuner's cache file on the CPU (gemm_tuning_cache.h): every kind of choice round-trips, sections of
// other devices survive a save, corrupt files are DATA_LOSS and replaced by the next save, and the tuners'
// reading of it (read_gemm_tuning_cache) tells a new cache from an unreadable one. Whether a restored
// cuBLASLt algorithm still runs is checked on the GPU (tests/gpu/gemm_test.cpp).
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <optional>
#include <string>

#include "unit/model/temp_dir.h"
#include "xinfer/backend/cuda/kernels/gemm/gemm_tuning_cache.h"

namespace xinfer::cuda {
namespace {

using model::testing::TempDir;
using model::testing::write_bytes;

GemmTuningEntry entry(GemmTuningKey key, GemmKind kind, float us, std::optional<float> heuristic_us) {
  GemmTuningEntry e{key, {}};
  e.choice.kind = kind;
  e.choice.us = us;
  e.choice.heuristic_us = heuristic_us;
  return e;
}

TEST(GemmTuningCache, RoundTripMergeAndCorruptFiles) {
  TempDir dir;
  const std::string path = dir.file("sub/cache.json");  // the directory is created on save
  EXPECT_EQ(load_gemm_tuning_cache(path, "dev").status().code(), StatusCode::kNotFound);

  GemmTuningEntry gemv_e = entry({4096, 4096, false, false, 1}, GemmKind::kGemv, 8.5f, 14.25f);
  gemv_e.choice.gemv = GemvConfig{2, 4, true};
  GemmTuningEntry lt_e = entry({96, 64, false, true, 3}, GemmKind::kCublasLt, 3.0f, 3.5f);
  for (size_t i = 0; i < sizeof(lt_e.choice.algo.data); ++i)  // any bytes: the file stores them as they are
    reinterpret_cast<unsigned char*>(lt_e.choice.algo.data)[i] = static_cast<unsigned char>(37 * i + 11);
  const GemmTuningEntry h_e = entry({128256, 4096, true, false, 256}, GemmKind::kHeuristic, 400.0f, 400.0f);
  // No cuBLASLt algorithm for the shape: no heuristic time (absent, not 0 us).
  GemmTuningEntry fallback_e = entry({1, 8, true, true, 9}, GemmKind::kGemv, 2.5f, std::nullopt);
  fallback_e.choice.gemv = GemvConfig{4, 1, false};
  const GemmTuningEntry none_e = entry({1, 12, true, true, 1}, GemmKind::kNone, 0.0f, std::nullopt);
  ASSERT_TRUE(save_gemm_tuning_cache(path, "devA", {gemv_e, lt_e, h_e, fallback_e, none_e}).ok());

  auto loaded = load_gemm_tuning_cache(path, "devA");
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  ASSERT_EQ(loaded->size(), 5u);
  std::map<GemmTuningKey, GemmChoice> by_key;
  for (const auto& e : *loaded) by_key[e.key] = e.choice;
  for (const GemmTuningEntry& want : {gemv_e, lt_e, h_e, fallback_e, none_e}) {
    ASSERT_EQ(by_key.count(want.key), 1u) << want.key.n << "x" << want.key.k;
    const GemmChoice& got = by_key[want.key];
    EXPECT_EQ(got.kind, want.choice.kind);
    EXPECT_FLOAT_EQ(got.us, want.choice.us);
    EXPECT_EQ(got.heuristic_us, want.choice.heuristic_us);
    if (want.choice.kind == GemmKind::kGemv) {
      EXPECT_EQ(got.gemv, want.choice.gemv);
    }
    if (want.choice.kind == GemmKind::kCublasLt) {
      EXPECT_EQ(std::memcmp(got.algo.data, want.choice.algo.data, sizeof(got.algo.data)), 0);
    }
  }
  EXPECT_EQ(load_gemm_tuning_cache(path, "devB").status().code(), StatusCode::kNotFound);

  // Another device's section and an update of one entry: everything else is kept.
  ASSERT_TRUE(save_gemm_tuning_cache(path, "devB", {h_e}).ok());
  GemmTuningEntry gemv_new = gemv_e;
  gemv_new.choice.gemv = GemvConfig{1, 1, false};
  ASSERT_TRUE(save_gemm_tuning_cache(path, "devA", {gemv_new}).ok());
  loaded = load_gemm_tuning_cache(path, "devA");
  ASSERT_TRUE(loaded.ok());
  EXPECT_EQ(loaded->size(), 5u);
  for (const auto& e : *loaded) {
    if (e.key == gemv_e.key) {
      EXPECT_EQ(e.choice.gemv, (GemvConfig{1, 1, false}));
    }
  }
  ASSERT_TRUE(load_gemm_tuning_cache(path, "devB").ok());
  EXPECT_EQ(load_gemm_tuning_cache(path, "devB")->size(), 1u);

  // Corrupt files are DATA_LOSS, never a crash or a partial result.
  const std::string ok =
      R"({"n":8,"k":8,"y_f32":false,"bias":false,"m":1,"kind":"heuristic","us":1,"heuristic_us":1})";
  const std::string head = R"({"format": 1, "devices": {"devA": [)";
  for (
      const std::string& text :
      {std::string("{ not json"), std::string(""), std::string("[1, 2, 3]"),
       std::string(R"({"format": 99, "devices": {}})"),
       std::string(R"({"format": 1, "devices": {"devA": {"n": 1}}})"), head + R"({"n": 1}]}})",
       head + ok +
           R"(, {"n":8,"k":8,"y_f32":false,"bias":false,"m":1,"kind":"cublaslt","algo":"zz","us":1,"heuristic_us":1}]}})",
       head +
           R"({"n":8,"k":8,"y_f32":"no","bias":false,"m":1,"kind":"heuristic","us":1,"heuristic_us":1}]}})",
       head + R"({"n":8,"k":8,"y_f32":false,"bias":false,"m":1,"kind":"magic","us":1,"heuristic_us":1}]}})",
       head +
           R"({"n":8,"k":8,"y_f32":false,"bias":false,"m":1,"kind":"heuristic","us":1,"heuristic_us":"x"}]}})",
       head + R"({"n":8,"k":8,"y_f32":false,"bias":false,"m":1,"kind":"heuristic","us":1}]}})",
       head +
           R"({"n":0,"k":8,"y_f32":false,"bias":false,"m":1,"kind":"heuristic","us":1,"heuristic_us":1}]}})"}) {
    write_bytes(path, text);
    EXPECT_EQ(load_gemm_tuning_cache(path, "devA").status().code(), StatusCode::kDataLoss) << text;
  }
  write_bytes(path, head + ok + "]}}");
  EXPECT_TRUE(load_gemm_tuning_cache(path, "devA").ok()) << "the well-formed variant loads";
  // Saving over a corrupt file replaces it.
  write_bytes(path, "garbage");
  ASSERT_TRUE(save_gemm_tuning_cache(path, "devA", {h_e}).ok());
  ASSERT_TRUE(load_gemm_tuning_cache(path, "devA").ok());
  EXPECT_EQ(load_gemm_tuning_cache(path, "devA")->size(), 1u);
}

// What the tuners see: a section's entries, a new cache (no file, or no section for this device), or an
// unreadable one (measured again; its save replaces the file).
TEST(GemmTuningCache, ReadTellsNewFromUnreadable) {
  TempDir dir;
  const std::string path = dir.file("cache.json");
  using State = CachedGemmChoices::State;
  CachedGemmChoices c = read_gemm_tuning_cache(path, "devA", "the test's choices");
  EXPECT_EQ(c.state, State::kNew);
  EXPECT_TRUE(c.entries.empty());

  const GemmTuningEntry h_e = entry({64, 32, false, false, 2}, GemmKind::kHeuristic, 1.5f, 1.5f);
  ASSERT_TRUE(save_gemm_tuning_cache(path, "devA", {h_e}).ok());
  c = read_gemm_tuning_cache(path, "devA", "the test's choices");
  EXPECT_EQ(c.state, State::kLoaded);
  ASSERT_EQ(c.entries.size(), 1u);
  EXPECT_EQ(c.entries[0].key, h_e.key);
  c = read_gemm_tuning_cache(path, "devB", "the test's choices");
  EXPECT_EQ(c.state, State::kNew) << "another device's section only";

  write_bytes(path, R"({"format": 1, "devices": {"devA": [{"n": 1}]}})");
  c = read_gemm_tuning_cache(path, "devA", "the test's choices");
  EXPECT_EQ(c.state, State::kUnreadable);
  EXPECT_TRUE(c.entries.empty());
}

}  // namespace
}  // namespace xinfer::cuda
