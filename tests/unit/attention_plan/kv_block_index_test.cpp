// The paged attention kernels' block-table division (kv_block_index.cuh) on the CPU: j / block_size as the
// high word of j * ceil(2^32 / block_size) equals the integer division wherever the launchers allow it (every
// j for powers of two, j < 2^32 / block_size otherwise), and the launch check refuses what would leave that
// range.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "xinfer/backend/cuda/kernels/attention/kv_block_index.cuh"

namespace xinfer::cuda {
namespace {

TEST(KvBlockIndex, MultiplyEqualsDivisionInTheCheckedRange) {
  std::vector<uint32_t> sizes;
  for (uint32_t b = 1; b <= 300; ++b) sizes.push_back(b);
  for (uint32_t b : {384u, 1000u, 1024u, 4096u, 65535u, 65536u}) sizes.push_back(b);
  for (const uint32_t b : sizes) {
    const KvBlockDivider div(static_cast<int>(b));
    const bool pow2 = (b & (b - 1)) == 0;
    const uint64_t limit = pow2 ? (uint64_t{1} << 32) : (uint64_t{1} << 32) / b;  // positions j < limit
    auto check = [&](uint64_t j) {
      if (j >= limit) return;
      const auto j32 = static_cast<uint32_t>(j);
      ASSERT_EQ(div.block(j32), j32 / b) << "block size " << b << ", position " << j;
    };
    // Every position of the first blocks, then the last position of each block and the first of the next
    // across the whole range (where an overshoot would show), sampled.
    for (uint64_t j = 0; j < 64ull * b; ++j) check(j);
    const uint64_t step = b * std::max<uint64_t>(1, limit / b / 4096);
    for (uint64_t m = step; m < limit; m += step) {
      check(m - 1);
      check(m);
    }
    check(limit - 1);
  }
}

TEST(KvBlockIndex, LaunchCheckRefusesPositionsPastTheExactRange) {
  check_kv_block_index(16, 1 << 20);  // powers of two: any table
  check_kv_block_index(1, 1 << 30);
  check_kv_block_index(1000, 4294);  // 4294 * 1000 * 1000 <= 2^32
  EXPECT_DEATH(check_kv_block_index(1000, 4295), "block division");
  EXPECT_DEATH(check_kv_block_index(48, 1 << 22), "block division");
}

}  // namespace
}  // namespace xinfer::cuda
