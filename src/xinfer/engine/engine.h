// Engine: the EngineClient implementation. Owns the backend, the model, the ModelRunner, the Sampler and
// the Scheduler, and runs them on one loop thread:
//
//   loop:  take the submission and abort queues (swap under mu_, never block while holding it)
//          -> Scheduler::add / abort (aborts: final output with kAbort at once)
//          -> step = schedule(); empty: sleep on cv_ until a submission, abort or stop arrives
//          -> ModelRunner::run(chunks of step)  (sample -> want_logits)
//          -> Sampler::sample(one input per sampling sequence: its params, its SequenceRng, prompt/outputs)
//          -> Scheduler::update(tokens) -> one RequestOutput per sampling request, final ones carry timings
//
// Asynchronous scheduling (EngineConfig::async_scheduling, docs/engine.md): a step whose sampling rows are
// all plain argmax (device greedy: ModelRunner::start_greedy) or all drawn on the device without penalties or
// logprobs (ModelRunner::start_sampled) is launched and left in flight; the next
// iteration schedules and launches the next step - its placeholder rows fed on the device from the step in
// flight - before it waits for the step in flight, applies its update() and queues its outputs:
//
//   schedule(N+1) -> launch(N+1) -> deliver outputs of N-1 -> finish_greedy(N) -> update(N) -> queue N's
//   outputs
//
// Rows of the step just launched whose request update(N) finished (stop token) or that an abort removed are
// discarded when that step completes: their client never sees them. A step that cannot be pipelined first
// completes the step in flight (drain) and then runs synchronously, skipping such rows. Aborts, stop() and
// sleeping with nothing to run complete the step in flight first.
//
// Threads: submit/abort/stats/render_metrics/drain/stop may be called from any thread; everything in
// "engine-thread state" below is touched only by the loop. Callbacks run on the loop thread, never under a
// lock: a callback may call submit(), abort() and stop() (which then does not join), must not throw, must
// not call drain() and must not destroy the Engine.
// Request ids: strings at the interface, mapped to uint64 (`live_`) for the scheduler; an id is live
// (a duplicate is refused, abort() finds it) from a successful submit() until just before its final
// callback runs, so the final callback itself may reuse it.
// Shutdown: drain() refuses new work (UNAVAILABLE) and waits until nothing is live; stop() (and the
// destructor) aborts everything live, each callback getting its final kAbort output, and joins the loop.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "xinfer/backend/backend.h"
#include "xinfer/core/thread_pool.h"
#include "xinfer/engine/engine_client.h"
#include "xinfer/engine/engine_config.h"
#include "xinfer/engine/metrics.h"
#include "xinfer/engine/model_runner.h"
#include "xinfer/engine/sampler.h"
#include "xinfer/engine/tensor_parallel.h"
#include "xinfer/model/llama.h"
#include "xinfer/model/shard.h"
#include "xinfer/scheduler/scheduler.h"

namespace xinfer::engine {

// Where device memory went at start-up (printed then; `xinfer bench` records it).
struct MemoryPlan {
  size_t total_bytes = 0;   // device memory (0 on the CPU backend)
  size_t weight_bytes = 0;
  size_t other_bytes = 0;   // activations, workspaces, CUDA context: in use after loading, minus weights
  size_t graph_reserve_bytes = 0;  // margin kept for lazily recorded CUDA graphs (0: graphs off)
  size_t kv_bytes = 0;      // num_blocks x bytes_per_block
  int num_blocks = 0;       // including the null block
  int64_t kv_tokens = 0;    // tokens the usable blocks hold
  size_t swap_bytes = 0;    // host memory of the KV swap space (per rank), num_swap_blocks x bytes_per_block
  int num_swap_blocks = 0;
};

// Readies `backend` for `mc` as the Engine does before loading weights: on CUDA, reserves the split-KV
// decode workspace (up to max_decode_seqs sequences of max_seq_len) and measures the GEMM choices for the
// model's linears (layer linears on up to max_tokens rows, the f32 lm_head on up to max_logit_rows);
// nothing on the CPU. Tools that drive a ModelRunner directly (`xinfer logits`) call it so they run the
// same kernels as serving.
void prepare_backend_for_model(backend::Backend& backend, const model::ModelConfig& mc, int max_tokens,
                               int max_logit_rows, int max_decode_seqs, int max_seq_len, bool show_progress);
// The same for one tensor-parallel rank: its own linear shapes (ModelShard::linear_shapes) and local heads
// (the split-KV workspace); the overload above is the unsharded model's (ModelShard::whole).
void prepare_backend_for_model(backend::Backend& backend, const model::ModelConfig& mc, const model::ModelShard& shard,
                               int max_tokens, int max_logit_rows, int max_decode_seqs, int max_seq_len,
                               bool show_progress);
// After the weights are loaded, before the KV cache is sized (CUDA; nothing elsewhere): the W8A8 GEMMs' choices
// measured at the decode graph buckets up to max_decode_rows, and the quantized linears' workspace allocated for
// steps of max_tokens rows, so that the memory plan counts it and serving never grows it (a progress bar for the
// measurement with show_progress).
void prepare_backend_for_weights(backend::Backend& backend, const model::LlamaModel& model, int max_tokens,
                                 int max_decode_rows, bool show_progress = false);

class Engine final : public EngineClient {
 public:
  // Loads the model, sizes the KV cache from config.kv_cache_memory and starts the loop thread.
  // Errors: the config's (INVALID_ARGUMENT), the model's (NOT_FOUND, UNIMPLEMENTED, ...), a budget below two
  // blocks or a max_model_len the KV cache cannot hold, weights larger than the device (INVALID_ARGUMENT), CUDA
  // backend in a build without it (UNIMPLEMENTED). CUDA: KV blocks from gpu_memory_utilization (MemoryPlan).
  static Result<std::unique_ptr<Engine>> create(EngineConfig config);
  ~Engine() override;  // stop()
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  Status submit(GenerationRequest request, OutputCallback on_output) override;
  void abort(const std::string& request_id) override;
  EngineStats stats() const override;
  const EngineInfo& info() const override { return info_; }
  void render_metrics(std::string* out) const override;

