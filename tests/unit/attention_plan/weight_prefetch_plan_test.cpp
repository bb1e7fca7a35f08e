// The CUDA backend's L2 weight prefetch plan (weight_prefetch_plan.h), no GPU needed: which byte ranges it
// asks for before each linear of a decode step, on fake device addresses.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "xinfer/backend/cuda/weight_prefetch_plan.h"

namespace xinfer {
namespace {

using cuda::L2PrefetchRange;
using cuda::WeightPrefetchPlan;

const void* addr(uintptr_t a) { return reinterpret_cast<const void*>(a); }

// Three linears of 1000 / 500 / 2000 weight bytes (the second with 96 bytes of scales), at addresses far apart.
std::vector<WeightPrefetchPlan::Linear> three_linears() {
  return {{addr(0x10000), {{addr(0x10000), 1000}}},
          {addr(0x20000), {{addr(0x20000), 500}, {addr(0x30000), 96}}},
          {addr(0x40000), {{addr(0x40000), 2000}}}};
}

size_t total(const std::vector<L2PrefetchRange>& r) {
  size_t t = 0;
  for (const L2PrefetchRange& x : r) t += x.bytes;
  return t;
}

TEST(WeightPrefetchPlan, WindowRunsAheadOfTheRunningLinear) {
  WeightPrefetchPlan plan;
  plan.set(three_linears(), 1200);
  ASSERT_TRUE(plan.enabled());
  // Sizes trimmed to 16-byte multiples: 992 + 496 + 96 + 2000.
  EXPECT_EQ(plan.stream_bytes(), 992u + 496u + 96u + 2000u);
  // First linear: [0, 1200) = all of the first (992) and 208 bytes of the second.
  std::vector<L2PrefetchRange> r = plan.advance(addr(0x10000));
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].ptr, addr(0x10000));
  EXPECT_EQ(r[0].bytes, 992u);
  EXPECT_EQ(r[1].ptr, addr(0x20000));
  EXPECT_EQ(r[1].bytes, 208u);
  // Second linear (starts at 992): up to 2192 = the rest of its weight, its scales, 608 bytes of the third.
  r = plan.advance(addr(0x20000));
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].ptr, addr(0x20000 + 208));
  EXPECT_EQ(r[0].bytes, 496u - 208u);
  EXPECT_EQ(r[1].ptr, addr(0x30000));
  EXPECT_EQ(r[1].bytes, 96u);
  EXPECT_EQ(r[2].ptr, addr(0x40000));
  EXPECT_EQ(r[2].bytes, 608u);
  // Asked again for the same linear: nothing new.
  EXPECT_TRUE(plan.advance(addr(0x20000)).empty());
  // Third (starts at 1584): up to 2784, i.e. its bytes 608..1200.
  r = plan.advance(addr(0x40000));
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].ptr, addr(0x40000 + 608));
  EXPECT_EQ(r[0].bytes, 1200u - 608u);
}

TEST(WeightPrefetchPlan, AnEarlierLinearStartsANewStep) {
  WeightPrefetchPlan plan;
  plan.set(three_linears(), 100000);  // the whole stream at once
  EXPECT_EQ(total(plan.advance(addr(0x10000))), plan.stream_bytes());
  EXPECT_TRUE(plan.advance(addr(0x20000)).empty());
  EXPECT_TRUE(plan.advance(addr(0x40000)).empty());
  // The next step: all again.
  EXPECT_EQ(total(plan.advance(addr(0x10000))), plan.stream_bytes());
}

TEST(WeightPrefetchPlan, LinearsThatRanWithoutThePlanAreSkipped) {
  WeightPrefetchPlan plan;
  plan.set(three_linears(), 16);
  EXPECT_EQ(total(plan.advance(addr(0x10000))), 16u);
  // The second linear was not announced (e.g. a step past the row limit); the third starts its own window.
  const std::vector<L2PrefetchRange> r = plan.advance(addr(0x40000));
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].ptr, addr(0x40000));
  EXPECT_EQ(r[0].bytes, 16u);
}

TEST(WeightPrefetchPlan, UnknownWeightsAndAZeroWindowAskForNothing) {
  WeightPrefetchPlan plan;
  plan.set(three_linears(), 1024);
  EXPECT_TRUE(plan.advance(addr(0x50000)).empty());  // the lm_head: not registered
  plan.set(three_linears(), 0);
  EXPECT_FALSE(plan.enabled());
  EXPECT_TRUE(plan.advance(addr(0x10000)).empty());
  plan.set({}, 1024);
  EXPECT_FALSE(plan.enabled());
}

TEST(WeightPrefetchPlan, MisalignedOrEmptyRangesAreDropped) {
  WeightPrefetchPlan plan;
  plan.set({{addr(0x10000), {{addr(0x10008), 4096}, {addr(0x20000), 8}, {nullptr, 64}, {addr(0x30000), 64}}}}, 1 << 20);
  EXPECT_EQ(plan.stream_bytes(), 64u);
  const std::vector<L2PrefetchRange> r = plan.advance(addr(0x10000));
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].ptr, addr(0x30000));
}

}  // namespace
}  // namespace xinfer
