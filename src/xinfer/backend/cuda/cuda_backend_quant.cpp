// CudaBackend's weight-only quantized linears (kernels/gemm/quant_linear.h): which formats it runs
// (supports()), the checks of a LinearWeights in those formats, and the dispatch of linear():
//   int4 with power-of-two groups >= 32 at m 1..4 and 9..16, mins (GGUF Q4_1) at every m <= 16 (default;
//                not with XINFER_INT_GEMV=dot / mma; XINFER_INT4_GEMV_ROWS=all|1 widens / narrows the rows)
//                -> launch_int4_decode_gemv (int4_decode_gemv.h), the tensor-core decode GEMV with the lean
//                instruction stream (groups of 32 / 64 with the scales folded into bf16 weights), the weight
//                read once for all rows
//   int8 (default) / int4 (XINFER_INT_GEMV=dot), m = 1, bf16 y -> launch_dot_gemv (quant_dot_gemv.h), the
//                CUDA-core GEMV; XINFER_INT_GEMV=mma keeps both on the mma GEMV (read once per process). int4
//                stays opt-in: the int4 decode GEMV above is faster at m = 1 (docs/cuda_backend.md)
//   W8A8-FP8, m = 1, bf16 y (default; XINFER_FP8_GEMV=mma turns it off) -> the CUDA-core FP8 GEMV: rows
//                shorter than 8192 launch_fp8_quant_dot_gemv (x quantized in each CTA: one launch, the bits
//                of the two-kernel path), longer ones quantize x first, then launch_fp8_dot_gemv (split-K)
//   m <= kQuantGemvMaxRows and the GEMV takes the weight -> launch_quant_gemv (weights read once per 8 rows;
//                int8 once per 16, QuantGemvConfig::tokens16, as the W8A8 GEMVs, unless
//                XINFER_GEMV_TOKENS16=0)
//   act order sorted at load (LinearWeights::input_perm): m <= kQuantGemvMaxRows -> x's columns gathered into
//                the workspace (launch_gather_columns), then the GEMVs as below; more rows -> the dequantize
//                path with the weight written back in the input's column order
//   kQuantGemvMaxRows < m, where measure_wq_gemms() found it faster (the default; set_wq_gemm_max_rows) ->
//                launch_wq_gemm (wq_gemm.h): the quantized weight read once per 64 rows and dequantized in
//                registers, x held in shared memory, k split over CTAs where the tiles leave SMs idle
//   otherwise -> the weight dequantized to bf16 into a workspace, then the bf16 GEMM (GemmTuner::run, the
//                tuner's choice for the shape): prefill in every format, and g_idx / odd group sizes at any m
//                (one log line per weight description: a slower path).
//   W8A8-FP8 (any m) -> each row of x quantized to e4m3 with its scale into the workspace, then for
//                m <= kQuantGemvMaxRows our FP8 GEMV (quant_linear.h launch_fp8_gemv), else cuBLASLt's
//                FP8 GEMM with the per-token x per-channel scales (a per-tensor weight scale broadcast to a
//                vector first), or our wgmma GEMM on the e4m3 codes where measure_fp8_gemms() found it faster
//                for the shape and rows (set_fp8_gemm / XINFER_FP8_GEMM; on an H200 it lost at every 8B
//                shape, docs/PERF.md session 31); a shape cuBLASLt has no FP8 algorithm for fails naming
//                layer shape and m.
//   W8A8-INT8 (any m) -> each row of x quantized to int8 with its scale (SmoothQuant's symmetric per-token or
//                static codes, the oracle's bits), then for m <= kQuantGemvMaxRows our int8 GEMV
//                (launch_w8a8_int8_gemv: int8 mma, int32 sums), else our wgmma GEMM with the scales fused
//                (w8a8_int8_wgmma.h, measured or by shape; set_int8_gemm / XINFER_INT8_GEMM), or where it
//                does not take the shape (k % 16 != 0) or "cublaslt" is chosen, cuBLASLt's int8 GEMM into an
//                int32 workspace in chunks of rows plus our scale epilogue (cublaslt_int8_gemm.h
//                kInt32Epilogue): the same bits.
// The workspace (bf16, the largest n * k run so far) grows outside graph recordings; a recording that would
// need it to grow fails (end_capture() grows it, the step runs eagerly), as for the decode workspace.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <unistd.h>

#include "xinfer/backend/cuda/cuda_backend.h"
#include "xinfer/backend/cuda/cuda_check.h"
#include "xinfer/backend/cuda/kernels/elementwise/silu_mul.h"
#include "xinfer/backend/cuda/kernels/gemm/cublaslt_algo_choice.h"
#include "xinfer/backend/cuda/kernels/gemm/cublaslt_fp8_gemm.h"
#include "xinfer/backend/cuda/kernels/gemm/cublaslt_int8_gemm.h"
#include "xinfer/backend/cuda/kernels/gemm/gemm_tuner.h"
#include "xinfer/backend/cuda/kernels/gemm/int4_decode_gemv.h"
#include "xinfer/backend/cuda/kernels/gemm/quant_dot_gemv.h"
#include "xinfer/backend/cuda/kernels/gemm/quant_linear.h"
#include "xinfer/backend/cuda/kernels/gemm/w8a8_int8_wgmma.h"
#include "xinfer/backend/cuda/kernels/gemm/wq_gemm.h"
#include "xinfer/backend/cuda/kernels/norm/rms_norm.h"
#include "xinfer/backend/cuda/kernels/quant/quantize_activations.h"
#include "xinfer/core/logging.h"
#include "xinfer/core/progress_bar.h"

