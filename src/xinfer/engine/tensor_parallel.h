// TensorParallelGroup: ranks 1..N-1 of a tensor-parallel model (docs/tensor_parallel.md). Rank 0 is the
// caller's own backend, model and ModelRunner, driven by the engine loop; every other rank lives on a thread of
// its own that made its backend there (a CUDA rank binds its device on that thread), joined the communicator,
// loaded its shard of the weights (model::ModelShard) and then runs one job at a time from its queue:
//
//   allocate_kv(spec)  -> its KV cache: the same block count as rank 0, its own (local) kv heads
//   launch(plan, step) -> (receive fed ids) + upload_step(plan) + forward(), replaying or recording its own CUDA
//                         graph of step.graph_key: the same step as rank 0, meeting it at every all-reduce /
//                         all-gather (step_followers.h); its logits are discarded (rank 0 samples)
//   (destructor)       -> stop, join
//
// The scheduler, the sampler and every host decision exist once, on rank 0: followers see only step plans, in
// rank 0's order, so all ranks run the same collectives in the same order. The communicators: CPU, an
// in-process group (backend/cpu/cpu_communicator.h); CUDA, NCCL (backend/cuda/nccl_communicator.h), created
// concurrently on every rank's thread with a timeout.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "xinfer/backend/backend.h"
#include "xinfer/backend/communicator.h"
#include "xinfer/core/status.h"
#include "xinfer/engine/engine_config.h"
#include "xinfer/engine/step_followers.h"
#include "xinfer/model/llama.h"

namespace xinfer::engine {

struct TensorParallelOptions {
  int tp_size = 2;
  BackendKind backend = BackendKind::kCpu;
  // Makes rank r's backend on the calling (the rank's own) thread; r >= 1.
  std::function<Result<std::unique_ptr<backend::Backend>>(int rank)> make_backend;
  std::string model_dir;
  model::LoadOptions load;  // tp_size / tp_rank / comm are set per rank
  std::chrono::milliseconds timeout{std::chrono::minutes(2)};  // communicator start-up
};

class TensorParallelGroup final : public StepFollowers {
 public:
  // Checks the sizes (every rank's ModelShard; CUDA: tp_size <= the GPUs present) before anything is made,
  // starts the follower threads (backend, communicator, then loading their shard in the background) and joins
  // rank 0 (`rank0`, the caller's backend) to the communicator. Errors: INVALID_ARGUMENT (sizes),
  // UNAVAILABLE (a rank could not join within the timeout, NCCL missing), a follower's backend error.
  static Result<std::unique_ptr<TensorParallelGroup>> start(const TensorParallelOptions& options,
                                                            const model::ModelConfig& config,
                                                            backend::Backend& rank0);
  ~TensorParallelGroup() override;  // stops and joins every follower
  TensorParallelGroup(const TensorParallelGroup&) = delete;
  TensorParallelGroup& operator=(const TensorParallelGroup&) = delete;

  int size() const { return static_cast<int>(followers_.size()) + 1; }
  backend::Communicator* rank0_comm() const { return rank0_comm_.get(); }
  // Blocks until every follower has loaded its shard; the first follower error otherwise.
  Status wait_loaded();
  struct RankReport {
    int rank = 0;
    backend::BackendInfo info;  // after loading (free memory: the memory plan's input)
    size_t weight_bytes = 0;
    std::string shard;          // ModelShard::to_string()
  };
  std::vector<RankReport> follower_reports() const;  // after wait_loaded()
  // Allocates every follower's KV cache (on its thread); returns when all are allocated.
  void allocate_kv(const backend::KvCacheSpec& spec);
  void launch(const backend::StepPlan& plan, const FollowerStep& step = {}) override;

 private:
  struct Follower;
  TensorParallelGroup() = default;
  static void follower_main(Follower& f, const TensorParallelOptions& options);
  static void run_step(Follower& f, const backend::StepPlan& plan, const FollowerStep& step);

  TensorParallelOptions options_;
  std::unique_ptr<backend::Communicator> rank0_comm_;
  std::vector<std::unique_ptr<Follower>> followers_;
};

// For tools that drive a ModelRunner themselves (`xinfer generate`): `dir` loaded on `rank0` as rank 0 of
// tp_size ranks (the others made by make_backend on their threads), with its group; tp_size 1: a plain load.
// After making the runner (KV spec with model->shard().num_kv_heads), call attach().
struct TensorParallelModel {
  std::unique_ptr<TensorParallelGroup> group;  // null for tp_size 1
  std::unique_ptr<model::LlamaModel> model;
  // Allocates the followers' KV caches (the same spec) and hands the runner its followers.
  void attach(class ModelRunner& runner, const backend::KvCacheSpec& spec);
};
Result<TensorParallelModel> load_tensor_parallel(
    const std::string& dir, backend::Backend& rank0, const model::LoadOptions& load, int tp_size, BackendKind kind,
    std::function<Result<std::unique_ptr<backend::Backend>>(int rank)> make_backend);

// CPU threads of each rank when tp_size ranks share `threads` (0: all cores): the ranks split the cores; a
// single rank keeps `threads` as given.
int threads_per_rank(int threads, int tp_size);

// Rank 0's size checks alone (every rank's ModelShard; CUDA: enough GPUs), for callers that want the error
// before making any backend or reading any weight. visible_gpus: the CUDA device count to check against; unset:
// cudaGetDeviceCount() (a build without CUDA: UNIMPLEMENTED for tp_size > 1 on CUDA). Tests inject it.
Status validate_tensor_parallel(const model::ModelConfig& config, int tp_size, BackendKind backend,
                                std::optional<int> visible_gpus = std::nullopt);

}  // namespace xinfer::engine
