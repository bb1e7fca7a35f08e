#include "xinfer/engine/tensor_parallel.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "xinfer/backend/cpu/cpu_communicator.h"
#include "xinfer/core/check.h"
#include "xinfer/core/logging.h"
#include "xinfer/engine/engine.h"
#include "xinfer/engine/model_runner.h"
#include "xinfer/model/shard.h"
#if defined(XINFER_HAVE_CUDA)
#include <cuda_runtime.h>

#include "xinfer/backend/cuda/cuda_backend.h"
#if defined(XINFER_HAVE_NCCL)
#include "xinfer/backend/cuda/nccl_communicator.h"
#endif
#endif

namespace xinfer::engine {

struct TensorParallelGroup::Follower {
  int rank = 0;
  std::thread thread;

  // Shared with the caller's thread, under mu.
  std::mutex mu;
  std::condition_variable cv;
  struct Job {
    enum Kind { kStep, kKv, kStop } kind = kStep;
    backend::StepPlan plan;
    FollowerStep step;
    backend::KvCacheSpec spec;
  };
  std::deque<Job> jobs;
  bool loaded = false;
  Status load_status;
  int kv_allocations = 0;
  RankReport report;

  // The rank's own state, touched only by its thread once started (comm: handed over before).
  std::unique_ptr<backend::Communicator> comm;
  std::unique_ptr<backend::Backend> backend;
  std::unique_ptr<model::LlamaModel> model;
  backend::KvCache kv;
  backend::DeviceTensor ids[2];  // the ids rank 0's ModelRunner sampled, received for steps that feed them
#if defined(XINFER_HAVE_CUDA) && defined(XINFER_HAVE_NCCL)
  cuda::NcclId nccl_id;
#endif
};

int threads_per_rank(int threads, int tp_size) {
  if (tp_size <= 1) return threads;
  const int total = threads > 0 ? threads : static_cast<int>(std::thread::hardware_concurrency());
  return std::max(1, total / tp_size);
}

Status validate_tensor_parallel(const model::ModelConfig& config, int tp_size, BackendKind backend,
                                std::optional<int> visible_gpus) {
  for (int r = 0; r < tp_size; ++r) XI_RETURN_IF_ERROR(model::ModelShard::make(config, tp_size, r).status());
  if (backend != BackendKind::kCuda || tp_size <= 1) return Status();
  if (!visible_gpus) {
#if defined(XINFER_HAVE_CUDA)
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess) devices = 0;
    visible_gpus = devices;
#else
    return unimplemented("tensor parallelism on CUDA: this xinfer was built without the CUDA backend");
#endif
  }
  if (tp_size > *visible_gpus)
    return invalid_argument("tensor_parallel_size " + std::to_string(tp_size) + " needs " + std::to_string(tp_size) +
                            " GPUs (one rank per GPU); this machine has " + std::to_string(*visible_gpus) +
                            " visible (CUDA_VISIBLE_DEVICES)");
#if defined(XINFER_HAVE_CUDA) && !defined(XINFER_HAVE_NCCL)
  return unimplemented("tensor parallelism on CUDA needs NCCL: this xinfer was built without nccl.h");
#endif
  return Status();
}

Result<std::unique_ptr<TensorParallelGroup>> TensorParallelGroup::start(const TensorParallelOptions& options,
                                                                        const model::ModelConfig& config,
                                                                        backend::Backend& rank0) {
  const int n = options.tp_size;
  XI_RETURN_IF_ERROR(validate_tensor_parallel(config, n, options.backend));
  if (n < 2) return invalid_argument("a tensor parallel group needs at least 2 ranks, got " + std::to_string(n));
  std::unique_ptr<TensorParallelGroup> g(new TensorParallelGroup());
  g->options_ = options;
  for (int r = 1; r < n; ++r) {
    g->followers_.push_back(std::make_unique<Follower>());
    g->followers_.back()->rank = r;
  }
  if (options.backend == BackendKind::kCpu) {
    auto comms = cpu::CpuCommunicator::create_group(n, std::chrono::minutes(10));
    g->rank0_comm_ = std::move(comms[0]);
    for (int r = 1; r < n; ++r) g->followers_[static_cast<size_t>(r) - 1]->comm = std::move(comms[static_cast<size_t>(r)]);
    for (auto& f : g->followers_) f->thread = std::thread([&f = *f, &o = g->options_] { follower_main(f, o); });
    return g;
  }
#if defined(XINFER_HAVE_CUDA) && defined(XINFER_HAVE_NCCL)
  auto* gpu = dynamic_cast<cuda::CudaBackend*>(&rank0);
  XI_CHECK(gpu != nullptr) << "tensor parallel on CUDA: rank 0 must be a CudaBackend";
  XI_ASSIGN_OR_RETURN(cuda::NcclId id, cuda::NcclCommunicator::new_id());
  for (auto& f : g->followers_) {
    f->nccl_id = id;
    f->thread = std::thread([&f = *f, &o = g->options_] { follower_main(f, o); });
  }
  // Rank 0 joins while the followers do: NCCL's start-up needs every rank at once.
  auto comm = cuda::NcclCommunicator::create(id, n, 0, 0, gpu->stream(), options.timeout);
  if (!comm.ok()) return comm.status();  // the destructor stops the followers
  g->rank0_comm_ = std::move(*comm);
  return g;
#else
  (void)rank0;
  return unimplemented("tensor parallelism on CUDA needs a build with the CUDA backend and nccl.h");
#endif
}

