// Backend: the op interface the model graph is written against (model/llama.cpp), implemented once per
// device (backend/cpu, backend/cuda). A backend owns device memory (weights, activations, KV blocks);
// the model owns no device code and has no #ifdef for devices.
//
// Conventions for every op:
//  - TensorViews passed to an op live on this backend's device, are row-major and contiguous.
//  - Activations are in the backend's activation dtype (f32 on CPU, bf16 on CUDA); `T` is the number of
//    tokens in the step (all sequences' new tokens, flattened), `H` hidden size, `D` head dim.
//  - Ops are asynchronous on devices that are (CUDA stream order); to_host() synchronizes.
//  - Step metadata (positions, slot mapping, block tables) is planned on the host once per step and
//    uploaded with upload_step(); ops then read it from device memory, which keeps the forward
//    capturable as a CUDA graph.
//
// KV cache layout (paged): per layer, K and V each [num_blocks, num_kv_heads, block_size, D]. A token at
// position p of a sequence lives in block block_table[p / block_size], row p % block_size; its flat slot
// is block_id * block_size + p % block_size. Block 0 may be the null block (never written by live
// sequences).
// The blocks hold the activation dtype, or FP8 E4M3 (--kv-cache-dtype fp8, where supports_kv_cache_dtype()):
// rope_kv_write stores e4m3(x / scale) (round to nearest even, saturated to +-448) and attention reads
// e4m3 * scale, with one scale per layer for K and one for V (LayerKvCache::k_scale / v_scale), or one per
// layer and KV head (k_head_scales / v_head_scales). With LayerKvCache::k_rotation (kv_rotation.h),
// rope_kv_write also rotates every q and k head after RoPE (q . k unchanged) and the cache holds rotated
// keys.
//
// Swap space (swap-to-host preemption, docs/scheduler.md): with KvCacheSpec::num_swap_blocks > 0 the cache
// also owns host memory for that many blocks (KvCache::swap); swap block b holds, at b * bytes_per_block(),
// one cache block's K then V rows of layer 0, then of layer 1, and so on. copy_kv_blocks() moves whole blocks
// between the two in stream order.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "xinfer/backend/counter_rng.h"
#include "xinfer/backend/kv_rotation.h"
#include "xinfer/core/status.h"
#include "xinfer/core/tensor.h"
#include "xinfer/kv_cache/swap_space.h"
#include "xinfer/quant/weight_format.h"

