// CudaBackend: the Backend op interface on one NVIDIA GPU (Hopper, sm_90a), bf16 activations and
// weights, f32 accumulation everywhere, f32 logits.
//
// Memory: every allocate()/upload() is its own cudaMalloc, owned by the returned buffer (freed when the
// last shared_ptr goes). All work is issued on one stream owned by the backend; to_host_f32() and
// synchronize() wait for it.
//
// Step metadata: upload_step() packs the StepPlan arrays and the attention plan (attention_plan.h) into
// one pinned host staging buffer and copies it with one async copy into one persistent device buffer
// (grown, never shrunk), so pointers stay stable across steps (CUDA graphs later). The staging buffer
// is reused only after the previous copy has completed (an event guards it). A plan's token_sources go last
// in the buffer (the other arrays keep their offsets); feed_tokens() patches the device token ids from them
// with a tiny kernel queued before the forward (or the graph replay).
//
// Host copies: to_host_raw_async() copies land in a pinned staging buffer (first fit among the regions of
// copies not yet completed, so a later step's copy never overwrites an earlier one's unread ids);
// fence_host_copies() records an event per group, and wait_host_copies(fence) waits only for that event.
//
// Graphs: begin_capture()/end_capture(key) record the ops in between on the backend's stream (relaxed
// capture mode) into a cudaGraphExec kept per key; replay(key) launches it when the last upload_step()
// has the layout it was recorded with (array sizes, block-table width, attention plan sizes) and the
// step buffer and decode workspace are the ones it recorded (else it is dropped: the caller records
// again). An op that would have to grow the decode workspace during a recording fails the recording;
// the workspace is grown at end_capture(), so the next recording succeeds.
//
// Linears: kernels/gemm/gemm_tuner.h picks cuBLASLt algorithms or the small-M GEMV kernel per (shape, m)
// from measurements that tune_linears() makes once at start-up (cached on disk), before any recording.
//
// Fused decode ops: add_rms_norm_linear (o or down projection -> add + RMSNorm -> next projection) runs as
// GEMVs with no kernel between them for m <= 8 rows (gemv.h GemvFusion; LinearFusion::kWhenGemv, the
// default): the producer adds its output into the residual in its epilogue; the next projection reads the
// residual, applies the norm weight on its way in and scales its dot products by each row's 1 / RMS, which
// its lanes sum on the way. Fused where the tuner measured that GEMV faster than add + norm + the plain
// choice (gemm_tuner.h normed_input) and runs the producer (if the op has one) as the GEMV, each with its
// tuned configuration; with a SwiGLU (act_out) and a configuration of paired rows, the gate_up GEMV also
// writes act_out in its epilogue (no silu_mul kernel). The residual is bit-identical to the composition's,
// the projection's output within bf16 rounding of it, act_out silu_mul's of that output; delta and
// normed_out are not written. Elsewhere (prefill, a delta given as input):
// the composition (Backend's default).
//
// Fused RoPE + attention: rope_paged_attention runs as one kernel on decode-only steps of up to
// kMaxFusedRopeDecodes sequences (every token a decode; head_dim 64 / 128): the split-KV decode kernel
// rotates q and the newest k itself and writes the newest k, v to the cache (paged_decode_attention.h), one
// launch per layer fewer; out and the cache are bit-identical to rope_kv_write -> paged_attention (qkv's q
// and k are then left unrotated). Elsewhere (mixed or prefill steps, larger decode batches, where it measured
// slower, other head dims, a slot that is not where the block table puts the position) the composition. On
// by default; CudaBackendOptions::rope_attention_fusion / set_rope_attention_fusion(false) turn it off.
//
// Quantized linears (cuda_backend_quant.cpp, kernels/gemm/quant_linear.h): supports() answers true for
// dense, int8 per channel and int4 / int8 per group (any group size, zero points, g_idx), in the CPU layout,
// and W8A8-FP8 (per-channel or per-tensor weight scales, dynamic per-token or static activation scales:
// kernels/quant/quantize_activations.h, then cuBLASLt's FP8 GEMM with outer-vector scales,
// kernels/gemm/cublaslt_fp8_gemm.h), and W8A8-INT8 (int8 activations per token or static, then our int8
// GEMV for m <= 16, else our wgmma GEMM with the scales fused, w8a8_int8_wgmma.h, or cuBLASLt's int8 GEMM
// with int32 sums and our scale epilogue, cublaslt_int8_gemm.h: set_int8_gemm). linear() runs up to
// kQuantGemvMaxRows (16) rows through the quantized tensor-core GEMV where it takes the weight (k % 32 / 16,
// group % 32, no g_idx); past that, where measure_wq_gemms() timed it faster (set_wq_gemm_max_rows), the
// tiled GEMM that dequantizes in shared memory (wq_gemm.h); otherwise it dequantizes the weight into a bf16
// workspace and runs the tuned bf16 GEMM (prefill, and the slower path for the rest). Act-order weights
// sorted at load (LinearWeights::input_perm) gather x's columns for the GEMV rows and dequantize back into
// input order past them. add_rms_norm_linear fuses dense linears only (quantized ones run the composition).
// The workspace grows outside recordings only, like the decode one.
//
// KV cache: bf16, per layer K and V [num_blocks, num_kv_heads, block_size, head_dim] (backend.h).
// Attention: decodes use the split-KV decode kernel, prefill chunks the tiled tensor-core kernel
// (head_dim 64 / 128); other head dims go to the generic kernel.
#pragma once

