#include "xinfer/core/thread_pool.h"

#include <algorithm>
#include <chrono>

namespace xinfer {
namespace {

thread_local bool t_inside_pool = false;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#else
  std::this_thread::yield();
#endif
}

// Spins until done() or kSpinMicros have passed; true if done.
template <typename Done>
bool spin_until(Done done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(ThreadPool::kSpinMicros);
  for (int i = 0;; ++i) {
    if (done()) return true;
    cpu_relax();
    if ((i & 63) == 63 && std::chrono::steady_clock::now() > deadline) return done();
  }
}

}  // namespace

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads <= 0) num_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 0; i < num_threads - 1; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  {
    std::lock_guard<std::mutex> lock(mu_);
  }  // a worker between its check and its wait sees stop_ or the notify
  work_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::worker_loop(int index) {
  t_inside_pool = true;
  uint64_t seen = 0;
  for (;;) {
    auto ready = [&] { return stop_.load() || generation_.load() != seen; };
    if (!spin_until(ready)) {
      std::unique_lock<std::mutex> lock(mu_);
      sleepers_.fetch_add(1);
      work_cv_.wait(lock, ready);
      sleepers_.fetch_sub(1);
    }
    if (stop_.load()) return;
    seen = generation_.load(std::memory_order_acquire);
    const size_t slot = static_cast<size_t>(index) + 1;  // chunk 0 belongs to the caller
    if (slot < chunks_.size()) (*task_)(chunks_[slot].first, chunks_[slot].second);
    // Every worker acknowledges every generation, with or without a chunk, so none still reads chunks_
    // when the next call rewrites it.
    if (pending_.fetch_sub(1) == 1 && caller_waiting_.load()) {
      { std::lock_guard<std::mutex> lock(mu_); }
      done_cv_.notify_all();
    }
  }
}

void ThreadPool::parallel_for(int64_t begin, int64_t end, const std::function<void(int64_t, int64_t)>& fn,
                              int64_t grain) {
  if (end <= begin) return;
  const int64_t n = end - begin;
  grain = std::max<int64_t>(grain, 1);
  const int64_t max_chunks = std::min<int64_t>(size(), (n + grain - 1) / grain);
  if (max_chunks <= 1 || t_inside_pool || workers_.empty()) {
    fn(begin, end);
    return;
  }
  std::lock_guard<std::mutex> run_lock(run_mu_);
  // Every worker has finished the previous generation (the previous call waited for pending_ == 0), so
  // nobody reads chunks_ or task_ while they are rewritten here.
  chunks_.clear();
  for (int64_t c = 0; c < max_chunks; ++c)
    chunks_.emplace_back(begin + n * c / max_chunks, begin + n * (c + 1) / max_chunks);
  task_ = &fn;
  pending_.store(static_cast<int>(workers_.size()));
  generation_.fetch_add(1);  // seq_cst: publishes chunks_/task_ and orders against sleepers_ below
  if (sleepers_.load() > 0) {
    { std::lock_guard<std::mutex> lock(mu_); }
    work_cv_.notify_all();
  }
  t_inside_pool = true;
  fn(chunks_[0].first, chunks_[0].second);
  t_inside_pool = false;
  auto done = [&] { return pending_.load() == 0; };
  if (!spin_until(done)) {
    std::unique_lock<std::mutex> lock(mu_);
    caller_waiting_.store(true);
    done_cv_.wait(lock, done);
    caller_waiting_.store(false);
  }
}

}  // namespace xinfer
