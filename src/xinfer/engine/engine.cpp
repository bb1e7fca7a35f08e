#include "xinfer/engine/engine.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <utility>

#include "xinfer/backend/cpu/cpu_backend.h"
#if defined(XINFER_HAVE_CUDA)
#include "xinfer/backend/cuda/cuda_backend.h"
#endif
#include "xinfer/core/check.h"
#include "xinfer/core/logging.h"
#include "xinfer/core/progress_bar.h"
#include "xinfer/engine/backend_factory.h"
#include "xinfer/engine/prompt_logprobs.h"
#include "xinfer/engine/tensor_parallel.h"
#include "xinfer/kv_cache/kv_cache_manager.h"
#include "xinfer/model/checkpoint_linear.h"
#include "xinfer/model/model_config.h"
#include "xinfer/model/preset_configs.h"

namespace xinfer::engine {
namespace {

struct BackendBundle {
  std::unique_ptr<backend::Backend> backend;
  std::unique_ptr<ThreadPool> own_pool;  // set when the backend has no host pool to share
  ThreadPool* sampler_pool = nullptr;
};

// The one place that knows how to build each backend (and the only #if on CUDA in the engine).
// The CUDA backend reserves its split-KV decode workspace here, before the memory plan measures what
// is in use.
// Tensor parallelism on the CPU: the ranks share the cores (each rank's pool gets its part of them).
int cpu_threads_per_rank(const EngineConfig& config) {
  if (config.tensor_parallel_size <= 1) return config.threads;
  const int total = config.threads > 0 ? config.threads : static_cast<int>(std::thread::hardware_concurrency());
  return std::max(1, total / config.tensor_parallel_size);
}

// `device`: the CUDA device (tensor-parallel rank r runs on device r).
Result<BackendBundle> make_backend(const EngineConfig& config, const model::ModelConfig& mc, int max_seq_len,
                                   int device = 0) {
  BackendBundle b;
  switch (config.backend) {
    case BackendKind::kCpu: {
      (void)device;
      auto cpu = std::make_unique<cpu::CpuBackend>(cpu::CpuBackendOptions{cpu_threads_per_rank(config)});
      b.sampler_pool = &cpu->pool();  // forward and sampling never overlap: one pool serves both
      b.backend = std::move(cpu);
      return b;
    }
    case BackendKind::kCuda: {
#if defined(XINFER_HAVE_CUDA)
      XI_RETURN_IF_ERROR(usable_cuda_device());
      cuda::CudaBackendOptions options;
      options.device = device;
      options.gemm_tuning = config.gemm_tuning;
      options.gemm_tuning_cache = config.gemm_tuning_cache;
      options.gemv_pdl = config.gemv_pdl;
      options.linear_fusion = config.fused_linears ? cuda::LinearFusion::kWhenGemv : cuda::LinearFusion::kOff;
      options.rope_attention_fusion = config.fused_rope_attention;
      auto gpu = std::make_unique<cuda::CudaBackend>(options);
      // Rank `device`'s own shapes (its heads, its linears): validate_tensor_parallel has passed.
      XI_ASSIGN_OR_RETURN(const model::ModelShard shard,
                          model::ModelShard::make(mc, std::max(1, config.tensor_parallel_size), device));
      prepare_backend_for_model(*gpu, mc, shard, config.scheduler.max_num_batched_tokens,
                                config.scheduler.max_num_seqs, config.scheduler.max_num_seqs, max_seq_len,
                                config.show_progress);
      b.backend = std::move(gpu);
      b.own_pool = std::make_unique<ThreadPool>(config.threads);
      b.sampler_pool = b.own_pool.get();
      return b;
#else
      (void)mc;
      (void)max_seq_len;
      return unimplemented("this xinfer was built without the CUDA backend (no nvcc at configure time); "
                           "use --backend cpu");
#endif
    }
  }
  return invalid_argument("unknown backend");
}

// Device memory kept out of the KV cache for CUDA graphs (recorded lazily, at most 10 batch buckets (1..512)
// x a few block-table widths; each holds ~10 kernel nodes per layer; measured: recordings take < 2 MiB each).
constexpr size_t kGraphMemoryReserve = size_t{256} << 20;

double gib(size_t bytes) { return static_cast<double>(bytes) / static_cast<double>(size_t{1} << 30); }

size_t host_memory_bytes() {
  return static_cast<size_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

FinishReason to_engine_reason(sched::FinishReason r) {
  switch (r) {
    case sched::FinishReason::kStop: return FinishReason::kStop;
    case sched::FinishReason::kLength: return FinishReason::kLength;
    case sched::FinishReason::kAbort: return FinishReason::kAbort;
  }
  return FinishReason::kError;
}

RequestTimings timings_of(const sched::RequestMetrics& m, bool final_output) {
  RequestTimings t;
  t.queue_time_s = m.queue_time_s();
  t.ttft_s = m.time_to_first_token_s();
  if (final_output) {
    t.e2e_s = m.e2e_latency_s();
    t.itl_s = m.inter_token_latencies_s;
  }
  return t;
}

void append_token(RequestOutput& out, const SampleOutput& o, bool with_logprobs) {
  out.new_token_ids.push_back(o.token);
  if (with_logprobs) out.new_logprobs.push_back(TokenLogprob{o.token, o.logprob, o.top_logprobs});
}

}  // namespace

void prepare_backend_for_model(backend::Backend& backend, const model::ModelConfig& mc, int max_tokens,
                               int max_logit_rows, int max_decode_seqs, int max_seq_len, bool show_progress) {
  prepare_backend_for_model(backend, mc, model::ModelShard::whole(mc), max_tokens, max_logit_rows, max_decode_seqs,
                            max_seq_len, show_progress);
}

void prepare_backend_for_model(backend::Backend& backend, const model::ModelConfig& mc, const model::ModelShard& shard,
                               int max_tokens, int max_logit_rows, int max_decode_seqs, int max_seq_len,
                               bool show_progress) {
#if defined(XINFER_HAVE_CUDA)
  auto* gpu = dynamic_cast<cuda::CudaBackend*>(&backend);
  if (gpu == nullptr) return;
  gpu->reserve_decode_workspace(max_decode_seqs, shard.num_heads, shard.num_kv_heads, shard.head_dim, max_seq_len);
  // GEMM choices measured for this rank's linears (qkv, o, gate_up, down on up to a step's tokens; the
  // lm_head, f32 logits, on up to one row per sequence) before any graph is recorded. qkv and gate_up read the
  // residual through an RMSNorm (normed_input: decode rows may fold it in).
  std::vector<cuda::GemmShape> shapes;
  for (const model::LinearShape& l : shard.linear_shapes(mc))
    shapes.push_back({static_cast<int>(l.n), static_cast<int>(l.k), l.lm_head, l.bias,
                      l.lm_head ? max_logit_rows : max_tokens, l.normed_input});
  gpu->tune_linears(shapes, show_progress);
#else
  (void)backend, (void)mc, (void)shard, (void)max_tokens, (void)max_logit_rows, (void)max_decode_seqs;
  (void)max_seq_len, (void)show_progress;
#endif
}

void prepare_backend_for_weights(backend::Backend& backend, const model::LlamaModel& model, int max_tokens,
                                 int max_decode_rows, bool show_progress) {
#if defined(XINFER_HAVE_CUDA)
  auto* gpu = dynamic_cast<cuda::CudaBackend*>(&backend);
  if (gpu == nullptr) return;
  // runs: what the kernels run, a segmented weight's segments (backend.h) in its place
  std::vector<const backend::LinearWeights*> linears, runs;
  for (int l = 0; l < model.config().num_layers; ++l) {
    const model::LayerWeights& w = model.layer(l);
    for (const backend::LinearWeights* lw : {&w.qkv, &w.o, &w.gate_up, &w.down}) {
      linears.push_back(lw);
      if (!lw->segmented()) runs.push_back(lw);
      for (const backend::LinearWeights& s : lw->segments) runs.push_back(&s);
    }
  }
  gpu->reserve_quant_workspace(linears, max_tokens);  // first: the measurement below then grows nothing
  gpu->measure_w8a8_gemms(runs, max_decode_rows, show_progress);
  gpu->measure_fp8_gemms(runs, max_tokens);
  gpu->measure_int8_gemms(runs, max_tokens);
  gpu->measure_wq_gemms(runs, max_decode_rows);
#else
  (void)backend, (void)model, (void)max_tokens, (void)max_decode_rows, (void)show_progress;
#endif
}

Result<std::unique_ptr<Engine>> Engine::create(EngineConfig config) {
  XI_RETURN_IF_ERROR(config.validate());
  const bool dummy = config.load_format == model::LoadFormat::kDummy;
  if (!dummy && model::is_preset(config.model_dir))
    return invalid_argument("model " + config.model_dir + " is a built-in config without weights: use "
                            "--load-format dummy, or give a model directory");
  XI_ASSIGN_OR_RETURN(model::ModelConfig mc, dummy ? model::resolve_model_config(config.model_dir)
                                                   : model::load_model_config(config.model_dir));
  // The model's limit: max_position_embeddings, or a shorter sliding window (full attention is exact only
  // within it).
  const int max_pos = mc.context_limit() > 0 ? mc.context_limit() : INT32_MAX;
  if (config.max_model_len > max_pos)
    return invalid_argument("max_model_len " + std::to_string(config.max_model_len) + " exceeds " +
                            mc.context_limit_reason());
  // Devices plan memory (weights and workspaces first, KV blocks from what is left); the CPU backend
  // takes kv_cache_memory of host RAM.
  const bool plan_memory = config.backend == BackendKind::kCuda;
  const int longest = config.max_model_len > 0 ? config.max_model_len : max_pos;
  // Tensor parallelism: every size checked before any backend or weight (docs/tensor_parallel.md).
  const int tp = config.tensor_parallel_size;
  if (tp > 1) XI_RETURN_IF_ERROR(validate_tensor_parallel(mc, tp, config.backend));
  XI_ASSIGN_OR_RETURN(model::ModelShard shard0, model::ModelShard::make(mc, tp, 0));
  XI_ASSIGN_OR_RETURN(BackendBundle bundle, make_backend(config, mc, longest));
  backend::Backend& be = *bundle.backend;

  sched::SchedulerConfig& sc = config.scheduler;
  XI_ASSIGN_OR_RETURN(const KvCacheSettings kv_settings,
                      resolve_kv_cache({config.kv_cache_dtype, config.kv_cache_scale, config.kv_cache_rotation},
                                       config.model_dir, mc, !dummy, be));
  backend::KvCacheSpec spec{mc.num_layers, 0, sc.block_size, shard0.num_kv_heads, mc.head_dim, kv_settings.dtype};
  kv_settings.apply_to(spec);
  const size_t bytes_per_block = spec.bytes_per_block();
  // Swap space per rank (--swap-space).
  const size_t host_ram = host_memory_bytes();
  const double swap_gib = config.swap_space_gib;
  if (swap_gib * (1 << 30) * tp > kMaxSwapSpaceFraction * static_cast<double>(host_ram))
    return invalid_argument("--swap-space " + std::to_string(config.swap_space_gib) + " GiB x " +
                            std::to_string(tp) + " rank(s) is more than " +
                            std::to_string(static_cast<int>(kMaxSwapSpaceFraction * 100)) +
                            "% of this host's " + std::to_string(gib(host_ram)) + " GiB of RAM; lower it");
  sc.num_swap_blocks = static_cast<int>(
      std::min<double>(std::floor(swap_gib * (1 << 30) / static_cast<double>(bytes_per_block)),
                       std::numeric_limits<int>::max()));
  spec.num_swap_blocks = sc.num_swap_blocks;
  model::LoadOptions load;
  load.max_tokens = sc.max_num_batched_tokens;
  load.max_logit_rows = sc.max_num_seqs;
  load.show_progress = config.show_progress;
  load.load_format = config.load_format;
  load.seed = config.dummy_seed;
  load.dummy_quantization = config.dummy_quantization;
  // Ranks 1..tp-1 start on their own threads (backend, communicator) and load their shards meanwhile.
  std::unique_ptr<TensorParallelGroup> tp_group;
  if (tp > 1) {
    TensorParallelOptions o;
    o.tp_size = tp;
    o.backend = config.backend;
    o.make_backend = [config, mc, longest](int rank) -> Result<std::unique_ptr<backend::Backend>> {
      XI_ASSIGN_OR_RETURN(BackendBundle b, make_backend(config, mc, longest, rank));
      return std::move(b.backend);
    };
    o.model_dir = config.model_dir;
    o.load = load;
    o.load.max_model_len = config.max_model_len;
    XI_ASSIGN_OR_RETURN(tp_group, TensorParallelGroup::start(o, mc, be));
    load.tp_size = tp;
    load.tp_rank = 0;
    load.comm = tp_group->rank0_comm();
  }

  std::unique_ptr<model::LlamaModel> model;
  MemoryPlan plan;
  size_t kv_budget = config.kv_cache_memory;
  if (plan_memory) {
    const backend::BackendInfo before = be.info();
    // From the checkpoint's formats (quantized linears and GGUF blocks at their packed size where the
    // backend runs them), this rank's share.
    auto kept = [&](const quant::WeightFormat& f, int64_t n, int64_t k) { return be.supports_linear(f, n, k); };
    const size_t weights_estimate = static_cast<size_t>(
        static_cast<double>(model::planned_weight_bytes(
            config.model_dir, mc, before.activation_dtype, kept,
            config.load_format == model::LoadFormat::kDummy ? config.dummy_quantization : std::nullopt,
            tp > 1, [&](quant::GgufType t) { return be.prefers_repacked_gguf(t); })) *
        static_cast<double>(shard0.parameter_count(mc)) /
        static_cast<double>(model::LlamaModel::parameter_count(mc)));
    const double usable = config.gpu_memory_utilization * static_cast<double>(before.total_memory) -
                          static_cast<double>(before.total_memory - before.free_memory);
    if (static_cast<double>(weights_estimate) > usable)
      return invalid_argument(
          "model " + config.model_dir + " needs " + std::to_string(gib(weights_estimate)) + " GiB of " +
          (config.load_format == model::LoadFormat::kDummy && config.dummy_quantization
               ? "dummy " + quant::format_name(*config.dummy_quantization)
               : mc.quantization.quantized() ? mc.quantization.to_string()
                                             : std::string(dtype_name(before.activation_dtype))) +
          " weights (" + std::to_string(model::LlamaModel::parameter_count(mc)) +
          " parameters) but " + before.name + " has " + std::to_string(gib(before.total_memory)) +
          " GiB, of which gpu_memory_utilization " + std::to_string(config.gpu_memory_utilization) +
          " leaves " + std::to_string(usable / (1 << 30)) +
          " GiB: this rank's share (tensor_parallel_size " + std::to_string(tp) +
          ") does not fit; raise --tensor-parallel-size");
    load.max_model_len = config.max_model_len;  // 0: the rope table covers max_position_embeddings
    XI_ASSIGN_OR_RETURN(model, model::LlamaModel::load(config.model_dir, be, load));
    prepare_backend_for_weights(be, *model, sc.max_num_batched_tokens, sc.max_num_seqs, config.show_progress);
    be.synchronize();
    const backend::BackendInfo after = be.info();
    const size_t used = after.total_memory - after.free_memory;
    const double budget = config.gpu_memory_utilization * static_cast<double>(after.total_memory) -
                          static_cast<double>(used);
    // Graphs are recorded lazily (first decode step of each key): their memory comes from this margin.
    // Recorded all at start-up (record_graphs_at_start), every key a step can meet (~2 MiB each, measured)
    // and the step buffer sized for the largest plan.
    plan.graph_reserve_bytes = config.enable_cuda_graphs && be.supports_graphs() ? kGraphMemoryReserve : 0;
    if (plan.graph_reserve_bytes > 0 && config.record_graphs_at_start) {
      const int blocks = (model->max_model_len() + sc.block_size - 1) / sc.block_size;
      const ModelRunner::DecodeGraphKeys keys = ModelRunner::decode_graph_keys(
          sc.max_num_seqs, model->options().max_tokens, model->options().max_logit_rows, blocks, blocks);
      const size_t graphs = keys.buckets.size() * keys.widths.size();
      const size_t upload = ModelRunner::step_upload_bound(
          model->options().max_tokens, model->options().max_logit_rows, sc.max_num_seqs,
          keys.buckets.empty() ? 0 : keys.buckets.front(), keys.widths.back());
      plan.graph_reserve_bytes = std::max(kGraphMemoryReserve, graphs * (size_t{2} << 20) + upload);
    }
    const double kv_part = budget - static_cast<double>(plan.graph_reserve_bytes);
    kv_budget = kv_part > 0 ? static_cast<size_t>(kv_part) : 0;
    if (tp_group) {  // every rank holds the same blocks: the smallest budget decides
      XI_RETURN_IF_ERROR(tp_group->wait_loaded());
      for (const TensorParallelGroup::RankReport& r : tp_group->follower_reports()) {
        const double b = config.gpu_memory_utilization * static_cast<double>(r.info.total_memory) -
                         static_cast<double>(r.info.total_memory - r.info.free_memory) -
                         static_cast<double>(plan.graph_reserve_bytes);
        kv_budget = std::min(kv_budget, b > 0 ? static_cast<size_t>(b) : size_t{0});
      }
    }
    plan.weight_bytes = model->weight_bytes();
    plan.other_bytes = used > plan.weight_bytes ? used - plan.weight_bytes : 0;
    plan.total_bytes = after.total_memory;
  }
  // On the CPU the ranks share kv_cache_memory (one host RAM); on devices each rank has its own budget.
  sc.num_blocks = kv::num_blocks_for_budget(kv_budget, bytes_per_block * (plan_memory ? 1 : static_cast<size_t>(tp)));
  if (sc.num_blocks == 0) {
    return invalid_argument(std::string(plan_memory ? "the memory left after weights and workspaces under "
                                                      "gpu_memory_utilization"
                                                    : "kv_cache_memory") +
                            " (" + std::to_string(kv_budget) + " bytes) holds fewer than 2 KV blocks of " +
                            std::to_string(bytes_per_block) + " bytes (block_size " + std::to_string(sc.block_size) +
                            ")");
  }
  spec.num_blocks = sc.num_blocks;
  // The last sampled token is never fed back: a sequence of L tokens needs KV for L - 1.
  const int64_t kv_tokens = static_cast<int64_t>(sc.num_blocks - 1) * sc.block_size + 1;
  if (config.max_model_len > 0) {
    if (config.max_model_len > kv_tokens)
      return invalid_argument("max_model_len " + std::to_string(config.max_model_len) +
                              " needs more KV cache than there is (" + std::to_string(kv_tokens) +
                              " tokens in " + std::to_string(sc.num_blocks - 1) + " blocks); " +
                              (plan_memory ? "raise gpu_memory_utilization" : "raise kv_cache_memory") +
                              " or lower max_model_len");
  } else {
    config.max_model_len = static_cast<int>(std::min<int64_t>(max_pos, kv_tokens));
    if (config.max_model_len < max_pos)
      XI_LOG(WARN) << "max_model_len lowered to " << config.max_model_len << " (model: " << max_pos
                   << "): that is all the KV cache holds";
  }
  sc.max_model_len = config.max_model_len;
  XI_RETURN_IF_ERROR(sc.validate());
  if (config.served_model_name.empty())
    config.served_model_name = std::filesystem::path(config.model_dir).lexically_normal().filename().string();
  if (config.served_model_name.empty())  // "dir/" normalizes to a trailing empty name
    config.served_model_name =
        std::filesystem::path(config.model_dir).lexically_normal().parent_path().filename().string();

  if (!model) {
    load.max_model_len = config.max_model_len;
    XI_ASSIGN_OR_RETURN(model, model::LlamaModel::load(config.model_dir, be, load));
  }
  plan.kv_bytes = static_cast<size_t>(sc.num_blocks) * bytes_per_block;
  plan.num_blocks = sc.num_blocks;
  plan.kv_tokens = kv_tokens - 1;
  plan.num_swap_blocks = sc.num_swap_blocks;
  plan.swap_bytes = static_cast<size_t>(sc.num_swap_blocks) * bytes_per_block;
  if (!plan_memory) plan.weight_bytes = model->weight_bytes();
  if (tp_group) XI_RETURN_IF_ERROR(tp_group->wait_loaded());
  if (!config.async_scheduling) config.async_scheduling = be.async_host_copies();
  XI_LOG(INFO) << "engine: " << config.to_string();
  XI_LOG(INFO) << "engine: model " << model->config().to_string() << "; " << model::LlamaModel::parameter_count(mc)
               << " parameters";
  XI_LOG(INFO) << "engine: memory plan on " << be.info().name << ": weights " << gib(plan.weight_bytes)
               << " GiB, activations/workspaces/context " << gib(plan.other_bytes)
               << " GiB, CUDA graphs (reserve) " << gib(plan.graph_reserve_bytes) << " GiB, KV cache "
               << gib(plan.kv_bytes) << " GiB = " << sc.num_blocks - 1 << " blocks x " << bytes_per_block
               << " bytes = " << plan.kv_tokens << " tokens of " << kv_settings.to_string()
               << (plan_memory ? " (gpu_memory_utilization " + std::to_string(config.gpu_memory_utilization) +
                                     " of " + std::to_string(gib(plan.total_bytes)) + " GiB)"
                               : std::string(" (kv_cache_memory)"))
               << "; KV swap space "
               << (sc.num_swap_blocks > 0
                       ? std::to_string(gib(plan.swap_bytes)) +
                             " GiB of host memory = " + std::to_string(sc.num_swap_blocks) + " blocks" +
                             (tp > 1 ? " per rank" : "")
                       : std::string("none (preempted sequences recompute)"));
  ThreadPool* pool = bundle.sampler_pool;
  if (tp_group) {
    XI_LOG(INFO) << "engine: tensor parallel rank 0: " << shard0.to_string() << "; weights "
                 << gib(model->weight_bytes()) << " GiB on " << be.info().name << ", KV cache "
                 << gib(plan.kv_bytes) << " GiB (" << sc.num_blocks - 1 << " blocks of " << bytes_per_block << " bytes)";
    for (const TensorParallelGroup::RankReport& r : tp_group->follower_reports())
      XI_LOG(INFO) << "engine: tensor parallel rank " << r.rank << ": " << r.shard << "; weights "
                   << gib(r.weight_bytes) << " GiB on " << r.info.name << ", KV cache " << gib(plan.kv_bytes)
                   << " GiB; free after loading " << gib(r.info.free_memory) << " of " << gib(r.info.total_memory)
                   << " GiB";
  }
  std::unique_ptr<Engine> engine(new Engine(std::move(config), std::move(bundle.backend), std::move(bundle.own_pool),
                                            pool, std::move(model), spec, std::move(tp_group)));
  engine->memory_plan_ = plan;
  return engine;
}

Engine::Engine(EngineConfig config, std::unique_ptr<backend::Backend> backend, std::unique_ptr<ThreadPool> own_pool,
               ThreadPool* sampler_pool, std::unique_ptr<model::LlamaModel> model, backend::KvCacheSpec kv_spec,
               std::unique_ptr<TensorParallelGroup> tp)
    : config_(std::move(config)),
      backend_(std::move(backend)),
      own_pool_(std::move(own_pool)),
      tp_(std::move(tp)),
      model_(std::move(model)),
      metrics_(config_.served_model_name, config_.scheduler.max_num_batched_tokens, config_.scheduler.max_num_seqs) {
  const model::ModelConfig& mc = model_->config();
  info_.model_name = config_.served_model_name;
  info_.max_model_len = config_.max_model_len;
  info_.vocab_size = mc.vocab_size;
  info_.eos_token_ids = mc.eos_token_ids;
  info_.max_waiting = config_.max_waiting;
  runner_ = std::make_unique<ModelRunner>(*model_, *backend_, kv_spec,
                                          config_.enable_cuda_graphs ? GraphMode::kOn : GraphMode::kOff);
  if (tp_) {  // the other ranks' KV caches, then every step's plan goes to them first
    tp_->allocate_kv(kv_spec);
    runner_->set_followers(tp_.get());
  }
  if (config_.record_graphs_at_start && config_.enable_cuda_graphs) {
    const auto t0 = std::chrono::steady_clock::now();
    std::unique_ptr<ProgressBar> bar;
    const int made = runner_->record_decode_graphs(
        config_.scheduler.max_num_seqs, config_.scheduler.max_num_seqs, config_.max_model_len,
        [&](int done, int total) {
          if (!bar)
            bar = std::make_unique<ProgressBar>("Recording decode graphs", total, "graphs",
                                                config_.show_progress);
          bar->advance();
          if (done == total) bar->finish();
        });
    XI_LOG(INFO) << "engine: recorded " << made << " decode CUDA graphs at start-up (every row bucket and "
                 << "block-table width a decode step can meet) in "
                 << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() << " s";
  }
  sampler_ = std::make_unique<Sampler>(mc.vocab_size, sampler_pool ? sampler_pool : own_pool_.get(),
                                       mc.eos_token_ids);
  scheduler_ = std::make_unique<sched::Scheduler>(config_.scheduler);
  publish_stats();
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() { stop(); }

Status Engine::submit(GenerationRequest request, OutputCallback on_output) {
  if (!on_output) return invalid_argument("submit: on_output callback is empty");
  if (request.request_id.empty()) return invalid_argument("request_id must not be empty");
  const std::vector<int32_t>& prompt = request.prompt_ids;
  if (prompt.empty()) return invalid_argument("the prompt must contain at least one token");
  for (int32_t id : prompt)
    if (id < 0 || id >= info_.vocab_size)
      return invalid_argument("prompt token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                              std::to_string(info_.vocab_size) + ")");
  XI_RETURN_IF_ERROR(validate(request.sampling, info_.vocab_size));
  if (request.prompt_logprobs && (*request.prompt_logprobs < 0 || *request.prompt_logprobs > kMaxLogprobs))
    return invalid_argument("prompt_logprobs must be in [0, " + std::to_string(kMaxLogprobs) + "], got " +
                            std::to_string(*request.prompt_logprobs));
  const int num_prompt = static_cast<int>(prompt.size());
  const int max_len = info_.max_model_len;
  if (num_prompt >= max_len)
    return out_of_range("prompt has " + std::to_string(num_prompt) + " tokens; max_model_len is " +
                        std::to_string(max_len) + " and must hold the prompt plus at least one generated token");
  const SamplingParams& sp = request.sampling;
  const int max_new = sp.max_tokens ? *sp.max_tokens : max_len - num_prompt;
  if (static_cast<int64_t>(num_prompt) + max_new > max_len)
    return out_of_range("prompt (" + std::to_string(num_prompt) + " tokens) + max_tokens (" +
                        std::to_string(max_new) + ") = " + std::to_string(int64_t{num_prompt} + max_new) +
                        " exceeds max_model_len " + std::to_string(max_len));
  if (sp.min_tokens > max_new)
    return out_of_range("min_tokens " + std::to_string(sp.min_tokens) + " exceeds the " + std::to_string(max_new) +
                        " tokens left after the prompt within max_model_len " + std::to_string(max_len));
  if (request.arrival_time < 0) request.arrival_time = sched::steady_clock_seconds();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!accepting_) return unavailable("the engine is shutting down");
    if (live_.count(request.request_id) != 0)
      return invalid_argument("duplicate request id '" + request.request_id + "' (still in flight)");
    const int waiting = num_waiting_ + taken_submissions_ + static_cast<int>(submissions_.size());
    if (waiting >= info_.max_waiting)
      return resource_exhausted("the request queue is full (" + std::to_string(waiting) + " waiting, max_waiting " +
                                std::to_string(info_.max_waiting) + ")");
    const uint64_t id = next_id_++;
    live_.emplace(request.request_id, id);
    ++num_in_flight_;
    submissions_.push_back(Submission{id, std::move(request), std::move(on_output), max_new});
  }
  work_cv_.notify_one();
  return Status::ok_status();
}

void Engine::abort(const std::string& request_id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(request_id);
    if (it == live_.end()) return;  // unknown or already finished: nothing to do
    aborts_.push_back(it->second);
  }
  work_cv_.notify_one();
}