namespace xinfer::backend {

// Device memory owned by a backend; freed on destruction.
class DeviceBuffer {
 public:
  virtual ~DeviceBuffer() = default;
  virtual void* data() const = 0;
  virtual size_t bytes() const = 0;
};

// A tensor together with the buffer that owns it.
struct DeviceTensor {
  std::shared_ptr<DeviceBuffer> buffer;
  TensorView view;
};

// A linear layer's parameters: y[T, N] = x[T, K] @ W[N, K]^T (+ bias[N]), W stored in `format`
// (quant/weight_format.h): dense weight [N, K] in a float dtype, or a packed weight with its side tensors
// (GGUF: u8 [N, row_bytes(K)] raw blocks). The packed weight's shape[1] is not K: `k` holds it (0 means
// weight.shape[1], the dense case). Backends run only formats they supports(); the loader converts the rest.
struct LinearWeights {
  TensorView weight;  // [N, K] dense, or the format's packed layout
  TensorView bias;    // [N] or empty
  quant::WeightFormat format = quant::DenseFormat{};
  TensorView scales{}, zeros{}, mins{}, g_idx{}, input_scale{};  // as the format says, or empty
  // i32 [K] or empty: the packed weight's columns are stored in this order of the input's (GPTQ act order
  // sorted at load, model/checkpoint_linear.h sort_act_order): y = x[:, input_perm] @ W_stored^T. Backends
  // gather x so.
  TensorView input_perm{};
  int64_t k = 0;  // in_features when set (packed formats); 0: weight.shape[1]
  // Row blocks of one concatenated weight stored in different formats (a GGUF qkv whose v is Q6_K beside q
  // and k in Q4_K, as in llama.cpp's Q4_K_M): out's columns are the segments' outputs side by side, in order,
  // each segment a whole linear of its own (its bias included). When set, the fields above are unused and
  // empty; such a weight is not dense(). Backends run it as one linear (linear(); the fused chains take the
  // composition).
  std::vector<LinearWeights> segments{};
  bool segmented() const { return !segments.empty(); }
  int64_t out_features() const {
    if (segments.empty()) return weight.shape[0];
    int64_t n = 0;
    for (const LinearWeights& s : segments) n += s.out_features();
    return n;
  }
  int64_t in_features() const {
    if (!segments.empty()) return segments[0].in_features();
    return k > 0 ? k : weight.shape[1];
  }
  bool dense() const { return segments.empty() && std::holds_alternative<quant::DenseFormat>(format); }
};

// The arguments of Backend::add_rms_norm_linear: the chain between two halves of a decoder layer, from the
// projection that ends one (optional) through the norm to the projection (and SwiGLU) that opens the next.
// residual, out and act_out are the results; delta (when the op makes it) and normed_out are scratch that
// a device may fuse away (their contents are then unspecified). Outputs overlap neither each other nor
// the inputs.
struct NormLinearArgs {
  TensorView residual;     // [T, H], += delta in place
  TensorView delta;        // [T, H], or empty: plain rms_norm (residual unchanged)
  TensorView norm_weight;  // [H]
  float eps = 0;
  LinearWeights linear;    // weight [N, H], bias [N] or empty
  TensorView normed_out;   // [T, H]: rms_norm(residual) * norm_weight
  TensorView out;          // [T, N]: normed_out @ linear.weight^T + linear.bias
  TensorView act_out;      // [T, N / 2]: silu(out[:, :N/2]) * out[:, N/2:], or empty (no SwiGLU)
  // Optional first step: delta = delta_x @ delta_linear.weight^T (+ bias) (the o or down projection; delta
  // is then required, as scratch). With delta_x empty, delta is an input.
  TensorView delta_x;          // [T, K]
  LinearWeights delta_linear;  // weight [H, K], bias [H] or empty
  // Optional hint: the linear the caller runs on act_out next (the down projection), before any other op
  // writes act_out. A device may prepare that input for it here (CUDA: a W8A8 linear's quantized codes, made
  // by the SwiGLU kernel); the results are the same without it.
  const LinearWeights* act_linear = nullptr;
  // The caller reads act_out only through act_linear (the next linear() on it, with that weight): a device that
  // prepared that input may leave act_out itself unwritten (CUDA: the W8A8 SwiGLU writes the codes alone).
  bool act_out_unread = false;
};

struct KvCacheSpec {
  int num_layers = 0;
  int num_blocks = 0;
  int block_size = 16;
  int num_kv_heads = 0;
  int head_dim = 0;
  DType dtype = DType::kF32;
  // FP8 caches: dequantization scales (x = e4m3 * scale) of every layer's KV heads in the whole model,
  // [num_layers, total_kv_heads] each (row-major), or empty (1.0). This cache holds the heads
  // [kv_head_begin, kv_head_begin + num_kv_heads) (a tensor-parallel rank's; total_kv_heads 0: num_kv_heads).
  std::vector<float> k_scales = {}, v_scales = {};
  int total_kv_heads = 0;
  int kv_head_begin = 0;
  KvRotation k_rotation = KvRotation::kNone;  // keys (and q) stored rotated (kv_rotation.h)
  int num_swap_blocks = 0;  // host swap space, in blocks (see the top of this file); 0: none
  int scale_heads() const { return total_kv_heads > 0 ? total_kv_heads : num_kv_heads; }
  size_t bytes_per_block() const {  // K and V of one block across all layers
    return 2 * static_cast<size_t>(num_layers) * dtype_bytes(dtype, static_cast<size_t>(num_kv_heads) *
                                                                         block_size * head_dim);
  }
};

// One layer's cache: k, v: [num_blocks, num_kv_heads, block_size, D]. In an FP8 (e4m3) cache an element of
// KV head h stands for e4m3 * k_scale (K) or e4m3 * v_scale (V), or, where the layer's heads have scales of
// their own, e4m3 * k_head_scales[h] / v_head_scales[h] ([num_kv_heads] f32 on the backend's device; k_scale /
// v_scale are then unused); the scales are unused for other dtypes. k_rotation: rope_kv_write rotates q and k
// after RoPE (kv_rotation.h), so the cache holds rotated keys and attention reads them with rotated queries.
struct LayerKvCache {
  TensorView k;
  TensorView v;
  float k_scale = 1.0f;
  float v_scale = 1.0f;
  TensorView k_head_scales{}, v_head_scales{};
  KvRotation k_rotation = KvRotation::kNone;
  bool fp8() const { return k.dtype == DType::kFP8E4M3; }
  bool per_head_scales() const { return !k_head_scales.empty(); }
  // Host backends (the scales in host memory): the scales of KV head h.
  float host_k_scale(int h) const { return per_head_scales() ? k_head_scales.as<float>()[h] : k_scale; }
  float host_v_scale(int h) const { return per_head_scales() ? v_head_scales.as<float>()[h] : v_scale; }
};

// The whole KV cache: per-layer views plus the buffers that own them, and the swap space (host memory).
struct KvCache {
  std::vector<LayerKvCache> layers;
  std::vector<std::shared_ptr<DeviceBuffer>> buffers;
  std::shared_ptr<DeviceBuffer> swap;  // [num_swap_blocks * swap_block_bytes] host bytes, or null
  size_t swap_block_bytes = 0;         // KvCacheSpec::bytes_per_block()
  int num_swap_blocks() const { return swap ? static_cast<int>(swap->bytes() / swap_block_bytes) : 0; }
};

// Whole-block copies between a KV cache and its swap space: cache block `from` -> swap block `to` (to_host),
// or swap block `from` -> cache block `to`. No two copies of a batch write the same block.
struct KvCopyBatch {
  bool to_host = true;
  std::vector<kv::BlockCopy> copies;
};

// Host memory that stays valid while referenced (a host-memory backend's buffers, and swap spaces by
// default).
class HostMemoryBuffer final : public DeviceBuffer {
 public:
  explicit HostMemoryBuffer(size_t bytes) : data_(new std::byte[bytes]), bytes_(bytes) {}
  void* data() const override { return data_.get(); }
  size_t bytes() const override { return bytes_; }