#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "xinfer/backend/backend.h"
#include "xinfer/backend/cuda/kernels/attention/attention_plan.h"
#include "xinfer/backend/cuda/kernels/attention/paged_attention_params.h"
#include "xinfer/backend/cuda/kernels/gemm/gemm_args.h"
#include "xinfer/backend/cuda/kernels/gemm/gemv.h"
#include "xinfer/backend/cuda/kernels/gemm/quant_linear.h"
#include "xinfer/backend/cuda/kernels/gemm/w8a8_int8_wgmma.h"
#include "xinfer/backend/cuda/kernels/gemm/wq_gemm.h"

namespace xinfer::cuda {

class GemmTuner;
class CublasLtFp8Gemm;
class CublasLtInt8Gemm;

// The most decodes a step may have for rope_paged_attention to run fused (see above).
inline constexpr int kMaxFusedRopeDecodes = 128;

// Quantized linears with at most this many rows run the quantized GEMV (in launches of 8 rows, 16 with
// QuantGemvConfig::tokens16), more the
// dequantize + bf16 GEMM path (see above). Measured (H200, int4 g128 qkv 6144 x 4096, m = 16): GEMV in two
// launches 27.5 us, dequantize + GEMM 131.7 us with the first (scalar) dequantization kernel.
inline constexpr int kQuantGemvMaxRows = 16;

// When add_rms_norm_linear runs as the fused GEMVs instead of the composition (see above).
enum class LinearFusion {
  kOff,
  kWhenGemv,  // m <= 8 where the tuner's choices say so (see above), with their configurations
  kAlways,    // any m <= 8 the kernels take: the tuned configurations, else gemv_default_config (with rows
              // in pairs where the op has a SwiGLU, so its epilogue runs) (tests)
};

// The attention kernels' parameters for the step's tokens (the step uploaded by upload_step()): qkv
// [T, (num_heads + 2 * num_kv_heads) * head_dim], out [T, num_heads * head_dim], one layer's cache.
PagedAttentionParams paged_attention_params(const backend::StepMeta& step, const TensorView& qkv, int num_heads,
                                            int num_kv_heads, int head_dim, float scale,
                                            const backend::LayerKvCache& cache, const TensorView& out);

// The GEMV configurations of a fused add_rms_norm_linear: the linear that makes delta (if the op has one)
// and the one after the norm.
struct FusedLinearPlan {
  std::optional<GemvConfig> producer;
  GemvConfig consumer;
  bool swiglu = false;  // the consumer writes act_out itself (GemvFusion::swiglu_out): no silu_mul kernel
};

struct CudaBackendOptions {
  int device = 0;
  size_t gemm_workspace_bytes = 32u << 20;
  // tune_linears() measures GEMM candidates; false: cuBLASLt's heuristic.
  bool gemm_tuning = true;
  // Tuning cache file; "": default_gemm_tuning_cache_path() (env XINFER_GEMM_TUNING_CACHE, XDG_CACHE_HOME,
  // HOME); "off": none.
  std::string gemm_tuning_cache;
  // kWhenGemv, the default: the fused decode GEMVs (see above); kOff: the composition.
  LinearFusion linear_fusion = LinearFusion::kWhenGemv;
  // The GEMV candidates the tuner measures use programmatic dependent launch (pdl.cuh); false: plain launches.
  bool gemv_pdl = true;
  // rope_paged_attention as one decode-attention kernel on decode-only steps (see above); false: the
  // composition.
  bool rope_attention_fusion = true;
};

class CudaBackend final : public backend::Backend {
 public:
  explicit CudaBackend(CudaBackendOptions options = {});
  ~CudaBackend() override;

  backend::BackendInfo info() const override;
  bool supports(const quant::WeightFormat& f) const override;  // cuda_backend_quant.cpp
  // W8A8 also needs cuBLASLt's shapes (FP8: n and k multiples of 16; INT8: of 4); cuda_backend_quant.cpp.
  bool supports_linear(const quant::WeightFormat& f, int64_t n, int64_t k) const override;
  backend::DeviceTensor allocate(DType dtype, const Shape& shape) override;
  backend::DeviceTensor upload(const TensorView& host, DType dtype) override;
  void to_host_f32(const TensorView& src, float* dst) override;
  void to_host_raw(const TensorView& src, void* dst) override;
  // Through a pinned staging buffer (a copy into pageable memory would block the host).
  void to_host_raw_async(const TensorView& src, void* dst) override;
  void wait_host_copies() override;
  bool async_host_copies() const override { return true; }
  uint64_t fence_host_copies() override;
  void wait_host_copies(uint64_t fence) override;
  void mark_step_begin() override;
  void reserve_step_upload(size_t bytes) override;
  StepDeviceTime step_device_time(uint64_t fence) override;
  backend::StepMeta upload_step(const backend::StepPlan& plan) override;
  // Generated on the device (kernels/random), no host copy: dummy weights of an 8B model in < 1 s.
  backend::DeviceTensor random_normal(DType dtype, const Shape& shape, uint64_t seed, float stddev) override;
  Result<backend::DeviceCeilings> measure_ceilings() override;