void TensorParallelGroup::follower_main(Follower& f, const TensorParallelOptions& options) {
  Status st;
  {
    Result<std::unique_ptr<backend::Backend>> made = options.make_backend(f.rank);
    if (made.ok()) f.backend = std::move(*made);
    else st = made.status();
  }
#if defined(XINFER_HAVE_CUDA) && defined(XINFER_HAVE_NCCL)
  if (st.ok() && options.backend == BackendKind::kCuda) {
    auto* gpu = dynamic_cast<cuda::CudaBackend*>(f.backend.get());
    XI_CHECK(gpu != nullptr) << "tensor parallel on CUDA: rank " << f.rank << " must be a CudaBackend";
    auto comm = cuda::NcclCommunicator::create(f.nccl_id, options.tp_size, f.rank, f.rank, gpu->stream(),
                                               options.timeout);
    if (comm.ok()) f.comm = std::move(*comm);
    else st = comm.status();
  }
#endif
  if (st.ok()) {
    model::LoadOptions load = options.load;
    load.tp_size = options.tp_size;
    load.tp_rank = f.rank;
    load.comm = f.comm.get();
    load.show_progress = false;  // rank 0 shows its own
    Result<std::unique_ptr<model::LlamaModel>> m = model::LlamaModel::load(options.model_dir, *f.backend, load);
    if (m.ok()) {
      f.model = std::move(*m);
      prepare_backend_for_weights(*f.backend, *f.model, load.max_tokens, load.max_logit_rows);
    } else {
      st = Status(m.status().code(), "tensor parallel rank " + std::to_string(f.rank) + ": " + m.status().message());
    }
  }
  {
    std::lock_guard<std::mutex> lock(f.mu);
    f.loaded = true;
    f.load_status = st;
    if (st.ok()) {
      f.backend->synchronize();
      f.report = RankReport{f.rank, f.backend->info(), f.model->weight_bytes(), f.model->shard().to_string()};
      const int64_t rows = std::max(f.model->options().max_logit_rows, ModelRunner::kMaxGraphBatch);
      for (backend::DeviceTensor& t : f.ids) t = f.backend->allocate(DType::kI32, Shape{rows});
    }
  }
  f.cv.notify_all();
  while (true) {
    Follower::Job job;
    {
      std::unique_lock<std::mutex> lock(f.mu);
      f.cv.wait(lock, [&] { return !f.jobs.empty(); });
      job = std::move(f.jobs.front());
      f.jobs.pop_front();
    }
    if (job.kind == Follower::Job::kStop) break;
    XI_CHECK(st.ok()) << "tensor parallel rank " << f.rank << " got work after failing to load";
    if (job.kind == Follower::Job::kKv) {
      if (f.backend->supports_graphs()) f.backend->clear_graphs();  // recordings point at the old cache
      f.kv = backend::KvCache{};
      backend::KvCacheSpec spec = job.spec;
      spec.kv_head_begin = f.model->shard().kv_head_begin;  // this rank's heads of per-head scales
      f.kv = f.backend->allocate_kv_cache(spec);
      {
        std::lock_guard<std::mutex> lock(f.mu);
        ++f.kv_allocations;
      }
      f.cv.notify_all();
      continue;
    }
    run_step(f, job.plan, job.step);
  }
  if (f.backend) {
    f.backend->synchronize();
    f.backend->clear_graphs();  // before the model and KV cache they point at go
  }
}