EngineStats Engine::stats() const {
  EngineStats s;
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    s = stats_;
  }
  std::lock_guard<std::mutex> lock(mu_);
  s.num_waiting += static_cast<int>(submissions_.size());
  return s;
}

void Engine::render_metrics(std::string* out) const { metrics_.render(stats(), out); }

void Engine::drain() {
  std::unique_lock<std::mutex> lock(mu_);
  accepting_ = false;
  idle_cv_.wait(lock, [this] { return num_in_flight_ == 0; });
}

void Engine::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    accepting_ = false;
    stopping_ = true;
  }
  work_cv_.notify_all();
  // From a callback (the loop thread itself) the loop exits after this step; the owner joins.
  if (thread_.joinable() && std::this_thread::get_id() != thread_.get_id()) thread_.join();
}

void Engine::loop() {
  std::vector<Submission> submissions;
  std::vector<uint64_t> aborts;
  const bool async = config_.async_scheduling.value_or(false);
  for (;;) {
    bool stopping = false;
    if (!scheduler_->has_unfinished()) {  // nothing will run: finish what is in flight, deliver, then sleep
      complete_in_flight();
      deliver_pending();
    }
    {
      std::unique_lock<std::mutex> lock(mu_);
      auto has_news = [this] { return stopping_ || !submissions_.empty() || !aborts_.empty(); };
      if (!scheduler_->has_unfinished()) work_cv_.wait(lock, has_news);
      submissions.swap(submissions_);
      taken_submissions_ = static_cast<int>(submissions.size());  // until publish_stats() counts them
      aborts.swap(aborts_);
      stopping = stopping_;
    }
    if (!aborts.empty() || stopping) {
      // An abort's final output follows its last delivered tokens; tokens still queued for a request its
      // client aborted (possibly from the callback of its previous token) are dropped, as they would not
      // have been computed had the abort arrived one step earlier. (A step in flight keeps running: its rows
      // of aborted requests are discarded when it completes.)
      std::erase_if(pending_, [&](const Delivery& d) {
        return !d.final_callback && std::find(aborts.begin(), aborts.end(), d.id) != aborts.end();
      });
      deliver_pending();
    }
    for (Submission& s : submissions) add_request(s);
    if (!submissions.empty()) publish_stats();  // they count as waiting from now on
    submissions.clear();
    for (uint64_t id : aborts) abort_request(id);
    aborts.clear();
    if (stopping) {
      complete_in_flight();  // its finished requests end normally; the device is idle after this
      deliver_pending();
      std::vector<uint64_t> ids;
      ids.reserve(requests_.size());
      for (const auto& [id, st] : requests_) ids.push_back(id);
      std::sort(ids.begin(), ids.end());  // submission order, for predictable callbacks
      for (uint64_t id : ids) abort_request(id);
      publish_stats();
      return;
    }
    const auto step_begin = std::chrono::steady_clock::now();
    sched::ScheduledStep step = scheduler_->schedule();
    if (!step.empty()) runner_->queue_kv_copies(step.swap_out, step.swap_in);
    if (step.metrics.num_preempted > 0) warn_preemptions();
    if (step.empty()) {
      if (in_flight_) {  // nothing to add behind it (e.g. every running sequence finishes with it)
        complete_in_flight();
        continue;
      }
      deliver_pending();
      // Work is queued but nothing can run (should not happen: an empty batch admits the queue head).
      if (scheduler_->has_unfinished()) {
        std::unique_lock<std::mutex> lock(mu_);
        work_cv_.wait_for(lock, std::chrono::milliseconds(1));
      }
      continue;
    }
    double drain_s = 0;  // completing the step in flight (recorded as that step's time)
    if (async) {
      const StepRows rows = prepare_step(step, /*feed=*/true);
      if (config_.device_greedy && rows.plain_argmax && !rows.prompt_rows) {
        launch_pipelined(step, /*sampled=*/false);
        continue;
      }
      // Device draws, once a synchronous step has shown that the backend takes this model's batches.
      if (config_.device_sampling && backend_->supports_sampling() && rows.device_drawable && !rows.prompt_rows &&
          runner_->device_sampling_verified()) {
        launch_pipelined(step, /*sampled=*/true);
        continue;
      }
      // Not pipelinable: finish the step in flight (it resolves this step's placeholders), then run as usual.
      const auto drain_begin = std::chrono::steady_clock::now();
      complete_in_flight();
      drain_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - drain_begin).count();
    }
    const double device_s = run_step(step);  // publishes stats
    const auto end = std::chrono::steady_clock::now();
    const double total_s = std::chrono::duration<double>(end - step_begin).count() - drain_s;
    int64_t tokens = 0;
    for (const sched::ScheduledSeq& q : step.seqs) tokens += q.num_tokens();
    const bool decode_only = std::all_of(step.seqs.begin(), step.seqs.end(),
                                         [](const sched::ScheduledSeq& q) { return q.num_tokens() == 1; });
    // The runner's device time of this step (valid where its ids came back through finish_greedy).
    record_step_time(decode_only, tokens, device_s, total_s - device_s, runner_->take_step_device_time());
    last_completion_ = end;
  }
}