namespace xinfer::cuda {
namespace {

// The format's name, for failure messages only (XI_CHECK evaluates its message only when it fails, and
// linear() checks a weight on every call).
std::string fmt(const backend::LinearWeights& w) { return quant::format_name(w.format); }

template <typename T>
const T* device_ptr(const TensorView& t, DType dtype, const char* what, const backend::LinearWeights& w) {
  XI_CHECK(!t.empty()) << "linear " << fmt(w) << ": missing " << what;
  XI_CHECK(t.dtype == dtype) << "linear " << fmt(w) << ": " << what << " must be " << dtype_name(dtype) << ", got "
                             << dtype_name(t.dtype);
  XI_CHECK(t.device == Device::kCuda) << "linear " << fmt(w) << ": " << what << " is not a cuda tensor";
  return static_cast<const T*>(t.data);
}

// XINFER_INT_GEMV (read once per process): 0 unset (the defaults), 1 "dot", 2 "mma" (see top).
int int_gemv_mode() {
  static const int mode = [] {
    const char* v = std::getenv("XINFER_INT_GEMV");
    if (v != nullptr && std::strcmp(v, "dot") == 0) return 1;
    if (v != nullptr && std::strcmp(v, "mma") == 0) return 2;
    return 0;
  }();
  return mode;
}

// Whether int `bits` single decode rows (m = 1, bf16 y; at m >= 2 it measured slower) run the CUDA-core GEMV
// (see top): int8 by default, int4 with XINFER_INT_GEMV=dot, neither with XINFER_INT_GEMV=mma.
bool int_dot_gemv_enabled(int bits) {
  return int_gemv_mode() == 1 || (int_gemv_mode() == 0 && bits == 8);
}

// Whether int4 decode rows run the tensor-core decode GEMV (int4_decode_gemv.h): by default.
bool int4_decode_gemv_enabled() {
  return int_gemv_mode() == 0;
}

// A GEMV configuration with its 16 rows per launch (QuantGemvConfig::tokens16: int8 weight-only, FP8 and
// W8A8-INT8) turned off by XINFER_GEMV_TOKENS16=0 (the A/B switch; read once per process).
QuantGemvConfig tokens16_switch(QuantGemvConfig c) {
  static const bool tokens16 = [] {
    const char* v = std::getenv("XINFER_GEMV_TOKENS16");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  c.tokens16 = c.tokens16 && tokens16;
  return c;
}

// Whether it runs m rows of x of weight q (else the mma GEMV, in launches of 8). Measured on an H100
// (docs/PERF.md session 35, the 8B shapes' four linears per layer): m 2..4 even with the mma GEMV (57.7
// / 59.6 against 58.6 / 59.4 us), m 5..8 3% slower (65.0 against 63.1 us at 8; the engine at 8 sequences 2.98
// against 2.87 ms a step), m 9..16 20-24% faster (98.7 against 123.9 us at 16: one launch, where the mma GEMV
// makes two; the engine at 16 sequences 4.08 against 4.91 ms a step). Mins (GGUF Q4_1) only it takes.
// XINFER_INT4_GEMV_ROWS=all runs it at every m <= 16, =1 at m = 1 only (plus mins).
bool int4_decode_gemv_for(const QuantWeight& q, int m) {
  static const int mode = [] {  // 0 measured rule, 1 all, 2 m = 1 only
    const char* v = std::getenv("XINFER_INT4_GEMV_ROWS");
    return v == nullptr ? 0 : std::strcmp(v, "all") == 0 ? 1 : std::strcmp(v, "1") == 0 ? 2 : 0;
  }();
  if (m < 1 || m > kInt4DecodeGemvMaxRows) return false;
  if (m == 1 || q.mins != nullptr || mode == 1) return true;
  return mode == 0 && (m <= 4 || m > 8);
}

// W8A8-FP8 single decode rows (m = 1, bf16 y) run the CUDA-core FP8 GEMV, with the activation quantization
// fused where it pays (see top), unless XINFER_FP8_GEMV=mma (the A/B switch: quantize x, then the mma GEMV).
bool fp8_dot_gemv_enabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("XINFER_FP8_GEMV");
    return v == nullptr || std::strcmp(v, "mma") != 0;
  }();
  return enabled;
}

// The row quantization a W8A8 linear's input takes (quantize_activations.h), or kNone for other formats;
// `input_scale`: its static per-tensor scale, or nullptr (dynamic per token).
RowQuant w8a8_row_quant(const backend::LinearWeights& w, const float*& input_scale) {
  input_scale = nullptr;
  quant::ActScaleMode act;
  RowQuant kind;
  if (const auto* f = std::get_if<quant::W8A8Fp8Format>(&w.format)) {
    act = f->act;
    kind = RowQuant::kFp8;
  } else if (const auto* g = std::get_if<quant::W8A8Int8Format>(&w.format)) {
    act = g->act;
    kind = RowQuant::kInt8;
  } else {
    return RowQuant::kNone;
  }
  if (act == quant::ActScaleMode::kStaticPerTensor) {
    input_scale = device_ptr<float>(w.input_scale, DType::kF32, "input_scale", w);
    XI_CHECK_EQ(w.input_scale.numel(), 1) << "linear " << fmt(w) << ": input_scale";
  }
  return kind;
}

// One FP8 decode row whose CUDA-core GEMV quantizes x itself (launch_fp8_quant_dot_gemv, see top): the
// shapes where that measured faster than quantizing first.
bool fp8_row_quantizes_x(int m, int64_t n, int64_t k, DType out_dtype) {
  return m == 1 && out_dtype == DType::kBF16 && fp8_dot_gemv_enabled() &&
         fp8_dot_gemv_fuse_pays(static_cast<int>(n), static_cast<int>(k));
}

// Whether a W8A8-INT8 linear of m rows runs our int8 GEMV (else cuBLASLt's GEMM into int32 sums): its
// workspace (w8a8_workspace) and its launch (int8_linear) must agree.
bool int8_runs_gemv(int m, int64_t n, int64_t k) {
  return m <= kQuantGemvMaxRows && fp8_gemv_supports(static_cast<int>(n), static_cast<int>(k));
}

}  // namespace

bool CudaBackend::fp8_gemv_quantizes_x(int m, int64_t n, int64_t k) {
  return fp8_row_quantizes_x(m, n, k, DType::kBF16);
}

bool CudaBackend::supports(const quant::WeightFormat& f) const {
  if (std::holds_alternative<quant::DenseFormat>(f) || std::holds_alternative<quant::Int8ChannelFormat>(f))
    return true;
  if (const auto* g = std::get_if<quant::IntGroupFormat>(&f))
    return (g->bits == 4 || g->bits == 8) && g->group_size >= 1 &&
           !(g->min_offset && (g->bits != 4 || g->zero_point));
  return std::holds_alternative<quant::W8A8Fp8Format>(f) || std::holds_alternative<quant::W8A8Int8Format>(f);
}

bool CudaBackend::supports_linear(const quant::WeightFormat& f, int64_t n, int64_t k) const {
  if (!supports(f)) return false;
  // The GEMMs of the prefill rows (m > 16) are cuBLASLt's: e4m3 needs n and k multiples of 16, int8 of 4.
  if (std::holds_alternative<quant::W8A8Fp8Format>(f)) return n % 16 == 0 && k % 16 == 0;
  if (std::holds_alternative<quant::W8A8Int8Format>(f)) return n % 4 == 0 && k % 4 == 0;
  return true;  // weight-only formats: any shape (the dequantize + bf16 GEMM path where no GEMV takes it)
}

QuantWeight CudaBackend::quant_weight(const backend::LinearWeights& w) const {
  const int64_t n = w.out_features(), k = w.in_features();
  QuantWeight q;
  q.n = static_cast<int>(n);
  q.k = static_cast<int>(k);
  XI_CHECK(n >= 1 && k >= 1 && n <= INT32_MAX && k <= INT32_MAX) << "linear " << fmt(w) << ": shape [" << n << ", " << k << "]";
  if (std::holds_alternative<quant::Int8ChannelFormat>(w.format)) {
    q.bits = 8;
    q.is_signed = true;
    q.group_size = q.k;
    q.w = device_ptr<uint8_t>(w.weight, DType::kI8, "weight", w);
    XI_CHECK_EQ(w.weight.numel(), n * k) << "linear " << fmt(w) << ": weight elements vs [" << n << ", " << k << "]";
    q.scales = device_ptr<float>(w.scales, DType::kF32, "scales", w);
    XI_CHECK_EQ(w.scales.numel(), n) << "linear " << fmt(w) << ": scales";
    return q;
  }
  const auto* g = std::get_if<quant::IntGroupFormat>(&w.format);
  XI_CHECK(g != nullptr && (g->bits == 4 || g->bits == 8)) << "linear: format " << fmt(w) << " not supported on cuda";
  q.bits = g->bits;
  q.group_size = g->group_size;
  XI_CHECK(g->bits == 8 || k % 2 == 0) << "linear " << fmt(w) << ": int4 needs an even in_features, got " << k;
  q.w = device_ptr<uint8_t>(w.weight, DType::kU8, "weight", w);
  XI_CHECK_EQ(static_cast<size_t>(w.weight.numel()), q.weight_bytes())
      << "linear " << fmt(w) << ": packed weight bytes vs [" << n << ", " << k << "]";
  const int64_t groups = q.groups();
  q.scales = device_ptr<float>(w.scales, DType::kF32, "scales", w);
  XI_CHECK_EQ(w.scales.numel(), n * groups) << "linear " << fmt(w) << ": scales vs [" << n << ", " << groups << "]";
  if (g->zero_point) {
    q.zeros = device_ptr<uint8_t>(w.zeros, DType::kU8, "zeros", w);
    XI_CHECK_EQ(w.zeros.numel(), n * groups) << "linear " << fmt(w) << ": zeros vs [" << n << ", " << groups << "]";
  }
  if (g->min_offset) {
    XI_CHECK(g->bits == 4 && !g->zero_point) << "linear " << fmt(w) << ": mins need int4 without zero points";
    q.mins = device_ptr<float>(w.mins, DType::kF32, "mins", w);
    XI_CHECK_EQ(w.mins.numel(), n * groups)
        << "linear " << fmt(w) << ": mins vs [" << n << ", " << groups << "]";
  }
  if (!w.g_idx.empty()) {
    q.g_idx = device_ptr<int32_t>(w.g_idx, DType::kI32, "g_idx", w);
    XI_CHECK_EQ(w.g_idx.numel(), k) << "linear " << fmt(w) << ": g_idx";
  }
  return q;
}

