// A fixed pool of worker threads for data-parallel loops on the CPU backend.
//
//   pool.parallel_for(0, rows, [&](int64_t begin, int64_t end) { ... });
//
// parallel_for splits [begin, end) into at most size() contiguous chunks of at least `grain` items, runs
// them on the workers and the calling thread, and returns when all are done. Calls from several threads
// are serialized; a nested call from inside a task runs inline on the calling worker.
//
// Hand-off: a decode step on the CPU makes ~200 parallel_for calls a few microseconds apart, so waking
// sleeping threads through a condition variable each time (10-20 us a call on 2 cores) would cost as much
// as the work. Workers therefore spin on an atomic generation counter for up to kSpinMicros after a task
// before they sleep on the condition variable, and the caller spins the same way for its workers to
// finish. A condition variable is touched only when a thread actually sleeps (sleepers_ / caller_waiting_,
// sequentially consistent against the counters, so no wake-up is lost).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace xinfer {

class ThreadPool {
 public:
  // num_threads <= 0 means std::thread::hardware_concurrency().
  explicit ThreadPool(int num_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }  // workers + caller
  void parallel_for(int64_t begin, int64_t end, const std::function<void(int64_t, int64_t)>& fn,
                    int64_t grain = 1);

  static constexpr int kSpinMicros = 100;  // busy-wait before sleeping, workers and caller alike

 private:
  void worker_loop(int index);

  std::vector<std::thread> workers_;
  std::mutex run_mu_;  // serializes parallel_for calls
  std::mutex mu_;      // guards the sleeps only
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  // Written by the caller before generation_ is bumped (release), read by workers after they see it.
  const std::function<void(int64_t, int64_t)>* task_ = nullptr;
  std::vector<std::pair<int64_t, int64_t>> chunks_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};   // workers that have not finished the current generation
  std::atomic<int> sleepers_{0};  // workers asleep (or about to be) on work_cv_
  std::atomic<bool> caller_waiting_{false};
  std::atomic<bool> stop_{false};
};

}  // namespace xinfer