void Engine::add_request(Submission& s) {
  GenerationRequest& g = s.request;
  sched::Request r;
  r.id = s.id;
  r.prompt = g.prompt_ids;
  r.max_new_tokens = s.max_new_tokens;
  r.min_new_tokens = g.sampling.min_tokens;
  r.priority = g.priority;
  r.stop_token_ids = g.sampling.stop_token_ids;
  r.eos_token_ids = info_.eos_token_ids;
  r.ignore_eos = g.sampling.ignore_eos;
  r.arrival_time = g.arrival_time;
  r.prompt_logits = g.prompt_logprobs.has_value();
  r.group = g.group;
  const int num_prompt = static_cast<int>(g.prompt_ids.size());
  if (Status st = scheduler_->add(std::move(r)); !st.ok()) {
    finish_with_error(s, st);
    return;
  }
  RequestState state{std::move(g.request_id), std::move(s.on_output), g.sampling,
                     SequenceRng::for_request(g.sampling, g.rng_stream), num_prompt, 0, std::nullopt, {}};
  state.prompt_top = g.prompt_logprobs;
  if (state.prompt_top) state.prompt_logprobs.resize(static_cast<size_t>(num_prompt - 1));
  requests_.emplace(s.id, std::move(state));
}

void Engine::abort_request(uint64_t id) {
  std::optional<sched::FinishedRequest> f = scheduler_->abort(id);
  if (!f) return;
  ++requests_aborted_;
  publish_stats();
  finish_request(id, *f, nullptr, /*defer=*/false);
}