  // Stops accepting (submit -> UNAVAILABLE) and blocks until every live request has finished.
  void drain();
  // Aborts every live request (final kAbort outputs), stops and joins the loop. Idempotent.
  void stop();

  // The config with derived fields filled (num_blocks, max_model_len).
  const EngineConfig& config() const { return config_; }
  const MemoryPlan& memory_plan() const { return memory_plan_; }
  const model::LlamaModel& model() const { return *model_; }
  // For measurements while no request is live (bench ceilings); the loop thread uses it otherwise.
  backend::Backend& backend() { return *backend_; }

 private:
  struct Submission {
    uint64_t id;
    GenerationRequest request;
    OutputCallback on_output;
    int max_new_tokens;
  };
  // Engine-thread state of one live request.
  struct RequestState {
    std::string request_id;
    OutputCallback on_output;
    SamplingParams params;
    SequenceRng rng;
    int num_prompt_tokens = 0;
    int num_output_tokens = 0;
    // GenerationRequest::prompt_logprobs: the top count, and [num_prompt_tokens - 1] entries filled by the
    // all_logits chunks of its prefill (entry p scores prompt token p + 1), handed over with its first output.
    std::optional<int32_t> prompt_top;
    std::vector<TokenLogprob> prompt_logprobs;
  };

  Engine(EngineConfig config, std::unique_ptr<backend::Backend> backend, std::unique_ptr<ThreadPool> own_pool,
         ThreadPool* sampler_pool, std::unique_ptr<model::LlamaModel> model, backend::KvCacheSpec kv_spec,
         std::unique_ptr<TensorParallelGroup> tp);

  void loop();
  void add_request(Submission& s);
  void abort_request(uint64_t id);
  // Runs `step` synchronously (no step in flight). Returns the seconds spent in the model runner (upload,
  // forward, sampling, wait for the result).
  double run_step(const sched::ScheduledStep& step);
  // What the live sampling rows of a prepared step need.
  struct StepRows {
    bool plain_argmax = true;     // every row: is_plain_argmax (device greedy)
    bool device_drawable = true;  // every row: device_samplable and no penalties (ModelRunner::start_sampled)
    bool prompt_rows = false;     // some chunk is all_logits (prompt logprobs): host logits, never pipelined
  };
  // Fills chunks_ (live rows only), sample_inputs_ and sample_ids_ / sample_live_ (every sampling row) for
  // `step`; feed: placeholder rows read the step in flight (token_source).
  StepRows prepare_step(const sched::ScheduledStep& step, bool feed);
  // Asynchronous scheduling: launches `step` (prepared, pipelinable; sampled: ModelRunner::start_sampled,
  // else start_greedy) behind the step in flight, then completes the step in flight (delivering older
  // outputs).
  void launch_pipelined(const sched::ScheduledStep& step, bool sampled);
  // Waits for the step in flight (if any) and applies its outputs.
  void complete_in_flight();
  // Scheduler::update() with one output per sampling row (rows of requests no longer live are discarded),
  // bookkeeping, stats, and the rows' outputs queued in pending_.
  void apply_outputs(const std::vector<uint64_t>& sample_ids, const std::vector<SampleOutput>& outs);
  // A step with all_logits chunks: host logits of every row, prompt log-probabilities scored into the
  // requests' state, host sampling of the sampling rows.
  std::vector<SampleOutput> run_prompt_rows_step();
  // One step's times; `t`: its device time where the runner measured it (ModelRunner::last_step_device_time).
  void record_step_time(bool decode_only, int64_t tokens, double device_s, double host_s,
                        const backend::Backend::StepDeviceTime& t);
  // Forgets the request and sends its final output: at once, or with `defer` as a pending delivery.
  void finish_request(uint64_t id, const sched::FinishedRequest& f, const SampleOutput* last, bool defer);
  // Runs the pending deliveries in order (engine thread). A step's outputs are delivered while the device
  // computes the next step (run_step); everything that could reorder them against later outputs (aborts,
  // stop, sleeping with nothing to run) delivers them first.
  void deliver_pending();
  void finish_with_error(Submission& s, const Status& error);
  void release_id(const std::string& request_id);  // before the final callback
  void final_delivered();                          // after it: drain() counts these
  void publish_stats();