  // Whole bf16 tables or a vocabulary shard (other ranks' ids: rows of -0.0; gather_rows.h).
  void embedding(const backend::StepMeta& step, const TensorView& table, const TensorView& out,
                 const backend::VocabRows& rows = {}) override;
  void rms_norm(const TensorView& x, const TensorView& weight, float eps, const TensorView& out) override;
  void add_rms_norm(const TensorView& residual, const TensorView& delta, const TensorView& weight, float eps,
                    const TensorView& out) override;
  void linear(const TensorView& x, const backend::LinearWeights& w, const TensorView& out) override;
  void add_rms_norm_linear(const backend::NormLinearArgs& a) override;
  // bf16 or FP8 e4m3 (kernels/attention/kv_fp8.cuh): rope_kv_write, the decode and mma.sync prefill kernels
  // and the generic kernel read and write e4m3 caches; the fused RoPE + decode kernel and the wgmma prefill
  // kernels are bf16 only (FP8 steps run rope_kv_write + decode / mma.sync prefill instead).
  bool supports_kv_cache_dtype(DType d) const override { return d == DType::kBF16 || d == DType::kFP8E4M3; }
  // The KV swap space: pinned, mapped host memory that the copy kernel reads and writes directly
  // (kernels/elementwise/kv_block_copy.h), pinned here (swap_space_buffer.h).
  std::shared_ptr<backend::DeviceBuffer> allocate_swap_memory(size_t bytes) override;
  void copy_kv_blocks(const backend::KvCache& cache, const backend::KvCopyBatch& batch) override;
  void rope_kv_write(const backend::StepMeta& step, const TensorView& qkv, int num_heads, int num_kv_heads,
                     int head_dim, const TensorView& cos_sin, const backend::LayerKvCache& cache) override;
  void qk_norm(const TensorView& qkv, int num_heads, int num_kv_heads, int head_dim, const TensorView& q_weight,
               const TensorView& k_weight, float eps) override;
  void paged_attention(const backend::StepMeta& step, const TensorView& qkv, int num_heads, int num_kv_heads,
                       int head_dim, float scale, const backend::LayerKvCache& cache, const TensorView& out) override;
  void rope_paged_attention(const backend::StepMeta& step, const TensorView& qkv, int num_heads,
                            int num_kv_heads, int head_dim, const TensorView& cos_sin, float scale,
                            const backend::LayerKvCache& cache, const TensorView& out) override;
  void silu_mul(const TensorView& gate_up, const TensorView& out) override;
  void gather_rows(const backend::StepMeta& step, const TensorView& x, const TensorView& out) override;
  void feed_tokens(const backend::StepMeta& step, const TensorView& ids) override;
  void argmax_rows(const TensorView& logits, const TensorView& out) override;
  // cuda_backend_sampling.cpp: kernels/sampling/sample_rows.h, parameters staged like upload_step().
  bool supports_sampling() const override { return true; }
  Status sample_rows(const TensorView& logits, const backend::SamplingBatch& batch, const TensorView& out) override;
  int64_t sampled_rows() const { return sampled_rows_; }  // rows sampled by sample_rows() so far

  bool supports_graphs() const override { return true; }
  void begin_capture() override;
  bool end_capture(uint64_t key) override;
  bool replay(uint64_t key) override;
  int num_graphs() const override { return static_cast<int>(graphs_.size()); }
  void clear_graphs() override;