void Engine::warn_preemptions() {
  const sched::SchedulerStats s = scheduler_->stats();
  if (s.num_preemptions < next_preemption_warning_) return;
  next_preemption_warning_ = s.num_preemptions + kPreemptionWarningInterval;
  XI_LOG(WARN) << "preemption: " << s.num_preemptions << " so far (" << s.num_swap_outs
               << " with their KV swapped to host memory, " << s.num_preempted_tokens
               << " KV tokens dropped to be recomputed): the KV cache (" << s.kv.num_usable_blocks
               << " blocks) is too small for this load; raise gpu_memory_utilization (cuda) or kv_cache_memory (cpu), "
                  "lower max_num_seqs"
               << (s.num_swap_blocks > 0 ? "" : ", or give --swap-space to copy victims' KV instead of recomputing it")
               << " (warned again after " << kPreemptionWarningInterval << " more)";
}

Engine::StepRows Engine::prepare_step(const sched::ScheduledStep& step, bool feed) {
  chunks_.clear();
  sample_inputs_.clear();
  sample_ids_.clear();
  sample_live_.clear();
  chunk_ids_.clear();
  StepRows rows;
  for (const sched::ScheduledSeq& s : step.seqs) {
    auto it = requests_.find(s.seq_id);
    if (it == requests_.end()) {
      // Finished (stop token) or aborted since it was scheduled, while the step before was in flight: its
      // spans may dangle; it is not computed, and its sampled token (if any) is discarded.
      XI_CHECK(!feed) << "a freshly scheduled row of request " << s.seq_id << " is not live";
      if (s.sample) {
        sample_ids_.push_back(s.seq_id);
        sample_live_.push_back(false);
      }
      continue;
    }
    SequenceChunk c{s.token_ids, s.start_pos, s.block_table, s.sample};
    c.all_logits = s.all_logits;
    rows.prompt_rows = rows.prompt_rows || s.all_logits;
    chunk_ids_.push_back(s.seq_id);
    if (feed) {
      c.token_source = s.pending_row;
    } else {
      XI_CHECK(std::find(s.token_ids.begin(), s.token_ids.end(), sched::kPendingToken) == s.token_ids.end())
          << "request " << s.seq_id << ": unresolved placeholder in a synchronous step";
    }
    chunks_.push_back(c);
    if (!s.sample) continue;
    RequestState& st = it->second;
    const sched::Sequence* seq = scheduler_->find(s.seq_id);
    XI_CHECK(seq != nullptr) << "scheduled sequence " << s.seq_id << " is not live";
    // The sampler sees the known outputs plus, for a placeholder row, the placeholder: only its count
    // matters (min_tokens masking, the device draw's random bits) to the rows that run with a placeholder
    // (plain argmax, or device-drawn without penalties).
    const std::span<const int32_t> tokens(seq->tokens);
    sample_inputs_.push_back(SampleInput{nullptr, &st.params, &st.rng,
                                         tokens.first(static_cast<size_t>(st.num_prompt_tokens)),
                                         tokens.subspan(static_cast<size_t>(st.num_prompt_tokens))});
    sample_ids_.push_back(s.seq_id);
    sample_live_.push_back(true);
    const SampleInput& in = sample_inputs_.back();
    rows.plain_argmax = rows.plain_argmax && is_plain_argmax(in);
    rows.device_drawable = rows.device_drawable && device_samplable(in) && !in.params->has_penalties();
  }
  XI_CHECK_EQ(static_cast<int>(sample_ids_.size()), step.num_sampling);
  return rows;
}

