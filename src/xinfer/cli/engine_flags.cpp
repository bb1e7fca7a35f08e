#include "xinfer/cli/engine_flags.h"

namespace xinfer::cli {

void EngineFlags::add_to(FlagSet& flags) {
  sched::SchedulerConfig& sc = config.scheduler;
  kv_cache_memory.bytes = config.kv_cache_memory;
  enforce_eager = !config.enable_cuda_graphs;
  host_sampling = !config.device_greedy && !config.device_sampling;
  flags.add("--backend", &backend, "cpu or cuda");
  flags.add("--threads", &config.threads, "CPU threads for the sampler and the CPU backend's ops; 0 = all cores");
  flags.add("--tensor-parallel-size", &config.tensor_parallel_size,
            "split the model over this many ranks (CUDA: one per GPU; CPU: threads sharing the cores and "
            "--kv-cache-memory); must divide the attention heads and the FFN width (e.g. 3 for SmolLM2's 9 "
            "heads)");
  flags.add("--kv-cache-memory", &kv_cache_memory,
            "memory for KV-cache blocks on the CPU backend (host RAM), e.g. 512MiB, 4GiB");
  flags.add("--kv-cache-dtype", &kv_cache_dtype,
            "dtype of the KV cache: auto (the activation dtype: f32 on cpu, bf16 on cuda), bf16, fp16, f32 or "
            "fp8 (alias fp8_e4m3: 1 byte per element, twice the blocks of bf16; cpu and cuda)");
  flags.add("--kv-cache-scale", &config.kv_cache_scale,
            "fp8 KV cache: dequantization scale of K and V in every layer (stored e4m3(x / scale)); 0 = the "
            "checkpoint's self_attn.k_scale / v_scale tensors (per tensor or per KV head) where present, else 1.0");
  flags.add("--kv-cache-rotation", &kv_cache_rotation,
            "fp8 KV cache: auto, hadamard or none. hadamard stores keys (and reads them with queries) rotated by a "
            "Walsh-Hadamard matrix, which leaves every attention score as it is but spreads e4m3's rounding over "
            "all channels (SmolLM2 WikiText-2: about a third less KL from the cache); auto = hadamard where "
            "head_dim is a power of two in [16, 256]");
  flags.add(
      "--swap-space", &config.swap_space_gib,
      "GiB of host memory per GPU (per rank) for the KV blocks of preempted sequences (swap-to-host "
      "preemption): a preempted sequence's KV is copied there and back when it resumes instead of being "
      "recomputed, while the space lasts; allocated (cuda: pinned, ~2.5 GB/s) at start-up; at most 70% of "
      "the host's RAM over all ranks; 0 = preempted sequences recompute. Pays where many long sequences "
      "are preempted (e.g. 16 for offline 128/2048 or 2048/2048 batches of an 8B model on an H200)");
  flags.add("--gpu-memory-utilization", &config.gpu_memory_utilization,
            "CUDA backend: fraction of device memory for weights, activations and KV cache (the KV cache gets "
            "what is left)");
  flags.add("--max-model-len", &config.max_model_len,
            "longest sequence (prompt + output); 0 = serve: the model's limit or what the KV cache holds, "
            "bench: the longest input + output benchmarked");
  flags.add("--block-size", &sc.block_size, "tokens per KV-cache block");
  flags.add("--enforce-eager", &enforce_eager, "no CUDA graphs: every step runs op by op");
  flags.add("--record-graphs-at-start", &config.record_graphs_at_start,
            "CUDA graphs: record every decode graph a step can meet (row buckets up to --max-num-seqs x "
            "block-table "
            "widths up to --max-model-len) at start-up instead of lazily at each new shape's first step; "
            "takes a few "
            "seconds and up to ~2 MiB of device memory per graph");
  flags.add("--host-sampling", &host_sampling,
            "every step copies the logits to the host sampler (off: greedy argmax and, with --device-sampling, "
            "random sampling on the device, ids only)");
  flags.add("--device-sampling", &config.device_sampling,
            "non-greedy requests (temperature, top-k/p, min-p, penalties, logit_bias) are sampled on the device "
            "(rows that want logprobs stay on the host); --no-device-sampling: on the host");
  async_scheduling =
      config.async_scheduling.value_or(backend == "cuda");  // the shown default: the command's backend
  flags.add(
      "--async-scheduling", &async_scheduling,
      "schedule and launch step N+1 while the device computes step N (greedy steps, and device-sampled "
      "ones without penalties or logprobs; the others wait for the step in flight); default: on for cuda, "
      "off for cpu; --no-async-scheduling: off");
  flags_ = &flags;
  flags.add("--gemm-tuning", &config.gemm_tuning,
            "CUDA: time the GEMM candidates (cuBLASLt algorithms, GEMV) of every linear, and the W8A8 FP8 GEMMs' "
            "algorithms at the decode batch sizes, at start-up and keep the fastest; --no-gemm-tuning: cuBLASLt's "
            "heuristic");
  flags.add("--gemm-tuning-cache", &config.gemm_tuning_cache,
            "CUDA: file caching the measured GEMM choices, the bf16 linears' and the W8A8 FP8 GEMMs' at the decode "
            "batch sizes, per GPU model (empty: ~/.cache/xinfer/gemm_tuning.json or $XINFER_GEMM_TUNING_CACHE; "
            "off: none)");
  flags.add("--gemv-pdl", &config.gemv_pdl,
            "CUDA: the small-batch GEMV kernels use programmatic dependent launch (start while the previous "
            "kernel finishes); --no-gemv-pdl: plain launches");
  flags.add("--fused-linears", &config.fused_linears,
            "CUDA: on decode rows the o / down projection adds itself into the residual and the next "
            "projection applies the RMSNorm on its way in (two GEMVs, no norm kernel) where the GEMM tuner "
            "measured that faster (needs tuning: off with --no-gemm-tuning); --no-fused-linears: separate "
            "add + norm kernels");
  flags.add("--fused-rope-attention", &config.fused_rope_attention,
            "CUDA: on decode-only steps RoPE and the KV-cache write run inside the decode attention kernel; "
            "--no-fused-rope-attention: a rope kernel, then attention");
  flags.add("--enable-prefix-caching", &sc.enable_prefix_caching, "reuse KV blocks of identical prompt prefixes");
  flags.add("--max-num-seqs", &sc.max_num_seqs, "most sequences running at once");
  flags.add("--max-num-batched-tokens", &sc.max_num_batched_tokens, "most tokens in one forward pass");
  flags.add("--decode-interval", &sc.decode_interval, "initial steps between admissions of waiting requests");
  flags.add("--reorder-window", &sc.reorder_window, "waiting requests reordered shortest-first (<= 1: FIFO)");
  flags.add("--min-decode-interval", &sc.min_decode_interval,
            "adaptive admission interval: lower bound (steps)");
  flags.add("--max-decode-interval", &sc.max_decode_interval,
            "adaptive admission interval: upper bound (steps)");
  flags.add("--target-queue-time", &sc.target_queue_time_s,
            "seconds the head of the queue may wait before it is admitted at once (and the interval halves)");
  flags.add("--target-step-time", &sc.target_step_time_s,
            "admission steps slower than this (seconds, EWMA) double the admission interval");
  flags.add("--prefill-tokens-per-decode", &sc.prefill_tokens_per_decode,
            "a step's prefill-token budget shrinks by this per decoding sequence (bounds the inter-token "
            "latency tail under load; 0 = off: prefill takes what the decodes leave of the step)");
  flags.add("--min-prefill-budget", &sc.min_prefill_budget,
            "floor of the shrinking prefill-token budget (prefill progresses with every slot decoding)");
}

Status EngineFlags::finish() {
  auto kind = engine::parse_backend_kind(backend);
  if (!kind.ok()) return kind.status();
  if (kv_cache_memory.bytes == 0) return invalid_argument("--kv-cache-memory must be positive");
  config.backend = *kind;
  auto kv_dtype = engine::parse_kv_cache_dtype(kv_cache_dtype);
  if (!kv_dtype.ok()) return kv_dtype.status();
  config.kv_cache_dtype = *kv_dtype;
  auto kv_rotation = engine::parse_kv_cache_rotation(kv_cache_rotation);
  if (!kv_rotation.ok()) return kv_rotation.status();
  config.kv_cache_rotation = *kv_rotation;
  config.kv_cache_memory = static_cast<size_t>(kv_cache_memory.bytes);
  config.enable_cuda_graphs = !enforce_eager;
  config.device_greedy = !host_sampling;
  if (host_sampling) config.device_sampling = false;
  if (flags_ != nullptr && flags_->was_set("--async-scheduling")) config.async_scheduling = async_scheduling;
  return Status();
}

}  // namespace xinfer::cli