void* CudaBackend::grow(GrowableBuffer& b, size_t bytes, const char* what) {
  if (bytes > b.bytes) {
    if (capturing_) {  // a synchronizing cudaMalloc cannot be recorded: fail this recording (see top)
      capture_failed_ = true;
      b.capture_bytes = std::max(b.capture_bytes, bytes);
      return nullptr;
    }
    DebugTimer timer("workspace growth (synchronizes)");
    if (timer.enabled()) timer.detail() << what << " " << b.bytes << " -> " << bytes << " bytes";
    synchronize();
    if (b.ptr) XI_CUDA_CHECK(cudaFree(b.ptr));
    b.ptr = nullptr;
    XI_CUDA_CHECK(cudaMalloc(&b.ptr, bytes));
    b.bytes = bytes;
  }
  return b.ptr;
}

WqGemmWorkspace CudaBackend::wq_gemm_workspace() {
  if (wq_gemm_ws_.partial == nullptr && !capturing_) {
    const size_t bytes = WqGemmWorkspace::partial_bytes() + WqGemmWorkspace::counter_bytes();
    void* p = nullptr;
    synchronize();
    XI_CUDA_CHECK(cudaMalloc(&p, bytes));
    // On the backend's stream and waited for: a cudaMemset on the legacy stream does not order with this
    // non-blocking stream, so the first GEMM's counters could be zeroed under it.
    XI_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream_));
    XI_CUDA_CHECK(cudaStreamSynchronize(stream_));
    wq_gemm_ws_.partial = static_cast<float*>(p);
    wq_gemm_ws_.counters =
        reinterpret_cast<unsigned*>(static_cast<char*>(p) + WqGemmWorkspace::partial_bytes());
  }
  return wq_gemm_ws_;
}

void* CudaBackend::quant_workspace(size_t bytes) {
  return grow(quant_ws_, bytes, "quantized linears");
}

CudaBackend::W8a8WorkspaceLayout CudaBackend::w8a8_workspace_layout(const backend::LinearWeights& w, int m) {
  const int64_t n = w.out_features(), k = w.in_features();
  W8a8WorkspaceLayout l;
  l.xq_bytes = (static_cast<size_t>(m) * k + 255) / 256 * 256;
  l.xs_bytes = (static_cast<size_t>(m) * 4 + 255) / 256 * 256;
  l.tail_bytes = static_cast<size_t>(n) * 4;  // FP8: the broadcast weight scales
  if (std::holds_alternative<quant::W8A8Int8Format>(w.format)) {  // int32 sums for cuBLASLt only
    const bool cublaslt = !int8_runs_gemv(m, n, k) && !int8_wgmma_for(m, static_cast<int>(n), static_cast<int>(k));
    if (cublaslt && !int8_) int8_ = std::make_unique<CublasLtInt8Gemm>();
    l.tail_bytes = cublaslt ? int8_->acc_bytes(m, static_cast<int>(n)) : 0;
  }
  return l;
}

std::optional<CudaBackend::W8a8Workspace> CudaBackend::w8a8_workspace(const backend::LinearWeights& w, int m) {
  const W8a8WorkspaceLayout l = w8a8_workspace_layout(w, m);
  auto* ws = static_cast<uint8_t*>(quant_workspace(l.total()));
  if (ws == nullptr) return std::nullopt;  // recording failed (see top)
  return W8a8Workspace{ws, reinterpret_cast<float*>(ws + l.xq_bytes), ws + l.xq_bytes + l.xs_bytes};
}

void CudaBackend::reserve_quant_workspace(const std::vector<const backend::LinearWeights*>& linears, int max_tokens) {
  XI_CHECK(!capturing_) << "reserve_quant_workspace() while recording a graph";
  size_t bytes = 0, segment_bytes = 0;
  std::vector<const backend::LinearWeights*> flat;  // segments in place of a segmented weight
  for (const backend::LinearWeights* w : linears) {
    if (!w->segmented()) {
      flat.push_back(w);
      continue;
    }
    // Segment outputs through the workspace (segmented_linear): every segment at any m where segments_gemm
    // cannot join them (a bf16 or W8A8 segment, a bias, an input permutation); otherwise a weight-only
    // segment only where its GEMV or the tiled GEMM does not take it, beside a tiled one: up to the tiled
    // GEMM's last row (at least the GEMVs' 16), segments_gemm taking them all together past it. bf16 outputs
    // (qkv, gate_up); an f32 one grows it outside a recording.
    const bool joinable = segments_joinable(*w);
    const int tiled_rows = wq_gemm_max_rows_ == kWqGemmMeasured ? kInt8MeasuredMaxRows : wq_gemm_max_rows_;
    const int rows = joinable ? std::min(max_tokens, std::max(tiled_rows, kQuantGemvMaxRows)) : max_tokens;
    for (const backend::LinearWeights& s : w->segments) {
      flat.push_back(&s);
      if (rows > 1)
        segment_bytes =
            std::max(segment_bytes, static_cast<size_t>(rows) * s.out_features() * sizeof(__nv_bfloat16));
    }
    // prefill rows: all segments dequantized into one weight (segments_gemm)
    if (max_tokens > kQuantGemvMaxRows)
      bytes =
          std::max(bytes, static_cast<size_t>(w->out_features()) * w->in_features() * sizeof(__nv_bfloat16));
  }
  if (segment_bytes > 0) grow(segment_ws_, segment_bytes, "segments");
  for (const backend::LinearWeights* w : flat) {
    if (w->dense()) continue;
    if (std::holds_alternative<quant::W8A8Fp8Format>(w->format) ||
        std::holds_alternative<quant::W8A8Int8Format>(w->format)) {
      bytes = std::max(bytes, w8a8_workspace_layout(*w, max_tokens).total());  // grows with m
    } else if (max_tokens > kQuantGemvMaxRows) {  // weight-only formats: prefill rows dequantize the weight
      bytes = std::max(bytes, static_cast<size_t>(w->out_features()) * w->in_features() * sizeof(__nv_bfloat16));
      if (wq_gemm_max_rows_ != 0) wq_gemm_workspace();  // the tiled GEMM's split-k partials
    }
    if (!w->input_perm.empty())  // act order: decode rows gather x's columns here (quantized_linear)
      bytes = std::max(bytes, static_cast<size_t>(std::min(max_tokens, kQuantGemvMaxRows)) *
                                  w->in_features() * sizeof(__nv_bfloat16));
  }
  if (bytes > 0) quant_workspace(bytes);
}

