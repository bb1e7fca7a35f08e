#include "xinfer/backend/cpu/cpu_communicator.h"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "xinfer/core/check.h"

namespace xinfer::cpu {

CpuCommGroup::CpuCommGroup(int size, std::chrono::milliseconds timeout)
    : size_(size), timeout_(timeout), arrived_ranks_(static_cast<size_t>(size), false),
      slots_(static_cast<size_t>(size)) {
  XI_CHECK_GE(size, 1) << "a communicator group needs at least one rank";
}

void CpuCommGroup::arrive_and_wait(int rank, const char* what) {
  std::unique_lock<std::mutex> lock(mu_);
  XI_CHECK(!arrived_ranks_[static_cast<size_t>(rank)]) << "rank " << rank << " arrived twice at " << what;
  const uint64_t gen = generation_;
  if (++arrived_ == size_) {
    arrived_ = 0;
    std::fill(arrived_ranks_.begin(), arrived_ranks_.end(), false);
    ++generation_;
    cv_.notify_all();
    return;
  }
  arrived_ranks_[static_cast<size_t>(rank)] = true;
  if (!cv_.wait_for(lock, timeout_, [&] { return generation_ != gen; })) {
    std::ostringstream missing;
    for (int r = 0; r < size_; ++r)
      if (!arrived_ranks_[static_cast<size_t>(r)]) missing << ' ' << r;
    XI_CHECK(false) << "tensor parallel: rank " << rank << " waited " << timeout_.count() << " ms at " << what
                    << " for ranks" << missing.str() << " (of " << size_
                    << "): a rank stopped or ran different collectives";
  }
}

CpuCommunicator::CpuCommunicator(std::shared_ptr<CpuCommGroup> group, int rank)
    : group_(std::move(group)), rank_(rank) {
  XI_CHECK(rank >= 0 && rank < group_->size()) << "rank " << rank << " of " << group_->size();
}

std::vector<std::unique_ptr<CpuCommunicator>> CpuCommunicator::create_group(int size,
                                                                            std::chrono::milliseconds timeout) {
  auto group = std::make_shared<CpuCommGroup>(size, timeout);
  std::vector<std::unique_ptr<CpuCommunicator>> out;
  for (int r = 0; r < size; ++r) out.push_back(std::make_unique<CpuCommunicator>(group, r));
  return out;
}

void CpuCommunicator::all_reduce_sum(const TensorView& x) {
  const int n = size();
  if (n == 1) return;
  XI_CHECK(x.dtype == DType::kF32) << "cpu all_reduce_sum: f32 only, got " << dtype_name(x.dtype);
  CpuCommGroup& g = *group_;
  g.slots_[static_cast<size_t>(rank_)].in = x;
  g.arrive_and_wait(rank_, "all_reduce_sum (publish)");
  const int64_t numel = x.numel();
  for (int r = 0; r < n; ++r)
    XI_CHECK_EQ(g.slots_[static_cast<size_t>(r)].in.numel(), numel)
        << "all_reduce_sum: rank " << r << " and rank " << rank_ << " disagree on the size";
  // My chunk [begin, end), summed over ranks in rank order.
  const int64_t per = (numel + n - 1) / n;
  const int64_t begin = std::min(numel, per * rank_), end = std::min(numel, begin + per);
  scratch_.assign(static_cast<size_t>(end - begin), 0.0f);
  for (int r = 0; r < n; ++r) {
    const float* src = g.slots_[static_cast<size_t>(r)].in.as<float>();
    if (r == 0) {
      std::memcpy(scratch_.data(), src + begin, scratch_.size() * sizeof(float));
      continue;
    }
    for (int64_t i = begin; i < end; ++i) scratch_[static_cast<size_t>(i - begin)] += src[i];
  }
  g.arrive_and_wait(rank_, "all_reduce_sum (reduce)");  // every input read: now overwrite them
  for (int r = 0; r < n; ++r)
    if (end > begin)
      std::memcpy(g.slots_[static_cast<size_t>(r)].in.as<float>() + begin, scratch_.data(),
                  scratch_.size() * sizeof(float));
  g.arrive_and_wait(rank_, "all_reduce_sum (write)");
}

void CpuCommunicator::all_gather_columns(const TensorView& in, const TensorView& out,
                                         std::span<const int64_t> col_offsets) {
  const int n = size();
  XI_CHECK_EQ(static_cast<int>(col_offsets.size()), n + 1) << "all_gather_columns: one offset per rank + 1";
  XI_CHECK(in.dtype == out.dtype) << "all_gather_columns: in " << dtype_name(in.dtype) << ", out "
                                  << dtype_name(out.dtype);
  XI_CHECK_EQ(out.shape.rank(), 2);
  const int64_t rows = out.shape[0], cols = out.shape[1];
  XI_CHECK_EQ(cols, col_offsets[static_cast<size_t>(n)]);
  const int64_t my_cols = col_offsets[static_cast<size_t>(rank_) + 1] - col_offsets[static_cast<size_t>(rank_)];
  XI_CHECK_EQ(in.numel(), rows * my_cols) << "all_gather_columns: rank " << rank_ << "'s input is "
                                          << in.shape << " for " << rows << " rows of " << my_cols << " columns";
  const size_t elem = dtype_bytes(in.dtype, 1);
  CpuCommGroup& g = *group_;
  g.slots_[static_cast<size_t>(rank_)].in = in;
  if (n > 1) g.arrive_and_wait(rank_, "all_gather_columns (publish)");
  for (int r = 0; r < n; ++r) {
    const int64_t c0 = col_offsets[static_cast<size_t>(r)], w = col_offsets[static_cast<size_t>(r) + 1] - c0;
    const TensorView& src = g.slots_[static_cast<size_t>(r)].in;
    XI_CHECK_EQ(src.numel(), rows * w) << "all_gather_columns: rank " << r << "'s input";
    const auto* s = static_cast<const uint8_t*>(src.data);
    auto* d = static_cast<uint8_t*>(out.data);
    for (int64_t row = 0; row < rows; ++row)
      std::memcpy(d + (row * cols + c0) * elem, s + row * w * elem, static_cast<size_t>(w) * elem);
  }
  if (n > 1) g.arrive_and_wait(rank_, "all_gather_columns (read)");  // inputs stay valid until all copied
}

void CpuCommunicator::broadcast(const TensorView& x, int root) {
  const int n = size();
  XI_CHECK(root >= 0 && root < n) << "broadcast: root " << root << " of " << n;
  if (n == 1) return;
  CpuCommGroup& g = *group_;
  g.slots_[static_cast<size_t>(rank_)].in = x;
  g.arrive_and_wait(rank_, "broadcast (publish)");
  const TensorView& src = g.slots_[static_cast<size_t>(root)].in;
  XI_CHECK(src.dtype == x.dtype && src.numel() == x.numel())
      << "broadcast: rank " << rank_ << " has " << x.shape << " " << dtype_name(x.dtype) << ", root " << root
      << " " << src.shape << " " << dtype_name(src.dtype);
  if (rank_ != root && x.numel() > 0) std::memcpy(x.data, src.data, x.bytes());
  g.arrive_and_wait(rank_, "broadcast (read)");  // root's tensor stays valid until every rank has copied it
}

}  // namespace xinfer::cpu
