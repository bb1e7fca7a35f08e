#include "xinfer/core/thread_pool.h"

#include <algorithm>

namespace xinfer {
namespace {
thread_local bool t_inside_pool = false;
}

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads <= 0) num_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 0; i < num_threads - 1; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::worker_loop(int index) {
  t_inside_pool = true;
  uint64_t seen = 0;
  for (;;) {
    std::pair<int64_t, int64_t> chunk;
    const std::function<void(int64_t, int64_t)>* task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      const size_t slot = static_cast<size_t>(index) + 1;  // chunk 0 belongs to the caller
      if (slot >= chunks_.size()) continue;
      chunk = chunks_[slot];
      task = task_;
    }
    (*task)(chunk.first, chunk.second);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (--pending_ == 0) done_cv_.notify_all();
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
  std::vector<std::pair<int64_t, int64_t>> chunks;
  for (int64_t c = 0; c < max_chunks; ++c)
    chunks.emplace_back(begin + n * c / max_chunks, begin + n * (c + 1) / max_chunks);
  {
    std::lock_guard<std::mutex> lock(mu_);
    chunks_ = chunks;
    task_ = &fn;
    pending_ = static_cast<int>(chunks.size()) - 1;
    ++generation_;
  }
  work_cv_.notify_all();
  t_inside_pool = true;
  fn(chunks[0].first, chunks[0].second);
  t_inside_pool = false;
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return pending_ == 0; });
}

}  // namespace xinfer