void CudaBackend::fp8_linear(const TensorView& x, const backend::LinearWeights& w, const TensorView& out,
                             bool x_quantized) {
  XI_CHECK(w.input_perm.empty()) << "linear " << fmt(w) << ": an input permutation on a W8A8 weight";
  const auto& f = std::get<quant::W8A8Fp8Format>(w.format);
  const int64_t n = w.out_features(), k = w.in_features();
  const int m = static_cast<int>(x.numel() / k);
  const auto* wq = device_ptr<uint8_t>(w.weight, DType::kFP8E4M3, "weight", w);
  XI_CHECK_EQ(w.weight.numel(), n * k) << "linear " << fmt(w) << ": weight elements vs [" << n << ", " << k << "]";
  const auto* ws_in = device_ptr<float>(w.scales, DType::kF32, "scales", w);
  XI_CHECK_EQ(w.scales.numel(), f.per_channel ? n : 1) << "linear " << fmt(w) << ": scales";
  const float* input_scale = nullptr;
  w8a8_row_quant(w, input_scale);
  XI_CHECK(x.dtype == DType::kBF16 && x.device == Device::kCuda) << "linear x must be a bf16 cuda tensor";
  if (!w.bias.empty()) XI_CHECK(w.bias.dtype == DType::kBF16) << "linear bias must be bf16";
  const auto* bias = w.bias.empty() ? nullptr : static_cast<const __nv_bfloat16*>(w.bias.data);
  const int ni = static_cast<int>(n), ki = static_cast<int>(k);
  const bool dot_row = m == 1 && out.dtype == DType::kBF16 && fp8_dot_gemv_enabled();
  if (!x_quantized && fp8_row_quantizes_x(m, n, k, out.dtype)) {
    // One decode row: the CUDA-core FP8 GEMV quantizing x itself (one launch; the same bits as below).
    const DotGemvConfig config = fp8_quant_dot_gemv_default_config(ni, ki, options_.gemv_pdl);
    if (fp8_quant_dot_gemv_supports(ni, ki, m, config) && reinterpret_cast<uintptr_t>(x.data) % 16 == 0) {
      launch_fp8_quant_dot_gemv({static_cast<const __nv_bfloat16*>(x.data), input_scale, wq, ws_in, f.per_channel, bias,
                                 out.data, false, m, ni, ki},
                                stream_, config);
      ++fp8_gemvs_;
      return;
    }
  }
  const std::optional<W8a8Workspace> ws = w8a8_workspace(w, m);
  if (!ws) return;  // recording failed (see top)
  if (!x_quantized)
    launch_quantize_fp8_rows(static_cast<const __nv_bfloat16*>(x.data), m, ki, input_scale, ws->xq, ws->xs, stream_);
  if (dot_row && fp8_dot_gemv_supports(ni, ki, m)) {  // the split-K dot GEMV on the quantized row
    launch_fp8_dot_gemv({ws->xq, ws->xs, wq, ws_in, f.per_channel, bias, out.data, false, m, ni, ki}, stream_,
                        fp8_dot_gemv_default_config(ni, ki, options_.gemv_pdl));
    ++fp8_gemvs_;
    return;
  }
  if (m <= kQuantGemvMaxRows && fp8_gemv_supports(ni, ki)) {
    // Decode rows: our FP8 GEMV (cuBLASLt's FP8 GEMM reached 24-55% of the bandwidth at m = 1; this 50-86%).
    const QuantGemvConfig config = tokens16_switch(fp8_gemv_default_config(ni, ki, options_.gemv_pdl));
    launch_fp8_gemv({ws->xq, ws->xs, wq, ws_in, f.per_channel, bias, out.data, out.dtype == DType::kF32, m, ni, ki},
                    stream_, config);
    ++fp8_gemvs_;
    return;
  }
  const float* w_scales = ws_in;
  if (!f.per_channel) {
    auto* wsv = reinterpret_cast<float*>(ws->tail);
    launch_broadcast_scale(ws_in, ni, wsv, stream_);
    w_scales = wsv;
  }
  const Fp8GemmArgs args{ws->xq, ws->xs, wq, w_scales, bias, out.data, out.dtype == DType::kF32, m, ni, ki};
  if (const std::optional<Int8WgmmaConfig> config = fp8_wgmma_for(m, ni, ki);
      config && reinterpret_cast<uintptr_t>(wq) % 16 == 0 && reinterpret_cast<uintptr_t>(ws->xq) % 16 == 0) {
    launch_w8a8_fp8_wgmma(args, stream_, *config);
    ++fp8_gemms_;
    ++fp8_wgmma_gemms_;
    return;
  }
  if (!fp8_) fp8_ = std::make_unique<CublasLtFp8Gemm>();
  XI_CHECK(fp8_->supported(args)) << "linear " << fmt(w) << " [" << n << ", " << k << "] at " << m
                                  << " rows: cuBLASLt has no FP8 algorithm (k and n must be multiples of 16)";
  fp8_->run(args, stream_);
  ++fp8_gemms_;
}

void CudaBackend::measure_w8a8_gemms(const std::vector<const backend::LinearWeights*>& linears, int max_rows,
                                     bool show_progress) {
  XI_CHECK(!capturing_) << "measure_w8a8_gemms() while recording a graph";
  const auto start = std::chrono::steady_clock::now();
  std::vector<int> rows;
  for (int m = 1; m <= max_rows; ++m)
    if (variant_rows(m)) rows.push_back(m);
  std::set<std::tuple<int, int64_t, int64_t, bool>> seen;  // (format index, n, k, bias)
  std::vector<const backend::LinearWeights*> distinct;
  for (const backend::LinearWeights* w : linears)
    if ((std::holds_alternative<quant::W8A8Fp8Format>(w->format) ||
         std::holds_alternative<quant::W8A8Int8Format>(w->format)) &&
        seen.insert({static_cast<int>(w->format.index()), w->out_features(), w->in_features(), !w->bias.empty()}).second)
      distinct.push_back(w);
  if (distinct.empty() || rows.empty()) return;
  const bool any_fp8 = std::any_of(distinct.begin(), distinct.end(), [](const backend::LinearWeights* w) {
    return std::holds_alternative<quant::W8A8Fp8Format>(w->format);
  });
  if (any_fp8 && !fp8_) fp8_ = std::make_unique<CublasLtFp8Gemm>();
  if (!options_.gemm_tuning && fp8_) {  // --no-gemm-tuning: cuBLASLt's heuristic for the FP8 GEMMs too
    fp8_->set_measure(false);
    std::erase_if(distinct, [](const backend::LinearWeights* w) {
      return std::holds_alternative<quant::W8A8Fp8Format>(w->format);
    });
    XI_LOG(INFO) << "cuda: FP8 GEMM measurement off (--no-gemm-tuning): cuBLASLt's heuristic algorithm";
    if (distinct.empty()) return;
  }
  // FP8 decisions of earlier runs on this device (the GEMM tuner's cache file, a section of its own): taken
  // instead of timing the shape's ~250 candidates again.
  const std::string cache_path = gemm_tuning_cache_path();
  const std::string cache_key =
      gemm_->device_key() + "|w8a8-fp8 outer-vec v" + std::to_string(CublasLtFp8Gemm::kChoiceVersion);
  std::string cache_note = "no cache";
  if (!cache_path.empty()) {
    const CachedGemmChoices cached = read_gemm_tuning_cache(cache_path, cache_key, "the FP8 choices");
    CublasLtFp8Gemm::add_known_choices(cached.entries);
    using State = CachedGemmChoices::State;
    cache_note = cached.state == State::kLoaded
                     ? std::to_string(cached.entries.size()) + " FP8 choices from " + cache_path
                 : cached.state == State::kNew ? "no FP8 choices yet in " + cache_path
                                               : cache_path + " unreadable";
  }
  if (fp8_) fp8_->set_max_measured_rows(rows.back());
  ProgressBar bar("Measuring W8A8 GEMMs", static_cast<int64_t>(distinct.size() * rows.size()), "points",
                  show_progress && isatty(STDERR_FILENO) != 0);
  for (const backend::LinearWeights* w : distinct) {
    const int64_t n = w->out_features(), k = w->in_features();
    backend::DeviceTensor x = allocate(DType::kBF16, Shape{rows.back(), k});
    backend::DeviceTensor y = allocate(DType::kBF16, Shape{rows.back(), n});
    XI_CUDA_CHECK(cudaMemsetAsync(x.view.data, 0, x.view.bytes(), stream_));
    for (const int m : rows) {
      TensorView xm = x.view, ym = y.view;
      xm.shape = Shape{m, k};
      ym.shape = Shape{m, n};
      linear(xm, *w, ym);
      bar.advance();
    }
    synchronize();
  }
  bar.finish();
  if (fp8_) fp8_->release_tuning_scratch();
  if (!cache_path.empty()) {
    const std::vector<GemmTuningEntry> known = CublasLtFp8Gemm::known_choices();
    if (!known.empty()) {
      const Status st = save_gemm_tuning_cache(cache_path, cache_key, known);
      if (!st.ok()) XI_LOG(WARN) << "GEMM tuning cache: FP8 choices not saved: " << st.to_string();
    }
  }
  XI_LOG(INFO) << "cuda: W8A8 GEMM choices measured for " << distinct.size() << " shapes at " << rows.size()
               << " decode batch sizes (" << rows.front() << ".." << rows.back() << ") in "
               << std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() << " s ("
               << cache_note << ")";
}