void Engine::launch_pipelined(const sched::ScheduledStep& step, bool sampled) {
  InFlightStep next;
  for (const sched::ScheduledSeq& q : step.seqs) next.tokens += q.num_tokens();
  next.decode_only = std::all_of(step.seqs.begin(), step.seqs.end(),
                                 [](const sched::ScheduledSeq& q) { return q.num_tokens() == 1; });
  // Behind the step in flight; placeholder rows read its ids on the device.
  const auto launch_begin = std::chrono::steady_clock::now();
  {
    DebugTimer timer("step launch");
    if (timer.enabled())
      timer.detail() << next.tokens << " tokens, " << step.seqs.size() << " rows"
                     << (next.decode_only ? ", decode only" : "");
    if (sampled) {
      runner_->start_sampled(chunks_, sample_inputs_, sampler_->eos_token_ids());
    } else {
      runner_->start_greedy(chunks_);
    }
  }
  next.launched = std::chrono::steady_clock::now();
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    const double launch = std::chrono::duration<double>(next.launched - launch_begin).count();
    stats_.launch_s += launch;
    (next.decode_only ? stats_.decode_only_launch_s : stats_.mixed_launch_s) += launch;
    ++(next.decode_only ? stats_.decode_only_launches : stats_.mixed_launches);
    if (in_flight_) ++stats_.async_steps;
  }
  next.sample_ids = sample_ids_;
  complete_in_flight();  // delivers older outputs, waits only for the step in flight; `next` stays queued
  in_flight_ = std::move(next);
}