 private:
  std::unique_ptr<std::byte[]> data_;
  size_t bytes_;
};

// Host-planned description of one forward step (one entry per sequence in the batch).
struct StepPlan {
  std::vector<int32_t> token_ids;        // [T]
  std::vector<int32_t> positions;        // [T]
  std::vector<int32_t> slot_mapping;     // [T] flat KV slot for each new token; -1: no KV write (padding)
  std::vector<int32_t> query_start_loc;  // [num_seqs + 1] offsets of each sequence's tokens in [0, T]
  std::vector<int32_t> seq_lens;         // [num_seqs] context length after this step (cached + new)
  std::vector<int32_t> block_tables;     // [num_seqs, max_blocks_per_seq], padded with 0
  int max_blocks_per_seq = 0;
  int max_seq_len = 0;
  std::vector<int32_t> logit_rows;       // token rows whose logits are wanted (e.g. last of each sequence)
  // [T] or empty. Asynchronous scheduling: token t whose source r >= 0 is not known on the host
  // (token_ids[t] is a placeholder); Backend::feed_tokens() sets it to row r of a device ids tensor (the
  // previous step's sampled ids) before the forward reads it. -1: keep token_ids[t].
  std::vector<int32_t> token_sources;
  // > 0: size attention launches (split-KV partitions, grid) for contexts up to this many tokens instead of
  // the longest one in the step, so that every step of one graph key has the same launch shapes.
  int padded_context_len = 0;
  // Swap-to-host preemption: KV block copies to run, in order, before this step's forward (and before its
  // metadata upload); ModelRunner and the tensor-parallel followers run them on their own cache.
  std::vector<KvCopyBatch> kv_copies;
  int num_seqs() const { return static_cast<int>(seq_lens.size()); }
  int num_tokens() const { return static_cast<int>(token_ids.size()); }
};

// The device-side copy of a StepPlan (pointers into device memory), valid until the next upload_step().
struct StepMeta {
  int num_tokens = 0;
  int num_seqs = 0;
  int max_blocks_per_seq = 0;
  int max_seq_len = 0;
  int num_logit_rows = 0;
  const int32_t* token_ids = nullptr;        // [T]
  const int32_t* positions = nullptr;        // [T]
  const int32_t* slot_mapping = nullptr;     // [T]
  const int32_t* query_start_loc = nullptr;  // [num_seqs + 1]
  const int32_t* seq_lens = nullptr;         // [num_seqs]
  const int32_t* block_tables = nullptr;     // [num_seqs, max_blocks_per_seq]
  const int32_t* logit_rows = nullptr;       // [num_logit_rows]
  const int32_t* token_sources = nullptr;    // [num_tokens], or nullptr when the plan has none
};

// The vocabulary rows an embedding table holds: token ids [begin, begin + table rows) of a vocabulary of
// `vocab` ids. The default ({0, 0}) is a whole table. Tensor parallelism gives each rank one contiguous
// range (model/shard.h, vocabulary-parallel embedding).
struct VocabRows {
  int64_t begin = 0;
  int64_t vocab = 0;  // ids are checked against it; 0: the table's own rows
};

// Ceilings measured on the device itself (benchmarks divide achieved figures by these).
struct DeviceCeilings {
  double copy_gbs = 0;          // device-to-device copy, bytes read + written per second / 1e9
  double bf16_gemm_tflops = 0;  // bf16 GEMM 8192^3 on random data
};

// ---- device sampling (Backend::sample_rows) ----
// One row to sample, with the host Sampler's parameters already resolved by the engine
// (engine/device_sampling.h); the definitions and their order are engine/sampler.h's.
struct SamplingRow {
  int32_t logit_row = 0;          // row of `logits` to sample from
  bool greedy = true;             // argmax (ties -> lowest id); the fields below are then unused
  float temperature = 1.0f;       // > 0
  float inv_temperature = 1.0f;   // 1.0f / temperature, as the host computes it
  int32_t top_k = 0;              // 0: off; else 1 <= top_k < vocab
  float top_p = 1.0f;             // (0, 1]; 1: off
  float min_p = 0.0f;             // [0, 1]; 0: off
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  uint64_t random_bits = 0;       // seeds this row's draw: a pure function of (sequence seed, output index)
};
// What happens to one token's logit of one row before sampling, in the host Sampler's order:
// masked -> -inf; else + bias (if has_bias), then the repetition penalty (if repeated: a positive logit is
// divided by it, a negative one multiplied), then - (presence + frequency * count) if count > 0.
struct LogitAdjustment {
  int32_t row = 0;                // index into SamplingBatch::rows
  int32_t token = 0;
  float bias = 0.0f;
  int32_t count = 0;              // occurrences among the sequence's output tokens
  bool has_bias = false;
  bool repeated = false;          // in the prompt or the output (repetition penalty)
  bool masked = false;            // min_tokens not reached: EOS / stop ids
};
struct SamplingBatch {
  std::vector<SamplingRow> rows;
  std::vector<LogitAdjustment> adjustments;  // at most one per (row, token); rows with any have distinct logit_rows
  void clear() {
    rows.clear();
    adjustments.clear();
  }
};

struct BackendInfo {
  std::string name;        // "cpu" / "cuda:0 NVIDIA H200"
  DType activation_dtype;  // dtype of activations and (by default) weights
  size_t total_memory;     // bytes of device memory (host RAM for cpu)
  size_t free_memory;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual BackendInfo info() const = 0;
  // Whether linear() (and embedding_weights() for a table) runs weights stored in `f` as they are. Dense only
  // by default; the loader dequantizes other formats once at load for a backend that says no.
  virtual bool supports(const quant::WeightFormat& f) const {
    return std::holds_alternative<quant::DenseFormat>(f);
  }
  // Whether linear() runs an [n, k] weight in `f` as it is at every number of rows: supports(f) unless the
  // backend's kernels also constrain the shape (CUDA: the W8A8 GEMMs). The loader dequantizes a weight this
  // refuses once at load, with one log line naming the layer, format and shape, so no request fails on it.
  virtual bool supports_linear(const quant::WeightFormat& f, int64_t n, int64_t k) const {
    (void)n;
    (void)k;
    return supports(f);
  }
  // Whether the GGUF loader repacks linears of GGUF `type` into the int format model/gguf_repack.h gives the
  // type (where there is one and supports() takes it) instead of keeping the blocks: by default where
  // linear() has no kernel for the blocks.
  virtual bool prefers_repacked_gguf(quant::GgufType type) const {
    return !supports(quant::GgufFormat{type});
  }

