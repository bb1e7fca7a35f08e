// EngineConfig: everything Engine::create() needs: the model, the backend, the KV-cache budget and every
// scheduler tunable (sched::SchedulerConfig, embedded whole so a new knob needs no plumbing here).
// Filled from the command line by `xinfer serve`; to_string() goes to the start-up log.
//
// Derived at create() (not set by the user):
//   scheduler.num_blocks     = kv::num_blocks_for_budget(budget, KvCacheSpec::bytes_per_block()), budget =
//                              kv_cache_memory (CPU) or, on CUDA, gpu_memory_utilization * total device
//                              memory - memory in use after weights and workspaces are allocated
//   scheduler.max_model_len  = max_model_len, or min(max_position_embeddings, KV capacity + 1) when 0
//   scheduler.num_swap_blocks = swap_space_gib / KvCacheSpec::bytes_per_block()
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "xinfer/core/status.h"
#include "xinfer/engine/kv_cache_dtype.h"
#include "xinfer/model/llama.h"
#include "xinfer/scheduler/scheduler_config.h"

namespace xinfer::engine {

enum class BackendKind { kCpu, kCuda };
const char* backend_kind_name(BackendKind k);                   // "cpu", "cuda"
Result<BackendKind> parse_backend_kind(const std::string& s);   // INVALID_ARGUMENT for anything else

// Batch limits for offline throughput (`xinfer bench`'s throughput mode), vLLM's offline defaults (its LLM
// class) by device: 1024 sequences and 16,384 batched tokens on a GPU of at least 70 GiB other than an A100
// (H100, H200, MI300X), else 512 and 8192 (device_memory 0: no GPU). Here rather than in scheduler/, which
// knows no devices.
struct BatchLimits {
  int max_num_seqs = 0;
  int max_num_batched_tokens = 0;
};
inline constexpr BatchLimits kOfflineBatchLimits{512, 8192};
inline constexpr BatchLimits kLargeGpuOfflineBatchLimits{1024, 16384};
inline constexpr size_t kLargeGpuBytes = size_t{70} << 30;
BatchLimits offline_batch_limits(const std::string& device_name, size_t device_memory);

// Swap spaces (EngineConfig::swap_space_gib) may take at most this fraction of the host's RAM over all ranks.
inline constexpr double kMaxSwapSpaceFraction = 0.7;

struct EngineConfig {
  std::string model_dir;                 // Hugging Face directory: config.json + *.safetensors
  std::string served_model_name;         // empty: base name of model_dir
  BackendKind backend = BackendKind::kCpu;
  int threads = 0;                       // CPU threads (backend ops and sampler); 0: all cores
  size_t kv_cache_memory = size_t{1} << 30;  // bytes of KV blocks on the CPU backend (host RAM)
  // CUDA: fraction of device memory the engine may use; KV blocks get what weights and workspaces leave.
  double gpu_memory_utilization = 0.90;
  // Host memory per rank, in GiB, for the KV of preempted sequences (swap-to-host preemption,
  // docs/scheduler.md; `--swap-space`), allocated (CUDA: pinned) at start-up; 0: they recompute.
  double swap_space_gib = 0;
  model::LoadFormat load_format = model::LoadFormat::kAuto;  // kDummy: random weights, model may be a preset
  uint64_t dummy_seed = 0;
  std::optional<quant::WeightFormat> dummy_quantization;  // dummy linears in this format (`--quantization`)
  int max_model_len = 0;                 // prompt + output per sequence; 0: see above
  // dtype of the KV blocks (kv_cache_dtype.h; `--kv-cache-dtype`): auto = the activation dtype.
  KvCacheDtype kv_cache_dtype = KvCacheDtype::kAuto;
  // FP8 KV cache: the dequantization scale of K and V in every layer (`--kv-cache-scale`); 0: the
  // checkpoint's k_scale / v_scale tensors where present, else 1.0 (kv_cache_dtype.h).
  float kv_cache_scale = 0.0f;
  // FP8 KV cache: keys (and queries) stored in a Hadamard-rotated basis (`--kv-cache-rotation`, kv_cache_dtype.h);
  // auto: where head_dim allows it.
  KvRotationChoice kv_cache_rotation = KvRotationChoice::kAuto;
  int max_waiting = 4096;                // queued requests beyond this -> RESOURCE_EXHAUSTED
  bool show_progress = false;            // progress bar while converting weights
  // Decode-only steps run as recorded CUDA graphs per batch bucket (ModelRunner); false: always eager
  // (`--enforce-eager`). No effect on backends that cannot record.
  bool enable_cuda_graphs = true;
  // With graphs: record every decode graph a step can meet (row buckets up to max_num_seqs x block-table
  // widths up to max_model_len) at start-up, as vLLM captures its batch sizes, instead of lazily in the first
  // step of each shape (`--record-graphs-at-start`; ModelRunner::record_decode_graphs). Off by default: not
  // yet measured against the lazy recordings (docs/PERF.md session 29).
  bool record_graphs_at_start = false;
  // A step whose every sampling row is plain greedy (temperature 0; no min_tokens masking pending, logit_bias,
  // penalties or logprobs) takes the argmax on the backend and copies back only the token ids; false: the
  // logits always come to the host Sampler (`--host-sampling`). Same tokens either way.
  bool device_greedy = true;
  // Steps with non-greedy rows (temperature, top-k/p, min-p, penalties, logit_bias) draw their tokens on the
  // backend where it can (Backend::sample_rows; rows that want logprobs stay on the host Sampler); false: the
  // logits come to the host Sampler (`--no-device-sampling`, or `--host-sampling` for every step). The same
  // distribution, not the same random stream.
  bool device_sampling = true;
  // CUDA: measure the GEMM candidates of each linear shape at start-up and keep the fastest
  // (backend/cuda/kernels/gemm/gemm_tuner.h); false: cuBLASLt's heuristic (`--no-gemm-tuning`).
  bool gemm_tuning = true;
  // File caching the measured choices across runs; "": ~/.cache/xinfer/gemm_tuning.json (or
  // $XINFER_GEMM_TUNING_CACHE); "off": no file (`--gemm-tuning-cache`).
  std::string gemm_tuning_cache;
  // CUDA: the GEMV candidates use programmatic dependent launch (`--no-gemv-pdl`: plain launches).
  bool gemv_pdl = true;
  // CUDA: on decode rows, projection -> add + RMSNorm -> projection runs as two fused GEMVs where the GEMM
  // tuner measured that faster (backend/cuda/cuda_backend.h; none without tuning; `--no-fused-linears`: the
  // composition).
  bool fused_linears = true;
  // CUDA: on decode-only steps RoPE, the KV-cache write and attention run as one kernel
  // (backend/cuda/cuda_backend.h; `--no-fused-rope-attention`: the rope kernel, then attention).
  bool fused_rope_attention = true;
  // Asynchronous scheduling (docs/engine.md): the host schedules and launches step N+1 while the device
  // computes step N (placeholder tokens fed from N's device-side ids), then applies N's results. Pipelined:
  // steps of plain-argmax rows (device_greedy) and steps the device samples whole (device_sampling; no
  // penalties, no logprobs; after one synchronous device-sampled step). Other steps (host sampling, logprobs,
  // penalties) first finish the step in flight and run as without it. Same tokens either way. nullopt: on
  // when the backend runs asynchronously (Backend::async_host_copies(): CUDA), off on the CPU (where it would
  // only delay each output by a step); create() resolves it (`--async-scheduling` / `--no-async-scheduling`).
  std::optional<bool> async_scheduling;
  // Tensor parallelism (docs/tensor_parallel.md): the model split over this many ranks, one per GPU on CUDA
  // (threads of this process on the CPU, kv_cache_memory then shared by all ranks). Must divide the attention
  // heads and the FFN width; the kv heads are replicated when fewer. CUDA graphs and asynchronous scheduling
  // work on every rank (each records its own graphs; rank 0 broadcasts the ids a pipelined step feeds)
  // (`--tensor-parallel-size`).
  int tensor_parallel_size = 1;
  // Policy and limits; num_blocks and max_model_len are overwritten by create().
  sched::SchedulerConfig scheduler;

  // Ok or INVALID_ARGUMENT naming the first bad field (scheduler fields other than the derived ones too).
  Status validate() const;
  // One line, every field: "model_dir=... backend=cpu threads=0 kv_cache_memory=1073741824 ... | block_size=16 ..."
  std::string to_string() const;
};

}  // namespace xinfer::engine