void Engine::complete_in_flight() {
  if (!in_flight_) return;
  InFlightStep f = std::move(*in_flight_);
  in_flight_.reset();
  // Outputs queued by the previous completion go first (a request this step finishes takes its callback
  // into its final delivery), while the device still computes.
  deliver_pending();
  const auto wait_begin = std::chrono::steady_clock::now();
  const std::vector<int32_t>& ids = runner_->finish_greedy();
  const auto done = std::chrono::steady_clock::now();
  const backend::Backend::StepDeviceTime device_time = runner_->take_step_device_time();
  XI_CHECK_EQ(ids.size(), f.sample_ids.size());
  std::vector<SampleOutput> outs(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) outs[i].token = ids[i];
  apply_outputs(f.sample_ids, outs);
  // Device time: the step's period, from the previous step's completion (or its own launch, if later) to its
  // results (the device had this step queued throughout, unless the host fell behind). Host time: what the
  // host spent in that period outside the wait (scheduling and launching the next step, deliveries,
  // update()): overlapped with the device, not added to it.
  const auto start = std::max(f.launched, last_completion_);
  const double period_s = std::chrono::duration<double>(done - start).count();
  const double wait_s = std::chrono::duration<double>(done - wait_begin).count();
  record_step_time(f.decode_only, f.tokens, period_s, std::max(0.0, period_s - wait_s), device_time);
  last_completion_ = std::chrono::steady_clock::now();
}