  // ---- memory ----
  virtual DeviceTensor allocate(DType dtype, const Shape& shape) = 0;
  // Converts a host tensor (any float dtype) to `dtype` and copies it to the device.
  virtual DeviceTensor upload(const TensorView& host, DType dtype) = 0;
  // Copies a device tensor to host memory (f32), synchronizing first.
  virtual void to_host_f32(const TensorView& src, float* dst) = 0;
  // Copies a device tensor's bytes to host memory unconverted (any dtype; dst holds src.bytes()),
  // synchronizing first.
  virtual void to_host_raw(const TensorView& src, void* dst) = 0;
  // Starts copying src's bytes to dst (host memory) behind the work queued so far and returns at once; dst
  // holds them after wait_host_copies(). Lets the host do other work while the device computes (the engine
  // delivers the previous step's outputs meanwhile). Default: to_host_raw(), already complete.
  virtual void to_host_raw_async(const TensorView& src, void* dst) { to_host_raw(src, dst); }
  // Waits for the device work queued so far and completes every to_host_raw_async() copy.
  virtual void wait_host_copies() {}
  // True when ops run asynchronously, so host work between an op and wait_host_copies() overlaps the device
  // (false on the CPU backend: its ops finish before they return, and deferring host work only delays it).
  virtual bool async_host_copies() const { return false; }
  // Groups the to_host_raw_async() copies started since the previous fence; returns the group's id. With
  // wait_host_copies(fence) a caller can take one step's results while the next step's work and copies stay
  // queued (asynchronous scheduling). Default (copies complete at once): 0.
  virtual uint64_t fence_host_copies() { return 0; }
  // Waits for the device work queued before `fence` and completes the copies of every group <= fence; later
  // copies stay in flight (their staging memory is not reused until they complete).
  virtual void wait_host_copies(uint64_t fence) {
    (void)fence;
    wait_host_copies();
  }
  // Device time of a step, measured on the device's own queue (CUDA events): mark_step_begin() before the
  // step's first queued work (KV block copies, the plan upload), fence_host_copies() ends it, and once that
  // fence has been waited for, step_device_time(fence) gives the step's busy time (begin mark to fence), the
  // part of it before the plan upload (the KV block copies, e.g. swap-to-host preemption), and, when the
  // previous marked step was the one read before (idle_valid), the device's idle time between the two (the
  // host had not queued this one yet). Busy counts from the mark's place in the queue: where the device was
  // idle when the host marked the step, host time spent inside the step (launching it, recording a graph)
  // counts as busy. A step never fenced, or a fence read twice, gives valid = false; so does the default (the
  // CPU backend: ops finish as they are called).
  struct StepDeviceTime {
    bool valid = false, idle_valid = false;
    double busy_s = 0, copies_s = 0, idle_s = 0;
  };
  virtual void mark_step_begin() {}
  // Sizes the step-plan buffers for plans of up to `bytes` (upload_step's packed arrays) now, so that no
  // later upload_step() moves them (moving drops the recorded graphs). Default: nothing to size.
  virtual void reserve_step_upload(size_t bytes) { (void)bytes; }
  virtual StepDeviceTime step_device_time(uint64_t fence) {
    (void)fence;
    return {};
  }
  // Copies the plan's arrays to device memory; returns views of them.
  virtual StepMeta upload_step(const StepPlan& plan) = 0;
  // Whether rope_kv_write and the attention ops read and write a KV cache of dtype `d`: the activation
  // dtype everywhere; backends that implement the FP8 cache add kFP8E4M3.
  virtual bool supports_kv_cache_dtype(DType d) const { return d == info().activation_dtype; }
  // K and V for every layer, each [num_blocks, num_kv_heads, block_size, D] in spec.dtype (the activation
  // dtype, or one supports_kv_cache_dtype() accepts), with spec's scales of this cache's heads (one per layer
  // where they are all equal, else uploaded per head) and its key rotation.
  KvCache allocate_kv_cache(const KvCacheSpec& spec) {
    XI_CHECK(supports_kv_cache_dtype(spec.dtype))
        << info().name << ": no KV cache in " << dtype_name(spec.dtype) << " (its attention reads "
        << dtype_name(info().activation_dtype) << ")";
    const size_t heads = static_cast<size_t>(spec.scale_heads());
    XI_CHECK(spec.k_scales.empty() || spec.k_scales.size() == static_cast<size_t>(spec.num_layers) * heads);
    XI_CHECK(spec.v_scales.size() == spec.k_scales.size());
    XI_CHECK(spec.k_scales.empty() ||
             (spec.kv_head_begin >= 0 && spec.kv_head_begin + spec.num_kv_heads <= spec.scale_heads()))
        << "KV heads [" << spec.kv_head_begin << ", +" << spec.num_kv_heads << ") of " << spec.scale_heads();
    XI_CHECK(spec.k_rotation == KvRotation::kNone || kv_rotation_supported(spec.head_dim))
        << "no key rotation for head_dim " << spec.head_dim;
    KvCache cache;
    const Shape shape{spec.num_blocks, spec.num_kv_heads, spec.block_size, spec.head_dim};
    for (int l = 0; l < spec.num_layers; ++l) {
      DeviceTensor k = allocate(spec.dtype, shape);
      DeviceTensor v = allocate(spec.dtype, shape);
      LayerKvCache layer{k.view, v.view};
      layer.k_rotation = spec.k_rotation;
      if (!spec.k_scales.empty()) {
        const size_t first = static_cast<size_t>(l) * heads + static_cast<size_t>(spec.kv_head_begin);
        const std::vector<float> ks(spec.k_scales.begin() + static_cast<std::ptrdiff_t>(first),
                                    spec.k_scales.begin() + static_cast<std::ptrdiff_t>(first) + spec.num_kv_heads);
        const std::vector<float> vs(spec.v_scales.begin() + static_cast<std::ptrdiff_t>(first),
                                    spec.v_scales.begin() + static_cast<std::ptrdiff_t>(first) + spec.num_kv_heads);
        auto uniform = [](const std::vector<float>& x) { return std::all_of(x.begin(), x.end(), [&](float a) { return a == x[0]; }); };
        if (uniform(ks) && uniform(vs)) {
          layer.k_scale = ks[0];
          layer.v_scale = vs[0];
        } else {
          const Shape hs{spec.num_kv_heads};
          DeviceTensor kd = upload(TensorView{const_cast<float*>(ks.data()), DType::kF32, hs}, DType::kF32);
          DeviceTensor vd = upload(TensorView{const_cast<float*>(vs.data()), DType::kF32, hs}, DType::kF32);
          layer.k_head_scales = kd.view;
          layer.v_head_scales = vd.view;
          cache.buffers.push_back(std::move(kd.buffer));
          cache.buffers.push_back(std::move(vd.buffer));
        }
      }
      cache.layers.push_back(layer);
      cache.buffers.push_back(std::move(k.buffer));
      cache.buffers.push_back(std::move(v.buffer));
    }
    if (spec.num_swap_blocks > 0) {
      cache.swap_block_bytes = spec.bytes_per_block();
      cache.swap = allocate_swap_memory(static_cast<size_t>(spec.num_swap_blocks) * cache.swap_block_bytes);
    }
    return cache;
  }
  // Host memory for a KV swap space, in memory this backend's copy_kv_blocks() reaches (CUDA: pinned and
  // mapped). Aborts with the size when the host cannot give it. Default: plain host memory.
  virtual std::shared_ptr<DeviceBuffer> allocate_swap_memory(size_t bytes) {
    return std::make_shared<HostMemoryBuffer>(bytes);
  }
  // Queues the copies of `batch` in stream order (after the ops before, before the ops after). Default: for
  // backends whose cache lives in host memory and whose ops have completed on return.
  virtual void copy_kv_blocks(const KvCache& cache, const KvCopyBatch& batch) {
    XI_CHECK(cache.swap != nullptr) << "KV block copies without a swap space";
    auto* swap = static_cast<std::byte*>(cache.swap->data());
    const int swap_blocks = cache.num_swap_blocks();
    for (const kv::BlockCopy& c : batch.copies) {
      const int32_t cache_block = batch.to_host ? c.from : c.to, swap_block = batch.to_host ? c.to : c.from;
      XI_CHECK(swap_block >= 0 && swap_block < swap_blocks)
          << "swap block " << swap_block << " of " << swap_blocks;
      std::byte* host = swap + static_cast<size_t>(swap_block) * cache.swap_block_bytes;
      for (const LayerKvCache& layer : cache.layers) {
        for (const TensorView* t : {&layer.k, &layer.v}) {
          XI_CHECK(cache_block >= 0 && cache_block < t->shape[0]) << "cache block " << cache_block;
          const size_t chunk = t->bytes() / static_cast<size_t>(t->shape[0]);
          std::byte* dev = static_cast<std::byte*>(t->data) + static_cast<size_t>(cache_block) * chunk;
          if (batch.to_host)
            std::memcpy(host, dev, chunk);
          else
            std::memcpy(dev, host, chunk);
          host += chunk;
        }
      }
    }
  }
  // A new tensor of N(0, stddev^2) values, element i = counter_normal(seed, i, stddev) rounded to
  // `dtype` (the same values on every backend). Default: generated on the host and uploaded; devices
  // override it to generate in place (dummy weights of 8B+ models).
  virtual DeviceTensor random_normal(DType dtype, const Shape& shape, uint64_t seed, float stddev) {
    HostTensor host(DType::kF32, shape);
    float* p = host.data<float>();
    for (int64_t i = 0; i < shape.numel(); ++i) p[i] = counter_normal(seed, static_cast<uint64_t>(i), stddev);
    return upload(host.view(), dtype);
  }
  // Blocks until all queued work is done (no-op on synchronous backends).
  virtual void synchronize() {}
  // Measures copy bandwidth and GEMM peak (seconds of device time); UNIMPLEMENTED where not supported.
  virtual Result<DeviceCeilings> measure_ceilings() { return unimplemented("no ceiling measurement on " + info().name); }

