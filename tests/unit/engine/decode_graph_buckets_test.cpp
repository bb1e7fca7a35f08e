// backend/decode_graph_buckets.h: the rows a decode-only step is padded to for a CUDA graph (ModelRunner) and
// at which the W8A8 GEMMs time their variants (variant_rows). Expected values by hand from the rule: powers
// of two up to 128, then multiples of 64 up to 1024, 0 outside [1, 1024].
#include "xinfer/backend/decode_graph_buckets.h"

#include <gtest/gtest.h>

#include <set>

namespace xinfer::backend {
namespace {

TEST(DecodeGraphBuckets, PowersOfTwoThenStepsOf64) {
  EXPECT_EQ(decode_graph_bucket(0), 0);
  EXPECT_EQ(decode_graph_bucket(-3), 0);
  EXPECT_EQ(decode_graph_bucket(1), 1);
  EXPECT_EQ(decode_graph_bucket(3), 4);
  EXPECT_EQ(decode_graph_bucket(17), 32);
  EXPECT_EQ(decode_graph_bucket(128), 128);
  EXPECT_EQ(decode_graph_bucket(129), 192);
  EXPECT_EQ(decode_graph_bucket(192), 192);
  EXPECT_EQ(decode_graph_bucket(193), 256);
  EXPECT_EQ(decode_graph_bucket(260), 320);  // was 512 with doubling
  EXPECT_EQ(decode_graph_bucket(449), 512);
  EXPECT_EQ(decode_graph_bucket(513), 576);
  EXPECT_EQ(decode_graph_bucket(857), 896);
  EXPECT_EQ(decode_graph_bucket(kMaxDecodeGraphRows), 1024);
  EXPECT_EQ(decode_graph_bucket(kMaxDecodeGraphRows + 1), 0);
  // Every bucket is its own bucket, and there are 22 of them.
  std::set<int> buckets;
  for (int n = 1; n <= kMaxDecodeGraphRows; ++n) {
    const int b = decode_graph_bucket(n);
    ASSERT_GE(b, n);
    ASSERT_EQ(decode_graph_bucket(b), b);
    buckets.insert(b);
  }
  EXPECT_EQ(buckets, (std::set<int>{1,   2,   4,   8,   16,  32,  64,  128, 192, 256, 320,
                                    384, 448, 512, 576, 640, 704, 768, 832, 896, 960, 1024}));
}

}  // namespace
}  // namespace xinfer::backend
