// Communicator: the collectives tensor parallelism needs between the ranks of one model (one rank per
// device; docs/tensor_parallel.md). Each rank owns one Communicator, bound to its own Backend's device and
// stream; every rank calls the same collectives in the same order with tensors of the same shape.
//
// Invariants every implementation keeps:
//  - all_reduce_sum leaves bit-identical results on every rank (a fixed reduction order that does not
//    depend on the rank), so ranks that run the same ops on the results stay bit-identical;
//  - a collective is ordered like an op of the rank's backend: on asynchronous devices it is queued on the
//    backend's stream (capturable in a CUDA graph), on the CPU it runs when called and returns when done;
//  - a rank that does not arrive within the communicator's timeout fails with a message naming the
//    collective and the ranks that are missing (never a silent hang).
//
// Layouts: all_reduce_sum works on any contiguous tensor (elementwise). all_gather_columns gathers a
// [R, C_r] tensor of every rank into [R, C] (C = sum of C_r) with rank r's columns at
// [col_offsets[r], col_offsets[r + 1]): the layout of a vocabulary-parallel lm_head's logits. broadcast copies
// root's tensor (any dtype, e.g. the i32 ids a pipelined step feeds on the device) into every rank's.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "xinfer/core/tensor.h"

namespace xinfer::backend {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string name() const = 0;  // "cpu-threads(2)" / "nccl(4)"

  // x[...] = sum over ranks of x[...], in place. x: any contiguous shape, the same on every rank, in the
  // backend's activation dtype.
  virtual void all_reduce_sum(const TensorView& x) = 0;
  // out[R, C] = the columns of every rank's in: out[:, col_offsets[r] : col_offsets[r + 1]] = in of rank r.
  // in: [R, col_offsets[rank + 1] - col_offsets[rank]]; out: [R, col_offsets[size]]; col_offsets: [size + 1],
  // the same on every rank. in and out do not overlap.
  virtual void all_gather_columns(const TensorView& in, const TensorView& out,
                                  std::span<const int64_t> col_offsets) = 0;
  // x[...] = x[...] of rank `root`, in place on every other rank. x: any contiguous tensor, the same shape and
  // dtype on every rank.
  virtual void broadcast(const TensorView& x, int root) = 0;
  // Makes room for all_gather_columns of up to `max_rows` rows with these offsets and dtype, so that later
  // calls (in CUDA graph recordings too) never allocate. Call it once, before any recording.
  virtual void reserve_all_gather(int64_t max_rows, std::span<const int64_t> col_offsets, DType dtype) {
    (void)max_rows, (void)col_offsets, (void)dtype;
  }
  // Returns once every rank has called it (and, on devices, once the work queued before it on every rank
  // has been ordered before the work queued after it).
  virtual void barrier() = 0;
};

}  // namespace xinfer::backend