  // ---- graphs: record the device work of one forward once, replay it on later steps ----
  // A backend that cannot record returns false from supports_graphs() and never gets the calls below.
  // Between begin_capture() and end_capture() ops are recorded, not run: they must not synchronize,
  // allocate or read results. A recording reads step metadata through the pointers of the upload_step()
  // it was made after, so replay(key) runs it against the last upload_step() only if that step has the same
  // layout and launch shapes (array sizes, block-table width, attention plan sizes) and the backend's
  // buffers were not reallocated since; otherwise it drops the recording and returns false.
  virtual bool supports_graphs() const { return false; }
  virtual void begin_capture() { XI_CHECK(false) << info().name << " cannot record graphs"; }
  // Stores the recording under `key` (replacing an older one); false if recording failed (nothing stored;
  // the work was not run: run it eagerly).
  virtual bool end_capture(uint64_t key) {
    (void)key;
    return false;
  }
  // Runs the recording `key` on the device (asynchronously); false if there is none that fits.
  virtual bool replay(uint64_t key) {
    (void)key;
    return false;
  }
  virtual int num_graphs() const { return 0; }
  // Drops every recording (their owners record again on their next step).
  virtual void clear_graphs() {}

  // ---- ops ----
  // Asynchronous scheduling: step.token_ids[t] = ids[token_sources[t]] for every t whose source is >= 0
  // (plan.token_sources). ids: [R] i32 on this device, e.g. the previous step's argmax_rows output. Call it
  // after upload_step() and before the forward (outside graph recordings: a replay reads the fed ids); in
  // stream order, so ids may still be being computed. No-op when the plan has no token_sources.
  virtual void feed_tokens(const StepMeta& step, const TensorView& ids) {
    (void)ids;
    XI_CHECK(step.token_sources == nullptr) << info().name << " cannot feed device tokens";
  }
  // out[T, H] = table[ids[t] - rows.begin, :] for ids in the table's rows, -0.0 for every other id
  // table: [V_r, H] (rows.begin = 0, V_r = V: the whole table, every id in it). A vocabulary shard's lookup:
  // summed over the ranks (all_reduce_sum), each element has one term that is not -0.0, and x + -0.0 == x
  // for every x (also +-0), so the sum is the unsharded lookup bit for bit in any order.
  virtual void embedding(const StepMeta& step, const TensorView& table, const TensorView& out,
                         const VocabRows& rows = {}) = 0;
  // The same from a table in any supported format (a quantized table: the looked-up rows dequantized).
  // Default: dense tables only.
  virtual void embedding_weights(const StepMeta& step, const LinearWeights& table, const TensorView& out,
                                 const VocabRows& rows = {}) {
    XI_CHECK(table.dense()) << info().name << ": embedding table in " << quant::format_name(table.format)
                            << " is not supported";
    embedding(step, table.weight, out, rows);
  }
  // out[R, W] = x / rms(x) * weight        x: [R, W], weight: [W]; R may be T or T*heads (q/k norm)
  virtual void rms_norm(const TensorView& x, const TensorView& weight, float eps, const TensorView& out) = 0;
  // residual[T, H] += delta[T, H]; out[T, H] = rms_norm(residual) * weight   (fused add + norm)
  virtual void add_rms_norm(const TensorView& residual, const TensorView& delta, const TensorView& weight,
                            float eps, const TensorView& out) = 0;
  // out[T, N] = x[T, K] @ w.weight[N, K]^T + w.bias
  virtual void linear(const TensorView& x, const LinearWeights& w, const TensorView& out) = 0;
  // (linear ->) (add_)rms_norm -> linear (-> silu_mul) as one op (NormLinearArgs); the results are those of
  // the composition below, which is the default, up to rounding: devices override it to fuse the chain
  // where that pays (CUDA: decode rows) and say how their results may differ.
  virtual void add_rms_norm_linear(const NormLinearArgs& a) {
    if (!a.delta_x.empty()) {
      XI_CHECK(!a.delta.empty()) << "add_rms_norm_linear: delta_x needs delta";
      linear(a.delta_x, a.delta_linear, a.delta);
    }
    if (a.delta.empty())
      rms_norm(a.residual, a.norm_weight, a.eps, a.normed_out);
    else
      add_rms_norm(a.residual, a.delta, a.norm_weight, a.eps, a.normed_out);
    linear(a.normed_out, a.linear, a.out);
    if (!a.act_out.empty()) silu_mul(a.out, a.act_out);
  }
  // Applies rotary embedding (rotate-half / NeoX layout) to q and k in place and writes k, v to the cache.
  // qkv: [T, (Hq + 2 * Hkv) * D] (q heads, then k heads, then v heads); cos_sin: [max_pos, D] with
  // cos in [:, :D/2] and sin in [:, D/2:].
  virtual void rope_kv_write(const StepMeta& step, const TensorView& qkv, int num_heads, int num_kv_heads,
                             int head_dim, const TensorView& cos_sin, const LayerKvCache& cache) = 0;
  // Causal paged attention over each sequence's cached context (prefill chunks and decodes alike):
  // token t of sequence s at position p attends to positions [0, p] of s.
  // qkv: [T, (Hq + 2 * Hkv) * D] (only the q part is read); out: [T, Hq * D]
  virtual void paged_attention(const StepMeta& step, const TensorView& qkv, int num_heads, int num_kv_heads,
                               int head_dim, float scale, const LayerKvCache& cache, const TensorView& out) = 0;
  // rope_kv_write -> paged_attention as one op (the composition below is the default). `cache` and `out` are
  // exactly those of the composition; afterwards the q and k parts of qkv are unspecified (a fused
  // implementation need not rotate them in place), v is unchanged. Devices override it to fuse where that
  // pays (CUDA: decode-only steps, one kernel instead of two).
  // qkv: [T, (Hq + 2 * Hkv) * D]; cos_sin: [max_pos, D]; out: [T, Hq * D]
  virtual void rope_paged_attention(const StepMeta& step, const TensorView& qkv, int num_heads,
                                    int num_kv_heads, int head_dim, const TensorView& cos_sin, float scale,
                                    const LayerKvCache& cache, const TensorView& out) {
    rope_kv_write(step, qkv, num_heads, num_kv_heads, head_dim, cos_sin, cache);
    paged_attention(step, qkv, num_heads, num_kv_heads, head_dim, scale, cache, out);
  }
  // Qwen3's per-head RMSNorm of q and k, in place inside qkv: [T, (Hq + 2 * Hkv) * D];
  // q_weight, k_weight: [D]
  virtual void qk_norm(const TensorView& qkv, int num_heads, int num_kv_heads, int head_dim,
                       const TensorView& q_weight, const TensorView& k_weight, float eps) = 0;
  // out[T, I] = silu(gate_up[:, :I]) * gate_up[:, I:]      gate_up: [T, 2I]
  virtual void silu_mul(const TensorView& gate_up, const TensorView& out) = 0;
  // out[R, H] = x[step.logit_rows[r], :]
  virtual void gather_rows(const StepMeta& step, const TensorView& x, const TensorView& out) = 0;
  // Greedy choice per row, exactly the host Sampler's: out[r] = the lowest c with logits[r, c] == the row's
  // max (NaN is never the max; -0 == +0), or 0 if the row has no non-NaN value.
  // logits: [R, V] f32; out: [R] i32. (ModelRunner runs it after a graph replay, outside the recording.)
  virtual void argmax_rows(const TensorView& logits, const TensorView& out) = 0;
  // Samples one token per batch row from its logits row: the host Sampler's transforms and thresholds
  // (engine/sampler.h: adjustments, temperature, min_p, top_k, top_p; ties as there), drawn with the
  // backend's own counter-based random numbers keyed by random_bits (not the host Sampler's stream), so a row
  // gives the same token whatever else is in the batch. Greedy rows are argmax_rows' choice.
  // logits: [R, V] f32, unchanged when the call returns; out: [>= rows] i32. Asynchronous like every op; not
  // for graph recordings. UNIMPLEMENTED where supports_sampling() is false (the host Sampler is used then).
  virtual bool supports_sampling() const { return false; }
  virtual Status sample_rows(const TensorView& logits, const SamplingBatch& batch, const TensorView& out) {
    (void)logits;
    (void)batch;
    (void)out;
    return unimplemented("no device sampling on " + info().name);
  }
};

}  // namespace xinfer::backend