void TensorParallelGroup::run_step(Follower& f, const backend::StepPlan& plan, const FollowerStep& step) {
  const TensorView fed = step.feed_buffer >= 0 ? f.ids[step.feed_buffer].view : TensorView{};
  if (step.feed_rows > 0) {
    XI_CHECK(step.feed_buffer == 0 || step.feed_buffer == 1) << "ids buffer " << step.feed_buffer;
    f.comm->broadcast(fed.rows(0, step.feed_rows), 0);
  }
  for (const backend::KvCopyBatch& b : plan.kv_copies) f.backend->copy_kv_blocks(f.kv, b);
  const backend::StepMeta meta = f.backend->upload_step(plan);
  if (!plan.token_sources.empty()) {
    XI_CHECK(!fed.empty()) << "tensor parallel rank " << f.rank << ": a step feeds tokens but names no ids buffer";
    f.backend->feed_tokens(meta, fed);
  }
  // Logits discarded: rank 0 samples. Recording runs nothing; the replay (or the eager fallback) runs the step.
  if (step.graph_key == 0 || !f.backend->supports_graphs()) {
    f.model->forward(meta, f.kv);
    return;
  }
  if (f.backend->replay(step.graph_key)) return;
  f.backend->begin_capture();
  f.model->forward(meta, f.kv);
  if (f.backend->end_capture(step.graph_key)) {
    XI_CHECK(f.backend->replay(step.graph_key)) << "a fresh recording must replay";
  } else {
    f.model->forward(meta, f.kv);  // recording failed (a workspace had to grow): run eagerly
  }
}

Status TensorParallelGroup::wait_loaded() {
  for (auto& f : followers_) {
    std::unique_lock<std::mutex> lock(f->mu);
    f->cv.wait(lock, [&] { return f->loaded; });
    if (!f->load_status.ok()) return f->load_status;
  }
  return Status();
}

std::vector<TensorParallelGroup::RankReport> TensorParallelGroup::follower_reports() const {
  std::vector<RankReport> out;
  for (const auto& f : followers_) {
    std::lock_guard<std::mutex> lock(f->mu);
    out.push_back(f->report);
  }
  return out;
}

void TensorParallelGroup::allocate_kv(const backend::KvCacheSpec& spec) {
  std::vector<int> before;
  for (auto& f : followers_) {
    std::lock_guard<std::mutex> lock(f->mu);
    before.push_back(f->kv_allocations);
    Follower::Job job;
    job.kind = Follower::Job::kKv;
    job.spec = spec;
    f->jobs.push_back(std::move(job));
    f->cv.notify_all();
  }
  for (size_t i = 0; i < followers_.size(); ++i) {
    Follower& f = *followers_[i];
    std::unique_lock<std::mutex> lock(f.mu);
    f.cv.wait(lock, [&] { return f.kv_allocations > before[i]; });
  }
}

void TensorParallelGroup::launch(const backend::StepPlan& plan, const FollowerStep& step) {
  for (auto& f : followers_) {
    Follower::Job job;
    job.kind = Follower::Job::kStep;
    job.plan = plan;
    job.step = step;
    {
      std::lock_guard<std::mutex> lock(f->mu);
      f->jobs.push_back(std::move(job));
    }
    f->cv.notify_all();
  }
}

TensorParallelGroup::~TensorParallelGroup() {
  for (auto& f : followers_) {
    {
      std::lock_guard<std::mutex> lock(f->mu);
      Follower::Job job;
      job.kind = Follower::Job::kStop;
      f->jobs.push_back(std::move(job));
    }
    f->cv.notify_all();
  }
  for (auto& f : followers_)
    if (f->thread.joinable()) f->thread.join();
}

Result<TensorParallelModel> load_tensor_parallel(
    const std::string& dir, backend::Backend& rank0, const model::LoadOptions& load, int tp_size, BackendKind kind,
    std::function<Result<std::unique_ptr<backend::Backend>>(int rank)> make_backend) {
  TensorParallelModel out;
  model::LoadOptions mine = load;
  if (tp_size > 1) {
    XI_ASSIGN_OR_RETURN(model::ModelConfig mc, model::load_model_config(dir));
    TensorParallelOptions o;
    o.tp_size = tp_size;
    o.backend = kind;
    o.make_backend = std::move(make_backend);
    o.model_dir = dir;
    o.load = load;
    XI_ASSIGN_OR_RETURN(out.group, TensorParallelGroup::start(o, mc, rank0));
    mine.tp_size = tp_size;
    mine.tp_rank = 0;
    mine.comm = out.group->rank0_comm();
  }
  XI_ASSIGN_OR_RETURN(out.model, model::LlamaModel::load(dir, rank0, mine));
  if (out.group) XI_RETURN_IF_ERROR(out.group->wait_loaded());
  return out;
}

void TensorParallelModel::attach(ModelRunner& runner, const backend::KvCacheSpec& spec) {
  if (!group) return;
  group->allocate_kv(spec);
  runner.set_followers(group.get());
}

}  // namespace xinfer::engine
