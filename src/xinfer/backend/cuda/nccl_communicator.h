// NcclCommunicator: backend::Communicator over NCCL, one rank per GPU of this process (one thread per rank,
// each with its own CudaBackend). Collectives are queued on the rank's backend stream, so they order with
// its ops and are captured into CUDA graphs like any kernel.
//
// NCCL is loaded at run time (dlopen of libnccl.so.2, the CUDA toolkit's), not linked: a binary without
// tensor parallelism never needs the library, and one that asks for it without NCCL installed gets a clear
// error instead of a loader failure.
//
// Start-up: NcclCommunicator::new_id() makes the group's id once; then every rank, on its own thread with
// its device current, calls create(). Communicators are created non-blocking and polled against the
// timeout: a rank that does not join fails with a message naming the rank, the device and the timeout, and
// the communicator is aborted (vLLM's TP start-up hangs are the anti-example). NVLink multicast (NVLS) is
// never switched on here: NCCL_NVLS_ENABLE is left as the environment sets it, and set to 0 when unset.
//
// all_reduce_sum: ncclAllReduce(sum) in place, in the tensor's dtype (bf16 / f16 / f32); NCCL's ring and
// tree algorithms give every rank the same bits. all_gather_columns: ncclAllGather of equal padded shares
// into a staging buffer [size, R, max share], then one cudaMemcpy2DAsync per rank into the columns of out; the
// buffer is sized by reserve_all_gather() before any recording (recordings keep its address: it never moves
// afterwards). broadcast: ncclBroadcast of the bytes, in place.
#pragma once

#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "xinfer/backend/communicator.h"
#include "xinfer/core/status.h"

namespace xinfer::cuda {

// The group's identity (ncclUniqueId's 128 bytes), shared by the ranks of one group.
struct NcclId {
  char bytes[128] = {};
};

class NcclCommunicator final : public backend::Communicator {
 public:
  // A fresh id for a group. UNAVAILABLE when NCCL cannot be loaded.
  static Result<NcclId> new_id();
  // Joins the group `id` as `rank` of `size` on `device` (made current on the calling thread), queuing on
  // `stream`. UNAVAILABLE when the group is not complete within `timeout` (or NCCL fails).
  static Result<std::unique_ptr<NcclCommunicator>> create(const NcclId& id, int size, int rank, int device,
                                                          cudaStream_t stream,
                                                          std::chrono::milliseconds timeout = std::chrono::minutes(2));
  ~NcclCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "nccl(" + std::to_string(size_) + ")"; }
  // x: bf16, f16 or f32 on this rank's device
  void all_reduce_sum(const TensorView& x) override;
  void all_gather_columns(const TensorView& in, const TensorView& out,
                          std::span<const int64_t> col_offsets) override;
  void broadcast(const TensorView& x, int root) override;
  void reserve_all_gather(int64_t max_rows, std::span<const int64_t> col_offsets, DType dtype) override;
  // An all-reduce of one float (NCCL has no barrier), then a stream synchronization.
  void barrier() override;

 private:
  NcclCommunicator(void* comm, int size, int rank, int device, cudaStream_t stream);
  void wait_enqueued(int result, const char* what);  // polls a non-blocking call until it is queued
  void grow_staging(size_t need);  // outside recordings only, and never after one used the buffer

  void* comm_;  // ncclComm_t
  int size_, rank_, device_;
  cudaStream_t stream_;
  std::chrono::milliseconds timeout_{std::chrono::minutes(2)};
  void* staging_ = nullptr;  // all_gather_columns: [size, R, max share] bytes, grown outside graph capture
  size_t staging_bytes_ = 0;
  bool recorded_ = false;  // a graph recording holds staging_'s address
  float* barrier_word_ = nullptr;
};

}  // namespace xinfer::cuda
