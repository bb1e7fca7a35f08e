// CpuCommunicator: backend::Communicator between N threads of one process (one thread per rank, each with
// its own CpuBackend), so tensor parallelism runs and is tested on machines without a GPU.
//
// A CpuCommGroup holds what the ranks share: a reusable barrier (with a timeout) and one slot per rank
// where a collective publishes its tensor. Every collective is
//   publish my tensor -> barrier -> read every rank's tensor (my share of the work) -> barrier -> ...
// all_reduce_sum: the elements are split into `size` contiguous chunks; rank r sums chunk r over ranks
// 0, 1, ..., N-1 in that order (f32, one rounding per addition) into a scratch buffer and, after a barrier,
// writes it into every rank's tensor; a last barrier keeps the scratch and the tensors stable until every
// rank is done. The order of the additions is the same for every element whoever computes it, so all ranks
// get the same bits, and the result is that of a sequential sum in rank order.
// all_gather_columns: each rank copies every rank's columns into its own out. broadcast: the other ranks copy
// root's tensor, then a barrier keeps it stable until all have.
// A rank that waits longer than the group's timeout at a barrier aborts (XI_CHECK) naming the collective,
// the ranks that arrived and the timeout: a rank that died or diverged never hangs the others silently.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "xinfer/backend/communicator.h"

namespace xinfer::cpu {

class CpuCommGroup {
 public:
  explicit CpuCommGroup(int size, std::chrono::milliseconds timeout = std::chrono::minutes(5));
  int size() const { return size_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

  // Blocks until all `size` ranks have called it for this generation; `what` names the collective for the
  // timeout message.
  void arrive_and_wait(int rank, const char* what);

 private:
  friend class CpuCommunicator;
  struct Slot {
    TensorView in, out;
  };
  const int size_;
  const std::chrono::milliseconds timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  std::vector<bool> arrived_ranks_;
  std::vector<Slot> slots_;  // [size], written by each rank before a barrier, read after it
};

class CpuCommunicator final : public backend::Communicator {
 public:
  CpuCommunicator(std::shared_ptr<CpuCommGroup> group, int rank);
  // The communicators of a new group of `size` ranks (index = rank).
  static std::vector<std::unique_ptr<CpuCommunicator>> create_group(
      int size, std::chrono::milliseconds timeout = std::chrono::minutes(5));

  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }
  std::string name() const override { return "cpu-threads(" + std::to_string(size()) + ")"; }
  // x: f32 (the CPU backend's activation dtype)
  void all_reduce_sum(const TensorView& x) override;
  void all_gather_columns(const TensorView& in, const TensorView& out,
                          std::span<const int64_t> col_offsets) override;
  void broadcast(const TensorView& x, int root) override;
  void barrier() override { group_->arrive_and_wait(rank_, "barrier"); }

 private:
  std::shared_ptr<CpuCommGroup> group_;
  int rank_;
  std::vector<float> scratch_;  // this rank's chunk of an all-reduce
};

}  // namespace xinfer::cpu