double Engine::run_step(const sched::ScheduledStep& step) {
  const StepRows rows = prepare_step(step, /*feed=*/false);
  std::vector<SampleOutput> outs;
  const bool any_sample = std::find(sample_live_.begin(), sample_live_.end(), true) != sample_live_.end();
  const bool greedy = config_.device_greedy && rows.plain_argmax && any_sample && !rows.prompt_rows;
  if (!greedy) deliver_pending();  // synchronous paths
  const auto device_begin = std::chrono::steady_clock::now();
  double overlapped_s = 0;  // host time spent delivering the previous step while the device computes
  if (chunks_.empty()) {
    // Every row was discarded (drained after a stop token or an abort): nothing to compute.
  } else if (rows.prompt_rows) {
    outs = run_prompt_rows_step();
  } else if (greedy) {
    // Device-side greedy: only the chosen ids come back (4 bytes per row, not the vocab's logits). The
    // previous step's outputs go to their callbacks while the device computes this one.
    if (!backend_->async_host_copies()) deliver_pending();  // nothing runs behind the host: do not delay
    runner_->start_greedy(chunks_);
    const auto delivery_begin = std::chrono::steady_clock::now();
    deliver_pending();
    overlapped_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - delivery_begin).count();
    const std::vector<int32_t>& ids = runner_->finish_greedy();
    XI_CHECK_EQ(ids.size(), sample_inputs_.size());
    outs.resize(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) outs[i].token = ids[i];
  } else if (config_.device_sampling && backend_->supports_sampling() && !sample_inputs_.empty()) {
    // Device sampling: rows without logprobs are drawn on the backend (ids back); the others' raw logits come
    // back for the host Sampler.
    outs = runner_->run_sampled(chunks_, sample_inputs_, *sampler_);
  } else {
    const std::vector<float>& logits = runner_->run(chunks_);
    const size_t vocab = static_cast<size_t>(info_.vocab_size);
    for (size_t i = 0; i < sample_inputs_.size(); ++i) sample_inputs_[i].logits = logits.data() + i * vocab;
    outs = sampler_->sample(sample_inputs_);
  }
  const double device_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - device_begin).count() - overlapped_s;
  // One output per sampling row: discarded rows get a dummy token that update() ignores.
  std::vector<SampleOutput> all(sample_ids_.size());
  size_t k = 0;
  for (size_t i = 0; i < sample_ids_.size(); ++i)
    if (sample_live_[i]) all[i] = std::move(outs[k++]);
  XI_CHECK_EQ(k, outs.size());
  apply_outputs(sample_ids_, all);
  return device_s;
}

std::vector<SampleOutput> Engine::run_prompt_rows_step() {
  const std::vector<float>& logits = runner_->run(chunks_);
  const std::vector<const float*> rows =
      score_prompt_rows(logits, static_cast<size_t>(info_.vocab_size), chunks_, [&](size_t i) {
        RequestState& st = requests_.at(chunk_ids_[i]);
        const sched::Sequence* seq = scheduler_->find(chunk_ids_[i]);
        XI_CHECK(seq != nullptr && st.prompt_top.has_value()) << "request " << chunk_ids_[i];
        return PromptScoring{seq->tokens, st.num_prompt_tokens, *st.prompt_top, &st.prompt_logprobs};
      });
  XI_CHECK_EQ(rows.size(), sample_inputs_.size());
  for (size_t k = 0; k < rows.size(); ++k) sample_inputs_[k].logits = rows[k];
  return sampler_->sample(sample_inputs_);
}

void Engine::apply_outputs(const std::vector<uint64_t>& sample_ids, const std::vector<SampleOutput>& outs) {
  XI_CHECK_EQ(sample_ids.size(), outs.size());
  // Rows whose request is no longer live (finished by the previous step's update, or aborted) are discarded:
  // the scheduler ignores them too.
  std::vector<bool> live(sample_ids.size());
  int num_live = 0;
  for (size_t i = 0; i < sample_ids.size(); ++i) {
    live[i] = requests_.count(sample_ids[i]) != 0;
    num_live += live[i] ? 1 : 0;
  }
  sched::StepOutput so;
  so.token_ids.reserve(outs.size());
  for (const SampleOutput& o : outs) so.token_ids.push_back(o.token);
  std::vector<sched::FinishedRequest> finished = scheduler_->update(so);
  metrics_.observe_step(scheduler_->last_step_metrics());
  metrics_.observe_generated(num_live);
  generation_tokens_total_ += num_live;

  std::vector<uint64_t> finished_ids;
  finished_ids.reserve(finished.size());
  for (const sched::FinishedRequest& f : finished) finished_ids.push_back(f.id);
  std::sort(finished_ids.begin(), finished_ids.end());
  auto is_finished = [&](uint64_t id) { return std::binary_search(finished_ids.begin(), finished_ids.end(), id); };

  // Bookkeeping first, then stats, then callbacks: a client that saw its final output sees its effect in
  // stats() (blocks freed, counters).
  for (size_t i = 0; i < sample_ids.size(); ++i) {
    if (!live[i]) continue;
    const uint64_t id = sample_ids[i];
    RequestState& st = requests_.at(id);
    if (++st.num_output_tokens != 1) continue;
    prompt_tokens_total_ += st.num_prompt_tokens;
    const sched::RequestMetrics& m = is_finished(id) ? std::find_if(finished.begin(), finished.end(), [&](auto& f) {
                                                          return f.id == id;
                                                        })->metrics
                                                     : scheduler_->find(id)->metrics;
    metrics_.observe_first_token(m.queue_time_s(), m.time_to_first_token_s(), st.num_prompt_tokens);
  }
  requests_finished_ += static_cast<int64_t>(finished.size());
  publish_stats();

  for (size_t i = 0; i < sample_ids.size(); ++i) {
    const uint64_t id = sample_ids[i];
    if (!live[i] || is_finished(id)) continue;  // final output below
    RequestState& st = requests_.at(id);
    const sched::Sequence* seq = scheduler_->find(id);
    XI_CHECK(seq != nullptr);
    RequestOutput out;
    out.request_id = st.request_id;
    append_token(out, outs[i], st.params.logprobs.has_value());
    if (st.num_output_tokens == 1) out.prompt_logprobs = std::move(st.prompt_logprobs);
    out.num_prompt_tokens = st.num_prompt_tokens;
    out.num_output_tokens = st.num_output_tokens;
    out.num_cached_prompt_tokens = seq->metrics.num_cached_prompt_tokens;
    out.timings = timings_of(seq->metrics, false);
    pending_.push_back(Delivery{id, std::move(out), nullptr});
  }
  for (const sched::FinishedRequest& f : finished) {
    size_t row = sample_ids.size();
    for (size_t i = 0; i < sample_ids.size() && row == sample_ids.size(); ++i)
      if (live[i] && sample_ids[i] == f.id) row = i;
    XI_CHECK_LT(row, sample_ids.size()) << "request " << f.id << " finished without a sampled row";
    finish_request(f.id, f, &outs[row], /*defer=*/true);
  }
}

