#include "roofline.h"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <vector>

#include "xinfer/core/thread_pool.h"

namespace xinfer::bench {
namespace {

template <typename F>
double best_seconds(int reps, F&& f) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace

HostCeilings measure_host_ceilings(int threads) {
  HostCeilings c;
  ThreadPool pool(threads);
  const size_t n = size_t{1} << 26;  // 256 MiB of floats per buffer
  std::vector<float> a(n, 1.0f), b(n, 0.0f);
  const double copy_s = best_seconds(5, [&] {
    pool.parallel_for(0, static_cast<int64_t>(n), [&](int64_t lo, int64_t hi) {
      std::memcpy(b.data() + lo, a.data() + lo, static_cast<size_t>(hi - lo) * sizeof(float));
    });
  });
  c.bandwidth_bytes_per_s = 2.0 * static_cast<double>(n) * sizeof(float) / copy_s;
  // Read-only: XOR of 64-bit words (vectorizes without fast-math, unlike a float sum).
  volatile uint64_t sink = 0;
  const auto* words = reinterpret_cast<const uint64_t*>(a.data());
  const int64_t num_words = static_cast<int64_t>(n / 2);
  const double read_s = best_seconds(5, [&] {
    pool.parallel_for(0, num_words, [&](int64_t lo, int64_t hi) {
      uint64_t x = 0;
      for (int64_t i = lo; i < hi; ++i) x ^= words[i];
      sink = sink ^ x;
    });
  });
  c.read_bandwidth_bytes_per_s = static_cast<double>(n) * sizeof(float) / read_s;

  openblas_set_num_threads(pool.size());
  const int m = 2048;
  std::vector<float> x(static_cast<size_t>(m) * m, 0.5f), y(static_cast<size_t>(m) * m, 0.25f),
      z(static_cast<size_t>(m) * m);
  const double gemm_s = best_seconds(5, [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, m, m, 1.0f, x.data(), m, y.data(), m, 0.0f, z.data(), m);
  });
  c.sgemm_flops_per_s = 2.0 * m * static_cast<double>(m) * m / gemm_s;
  return c;
}

}  // namespace xinfer::bench
