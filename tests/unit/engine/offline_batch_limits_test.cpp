// engine::offline_batch_limits (engine_config.h): `xinfer bench`'s throughput batch limits by device, vLLM's
// offline defaults. Expected values by hand from the rule: 1024 / 16384 from 70 GiB unless the name says
// A100, else 512 / 8192.
#include <gtest/gtest.h>

#include <utility>

#include "xinfer/engine/engine_config.h"

namespace xinfer::engine {
namespace {

// `xinfer bench`'s throughput batch limits by device (vLLM's offline defaults): the large limits need both
// the memory and a device that is not an A100 (vLLM measured larger token budgets slower there).
TEST(OfflineBatchLimits, ByDeviceMemoryAndName) {
  constexpr size_t kGiB = size_t{1} << 30;
  auto limits = [](const char* name, size_t bytes) {
    const BatchLimits b = offline_batch_limits(name, bytes);
    return std::pair(b.max_num_seqs, b.max_num_batched_tokens);
  };
  EXPECT_EQ(limits("NVIDIA H200", 140 * kGiB), std::pair(1024, 16384));
  EXPECT_EQ(limits("NVIDIA H100 80GB HBM3", 80 * kGiB - 300 * (kGiB >> 10)), std::pair(1024, 16384));
  EXPECT_EQ(limits("NVIDIA A100-SXM4-80GB", 80 * kGiB), std::pair(512, 8192));
  EXPECT_EQ(limits("NVIDIA L40S", 45 * kGiB), std::pair(512, 8192));
  EXPECT_EQ(limits("big", 70 * kGiB), std::pair(1024, 16384));
  EXPECT_EQ(limits("big", 70 * kGiB - 1), std::pair(512, 8192));
  EXPECT_EQ(limits("", 0), std::pair(512, 8192));  // no GPU
}

}  // namespace
}  // namespace xinfer::engine
