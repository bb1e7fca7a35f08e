// The row buckets of the measured W8A8-INT8 GEMM choice (w8a8_int8_wgmma.h int8_wgmma_row_bucket), no GPU
// needed.
#include <gtest/gtest.h>

#include "xinfer/backend/cuda/kernels/gemm/w8a8_int8_wgmma.h"

namespace xinfer {
namespace {

TEST(Int8WgmmaRowBucket, PowersOfTwoFrom32) {
  using cuda::int8_wgmma_row_bucket;
  EXPECT_EQ(int8_wgmma_row_bucket(17), 32);
  EXPECT_EQ(int8_wgmma_row_bucket(32), 32);
  EXPECT_EQ(int8_wgmma_row_bucket(33), 64);
  EXPECT_EQ(int8_wgmma_row_bucket(481), 512);
  EXPECT_EQ(int8_wgmma_row_bucket(cuda::kInt8MeasuredMaxRows), cuda::kInt8MeasuredMaxRows);
  EXPECT_GT(int8_wgmma_row_bucket(cuda::kInt8MeasuredMaxRows + 1),
            cuda::kInt8MeasuredMaxRows);  // not measured
}

}  // namespace
}  // namespace xinfer