namespace {

// The process's FP8 GEMM decisions (CudaBackend::measure_fp8_gemms): (device name, n, k, fp8_gemm_row_bucket)
// -> the wgmma configuration, or nullopt where cuBLASLt's GEMM was as fast. The first measurement of a key at
// the bucket's own rows decides it for every backend of the process; each backend copies the keys it needs
// into its own map (fp8_measured_), which linear() reads without a lock: measure_fp8_gemms writes it at
// start-up, before the thread that runs the steps starts (or on that thread), and never while steps run.
struct Fp8WgmmaDecisions {
  std::mutex mu;
  std::map<std::tuple<std::string, int, int, int>, std::optional<Int8WgmmaConfig>> by_bucket;
};
Fp8WgmmaDecisions& fp8_wgmma_decisions() {
  static Fp8WgmmaDecisions d;
  return d;
}

}  // namespace

std::optional<Int8WgmmaConfig> CudaBackend::fp8_wgmma_for(int m, int n, int k) const {
  if (fp8_cublaslt_only_ || m <= kQuantGemvMaxRows || !w8a8_int8_wgmma_supports(m, n, k) ||
      !fp8_fast_accumulation())
    return std::nullopt;
  if (fp8_wgmma_fixed_) return *fp8_wgmma_fixed_;
  const auto it = fp8_measured_.find({n, k, fp8_gemm_row_bucket(m)});
  return it == fp8_measured_.end() ? std::nullopt : it->second;
}

void CudaBackend::measure_fp8_gemms(const std::vector<const backend::LinearWeights*>& linears,
                                    int max_tokens) {
  XI_CHECK(!capturing_) << "measure_fp8_gemms() while recording a graph";
  if (fp8_cublaslt_only_ || fp8_wgmma_fixed_ || !options_.gemm_tuning || !fp8_fast_accumulation() ||
      max_tokens <= kQuantGemvMaxRows)
    return;
  const auto start = std::chrono::steady_clock::now();
  // Every bucket an m-row GEMM past the GEMV's rows can fall in, up to the one holding max_tokens (timed at
  // min(bucket, max_tokens) rows), so that linear() finds a decision for any step of this engine; at most
  // kFp8MeasuredMaxRows (the scratch output grows with the rows: larger steps run cuBLASLt).
  const std::vector<int> buckets = fp8_measured_row_buckets(kQuantGemvMaxRows + 1, max_tokens);
  const int max_rows = std::min(buckets.back(), max_tokens);
  Fp8WgmmaDecisions& d = fp8_wgmma_decisions();
  std::set<std::pair<int, int>> seen;
  int shapes = 0, points = 0, wgmma_wins = 0;
  for (const backend::LinearWeights* w : linears) {
    const int ni = static_cast<int>(w->out_features()), ki = static_cast<int>(w->in_features());
    if (!std::holds_alternative<quant::W8A8Fp8Format>(w->format) || !seen.insert({ni, ki}).second ||
        !w8a8_int8_wgmma_supports(max_rows, ni, ki))
      continue;
    // Scratch codes (any finite values: the timing does not depend on them), per-channel scales, output, and
    // copies of the weight to rotate through so that L2 holds none of them, as in the engine's steps. The
    // bias is the weight's own, so cuBLASLt runs the plan (and the measured algorithm) the engine runs.
    const int copies = rotated_copies(static_cast<size_t>(ni) * ki);
    const size_t scratch_bytes = static_cast<size_t>(copies) * ni * ki + static_cast<size_t>(max_rows) * ki +
                                 4 * static_cast<size_t>(std::max(max_rows, ni)) +
                                 2 * static_cast<size_t>(max_rows) * ni;
    size_t free_bytes = 0, total_bytes = 0;
    XI_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    // E.g. a 70B gate_up at 16k rows on a nearly full card: not measured rather than an abort.
    if (scratch_bytes > free_bytes / 2) {
      XI_LOG(WARN) << "cuda: W8A8-FP8 GEMM [" << ni << ", " << ki << "] not measured: its timing scratch ("
                   << static_cast<double>(scratch_bytes) / (1 << 30)
                   << " GiB) exceeds half of the free memory (" << static_cast<double>(free_bytes) / (1 << 30)
                   << " GiB); cuBLASLt runs it";
      continue;
    }
    ++shapes;
    backend::DeviceTensor wq = allocate(DType::kU8, Shape{copies, static_cast<int64_t>(ni) * ki});
    backend::DeviceTensor xq = allocate(DType::kU8, Shape{max_rows, ki});
    backend::DeviceTensor scales = allocate(DType::kF32, Shape{std::max(max_rows, ni)});
    backend::DeviceTensor y = allocate(DType::kBF16, Shape{max_rows, ni});
    XI_CUDA_CHECK(cudaMemsetAsync(wq.view.data, 0x30, wq.view.bytes(), stream_));
    XI_CUDA_CHECK(cudaMemsetAsync(xq.view.data, 0x30, xq.view.bytes(), stream_));
    XI_CUDA_CHECK(cudaMemsetAsync(scales.view.data, 0x3c, scales.view.bytes(), stream_));
    const auto* bias = w->bias.empty() ? nullptr : static_cast<const __nv_bfloat16*>(w->bias.data);
    if (!fp8_) fp8_ = std::make_unique<CublasLtFp8Gemm>();
    for (const int b : buckets) {
      const std::tuple<std::string, int, int, int> key{device_name_, ni, ki, b};
      {
        std::lock_guard<std::mutex> lock(d.mu);
        if (const auto it = d.by_bucket.find(key);
            it != d.by_bucket.end()) {  // decided earlier in this process
          fp8_measured_[{ni, ki, b}] = it->second;
          continue;
        }
      }
      const int m = std::min(b, max_tokens);
      const auto* sc = static_cast<const float*>(scales.view.data);
      int turn = 0;
      auto args = [&]() {
        const auto* base =
            static_cast<const uint8_t*>(wq.view.data) + static_cast<size_t>(turn++ % copies) * ni * ki;
        return Fp8GemmArgs{
            static_cast<const uint8_t*>(xq.view.data), sc, base, sc, bias, y.view.data, false, m, ni, ki};
      };
      if (!fp8_->supported(args())) continue;
      // cuBLASLt first: fastest_algo keeps it unless a wgmma configuration is more than 1% faster.
      const int best =
          fastest_algo(1 + static_cast<int>(std::size(kInt8WgmmaConfigs)), stream_, stream_, [&](int i) {
            if (i == 0)
              fp8_->run(args(), stream_);
            else
              launch_w8a8_fp8_wgmma(args(), stream_, kInt8WgmmaConfigs[i - 1]);
            return CUBLAS_STATUS_SUCCESS;
          });
      std::optional<Int8WgmmaConfig> chosen;
      if (best > 0) chosen = kInt8WgmmaConfigs[best - 1];
      if (m == b) {  // timed at the bucket's own rows, so any engine of the process may take it; a bucket
                     // timed at fewer rows (this engine's max_tokens) stays this backend's
        std::lock_guard<std::mutex> lock(d.mu);
        chosen =
            d.by_bucket.emplace(key, chosen).first->second;  // another backend's, if it decided meanwhile
      }
      fp8_measured_[{ni, ki, b}] = chosen;
      ++points;
      wgmma_wins += chosen.has_value();
      XI_LOG(DEBUG) << "cuda: W8A8-FP8 GEMM [" << ni << ", " << ki << "] at " << m
                    << " rows: " << (chosen ? to_string(*chosen) : std::string("cuBLASLt"));
    }
  }
  if (fp8_) fp8_->release_tuning_scratch();  // any plan the timings above made measured its algorithms here
  if (shapes == 0) return;
  XI_LOG(INFO) << "cuda: W8A8-FP8 GEMM measured for " << shapes << " shapes at " << buckets.size()
               << " row buckets (" << buckets.front() << ".." << buckets.back() << ") in "
               << std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()
               << " s: our wgmma GEMM at " << wgmma_wins << " of " << points
               << " newly measured points, cuBLASLt elsewhere";
}