void Engine::record_step_time(bool decode_only, int64_t tokens, double device_s, double host_s,
                              const backend::Backend::StepDeviceTime& t) {
  std::lock_guard<std::mutex> lock(stats_mu_);  // one section: a snapshot never sees a step half counted
  if (t.valid) {
    ++(decode_only ? stats_.decode_only_timed_steps : stats_.mixed_timed_steps);
    (decode_only ? stats_.decode_only_busy_s : stats_.mixed_busy_s) += t.busy_s;
    (decode_only ? stats_.decode_only_copies_s : stats_.mixed_copies_s) += t.copies_s;
    if (t.idle_valid) {
      ++(decode_only ? stats_.decode_only_idle_steps : stats_.mixed_idle_steps);
      (decode_only ? stats_.decode_only_idle_s : stats_.mixed_idle_s) += t.idle_s;
    }
  }
  (decode_only ? stats_.decode_only_steps : stats_.mixed_steps) += 1;
  (decode_only ? stats_.decode_only_tokens : stats_.mixed_tokens) += tokens;
  (decode_only ? stats_.decode_only_device_s : stats_.mixed_device_s) += device_s;
  stats_.host_s += host_s;
  (decode_only ? stats_.decode_only_host_s : stats_.mixed_host_s) += host_s;
}

void Engine::deliver_pending() {
  if (pending_.empty()) return;
  {
    // Outputs queued for a request whose client has asked to abort it (possibly from the callback of its
    // previous output, in an earlier batch) are dropped, as at the top of the loop: with a step in flight
    // two batches may be delivered before the loop sees the abort.
    std::lock_guard<std::mutex> lock(mu_);
    if (!aborts_.empty())
      std::erase_if(pending_, [&](const Delivery& d) {
        return !d.final_callback && std::find(aborts_.begin(), aborts_.end(), d.id) != aborts_.end();
      });
  }
  std::vector<Delivery> batch;
  batch.swap(pending_);  // a callback may not add deliveries, but keep the loop independent of that
  for (Delivery& d : batch) {
    if (d.final_callback) {
      release_id(d.out.request_id);
      d.final_callback(std::move(d.out));
      d.final_callback = nullptr;
      final_delivered();
      continue;
    }
    auto it = requests_.find(d.id);
    XI_CHECK(it != requests_.end()) << "pending output of unknown request " << d.id;
    it->second.on_output(std::move(d.out));
  }
}

void Engine::finish_request(uint64_t id, const sched::FinishedRequest& f, const SampleOutput* last, bool defer) {
  auto it = requests_.find(id);
  XI_CHECK(it != requests_.end()) << "finishing unknown request " << id;
  RequestState st = std::move(it->second);
  requests_.erase(it);
  const FinishReason reason = to_engine_reason(f.reason);
  metrics_.observe_finished(f.metrics, reason);

  RequestOutput out;
  out.request_id = st.request_id;
  if (last != nullptr) append_token(out, *last, st.params.logprobs.has_value());
  if (last != nullptr && st.num_output_tokens == 1) out.prompt_logprobs = std::move(st.prompt_logprobs);
  out.finished = true;
  out.finish_reason = reason;
  out.num_prompt_tokens = st.num_prompt_tokens;
  out.num_output_tokens = static_cast<int>(f.output_token_ids.size());
  XI_CHECK_EQ(out.num_output_tokens, st.num_output_tokens) << "request " << st.request_id;
  out.num_cached_prompt_tokens = f.metrics.num_cached_prompt_tokens;
  out.timings = timings_of(f.metrics, true);
  if (defer) {
    pending_.push_back(Delivery{id, std::move(out), std::move(st.on_output)});
    return;
  }
  release_id(st.request_id);
  st.on_output(std::move(out));
  st.on_output = nullptr;
  final_delivered();
}

void Engine::finish_with_error(Submission& s, const Status& error) {
  XI_LOG(WARN) << "request " << s.request.request_id << " failed: " << error.to_string();
  ++requests_finished_;
  publish_stats();
  metrics_.observe_finished(sched::RequestMetrics{}, FinishReason::kError);
  RequestOutput out;
  out.request_id = s.request.request_id;
  out.finished = true;
  out.finish_reason = FinishReason::kError;
  out.error = error.to_string();
  out.num_prompt_tokens = static_cast<int>(s.request.prompt_ids.size());
  release_id(s.request.request_id);
  s.on_output(std::move(out));
  s.on_output = nullptr;
  final_delivered();
}

void Engine::release_id(const std::string& request_id) {
  std::lock_guard<std::mutex> lock(mu_);
  live_.erase(request_id);
}

void Engine::final_delivered() {
  std::lock_guard<std::mutex> lock(mu_);
  if (--num_in_flight_ == 0) idle_cv_.notify_all();
}

void Engine::publish_stats() {
  const sched::SchedulerStats ss = scheduler_->stats();
  {
    std::lock_guard<std::mutex> lock(mu_);
    num_waiting_ = ss.num_waiting;
    taken_submissions_ = 0;  // added to the scheduler before this publication: num_waiting_ holds them
  }
  std::lock_guard<std::mutex> lock(stats_mu_);
  stats_.num_running = ss.num_running;
  stats_.num_waiting = ss.num_waiting;
  stats_.kv_usage = ss.kv.usage;
  stats_.num_free_blocks = ss.kv.num_free_blocks;
  stats_.num_total_blocks = ss.kv.num_usable_blocks;
  stats_.num_preemptions = ss.num_preemptions;
  stats_.num_preempted_tokens = ss.num_preempted_tokens;
  stats_.num_swap_outs = ss.num_swap_outs;
  stats_.num_swapped_out_tokens = ss.num_swapped_out_tokens;
  stats_.num_swap_ins = ss.num_swap_ins;
  stats_.num_swap_blocks = ss.num_swap_blocks;
  stats_.num_free_swap_blocks = ss.num_free_swap_blocks;
  stats_.prefix_query_tokens = ss.kv.prefix_query_tokens;
  stats_.prefix_hit_tokens = ss.kv.prefix_hit_tokens;
  stats_.prompt_tokens = prompt_tokens_total_;
  stats_.generation_tokens = generation_tokens_total_;
  stats_.num_steps = ss.num_steps;
  stats_.requests_finished = requests_finished_;
  stats_.requests_aborted = requests_aborted_;
  stats_.graph_captures = runner_->graph_captures();
  stats_.graph_replays = runner_->graph_replays();
  stats_.graph_capture_s = runner_->graph_capture_s();
}

}  // namespace xinfer::engine
