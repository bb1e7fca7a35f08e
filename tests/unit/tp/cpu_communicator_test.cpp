// CpuCommunicator: all_reduce_sum equals the sequential f32 sum in rank order (the definition, computed here
// independently) and is bit-identical on every rank; all_gather_columns places each rank's columns; N = 1..4
// ranks on awkward sizes (1, 7, 97, 4097 elements; rank shares of 0 columns); repeated collectives reuse the
// group; broadcast copies the root's i32 tensor to every rank; a rank that never arrives fails with a message naming the missing rank.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "xinfer/backend/cpu/cpu_communicator.h"

namespace xinfer::cpu {
namespace {

// Runs fn(rank) on one thread per rank.
template <typename Fn>
void on_ranks(int n, Fn fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back([&, r] { fn(r); });
  for (auto& t : threads) t.join();
}

TensorView view_of(std::vector<float>& v, Shape s) { return TensorView{v.data(), DType::kF32, s, Device::kCpu}; }

TEST(CpuCommunicator, AllReduceSumIsTheRankOrderSumOnEveryRank) {
  for (int n = 1; n <= 4; ++n) {
    for (int64_t numel : {1, 7, 97, 4097}) {
      SCOPED_TRACE("ranks " + std::to_string(n) + " numel " + std::to_string(numel));
      std::mt19937 rng(static_cast<uint32_t>(n * 1000 + numel));
      std::normal_distribution<float> dist(0.0f, 10.0f);
      std::vector<std::vector<float>> data(static_cast<size_t>(n), std::vector<float>(static_cast<size_t>(numel)));
      for (auto& d : data)
        for (auto& x : d) x = dist(rng);
      std::vector<float> expected(static_cast<size_t>(numel));
      for (int64_t i = 0; i < numel; ++i) {
        float s = data[0][static_cast<size_t>(i)];
        for (int r = 1; r < n; ++r) s += data[static_cast<size_t>(r)][static_cast<size_t>(i)];
        expected[static_cast<size_t>(i)] = s;
      }
      auto comms = CpuCommunicator::create_group(n);
      on_ranks(n, [&](int r) {
        // Three rounds: the group's barriers and slots are reused.
        for (int round = 0; round < 3; ++round) {
          std::vector<float> x = data[static_cast<size_t>(r)];
          comms[static_cast<size_t>(r)]->all_reduce_sum(view_of(x, Shape{numel}));
          EXPECT_EQ(0, std::memcmp(x.data(), expected.data(), x.size() * sizeof(float))) << "rank " << r;
        }
      });
    }
  }
}

TEST(CpuCommunicator, AllGatherColumnsPlacesEveryRanksColumns) {
  for (int n = 1; n <= 4; ++n) {
    const int64_t rows = 3;
    // Uneven shares, one of them empty when n > 2: [0, 5), [5, 5), [5, 12), ...
    std::vector<int64_t> offsets{0};
    for (int r = 0; r < n; ++r) offsets.push_back(offsets.back() + (r == 1 ? 0 : 5 + r));
    const int64_t cols = offsets.back();
    auto comms = CpuCommunicator::create_group(n);
    on_ranks(n, [&](int r) {
      const int64_t w = offsets[static_cast<size_t>(r) + 1] - offsets[static_cast<size_t>(r)];
      std::vector<float> in(static_cast<size_t>(rows * w) + 1);  // +1: never an empty buffer
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < w; ++j) in[static_cast<size_t>(i * w + j)] = static_cast<float>(i * 1000 + offsets[static_cast<size_t>(r)] + j);
      std::vector<float> out(static_cast<size_t>(rows * cols), -1.0f);
      comms[static_cast<size_t>(r)]->all_gather_columns(view_of(in, Shape{rows, w}), view_of(out, Shape{rows, cols}),
                                                        offsets);
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j)
          ASSERT_EQ(out[static_cast<size_t>(i * cols + j)], static_cast<float>(i * 1000 + j)) << "rank " << r;
    });
  }
}

TEST(CpuCommunicator, BroadcastCopiesTheRootsTensorToEveryRank) {
  for (int n = 1; n <= 4; ++n) {
    for (int root = 0; root < n; ++root) {
      SCOPED_TRACE("ranks " + std::to_string(n) + " root " + std::to_string(root));
      auto comms = CpuCommunicator::create_group(n);
      on_ranks(n, [&](int r) {
        for (int round = 0; round < 2; ++round) {  // i32, as the fed ids of a pipelined step
          std::vector<int32_t> ids(37);
          for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(r * 1000 + round * 100 + i);
          comms[static_cast<size_t>(r)]->broadcast(TensorView{ids.data(), DType::kI32, Shape{37}, Device::kCpu}, root);
          for (size_t i = 0; i < ids.size(); ++i)
            ASSERT_EQ(ids[i], static_cast<int32_t>(root * 1000 + round * 100 + i)) << "rank " << r;
        }
      });
    }
  }
}

TEST(CpuCommunicator, BarrierOrdersWork) {
  const int n = 3;
  auto comms = CpuCommunicator::create_group(n);
  std::vector<int> written(n, 0);
  std::vector<int> seen(n, 0);
  on_ranks(n, [&](int r) {
    written[static_cast<size_t>(r)] = r + 1;
    comms[static_cast<size_t>(r)]->barrier();
    int s = 0;
    for (int v : written) s += v;
    seen[static_cast<size_t>(r)] = s;
    comms[static_cast<size_t>(r)]->barrier();
  });
  for (int s : seen) EXPECT_EQ(s, 6);
}

TEST(CpuCommunicatorDeathTest, MissingRankFailsWithinTheTimeout) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        auto comms = CpuCommunicator::create_group(3, std::chrono::milliseconds(100));
        std::thread t([&] { comms[1]->barrier(); });
        comms[0]->barrier();  // rank 2 never comes
        t.join();
      },
      "waited 100 ms at barrier for ranks 2 \\(of 3\\)");
}

void mismatched_all_reduce() {
  auto comms = CpuCommunicator::create_group(2);
  std::vector<float> a(4), b(5);
  std::thread t([&] { comms[1]->all_reduce_sum(view_of(b, Shape{5})); });
  comms[0]->all_reduce_sum(view_of(a, Shape{4}));
  t.join();
}

TEST(CpuCommunicatorDeathTest, SizeMismatchIsABug) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(mismatched_all_reduce(), "disagree on the size");
}

}  // namespace
}  // namespace xinfer::cpu