  cudaStream_t stream() const { return stream_; }
  void synchronize() override;
  // Allocates the split-KV decode workspace for the worst step within these limits now, so it never
  // grows during serving (memory plan; CUDA graphs need stable pointers).
  void reserve_decode_workspace(int max_decode_seqs, int num_heads, int num_kv_heads, int head_dim, int max_seq_len);
  size_t decode_workspace_bytes() const { return decode_ws_floats_ * sizeof(float); }
  int num_sms() const { return num_sms_; }
  // Measures the GEMM candidates for the model's linears (or takes them from the cache) and logs a
  // one-line summary; call once after creating the backend, before any graph is recorded.
  void tune_linears(const std::vector<GemmShape>& shapes, bool show_progress);
  // Runs every distinct W8A8 linear shape of `linears` (FP8, INT8; others are skipped) once at each decode
  // graph bucket up to max_rows (cublaslt_algo_choice.h variant_rows) on scratch inputs, so that the GEMMs'
  // measured choices there (cublaslt_fp8_gemm.h, cublaslt_int8_gemm.h) are made now instead of inside the
  // first decode steps. The FP8 decisions are kept in the GEMM tuner's cache file (a section per device and
  // candidate version) and taken from it on the next start. Logs one line (shapes, rows, seconds, cache).
  void measure_w8a8_gemms(const std::vector<const backend::LinearWeights*>& linears, int max_rows,
                          bool show_progress = false);
  // Times the wgmma configurations (kInt8WgmmaConfigs) of the W8A8-INT8 GEMM on every distinct W8A8-INT8 shape of
  // `linears` at each decode row bucket up to max_tokens (int8_wgmma_row_bucket: 32, 64, .., kInt8MeasuredMaxRows;
  // each measured at min(bucket, max_tokens) rows) and keeps the fastest per (n, k, bucket): "auto" then runs
  // it there (int8_wgmma_for), the rule by shape elsewhere. Every configuration gives the same bits. Logs one line;
  // nothing to do under set_int8_gemm("cublaslt"), "rule" or a fixed configuration.
  void measure_int8_gemms(const std::vector<const backend::LinearWeights*>& linears, int max_tokens);
  // Allocates the quantized linears' workspace (activation codes and scales, INT8 sums, dequantized weights)
  // and the segmented weights' (their segments' outputs) for steps of up to max_tokens rows through `linears`
  // now, so that the memory plan counts them and they never grow (a growth waits for the device) during
  // serving.
  void reserve_quant_workspace(const std::vector<const backend::LinearWeights*>& linears, int max_tokens);
  size_t quant_workspace_bytes() const { return quant_ws_.bytes; }
  size_t segment_workspace_bytes() const { return segment_ws_.bytes; }
  GemmTuner& gemm() { return *gemm_; }
  // The GEMM tuner's cache file (--gemm-tuning-cache, else its default path); "" when tuning or the cache is
  // off.
  std::string gemm_tuning_cache_path() const;
  // The GEMV configurations add_rms_norm_linear(a) runs the fused kernels with, or nullopt: the composition.
  std::optional<FusedLinearPlan> fused_linear_plan(const backend::NormLinearArgs& a);
  // The fusion policies (see above). Recorded graphs hold the path chosen when they were recorded: changing a
  // policy drops them (the next replay records again).
  void set_linear_fusion(LinearFusion f);
  LinearFusion linear_fusion() const { return linear_fusion_; }
  void set_rope_attention_fusion(bool on);
  bool rope_attention_fusion() const { return rope_attention_fusion_; }
  // FP8 KV caches: decode and prefill attention convert codes to f16 (cvt.rn.f16x2.e4m3x2) for f16 MMAs
  // instead of to bf16 by integer ops (PagedAttentionParams::kv_fp8_f16). On by default: on an H200 decode
  // reads the cache at 80-92% of the copy ceiling at batch 64 against 59-65% (docs/PERF.md session 13;
  // prefill: session 25); XINFER_FP8_KV_F16=0 turns it off. Set it before graphs are recorded (recordings
  // keep the variant they were made with).
  void set_fp8_kv_f16_mma(bool on) { fp8_kv_f16_mma_ = on; }
  // FP8 KV caches, decode attention: how the tiles ahead are fetched (PagedAttentionParams::kv_fp8_prefetch:
  // 0 registers only, the default; 1 + an L2 prefetch two tiles ahead; 2 a shared-memory ring two tiles
  // deep). An experiment: session 29 found the FP8 decode kernel at ~100% of the copy ceiling where the bf16
  // one reads at 105-107%, with half the bytes in flight per warp (docs/PERF.md). XINFER_FP8_KV_PREFETCH=N
  // sets it. Set it before graphs are recorded.
  void set_fp8_kv_decode_prefetch(int mode);
  int fp8_kv_decode_prefetch() const { return fp8_kv_decode_prefetch_; }
  // The W8A8-INT8 GEMM past the GEMV's rows (the same bits whichever runs): "auto" (the default: our wgmma
  // kernels with the scales fused, the configuration measure_int8_gemms() found fastest for the shape and row
  // bucket, else by shape: int8_wgmma_auto_config in w8a8_int8_wgmma.h; cuBLASLt for a shape they do not take),
  // "rule" (that rule alone: nothing measured), "cublaslt" (int8 -> int32 workspace + our scale epilogue,
  // cublaslt_int8_gemm.h), or one wgmma configuration by its config_name() ("wgmma128s8pp", ...) at every row
  // count, optionally with a fixed band of the tile order ("wgmma256s5ppb1": m tiles fastest). XINFER_INT8_GEMM
  // sets it; setting it forgets the measurements.
  void set_int8_gemm(const std::string& name);
  // The wgmma configuration an m x n x k W8A8-INT8 GEMM runs with under that choice, or nullopt: cuBLASLt.
  std::optional<Int8WgmmaConfig> int8_wgmma_for(int m, int n, int k) const;
  // The W8A8-FP8 GEMM past the GEMV's rows: "auto" (the default: cuBLASLt's FP8 GEMM, or our wgmma kernels on
  // e4m3 codes (launch_w8a8_fp8_wgmma) in the configuration measure_fp8_gemms() found faster than cuBLASLt's
  // choice for the shape and rows; cuBLASLt where nothing was measured), "cublaslt" (always), or one wgmma
  // configuration by its config_name() at every row count (as set_int8_gemm). XINFER_FP8_GEMM sets it at
  // construction. Set it before graphs are recorded.
  void set_fp8_gemm(const std::string& name);
  // The wgmma configuration an m x n x k W8A8-FP8 GEMM runs with under that choice, or nullopt: cuBLASLt.
  std::optional<Int8WgmmaConfig> fp8_wgmma_for(int m, int n, int k) const;
  // True if measure_fp8_gemms left a decision (a wgmma configuration or cuBLASLt) for the bucket of an m-row
  // n x k GEMM: what the tests check the measured buckets against.
  bool fp8_gemm_measured(int m, int n, int k) const {
    return fp8_measured_.count({n, k, fp8_gemm_row_bucket(m)}) > 0;
  }
  // Under "auto": times cuBLASLt's FP8 GEMM (its measured algorithm at the decode graph buckets, the weight's
  // bias) against the wgmma configurations on every distinct W8A8-FP8 shape of `linears`, at every row bucket
  // (fp8_gemm_row_bucket: the decode graph buckets past the GEMV's rows, then 2048, 4096, ..) up to the one
  // holding max_tokens, at most kFp8MeasuredMaxRows (fp8_measured_row_buckets; each timed at min(bucket,
  // max_tokens) rows, the weight rotated past L2), and keeps the faster per (n, k, bucket): an m-row GEMM
  // then runs its bucket's decision. A bucket's first decision timed at its own rows is every backend's (two
  // engines of one process compute every FP8 linear alike); unmeasured shapes and buckets run cuBLASLt, as do
  // shapes whose timing scratch would take more than half of the free memory (one warning each). Nothing
  // under fixed choices, --no-gemm-tuning or XINFER_FP8_FAST_ACCUM=0 (the wgmma kernels sum with fast
  // accumulation only). Logs one line. Call after measure_w8a8_gemms (cuBLASLt's choices), before graphs are
  // recorded.
  void measure_fp8_gemms(const std::vector<const backend::LinearWeights*>& linears, int max_tokens);
  // Warps per decode-attention CTA on steps whose grid is more than one wave of 8-warp CTAs (decode_warps():
  // large batches, one partition each): 8, 4 or 2, or 0 (the default): by context length, as measured.
  // XINFER_DECODE_WARPS sets it at construction (A/B switch). Set it before graphs are recorded.
  void set_decode_many_warps(int warps);
  int decode_many_warps() const { return decode_many_warps_; }
  // FP8 KV caches: prefill attention on long contexts (prefer_wgmma_prefill) runs the wgmma kernel, as for
  // bf16 caches; false: the mma.sync kernel for every FP8 prefill. XINFER_FP8_KV_WGMMA=0 turns it off at
  // construction (A/B switch).
  void set_fp8_kv_wgmma_prefill(bool on) { fp8_kv_wgmma_prefill_ = on; }
  // Prefill attention on long contexts (prefer_wgmma_prefill), head_dim 128: the warp-specialized wgmma
  // kernel (PrefillKernel::kWgmmaWs) instead of kWgmmaSimple. XINFER_PREFILL_WS=0 turns it off at
  // construction (A/B).
  void set_prefill_ws(bool on) { prefill_ws_ = on; }
  // Weight-only int4 / int8 linears of kQuantGemvMaxRows < m <= rows run the tiled tensor-core GEMM that
  // reads the quantized weight (wq_gemm.h) instead of dequantizing it into the workspace for the bf16 GEMM; 0
  // keeps the dequantize path; kWqGemmMeasured (the default since session 30: W4A16 8B at 64 sequences +13%
  // output tok/s, the same tokens): where measure_wq_gemms() found it faster for the shape and row bucket.
  // XINFER_WQ_GEMM_MAX_ROWS (a row count, or "auto") sets it at construction. Set it before graphs are
  // recorded.
  static constexpr int kWqGemmMeasured = -1;
  void set_wq_gemm_max_rows(int rows) { wq_gemm_max_rows_ = rows; }
  int wq_gemm_max_rows() const { return wq_gemm_max_rows_; }
  // Under kWqGemmMeasured: times the dequantize path against the tiled GEMM on every distinct weight-only
  // shape of `linears` the tiled GEMM takes, at the row buckets 32, 64, .., 1024 up to max_rows (each at
  // min(bucket, max_rows) rows), and keeps which is faster per (n, k, bucket): linear() then runs that for m
  // in (bucket / 2, bucket]. Needs the quantized workspace reserved first. Logs one line; nothing to do
  // otherwise.
  void measure_wq_gemms(const std::vector<const backend::LinearWeights*>& linears, int max_rows);
  // Whether linear() runs the tiled GEMM for a weight-only [n, k] weight at m rows (after the GEMV's rows).
  bool wq_gemm_for(int m, int n, int k) const;
  // The tiled GEMM's split-k workspace (wq_gemm.h; 32 MB), allocated on first use outside a
  // recording (reserve_quant_workspace allocates it for weight-only models); inside a recording before that,
  // none: the GEMM then runs one k range per tile.
  WqGemmWorkspace wq_gemm_workspace();
  // Host calls of add_rms_norm_linear / rope_paged_attention that launched the fused kernels so far (a graph
  // recording counts once, its replays not at all).
  int64_t fused_linears() const { return fused_linears_; }
  int64_t fused_rope_attentions() const { return fused_rope_attentions_; }
  // Host calls of linear() on quantized weights that ran the quantized GEMV / dequantize + bf16 GEMM.
  int64_t quant_gemvs() const { return quant_gemvs_; }
  int64_t quant_dequant_gemms() const { return quant_dequant_gemms_; }
  int64_t quant_tiled_gemms() const { return quant_tiled_gemms_; }  // weight-only linears through wq_gemm.h
  int64_t fp8_gemms() const { return fp8_gemms_; }  // W8A8-FP8 linears (activation quantization + FP8 GEMM)
  int64_t fp8_wgmma_gemms() const { return fp8_wgmma_gemms_; }  // of those, on our wgmma GEMM (fp8_wgmma_for)
  int64_t fp8_gemvs() const { return fp8_gemvs_; }  // W8A8-FP8 decode linears (quantization + our FP8 GEMV)
  int64_t int8_gemms() const { return int8_gemms_; }  // W8A8-INT8 linears past the GEMV (quantization + GEMM)
  int64_t int8_gemvs() const { return int8_gemvs_; }  // W8A8-INT8 decode linears (quantization + int8 GEMV)
  // W8A8 linears whose x came quantized from the norm / SwiGLU kernel before them (no quantization kernel).
  int64_t w8a8_quantized_inputs() const { return w8a8_quantized_inputs_; }
  // Whether a W8A8-FP8 linear of m rows and this shape, bf16 out, quantizes its bf16 x inside its GEMV (the dot
  // GEMV's decode rows where that pays, cuda_backend_quant.cpp): then the norm before it does not quantize.
  static bool fp8_gemv_quantizes_x(int m, int64_t n, int64_t k);
  // The device view of a quantized LinearWeights (checks dtypes and sizes, naming the format).
  QuantWeight quant_weight(const backend::LinearWeights& w) const;