void CudaBackend::measure_int8_gemms(const std::vector<const backend::LinearWeights*>& linears, int max_tokens) {
  XI_CHECK(!capturing_) << "measure_int8_gemms() while recording a graph";
  if (int8_cublaslt_ || int8_rule_only_ || int8_wgmma_fixed_ || max_tokens <= 16) return;
  const auto start = std::chrono::steady_clock::now();
  const std::vector<int> buckets = int8_measured_row_buckets(max_tokens);
  std::map<std::string, int> wins;
  std::set<std::pair<int64_t, int64_t>> seen;
  int shapes = 0;
  for (const backend::LinearWeights* w : linears) {
    const int64_t n = w->out_features(), k = w->in_features();
    if (!std::holds_alternative<quant::W8A8Int8Format>(w->format) || !seen.insert({n, k}).second) continue;
    const int ni = static_cast<int>(n), ki = static_cast<int>(k), rows = std::min(buckets.back(), max_tokens);
    const auto* wq = device_ptr<int8_t>(w->weight, DType::kI8, "weight", *w);
    if (!w8a8_int8_wgmma_supports(rows, ni, ki) || reinterpret_cast<uintptr_t>(wq) % 16 != 0) continue;
    ++shapes;
    // Scratch codes (any values: the timing does not depend on them), scales and output.
    backend::DeviceTensor xq = allocate(DType::kI8, Shape{rows, k});
    backend::DeviceTensor xs = allocate(DType::kF32, Shape{rows});
    backend::DeviceTensor y = allocate(DType::kBF16, Shape{rows, n});
    XI_CUDA_CHECK(cudaMemsetAsync(xq.view.data, 0x11, xq.view.bytes(), stream_));
    XI_CUDA_CHECK(cudaMemsetAsync(xs.view.data, 0x3c, xs.view.bytes(), stream_));
    for (const int b : buckets) {
      const int m = std::min(b, max_tokens);
      const Int8GemmArgs args{static_cast<const int8_t*>(xq.view.data), static_cast<const float*>(xs.view.data), wq,
                              device_ptr<float>(w->scales, DType::kF32, "scales", *w), nullptr, y.view.data, false,
                              m, ni, ki, nullptr};
      // The rule's configuration first: fastest_algo keeps it unless another is more than 1% faster.
      std::vector<Int8WgmmaConfig> candidates = {int8_wgmma_auto_config(m, ki)};
      for (const Int8WgmmaConfig& c : kInt8WgmmaConfigs)
        if (config_name(c) != config_name(candidates[0])) candidates.push_back(c);
      const int best = fastest_algo(static_cast<int>(candidates.size()), stream_, stream_, [&](int i) {
        launch_w8a8_int8_wgmma(args, stream_, candidates[static_cast<size_t>(i)]);
        return CUBLAS_STATUS_SUCCESS;
      });
      const Int8WgmmaConfig chosen = candidates[static_cast<size_t>(best)];
      int8_measured_[{ni, ki, b}] = chosen;
      ++wins[config_name(chosen)];
      XI_LOG(DEBUG) << "cuda: W8A8-INT8 GEMM [" << n << ", " << k << "] at " << m << " rows: " << to_string(chosen);
    }
  }
  if (shapes == 0) return;
  std::string summary;
  for (const auto& [name, count] : wins) summary += (summary.empty() ? "" : ", ") + name + " x" + std::to_string(count);
  XI_LOG(INFO) << "cuda: W8A8-INT8 GEMM configurations measured for " << shapes << " shapes at " << buckets.size()
               << " row buckets (32.." << buckets.back() << ") in "
               << std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() << " s: " << summary;
}

bool CudaBackend::wq_gemm_for(int m, int n, int k) const {
  if (m <= kQuantGemvMaxRows) return false;
  if (wq_gemm_max_rows_ != kWqGemmMeasured) return m <= wq_gemm_max_rows_;
  const auto it = wq_measured_.find({n, k, int8_wgmma_row_bucket(m)});  // the INT8 measurement's buckets
  return it != wq_measured_.end() && it->second;
}

void CudaBackend::measure_wq_gemms(const std::vector<const backend::LinearWeights*>& linears, int max_rows) {
  XI_CHECK(!capturing_) << "measure_wq_gemms() while recording a graph";
  if (wq_gemm_max_rows_ != kWqGemmMeasured || max_rows <= kQuantGemvMaxRows) return;
  const auto start = std::chrono::steady_clock::now();
  const std::vector<int> buckets = int8_measured_row_buckets(max_rows);
  std::set<std::pair<int, int>> seen;
  int shapes = 0, tiled_wins = 0, cases = 0;
  for (const backend::LinearWeights* w : linears) {
    if (!quant::is_weight_only_int(w->format)) continue;
    const QuantWeight q = quant_weight(*w);
    if (!w->input_perm.empty() || !wq_gemm_supports(q) || !seen.insert({q.n, q.k}).second) continue;
    auto* ws =
        static_cast<__nv_bfloat16*>(quant_workspace(static_cast<size_t>(q.n) * q.k * sizeof(__nv_bfloat16)));
    if (ws == nullptr) continue;
    ++shapes;
    const int rows = std::min(buckets.back(), max_rows);
    backend::DeviceTensor x =
        allocate(DType::kBF16, Shape{rows, q.k});  // zeros: the timing does not depend on them
    backend::DeviceTensor y = allocate(DType::kBF16, Shape{rows, q.n});
    const auto* xp = static_cast<const __nv_bfloat16*>(x.view.data);
    for (const int b : buckets) {
      const int m = std::min(b, max_rows);
      // The dequantize path first: fastest_algo keeps it unless the tiled GEMM is more than 1% faster.
      const int best = fastest_algo(2, stream_, stream_, [&](int i) {
        if (i == 0) {
          launch_dequantize_weight(q, ws, stream_);
          gemm_->run({xp, ws, nullptr, y.view.data, false, m, q.n, q.k}, stream_);
        } else {
          launch_wq_gemm({xp, q, nullptr, y.view.data, false, m}, wq_gemm_workspace(), stream_);
        }
        return CUBLAS_STATUS_SUCCESS;
      });
      wq_measured_[{q.n, q.k, b}] = best == 1;
      ++cases;
      tiled_wins += best == 1 ? 1 : 0;
      XI_LOG(DEBUG) << "cuda: weight-only " << describe(q) << " at " << m
                    << " rows: " << (best == 1 ? "tiled GEMM" : "dequantize + GEMM");
    }
  }
  if (shapes == 0) return;
  XI_LOG(INFO) << "cuda: weight-only linears past " << kQuantGemvMaxRows << " rows measured for " << shapes
               << " shapes at " << buckets.size() << " row buckets (32.." << buckets.back() << ") in "
               << std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()
               << " s: the tiled GEMM at " << tiled_wins << " of " << cases;
}

