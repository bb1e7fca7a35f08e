// The host-side choices of the W8A8 wgmma GEMMs (w8a8_int8_wgmma.h), no GPU needed: the row buckets of the
// measured choices (INT8, FP8), the rule by shape, the tile rows and the band of the tile order.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <vector>

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

// The FP8 GEMM's measured decisions (CudaBackend::measure_fp8_gemms) per bucket: the decode graph buckets the
// decode steps are padded to, then powers of two past them.
TEST(Fp8GemmRowBucket, DecodeGraphBucketsThenPowersOfTwo) {
  using cuda::fp8_gemm_row_bucket;
  EXPECT_EQ(fp8_gemm_row_bucket(17), 32);
  EXPECT_EQ(fp8_gemm_row_bucket(129), 192);
  EXPECT_EQ(fp8_gemm_row_bucket(862), 896);  // 128/2048's decode steps
  EXPECT_EQ(fp8_gemm_row_bucket(backend::kMaxDecodeGraphRows), backend::kMaxDecodeGraphRows);
  EXPECT_EQ(fp8_gemm_row_bucket(backend::kMaxDecodeGraphRows + 1), 2 * backend::kMaxDecodeGraphRows);
  EXPECT_EQ(fp8_gemm_row_bucket(14777), 16384);  // 2048/128's mixed steps
  for (int m = 17; m <= 20000; ++m) {
    const int b = fp8_gemm_row_bucket(m);
    ASSERT_GE(b, m);
    ASSERT_EQ(fp8_gemm_row_bucket(b), b) << m;  // a bucket is its own bucket
  }
}

// The bucket lists CudaBackend::measure_int8_gemms / measure_fp8_gemms time: every row count past the GEMVs'
// (16) up to the engine's largest step (capped at the measured maximum) must fall in a listed bucket, or its
// GEMM would run without the measured decision.
TEST(MeasuredRowBuckets, CoverEveryRowCountUpToTheEnginesSteps) {
  constexpr int kGemvRows = 16;
  for (const int max_tokens :
       {17, 31, 32, 33, 100, 1000, 1024, 1025, 2100, 4096, 8192, 16383, 16384, 20000, 131072}) {
    const std::vector<int> fp8 = cuda::fp8_measured_row_buckets(kGemvRows + 1, max_tokens);
    ASSERT_FALSE(fp8.empty()) << max_tokens;
    EXPECT_LE(fp8.back(), cuda::kFp8MeasuredMaxRows) << max_tokens;
    for (int m = kGemvRows + 1; m <= std::min(max_tokens, cuda::kFp8MeasuredMaxRows); ++m)
      ASSERT_TRUE(std::count(fp8.begin(), fp8.end(), cuda::fp8_gemm_row_bucket(m)) == 1)
          << "fp8, max_tokens " << max_tokens << ", m " << m;
    const std::vector<int> int8 = cuda::int8_measured_row_buckets(max_tokens);
    ASSERT_FALSE(int8.empty()) << max_tokens;
    EXPECT_LE(int8.back(), cuda::kInt8MeasuredMaxRows) << max_tokens;
    for (int m = kGemvRows + 1; m <= std::min(max_tokens, cuda::kInt8MeasuredMaxRows); ++m)
      ASSERT_TRUE(std::count(int8.begin(), int8.end(), cuda::int8_wgmma_row_bucket(m)) == 1)
          << "int8, max_tokens " << max_tokens << ", m " << m;
  }
  // The largest bucket holds max_tokens, no more (a bucket past it would be timed at max_tokens rows anyway).
  EXPECT_EQ(cuda::fp8_measured_row_buckets(kGemvRows + 1, 3000).back(), 4096);
  EXPECT_EQ(cuda::fp8_measured_row_buckets(kGemvRows + 1, 1024).back(), 1024);
  EXPECT_TRUE(cuda::fp8_measured_row_buckets(kGemvRows + 1, kGemvRows).empty());  // GEMVs only
  EXPECT_EQ(cuda::int8_measured_row_buckets(3000).back(), cuda::kInt8MeasuredMaxRows);
  // Row counts past 2^30 do not overflow the bucket functions.
  EXPECT_EQ(cuda::int8_wgmma_row_bucket(std::numeric_limits<int>::max()), 1 << 30);
  EXPECT_EQ(cuda::fp8_gemm_row_bucket(std::numeric_limits<int>::max()), 1 << 30);
}

TEST(Int8WgmmaRule, ByRowsAndK) {
  using cuda::config_name;
  using cuda::int8_wgmma_auto_config;
  EXPECT_EQ(config_name(int8_wgmma_auto_config(17, 4096)), "wgmma128s8pp");
  EXPECT_EQ(config_name(int8_wgmma_auto_config(cuda::kInt8WgmmaSmallRows, 14336)), "wgmma128s8pp");
  EXPECT_EQ(config_name(int8_wgmma_auto_config(cuda::kInt8WgmmaSmallRows + 1, 4096)), "wgmma128x128s6pp");
  // Long k: cooperative 128 x 256 past the measured rows only.
  EXPECT_EQ(config_name(int8_wgmma_auto_config(cuda::kInt8MeasuredMaxRows, 14336)), "wgmma128x128s6pp");
  EXPECT_EQ(config_name(int8_wgmma_auto_config(cuda::kInt8MeasuredMaxRows + 1, 14336)), "wgmma256s4");
  EXPECT_EQ(config_name(int8_wgmma_auto_config(8192, cuda::kInt8WgmmaLongK - 16)), "wgmma128x128s6pp");
  EXPECT_EQ(cuda::int8_wgmma_rows(int8_wgmma_auto_config(8192, 4096)), 128);
  EXPECT_EQ(cuda::int8_wgmma_rows(int8_wgmma_auto_config(100, 4096)), 64);
  EXPECT_EQ(cuda::int8_wgmma_rows(int8_wgmma_auto_config(8192, 14336)), 128);  // cooperative
}

TEST(Int8WgmmaBand, OneWhileXFitsHalfOfL2ElseSquareWindow) {
  using cuda::int8_wgmma_band;
  constexpr int64_t l2 = 50 << 20;  // an H200's
  // x of 2048 x 4096 = 8 MiB: m tiles fastest.
  EXPECT_EQ(int8_wgmma_band(2048, 4096, 128, 128, 264, l2), 1);
  EXPECT_EQ(int8_wgmma_band(6400, 4096, 128, 128, 264, l2), 1);  // 25 MiB: half of L2
  // Past it: floor(sqrt(window * rows / bn)) -- 264 tiles of 128 x 128: 16; 132 of 128 x 256: 8.
  EXPECT_EQ(int8_wgmma_band(6401, 4096, 128, 128, 264, l2), 16);
  EXPECT_EQ(int8_wgmma_band(8192, 14336, 128, 256, 132, l2), 8);
  EXPECT_EQ(int8_wgmma_band(8192, 14336, 128, 256, 1, l2), 1);  // a tiny window
  // 64-row ping-pong tiles: always 1 (measured slower in bands).
  EXPECT_EQ(int8_wgmma_band(8192, 14336, 64, 256, 264, l2), 1);
  EXPECT_EQ(int8_wgmma_band(8192, 14336, 128, 0, 264, l2), 1);  // no columns: no loop
}

}  // namespace
}  // namespace xinfer