 private:
  void check_step(const backend::StepMeta& step) const;
  float* decode_workspace(size_t floats);
  // Host-side checks of rope_kv_write's / paged_attention's arguments against the last uploaded step.
  void check_rope_args(const TensorView& qkv, int num_heads, int num_kv_heads, int head_dim,
                       const TensorView& cos_sin, const backend::LayerKvCache& cache) const;
  void check_attention_args(const TensorView& qkv, int num_heads, int num_kv_heads, int head_dim,
                            const backend::LayerKvCache& cache, const TensorView& out) const;
  // The decode kernel's split-KV partition size and workspace for this step; false while recording a graph
  // that would have to grow the workspace (the recording is failed; launch nothing).
  bool decode_launch(int num_heads, int num_kv_heads, int head_dim, int& partition_size, int& warps,
                     float*& workspace);
  // Whether rope_paged_attention runs fused on the last uploaded step (see above).
  bool fuses_rope_attention(int head_dim, const TensorView& cos_sin,
                            const backend::LayerKvCache& cache) const;

  // x_quantized: x's codes and scales are already in the W8A8 workspace (w8a8_workspace(w, m)), made by the
  // norm or SwiGLU kernel before it; x is then read for its shape only.
  void quantized_linear(const TensorView& x, const backend::LinearWeights& w, const TensorView& out, bool x_quantized);
  // The weight-only formats (int4 / int8) into y (bf16, or f32 with y_f32), rows ldy elements apart (0: n). A
  // stride wider than n at m > 1 is taken by the int4 decode GEMV, the quant GEMV and the tiled GEMM only:
  // where another path would run, returns false and launches nothing (true otherwise, also when a recording
  // failed).
  bool weight_only_linear(const TensorView& x, const backend::LinearWeights& w, void* y, bool y_f32, int ldy);
  void fp8_linear(const TensorView& x, const backend::LinearWeights& w, const TensorView& out, bool x_quantized);
  void int8_linear(const TensorView& x, const backend::LinearWeights& w, const TensorView& out, bool x_quantized);
  // The W8A8 linears' workspace for `m` rows of w's input: xq [m, k] e4m3 / int8 codes | xs [m] scales | tail
  // (FP8: [n] broadcast weight scales; INT8 GEMM: the int32 sums); nullopt while recording a graph that would
  // have to grow it (the recording is failed).
  struct W8a8Workspace {
    uint8_t* xq;
    float* xs;
    uint8_t* tail;
  };
  std::optional<W8a8Workspace> w8a8_workspace(const backend::LinearWeights& w, int m);
  struct W8a8WorkspaceLayout {
    size_t xq_bytes = 0, xs_bytes = 0, tail_bytes = 0;
    size_t total() const { return xq_bytes + xs_bytes + tail_bytes; }
  };
  W8a8WorkspaceLayout w8a8_workspace_layout(const backend::LinearWeights& w, int m);
  // add_rms_norm_linear's norm and linear for a W8A8 linear: the norm kernel writes x's codes (rms_norm.h),
  // the GEMM / GEMV reads them; false (nothing run) where the linear quantizes x itself or is not W8A8.
  bool w8a8_norm_linear(const backend::NormLinearArgs& a);
  // silu_mul, also writing the codes `consumer` (a W8A8 linear about to read out) takes (silu_mul.h); the next
  // linear() on out with that weight then skips its quantization (quantized_input_).
  // out_unread (NormLinearArgs::act_out_unread): the codes alone where silu_mul can (out left unwritten).
  void swiglu(const TensorView& gate_up, const TensorView& out, const backend::LinearWeights* consumer,
              bool out_unread = false);
  // add_rms_norm_linear on weight-only quantized linears as two GEMVs (the producer adds into the residual,
  // the consumer folds the norm and the SwiGLU); false (nothing run) where that chain does not apply.
  bool quant_fused_chain(const backend::NormLinearArgs& a);
  // The quantized linears' workspace (dequantized weights, quantized activations), at least `bytes` long;
  // nullptr while recording a graph that would have to grow it (the recording is failed).
  void* quant_workspace(size_t bytes);
  // linear() of a weight stored as segments (backend.h LinearWeights::segments): each segment's linear into
  // its columns of out: in place at one row, and at more where its kernel takes a row stride (the int GEMVs,
  // the tiled GEMM); otherwise through segment_ws_ and a strided copy.
  void segmented_linear(const TensorView& x, const backend::LinearWeights& w, const TensorView& out);
  // Its prefill rows (m > kQuantGemvMaxRows) where every segment is weight-only (no bias, no input
  // permutation) and would dequantize its weight for the bf16 GEMM rather than run the tiled GEMM: the
  // segments dequantize into one bf16 [n, k] weight in the quant workspace and one GEMM writes out (the GEMM
  // of a weight in one format; no column copies). False, nothing launched, otherwise.
  bool segments_gemm(const TensorView& x, const backend::LinearWeights& w, const TensorView& out);
  // Whether segments_gemm can join w's segments into one GEMM: every one weight-only, without bias or input
  // permutation (the tiled GEMM's choice per m aside).
  static bool segments_joinable(const backend::LinearWeights& w);