void CudaBackend::int8_linear(const TensorView& x, const backend::LinearWeights& w, const TensorView& out,
                              bool x_quantized) {
  XI_CHECK(w.input_perm.empty()) << "linear " << fmt(w) << ": an input permutation on a W8A8 weight";
  const int64_t n = w.out_features(), k = w.in_features();
  const int m = static_cast<int>(x.numel() / k);
  const auto* wq = device_ptr<int8_t>(w.weight, DType::kI8, "weight", w);
  XI_CHECK_EQ(w.weight.numel(), n * k) << "linear " << fmt(w) << ": weight elements vs [" << n << ", " << k << "]";
  const auto* w_scales = device_ptr<float>(w.scales, DType::kF32, "scales", w);
  XI_CHECK_EQ(w.scales.numel(), n) << "linear " << fmt(w) << ": scales (per channel)";
  const float* input_scale = nullptr;
  w8a8_row_quant(w, input_scale);
  XI_CHECK(x.dtype == DType::kBF16 && x.device == Device::kCuda) << "linear x must be a bf16 cuda tensor";
  if (!w.bias.empty()) XI_CHECK(w.bias.dtype == DType::kBF16) << "linear bias must be bf16";
  const auto* bias = w.bias.empty() ? nullptr : static_cast<const __nv_bfloat16*>(w.bias.data);
  const int ni = static_cast<int>(n), ki = static_cast<int>(k);
  const std::optional<W8a8Workspace> ws = w8a8_workspace(w, m);
  if (!ws) return;  // recording failed (see top)
  auto* xq = reinterpret_cast<int8_t*>(ws->xq);
  if (!x_quantized)
    launch_quantize_int8_rows(static_cast<const __nv_bfloat16*>(x.data), m, ki, input_scale, xq, ws->xs, stream_);
  const bool y_f32 = out.dtype == DType::kF32;
  if (int8_runs_gemv(m, n, k)) {
    const QuantGemvConfig config =
        tokens16_switch(w8a8_int8_gemv_default_config(ni, ki, m, options_.gemv_pdl));
    launch_w8a8_int8_gemv({ws->xq, ws->xs, reinterpret_cast<const uint8_t*>(wq), w_scales, true, bias, out.data, y_f32, m,
                           ni, ki},
                          stream_, config);
    ++int8_gemvs_;
    return;
  }
  const Int8GemmArgs args{xq, ws->xs, wq, w_scales, bias, out.data, y_f32, m, ni, ki, reinterpret_cast<int32_t*>(ws->tail)};
  const bool aligned = reinterpret_cast<uintptr_t>(wq) % 16 == 0 && reinterpret_cast<uintptr_t>(xq) % 16 == 0;
  if (const std::optional<Int8WgmmaConfig> config = aligned ? int8_wgmma_for(m, ni, ki) : std::nullopt) {
    launch_w8a8_int8_wgmma(args, stream_, *config);
    ++int8_gemms_;
    return;
  }
  XI_CHECK(int8_->supported(args, Int8GemmMode::kInt32Epilogue))
      << "linear " << fmt(w) << " [" << n << ", " << k << "] at " << m
      << " rows: cuBLASLt has no int8 algorithm (k and n must be multiples of 4)";
  int8_->run(args, stream_, Int8GemmMode::kInt32Epilogue);
  ++int8_gemms_;
}


bool CudaBackend::w8a8_norm_linear(const backend::NormLinearArgs& a) {
  const float* input_scale = nullptr;
  const RowQuant kind = w8a8_row_quant(a.linear, input_scale);
  const int64_t n = a.linear.out_features(), k = a.linear.in_features();
  const int m = static_cast<int>(a.residual.numel() / k);
  if (kind == RowQuant::kNone || k % 8 != 0 || a.residual.dtype != DType::kBF16 || a.norm_weight.dtype != DType::kBF16)
    return false;
  // One FP8 decode row on a shape where the CUDA-core GEMV quantizes x itself: that measured faster.
  if (kind == RowQuant::kFp8 && fp8_row_quantizes_x(m, n, k, a.out.dtype)) return false;
  const std::optional<W8a8Workspace> ws = w8a8_workspace(a.linear, m);
  if (!ws) return true;  // recording failed (see top): nothing to launch
  launch_add_rms_norm({static_cast<__nv_bfloat16*>(a.residual.data),
                       a.delta.empty() ? nullptr : static_cast<const __nv_bfloat16*>(a.delta.data),
                       static_cast<const __nv_bfloat16*>(a.norm_weight.data), nullptr, m, static_cast<int>(k), a.eps, kind,
                       ws->xq, ws->xs, input_scale},
                      stream_);
  quantized_linear(a.normed_out, a.linear, a.out, true);
  return true;
}

void CudaBackend::swiglu(const TensorView& gate_up, const TensorView& out, const backend::LinearWeights* consumer,
                         bool out_unread) {
  const float* input_scale = nullptr;
  const RowQuant kind = consumer == nullptr ? RowQuant::kNone : w8a8_row_quant(*consumer, input_scale);
  const int64_t inter = out.shape[out.shape.rank() - 1];
  if (kind == RowQuant::kNone || inter % 8 != 0 || consumer->in_features() != inter || gate_up.dtype != DType::kBF16 ||
      out.dtype != DType::kBF16 || reinterpret_cast<uintptr_t>(gate_up.data) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(out.data) % 16 != 0) {
    silu_mul(gate_up, out);
    return;
  }
  XI_CHECK_EQ(gate_up.numel(), 2 * out.numel());
  const int m = static_cast<int>(out.numel() / inter);
  const std::optional<W8a8Workspace> ws = w8a8_workspace(*consumer, m);
  if (!ws) return;  // recording failed (see top)
  const bool codes_only = out_unread && silu_mul_codes_only_supported(static_cast<int>(inter));
  launch_silu_mul({static_cast<const __nv_bfloat16*>(gate_up.data),
                   codes_only ? nullptr : static_cast<__nv_bfloat16*>(out.data), m, static_cast<int>(inter), kind,
                   ws->xq, ws->xs, input_scale},
                  stream_);
  quantized_input_ = {out.data, out.numel(), consumer->weight.data};
}

bool CudaBackend::quant_fused_chain(const backend::NormLinearArgs& a) {
  // Only with LinearFusion::kAlways: on the H200 the chain made batch-1 decode slower than the composition
  // (cudaq-2, 8B: w4a16 ITL 2.985 vs 2.583 ms, w8a16 3.576 vs 3.433 ms), so the default runs the composition.
  if (linear_fusion_ != LinearFusion::kAlways) return false;
  if (!quant::is_weight_only_int(a.linear.format) ||
      (!a.delta_x.empty() && !quant::is_weight_only_int(a.delta_linear.format)))
    return false;
  // The fused GEMVs read the residual / delta_x in place: no gather of an act-order weight's input.
  if (!a.linear.input_perm.empty() || (!a.delta_x.empty() && !a.delta_linear.input_perm.empty()))
    return false;
  if (!a.delta.empty() && a.delta_x.empty()) return false;  // a delta given as input needs an add of its own
  if (a.out.dtype != DType::kBF16 || a.residual.dtype != DType::kBF16 || a.residual.device != Device::kCuda) return false;
  const QuantWeight q = quant_weight(a.linear);
  const int m = static_cast<int>(a.residual.numel() / q.k);
  auto* residual = static_cast<__nv_bfloat16*>(a.residual.data);
  if (m < 1 || m > 8 || !quant_gemv_supports(q) || reinterpret_cast<uintptr_t>(residual) % 16 != 0) return false;
  const bool swiglu = !a.act_out.empty() && a.act_out.dtype == DType::kBF16 && q.n % 2 == 0;
  QuantGemvConfig config = quant_gemv_default_config(q, options_.gemv_pdl);
  config.ctas_per_sm = 2;  // the normed kernels spill at 3 CTAs per SM (ptxas: up to 308 bytes)
  config.sum_x = false;
  config.tokens16 = false;  // m <= 8 here; fusion takes one token tile
  const QuantGemvFusion consumer{false, static_cast<const __nv_bfloat16*>(a.norm_weight.data), a.eps,
                                 swiglu ? static_cast<__nv_bfloat16*>(a.act_out.data) : nullptr};
  if (a.norm_weight.dtype != DType::kBF16 || !quant_gemv_fusion_supports(q, m, consumer, config)) return false;
  QuantWeight qd;
  QuantGemvConfig producer_config;
  const QuantGemvFusion producer{true, nullptr, 0.0f, nullptr};
  if (!a.delta_x.empty()) {
    qd = quant_weight(a.delta_linear);
    if (!quant_gemv_supports(qd) || reinterpret_cast<uintptr_t>(a.delta_x.data) % 16 != 0 ||
        a.delta_x.dtype != DType::kBF16)
      return false;
    producer_config = QuantGemvConfig{2, options_.gemv_pdl, 8, false, false, false};  // add_to_y: pipelined
    if (!quant_gemv_fusion_supports(qd, m, producer, producer_config)) return false;
  }
  auto bias_of = [](const backend::LinearWeights& w) {
    return w.bias.empty() ? nullptr : static_cast<const __nv_bfloat16*>(w.bias.data);
  };
  if (!a.delta_x.empty()) {
    launch_quant_gemv({static_cast<const __nv_bfloat16*>(a.delta_x.data), qd, bias_of(a.delta_linear), residual, false, m},
                      stream_, producer_config, producer);
    ++quant_gemvs_;
  }
  launch_quant_gemv({residual, q, bias_of(a.linear), a.out.data, false, m}, stream_, config, consumer);
  ++quant_gemvs_;
  if (!a.act_out.empty() && !swiglu) silu_mul(a.out, a.act_out);
  return true;
}

