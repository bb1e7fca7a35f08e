#include "xinfer/core/thread_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <numeric>
#include <thread>
#include <vector>

namespace xinfer {
namespace {

TEST(ThreadPool, CoversRangeExactlyOnce) {
  ThreadPool pool(4);
  for (int64_t n : {0, 1, 3, 4, 5, 97, 1000}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    pool.parallel_for(0, n, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
    });
    for (auto& h : hits) EXPECT_EQ(h.load(), 1);
  }
}

TEST(ThreadPool, NestedCallsRunInline) {
  ThreadPool pool(3);
  std::atomic<int64_t> sum{0};
  pool.parallel_for(0, 6, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) pool.parallel_for(0, 10, [&](int64_t b2, int64_t e2) { sum += e2 - b2; });
  });
  EXPECT_EQ(sum.load(), 60);
}

TEST(ThreadPool, ManyRoundsFromSeveralThreads) {
  ThreadPool pool(3);
  std::atomic<int64_t> total{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 3; ++c)
    callers.emplace_back([&] {
      for (int r = 0; r < 200; ++r) pool.parallel_for(0, 50, [&](int64_t b, int64_t e) { total += e - b; });
    });
  for (auto& t : callers) t.join();
  EXPECT_EQ(total.load(), 3 * 200 * 50);
}

// Calls with fewer chunks than threads, back to back: the idle workers must not read a call's chunks while
// the next call rewrites them (they acknowledge every generation); each item runs exactly once per call.
TEST(ThreadPool, BackToBackCallsWithFewerChunksThanThreads) {
  ThreadPool pool(4);
  std::vector<int> hits(4);
  for (int r = 0; r < 20000; ++r) {
    const int64_t n = 1 + r % 4;
    std::fill(hits.begin(), hits.end(), 0);
    pool.parallel_for(0, n, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
    });
    for (int64_t i = 0; i < 4; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)], i < n ? 1 : 0) << "round " << r;
  }
}

// Pauses longer than the spin put the workers (and the waiting caller) to sleep: no wake-up may be lost.
TEST(ThreadPool, WakesSleepingWorkers) {
  ThreadPool pool(2);
  std::atomic<int64_t> total{0};
  for (int r = 0; r < 30; ++r) {
    std::this_thread::sleep_for(std::chrono::microseconds(3 * ThreadPool::kSpinMicros));
    pool.parallel_for(0, 2, [&](int64_t b, int64_t e) {
      if (b > 0) std::this_thread::sleep_for(std::chrono::microseconds(2 * ThreadPool::kSpinMicros));
      total += e - b;
    });
  }
  EXPECT_EQ(total.load(), 60);
}

}  // namespace
}  // namespace xinfer