  int device_;
  CudaBackendOptions options_;
  std::string device_name_;
  int num_sms_ = 0;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<GemmTuner> gemm_;
  LinearFusion linear_fusion_ = LinearFusion::kWhenGemv;
  int64_t fused_linears_ = 0;
  bool rope_attention_fusion_ = true;
  bool fp8_kv_f16_mma_ = true;
  int fp8_kv_decode_prefetch_ = 0;
  bool int8_cublaslt_ = false;                     // set_int8_gemm("cublaslt")
  bool int8_rule_only_ = false;                    // set_int8_gemm("rule"): auto without measurements
  std::optional<Int8WgmmaConfig> int8_wgmma_fixed_;  // set_int8_gemm(config name); neither: "auto"
  std::map<std::tuple<int, int, int>, Int8WgmmaConfig> int8_measured_;  // (n, k, row bucket): measure_int8_gemms
  bool fp8_cublaslt_only_ = false;                                      // set_fp8_gemm("cublaslt")
  std::optional<Int8WgmmaConfig> fp8_wgmma_fixed_;  // set_fp8_gemm(config name); neither: "auto"
  // (n, k, fp8_gemm_row_bucket): the wgmma configuration, or nullopt: cuBLASLt (measure_fp8_gemms)
  std::map<std::tuple<int, int, int>, std::optional<Int8WgmmaConfig>> fp8_measured_;
  int decode_many_warps_ = 0;
  int wq_gemm_max_rows_ = kWqGemmMeasured;  // set_wq_gemm_max_rows
  std::map<std::tuple<int, int, int>, bool>
      wq_measured_;  // (n, k, row bucket): tiled faster (measure_wq_gemms)
  bool fp8_kv_wgmma_prefill_ = true;
  bool prefill_ws_ = true;
  int64_t fused_rope_attentions_ = 0;