void CudaBackend::quantized_linear(const TensorView& x, const backend::LinearWeights& w, const TensorView& out,
                                   bool x_quantized) {
  if (x_quantized) ++w8a8_quantized_inputs_;
  if (std::holds_alternative<quant::W8A8Fp8Format>(w.format)) return fp8_linear(x, w, out, x_quantized);
  if (std::holds_alternative<quant::W8A8Int8Format>(w.format)) return int8_linear(x, w, out, x_quantized);
  XI_CHECK(!x_quantized) << "linear " << fmt(w) << ": quantized input for a weight-only format";
  weight_only_linear(x, w, out.data, out.dtype == DType::kF32, 0);
}

bool CudaBackend::weight_only_linear(const TensorView& x, const backend::LinearWeights& w, void* y,
                                     bool y_f32, int ldy) {
  const QuantWeight q = quant_weight(w);
  const int m = static_cast<int>(x.numel() / q.k);
  XI_CHECK(x.dtype == DType::kBF16 && x.device == Device::kCuda) << "linear x must be a bf16 cuda tensor";
  const auto* bias = w.bias.empty() ? nullptr : static_cast<const __nv_bfloat16*>(w.bias.data);
  if (!w.bias.empty()) XI_CHECK(w.bias.dtype == DType::kBF16) << "linear bias must be bf16";
  const bool strided = ldy > 0 && ldy != q.n && m > 1;  // a row stride only the GEMVs and the tiled GEMM take
  const auto* xp = static_cast<const __nv_bfloat16*>(x.data);
  const int32_t* perm = nullptr;  // act order sorted at load (LinearWeights::input_perm)
  if (!w.input_perm.empty()) {
    if (strided) return false;
    perm = device_ptr<int32_t>(w.input_perm, DType::kI32, "input_perm", w);
    XI_CHECK_EQ(w.input_perm.numel(), static_cast<int64_t>(q.k)) << "linear " << fmt(w) << ": input_perm";
    if (m > kQuantGemvMaxRows ||
        !quant_gemv_supports(q)) {  // the weight dequantized in the input's column order
      auto* ws = static_cast<__nv_bfloat16*>(
          quant_workspace(static_cast<size_t>(q.n) * q.k * sizeof(__nv_bfloat16)));
      if (ws == nullptr) return true;  // recording failed (see top)
      launch_dequantize_weight(q, ws, stream_, perm);
      gemm_->run({xp, ws, bias, y, y_f32, m, q.n, q.k}, stream_);
      ++quant_dequant_gemms_;
      return true;
    }
    // Decode rows: x's columns in the weight's stored order (the workspace holds nothing else on this path),
    // then the GEMVs below as for any weight with contiguous groups.
    auto* xg =
        static_cast<__nv_bfloat16*>(quant_workspace(static_cast<size_t>(m) * q.k * sizeof(__nv_bfloat16)));
    if (xg == nullptr) return true;  // recording failed (see top)
    launch_gather_columns(xp, perm, m, q.k, xg, stream_);
    xp = xg;
  }
  if (q.bits == 4 && int4_decode_gemv_for(q, m) && int4_decode_gemv_enabled() &&
      int4_decode_gemv_supports(q) && reinterpret_cast<uintptr_t>(xp) % 16 == 0) {
    launch_int4_decode_gemv({xp, q, bias, y, y_f32, m, ldy}, stream_, options_.gemv_pdl,
                            int4_decode_gemv_default_schedule(q, m));
    ++quant_gemvs_;
    return true;
  }
  if (m == 1 && !y_f32 && int_dot_gemv_enabled(q.bits) && dot_gemv_supports(q, m) && reinterpret_cast<uintptr_t>(xp) % 16 == 0) {
    launch_dot_gemv({xp, q, bias, y, false, m}, stream_, dot_gemv_default_config(q, m, options_.gemv_pdl));
    ++quant_gemvs_;
    return true;
  }
  if (m <= kQuantGemvMaxRows && quant_gemv_supports(q) && reinterpret_cast<uintptr_t>(xp) % 16 == 0) {
    launch_quant_gemv({xp, q, bias, y, y_f32, m, ldy}, stream_,
                      tokens16_switch(quant_gemv_default_config(q, options_.gemv_pdl)));
    ++quant_gemvs_;
    return true;
  }
  if (m > kQuantGemvMaxRows && perm == nullptr && wq_gemm_for(m, q.n, q.k) && wq_gemm_supports(q) &&
      reinterpret_cast<uintptr_t>(xp) % 16 == 0) {
    launch_wq_gemm({xp, q, bias, y, y_f32, m, ldy}, wq_gemm_workspace(), stream_);
    ++quant_tiled_gemms_;
    return true;
  }
  if (strided) return false;
  if (m <= kQuantGemvMaxRows) {
    // Once per process and shape; tensor-parallel ranks run this on their own threads.
    static std::mutex logged_mutex;
    static std::set<std::string> logged;
    bool first;
    {
      std::lock_guard<std::mutex> lock(logged_mutex);
      first = logged.insert(describe(q)).second;
    }
    if (first)
      XI_LOG(INFO) << "cuda: no decode GEMV for " << describe(q)
                   << " (needs k % 32 (int4) / 16 (int8), group % 32 (int4) / 16 (int8), no g_idx): "
                      "dequantize + bf16 GEMM";
  }
  XI_CHECK(perm == nullptr) << "linear " << fmt(w)
                            << ": x gathered into the workspace the dequantize path needs";
  auto* ws = static_cast<__nv_bfloat16*>(quant_workspace(static_cast<size_t>(q.n) * q.k * sizeof(__nv_bfloat16)));
  if (ws == nullptr) return true;  // recording failed (see top)
  launch_dequantize_weight(q, ws, stream_);
  gemm_->run({xp, ws, bias, y, y_f32, m, q.n, q.k}, stream_);
  ++quant_dequant_gemms_;
  return true;
}

bool CudaBackend::segments_joinable(const backend::LinearWeights& w) {
  for (const backend::LinearWeights& s : w.segments)
    if (!quant::is_weight_only_int(s.format) || !s.input_perm.empty() || !s.bias.empty()) return false;
  return true;
}

bool CudaBackend::segments_gemm(const TensorView& x, const backend::LinearWeights& w, const TensorView& out) {
  const int64_t n = w.out_features(), k = w.in_features();
  const int m = static_cast<int>(x.numel() / k);
  if (m <= kQuantGemvMaxRows || x.dtype != DType::kBF16 || !segments_joinable(w)) return false;
  std::vector<QuantWeight> qs;
  for (const backend::LinearWeights& s : w.segments) {
    qs.push_back(quant_weight(s));
    if (wq_gemm_for(m, qs.back().n, qs.back().k) && wq_gemm_supports(qs.back()))
      return false;  // tiled: its own
  }
  auto* ws = static_cast<__nv_bfloat16*>(quant_workspace(static_cast<size_t>(n) * k * sizeof(__nv_bfloat16)));
  if (ws == nullptr) return true;  // recording failed (see top)
  size_t row = 0;
  for (const QuantWeight& q : qs) {
    launch_dequantize_weight(q, ws + row * k, stream_);
    row += static_cast<size_t>(q.n);
  }
  gemm_->run({static_cast<const __nv_bfloat16*>(x.data), ws, nullptr, out.data, out.dtype == DType::kF32, m,
              static_cast<int>(n), static_cast<int>(k)},
             stream_);
  ++quant_dequant_gemms_;
  return true;
}

}  // namespace xinfer::cuda
