// The CPU backend: f32 activations and weights (bf16/f16 weights are converted to f32 at upload), GEMMs
// through OpenBLAS (quantized weight formats through quant::quantized_matmul), everything else parallelized
// over rows with our ThreadPool. It is the correctness oracle for the CUDA backend and what CI runs.
//
// Memory is host RAM; "device" pointers are host pointers, so StepMeta points into the backend's own
// copy of the last StepPlan.
#pragma once

#include <algorithm>
#include <memory>

#include "xinfer/backend/backend.h"
#include "xinfer/core/thread_pool.h"

namespace xinfer::cpu {

struct CpuBackendOptions {
  int num_threads = 0;  // 0: all hardware threads
};

class CpuBackend : public backend::Backend {
 public:
  explicit CpuBackend(CpuBackendOptions options = {});
  ~CpuBackend() override;

  backend::BackendInfo info() const override;
  backend::DeviceTensor allocate(DType dtype, const Shape& shape) override;
  backend::DeviceTensor upload(const TensorView& host, DType dtype) override;
  void to_host_f32(const TensorView& src, float* dst) override;
  void to_host_raw(const TensorView& src, void* dst) override;
  backend::StepMeta upload_step(const backend::StepPlan& plan) override;
  void feed_tokens(const backend::StepMeta& step, const TensorView& ids) override;

  // Every format (quant::cpu_supports): non-dense linears run quant::quantized_matmul.
  bool supports(const quant::WeightFormat& f) const override;
  // Q4_K, Q5_0 and Q6_K: the int kernels on the repacked rows beat this backend's GGUF path for them, which
  // dequantizes a row at a time (bench/quant_kernel_bench --gguf-repack).
  bool prefers_repacked_gguf(quant::GgufType type) const override;
  // f32 (the activation dtype) or fp8 e4m3: rope_kv_write stores to_fp8_e4m3(x / scale), paged_attention reads
  // to_float(e4m3) * scale (both core/dtype.h's conversions, round to nearest even with saturation).
  bool supports_kv_cache_dtype(DType d) const override { return d == DType::kF32 || d == DType::kFP8E4M3; }
  void embedding(const backend::StepMeta& step, const TensorView& table, const TensorView& out,
                 const backend::VocabRows& rows = {}) override;
  // Dense or GGUF tables (the looked-up rows dequantized with quant::dequantize_gguf), whole or a vocabulary
  // shard (rows outside it -0.0, as embedding()).
  void embedding_weights(const backend::StepMeta& step, const backend::LinearWeights& table, const TensorView& out,
                         const backend::VocabRows& rows = {}) override;
  void rms_norm(const TensorView& x, const TensorView& weight, float eps, const TensorView& out) override;
  void add_rms_norm(const TensorView& residual, const TensorView& delta, const TensorView& weight, float eps,
                    const TensorView& out) override;
  void linear(const TensorView& x, const backend::LinearWeights& w, const TensorView& out) override;
  void rope_kv_write(const backend::StepMeta& step, const TensorView& qkv, int num_heads, int num_kv_heads,
                     int head_dim, const TensorView& cos_sin, const backend::LayerKvCache& cache) override;
  void qk_norm(const TensorView& qkv, int num_heads, int num_kv_heads, int head_dim,
               const TensorView& q_weight, const TensorView& k_weight, float eps) override;
  void paged_attention(const backend::StepMeta& step, const TensorView& qkv, int num_heads, int num_kv_heads,
                       int head_dim, float scale, const backend::LayerKvCache& cache,
                       const TensorView& out) override;
  void silu_mul(const TensorView& gate_up, const TensorView& out) override;
  void gather_rows(const backend::StepMeta& step, const TensorView& x, const TensorView& out) override;
  void argmax_rows(const TensorView& logits, const TensorView& out) override;

  ThreadPool& pool() { return *pool_; }

 private:
  // Items per task so each task does at least ~32K element operations: waking the pool costs tens of
  // microseconds, more than small ops take (decode steps of small models are all small ops).
  static int64_t grain_for(int64_t ops_per_item) {
    constexpr int64_t kMinOpsPerTask = int64_t{1} << 15;
    return std::max<int64_t>(1, kMinOpsPerTask / std::max<int64_t>(1, ops_per_item));
  }

  // linear() for a non-dense format: quant::quantized_matmul, then the bias.
  void quantized_linear(const TensorView& x, const backend::LinearWeights& w, const TensorView& out);
  // linear() of a weight stored as segments (backend.h LinearWeights::segments): each into its columns of
  // out.
  void segmented_linear(const TensorView& x, const backend::LinearWeights& w, const TensorView& out);

  std::unique_ptr<ThreadPool> pool_;
  backend::StepPlan step_copy_;  // storage behind the last StepMeta
};

}  // namespace xinfer::cpu