  // upload_step() state
  void* step_host_ = nullptr;    // pinned staging buffer
  struct HostCopy {
    void* dst;
    size_t offset, bytes;  // in copy_host_
    uint64_t fence;        // group id (next_fence_ when started)
  };
  struct HostFence {
    uint64_t id;
    cudaEvent_t event;  // recorded after the group's copies
  };
  void* copy_host_ = nullptr;    // pinned staging of to_host_raw_async(), copy_host_bytes_ long
  size_t copy_host_bytes_ = 0;
  std::vector<HostCopy> host_copies_;  // started, not yet waited for
  std::vector<HostFence> host_fences_;  // recorded, not yet waited for, oldest first
  std::vector<cudaEvent_t> free_events_;
  uint64_t next_fence_ = 1;
  // Completes the copies of groups <= fence (their events have completed) and recycles their events.
  void complete_host_copies(uint64_t fence);
  // Device step timing (backend.h StepDeviceTime): the open step's begin mark and the event upload_step()
  // records for it, then per fenced step its three events until step_device_time() reads them.
  struct TimedStep {
    uint64_t fence = 0;
    uint64_t mark = 0;  // mark_step_begin() calls so far, this step's included
    cudaEvent_t begin = nullptr, uploaded = nullptr, end = nullptr;
  };
  uint64_t marks_ = 0;
  uint64_t last_read_mark_ = 0;  // mark of the step last read (its end is last_step_end_)
  TimedStep open_step_;
  bool open_step_uploaded_ = false;
  std::vector<TimedStep> timed_steps_;  // fenced, not read yet, oldest first (at most kMaxTimedSteps)
  static constexpr size_t kMaxTimedSteps = 8;
  cudaEvent_t last_step_end_ = nullptr;  // end of the last step read: the next one's idle time starts there
  std::vector<cudaEvent_t> free_timing_events_;
  cudaEvent_t timing_event();
  // Replaces the step-plan buffers (pinned host staging, device copy) by ones of `capacity` bytes.
  void grow_step_buffers(size_t capacity);
  void* step_device_ = nullptr;  // persistent device copy
  size_t step_capacity_ = 0;
  cudaEvent_t step_copied_ = nullptr;
  backend::StepPlan host_step_;      // host copy of the last plan (host-side checks and attention sizing)
  AttentionPlanHost attn_host_;
  AttentionPlanView attn_view_;      // device pointers into step_device_
  const int32_t* step_token_ids_ = nullptr;  // identifies the step the plan belongs to

