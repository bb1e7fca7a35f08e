// gpu_tests' process setup: the engines the tests create keep their GEMM tuning cache (the bf16 tuner's and
// the FP8 GEMMs' measured decisions, gemm_tuning_cache.h) in a file of this process's own under the temp
// directory, removed at the end, instead of the user's ~/.cache/xinfer/gemm_tuning.json: a test run neither
// takes decisions an earlier run stored nor leaves its own behind. XINFER_GEMM_TUNING_CACHE, when set, is
// kept as given.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

namespace {

class TuningCacheEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    if (std::getenv("XINFER_GEMM_TUNING_CACHE") != nullptr) return;
    path_ = std::filesystem::temp_directory_path() /
            ("xinfer_gpu_tests_" + std::to_string(getpid()) + "_gemm_tuning.json");
    setenv("XINFER_GEMM_TUNING_CACHE", path_.c_str(), 1);
  }
  void TearDown() override {
    if (path_.empty()) return;
    std::error_code ec;
    std::filesystem::remove(path_, ec);
    unsetenv("XINFER_GEMM_TUNING_CACHE");
  }

 private:
  std::filesystem::path path_;
};

[[maybe_unused]] ::testing::Environment* const kTuningCacheEnvironment =
    ::testing::AddGlobalTestEnvironment(new TuningCacheEnvironment);

}  // namespace