  EngineConfig config_;
  EngineInfo info_;
  MemoryPlan memory_plan_;
  std::unique_ptr<backend::Backend> backend_;
  std::unique_ptr<ThreadPool> own_pool_;  // sampler pool when the backend has none to share
  // Tensor parallelism: ranks 1..N-1 (rank 0 is backend_ / model_ / runner_). Destroyed after model_ and
  // runner_ (declared before them), which hold rank 0's communicator.
  std::unique_ptr<TensorParallelGroup> tp_;
  std::unique_ptr<model::LlamaModel> model_;
  std::unique_ptr<ModelRunner> runner_;
  std::unique_ptr<Sampler> sampler_;
  std::unique_ptr<sched::Scheduler> scheduler_;
  EngineMetrics metrics_;

  // Shared with client threads, guarded by mu_.
  mutable std::mutex mu_;
  std::condition_variable work_cv_;   // loop waits: submissions, aborts, stop
  std::condition_variable idle_cv_;   // drain() waits: num_in_flight_ == 0
  std::vector<Submission> submissions_;
  std::vector<uint64_t> aborts_;
  std::unordered_map<std::string, uint64_t> live_;
  int num_in_flight_ = 0;             // accepted requests whose final callback has not returned
  uint64_t next_id_ = 1;
  int num_waiting_ = 0;               // scheduler's waiting count after the last step
  // Submissions the loop has taken from submissions_ and not yet published in num_waiting_: submit() counts
  // them, or a request arriving in between would find the queue emptier than it is.
  int taken_submissions_ = 0;
  bool accepting_ = true;
  bool stopping_ = false;

  mutable std::mutex stats_mu_;
  EngineStats stats_;

  // Engine-thread state.
  // An output of the last step, handed to its callback by deliver_pending(). A final output carries the
  // request's callback (its state is gone); release_id() and final_delivered() happen around the call.
  struct Delivery {
    uint64_t id = 0;
    RequestOutput out;
    OutputCallback final_callback;  // set for final outputs only
  };
  std::vector<Delivery> pending_;
  std::unordered_map<uint64_t, RequestState> requests_;
  std::vector<SequenceChunk> chunks_;
  std::vector<SampleInput> sample_inputs_;
  std::vector<uint64_t> sample_ids_;  // request of every sampling row of the prepared step (StepOutput order)
  std::vector<bool> sample_live_;     // its request was live when prepared (else: a discarded row)
  std::vector<uint64_t> chunk_ids_;   // request of every chunk in chunks_
  // Asynchronous scheduling: the step launched and not yet applied.
  struct InFlightStep {
    std::vector<uint64_t> sample_ids;  // every sampling row's request
    bool decode_only = false;
    int64_t tokens = 0;
    std::chrono::steady_clock::time_point launched;
  };
  std::optional<InFlightStep> in_flight_;
  // A warning at the first preemption and after every kPreemptionWarningInterval more (as vLLM does).
  static constexpr int64_t kPreemptionWarningInterval = 50;
  int64_t next_preemption_warning_ = 1;
  void warn_preemptions();
  std::chrono::steady_clock::time_point last_completion_;  // of the previous pipelined step
  int64_t prompt_tokens_total_ = 0;
  int64_t generation_tokens_total_ = 0;
  int64_t requests_finished_ = 0;
  int64_t requests_aborted_ = 0;

  std::thread thread_;
};

}  // namespace xinfer::engine