  void* decode_ws_ = nullptr;  // split-KV partials, grown on demand
  size_t decode_ws_floats_ = 0;
  // A device buffer grown on demand outside recordings (a cudaMalloc synchronizes): a recording that would
  // grow it fails instead, and end_capture() grows it to what that recording asked for (then the step runs
  // eagerly).
  struct GrowableBuffer {
    void* ptr = nullptr;
    size_t bytes = 0;
    size_t capture_bytes = 0;  // what a failed recording needed
  };
  void* grow(GrowableBuffer& b, size_t bytes, const char* what);
  GrowableBuffer quant_ws_;    // dequantized weights (bf16) or quantized activations
  GrowableBuffer segment_ws_;  // a segmented linear's segment outputs before they go to their columns
  WqGemmWorkspace wq_gemm_ws_;  // one allocation: partials, then counters
  // An activation whose codes swiglu() left in the W8A8 workspace for `weight`: valid for the next linear()
  // only (it consumes or drops the record), add_rms_norm_linear hands it to its first linear.
  struct QuantizedInput {
    const void* x = nullptr;
    int64_t numel = 0;
    const void* weight = nullptr;
  };
  QuantizedInput quantized_input_;
  int64_t quant_gemvs_ = 0, quant_dequant_gemms_ = 0, quant_tiled_gemms_ = 0, fp8_gemms_ = 0,
          fp8_wgmma_gemms_ = 0, fp8_gemvs_ = 0, int8_gemms_ = 0, int8_gemvs_ = 0;
  int64_t w8a8_quantized_inputs_ = 0;
  std::unique_ptr<CublasLtFp8Gemm> fp8_;    // created at the first W8A8-FP8 linear
  std::unique_ptr<CublasLtInt8Gemm> int8_;  // created at the first W8A8-INT8 linear with m > 16

  // Graphs. The signature of a step: what a recording bakes in (array sizes fix the offsets in the step
  // buffer; scalars fix launch shapes).
  using StepSignature = std::vector<int64_t>;
  struct Graph {
    cudaGraphExec_t exec = nullptr;
    StepSignature signature;
    const void* step_device = nullptr;
    const void* decode_ws = nullptr;
    const void* quant_ws = nullptr;
    const void* segment_ws = nullptr;
  };
  StepSignature step_signature() const;
  void destroy_graph(Graph& g);
  std::unordered_map<uint64_t, Graph> graphs_;
  // sample_rows() state (cuda_backend_sampling.cpp); shared_ptr: the type is complete only there.
  struct SamplingState;
  std::shared_ptr<SamplingState> sampling_;
  int64_t sampled_rows_ = 0;

  bool capturing_ = false;
  bool capture_failed_ = false;
  size_t capture_ws_floats_ = 0;  // decode workspace a failed recording needed
};

}  // namespace xinfer::cuda
