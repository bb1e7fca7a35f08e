// Memory, step upload and op dispatch of the CUDA backend; kernels live in kernels/<family>/.
#include "xinfer/backend/cuda/cuda_backend.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "xinfer/backend/cuda/cuda_check.h"
#include "xinfer/backend/cuda/device_ceilings.h"
#include "xinfer/backend/cuda/kernels/attention/paged_attention_generic.h"
#include "xinfer/backend/cuda/kernels/attention/paged_decode_attention.h"
#include "xinfer/backend/cuda/kernels/attention/paged_prefill_attention.h"
#include "xinfer/backend/cuda/kernels/elementwise/argmax_rows.h"
#include "xinfer/backend/cuda/kernels/elementwise/feed_tokens.h"
#include "xinfer/backend/cuda/kernels/elementwise/gather_rows.h"
#include "xinfer/backend/cuda/kernels/elementwise/kv_block_copy.h"
#include "xinfer/backend/cuda/kernels/elementwise/silu_mul.h"
#include "xinfer/backend/cuda/kernels/gemm/cublaslt_fp8_gemm.h"
#include "xinfer/backend/cuda/kernels/gemm/cublaslt_int8_gemm.h"
#include "xinfer/backend/cuda/kernels/gemm/gemm_tuner.h"
#include "xinfer/backend/cuda/kernels/gemm/gemm_tuning_cache.h"
#include "xinfer/backend/cuda/kernels/gemm/gemv.h"
#include "xinfer/backend/cuda/kernels/norm/qk_norm.h"
#include "xinfer/backend/cuda/kernels/norm/rms_norm.h"
#include "xinfer/backend/cuda/kernels/random/random_normal.h"
#include "xinfer/backend/cuda/kernels/rope/rope_kv_write.h"
#include "xinfer/backend/cuda/swap_space_buffer.h"
#include "xinfer/core/logging.h"

namespace xinfer::cuda {
namespace {

class CudaBuffer final : public backend::DeviceBuffer {
 public:
  explicit CudaBuffer(size_t bytes) : bytes_(bytes) {
    const cudaError_t err = cudaMalloc(&data_, std::max<size_t>(bytes, 256));
    XI_CHECK(err == cudaSuccess) << "cudaMalloc of " << bytes << " bytes: " << cudaGetErrorString(err);
  }
  ~CudaBuffer() override { cudaFree(data_); }
  void* data() const override { return data_; }
  size_t bytes() const override { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_;
};

__nv_bfloat16* bf16_ptr(const TensorView& t, const char* what) {
  XI_CHECK(t.dtype == DType::kBF16) << what << " must be bf16 on cuda, got " << dtype_name(t.dtype);
  XI_CHECK(t.device == Device::kCuda) << what << " is not a cuda tensor";
  return static_cast<__nv_bfloat16*>(t.data);
}

int64_t last_dim(const TensorView& t) { return t.shape[t.shape.rank() - 1]; }

// A KV-cache tensor's device pointer: bf16 elements, or e4m3 codes (FP8 cache) behind the same pointer type.
__nv_bfloat16* kv_ptr(const TensorView& t, const char* what) {
  XI_CHECK(t.dtype == DType::kBF16 || t.dtype == DType::kFP8E4M3)
      << what << " must be bf16 or fp8_e4m3 on cuda, got " << dtype_name(t.dtype);
  XI_CHECK(t.device == Device::kCuda) << what << " is not a cuda tensor";
  return static_cast<__nv_bfloat16*>(t.data);
}

int to_int(int64_t v) {
  XI_CHECK(v >= 0 && v <= INT32_MAX) << v << " does not fit in int32";
  return static_cast<int>(v);
}

}  // namespace

CudaBackend::CudaBackend(CudaBackendOptions options) : device_(options.device), options_(options) {
  XI_CUDA_CHECK(cudaSetDevice(device_));
  cudaDeviceProp props{};
  XI_CUDA_CHECK(cudaGetDeviceProperties(&props, device_));
  XI_CHECK(props.major == 9) << "the CUDA backend is built for Hopper (sm_90a); device " << device_ << " is "
                             << props.name << " (sm_" << props.major << props.minor << ")";
  device_name_ = props.name;
  num_sms_ = props.multiProcessorCount;
  XI_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  XI_CUDA_CHECK(cudaEventCreateWithFlags(&step_copied_, cudaEventDisableTiming));
  gemm_ = std::make_unique<GemmTuner>(options.gemm_workspace_bytes);
  linear_fusion_ = options.linear_fusion;
  rope_attention_fusion_ = options.rope_attention_fusion;
  if (const char* v = std::getenv("XINFER_FP8_KV_F16")) fp8_kv_f16_mma_ = std::atoi(v) != 0;  // A/B switch
  if (const char* v = std::getenv("XINFER_FP8_KV_PREFETCH"))
    set_fp8_kv_decode_prefetch(std::atoi(v));                                                   // A/B switch
  if (const char* v = std::getenv("XINFER_DECODE_WARPS")) set_decode_many_warps(std::atoi(v));  // A/B switch
  if (const char* v = std::getenv("XINFER_FP8_KV_WGMMA")) fp8_kv_wgmma_prefill_ = std::atoi(v) != 0;  // A/B switch
  if (const char* v = std::getenv("XINFER_PREFILL_WS")) prefill_ws_ = std::atoi(v) != 0;  // A/B switch
  if (const char* v = std::getenv("XINFER_INT8_GEMM")) set_int8_gemm(v);                            // A/B switch
  if (const char* v = std::getenv("XINFER_FP8_GEMM")) set_fp8_gemm(v);  // A/B switch
  if (const char* v = std::getenv("XINFER_WQ_GEMM_MAX_ROWS"))  // A/B switch
    set_wq_gemm_max_rows(std::strcmp(v, "auto") == 0 ? kWqGemmMeasured : std::atoi(v));
}

void CudaBackend::set_int8_gemm(const std::string& name) {
  int8_cublaslt_ = name == "cublaslt";
  int8_rule_only_ = name == "rule";
  int8_wgmma_fixed_.reset();
  int8_measured_.clear();
  if (name == "auto" || name == "cublaslt" || name == "rule") return;
  int8_wgmma_fixed_ = wgmma_config_named(name);
  XI_CHECK(int8_wgmma_fixed_.has_value())
      << "W8A8-INT8 GEMM (XINFER_INT8_GEMM): one of auto, rule, cublaslt, " << wgmma_config_names()
      << "; got '" << name << "'";
}

void CudaBackend::set_fp8_gemm(const std::string& name) {
  fp8_cublaslt_only_ = name == "cublaslt";
  fp8_wgmma_fixed_.reset();
  if (name == "auto" || name == "cublaslt") return;
  fp8_wgmma_fixed_ = wgmma_config_named(name);
  XI_CHECK(fp8_wgmma_fixed_.has_value()) << "W8A8-FP8 GEMM (XINFER_FP8_GEMM): one of auto, cublaslt, "
                                         << wgmma_config_names() << "; got '" << name << "'";
  if (!fp8_fast_accumulation())
    XI_LOG(WARN) << "W8A8-FP8 GEMM '" << name
                 << "' not used: XINFER_FP8_FAST_ACCUM=0 (the wgmma kernels sum with "
                 << "fast accumulation only); cuBLASLt runs every FP8 GEMM";
}

std::optional<Int8WgmmaConfig> CudaBackend::int8_wgmma_for(int m, int n, int k) const {
  if (int8_cublaslt_ || !w8a8_int8_wgmma_supports(m, n, k)) return std::nullopt;
  if (int8_wgmma_fixed_) return *int8_wgmma_fixed_;
  if (const auto it = int8_measured_.find({n, k, int8_wgmma_row_bucket(m)}); it != int8_measured_.end())
    return it->second;
  return int8_wgmma_auto_config(m, k);
}

void CudaBackend::set_decode_many_warps(int warps) {
  XI_CHECK(warps == 0 || warps == 8 || warps == 4 || warps == 2)
      << "decode attention warps per CTA: 8, 4, 2 or 0 (by context; XINFER_DECODE_WARPS), got " << warps;
  decode_many_warps_ = warps;
}

CudaBackend::~CudaBackend() {
  cudaStreamSynchronize(stream_);
  for (auto& [key, g] : graphs_) cudaGraphExecDestroy(g.exec);
  gemm_.reset();
  fp8_.reset();
  if (decode_ws_) cudaFree(decode_ws_);
  if (quant_ws_.ptr) cudaFree(quant_ws_.ptr);
  if (segment_ws_.ptr) cudaFree(segment_ws_.ptr);
  if (wq_gemm_ws_.partial) cudaFree(wq_gemm_ws_.partial);
  if (step_device_) cudaFree(step_device_);
  if (step_host_) cudaFreeHost(step_host_);
  if (copy_host_) cudaFreeHost(copy_host_);
  for (const HostFence& f : host_fences_) cudaEventDestroy(f.event);
  for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
  for (const TimedStep& t : timed_steps_)
    for (cudaEvent_t e : {t.begin, t.uploaded, t.end}) cudaEventDestroy(e);
  for (cudaEvent_t e : {open_step_.begin, open_step_.uploaded, last_step_end_})
    if (e != nullptr) cudaEventDestroy(e);
  for (cudaEvent_t e : free_timing_events_) cudaEventDestroy(e);
  cudaEventDestroy(step_copied_);
  cudaStreamDestroy(stream_);
}

backend::BackendInfo CudaBackend::info() const {
  size_t free_bytes = 0, total_bytes = 0;
  XI_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  return backend::BackendInfo{"cuda:" + std::to_string(device_) + " " + device_name_, DType::kBF16, total_bytes,
                              free_bytes};
}

void CudaBackend::synchronize() { XI_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

backend::DeviceTensor CudaBackend::allocate(DType dtype, const Shape& shape) {
  auto buf = std::make_shared<CudaBuffer>(dtype_bytes(dtype, static_cast<size_t>(shape.numel())));
  XI_CUDA_CHECK(cudaMemsetAsync(buf->data(), 0, buf->bytes(), stream_));
  return backend::DeviceTensor{buf, TensorView{buf->data(), dtype, shape, Device::kCuda}};
}

std::shared_ptr<backend::DeviceBuffer> CudaBackend::allocate_swap_memory(size_t bytes) {
  return std::make_shared<SwapSpaceBuffer>(bytes);
}

void CudaBackend::copy_kv_blocks(const backend::KvCache& cache, const backend::KvCopyBatch& batch) {
  if (batch.copies.empty()) return;
  XI_CHECK(cache.swap != nullptr && !cache.layers.empty()) << "KV block copies without a swap space";
  KvBlockCopyLayout layout;
  for (const backend::LayerKvCache& l : cache.layers) {
    layout.k.push_back(static_cast<unsigned char*>(l.k.data));
    layout.v.push_back(static_cast<unsigned char*>(l.v.data));
  }
  const TensorView& k0 = cache.layers[0].k;
  layout.num_blocks = static_cast<int>(k0.shape[0]);
  layout.chunk = k0.bytes() / static_cast<size_t>(layout.num_blocks);
  XI_CHECK_EQ(cache.swap_block_bytes, 2 * cache.layers.size() * layout.chunk) << "swap block size";
  XI_CHECK(dynamic_cast<SwapSpaceBuffer*>(cache.swap.get()) != nullptr)
      << "the KV swap space was not allocated by this backend";
  layout.swap = static_cast<unsigned char*>(cache.swap->data());  // pinned, mapped at the same address
  layout.num_swap_blocks = cache.num_swap_blocks();
  launch_kv_block_copy(layout, batch.copies, batch.to_host, stream_);
}

backend::DeviceTensor CudaBackend::upload(const TensorView& host, DType dtype) {
  XI_CHECK(dtype == DType::kBF16 || dtype == DType::kF32 || dtype == host.dtype)
      << "cuda upload: target dtype " << dtype_name(dtype) << " not supported";
  backend::DeviceTensor t = allocate(dtype, host.shape);
  // Copies go through our (non-blocking) stream, ordered after the zero fill; each is waited for
  // because the host source may be temporary.
  if (host.dtype == dtype) {
    XI_CUDA_CHECK(cudaMemcpyAsync(t.view.data, host.data, host.bytes(), cudaMemcpyHostToDevice, stream_));
    synchronize();
    return t;
  }
  // Convert on the host in chunks (any float dtype -> f32 -> target), then copy.
  constexpr size_t kChunk = 1u << 20;
  const auto n = static_cast<size_t>(host.numel());
  std::vector<float> f32(std::min(n, kChunk));
  std::vector<char> conv(dtype_bytes(dtype, f32.size()));
  for (size_t begin = 0; begin < n; begin += kChunk) {
    const size_t count = std::min(kChunk, n - begin);
    convert_to_f32(host.dtype, static_cast<const char*>(host.data) + dtype_bytes(host.dtype, begin), f32.data(), count);
    convert_from_f32(dtype, f32.data(), conv.data(), count);
    XI_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(t.view.data) + dtype_bytes(dtype, begin), conv.data(),
                                  dtype_bytes(dtype, count), cudaMemcpyHostToDevice, stream_));
    synchronize();
  }
  return t;
}

void CudaBackend::to_host_f32(const TensorView& src, float* dst) {
  const auto n = static_cast<size_t>(src.numel());
  if (src.dtype == DType::kF32) {
    XI_CUDA_CHECK(cudaMemcpyAsync(dst, src.data, n * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    synchronize();
    return;
  }
  std::vector<char> raw(src.bytes());
  XI_CUDA_CHECK(cudaMemcpyAsync(raw.data(), src.data, raw.size(), cudaMemcpyDeviceToHost, stream_));
  synchronize();
  convert_to_f32(src.dtype, raw.data(), dst, n);
}

void CudaBackend::to_host_raw(const TensorView& src, void* dst) {
  XI_CUDA_CHECK(cudaMemcpyAsync(dst, src.data, src.bytes(), cudaMemcpyDeviceToHost, stream_));
  synchronize();
}

void CudaBackend::to_host_raw_async(const TensorView& src, void* dst) {
  XI_CHECK(!capturing_) << "to_host_raw_async() while recording a graph";
  // First fit: offset 0 or the (aligned) end of a pending copy, overlapping no pending copy.
  const size_t bytes = src.bytes();
  auto fits = [&](size_t offset) {
    if (offset + bytes > copy_host_bytes_) return false;
    for (const HostCopy& c : host_copies_)
      if (offset < c.offset + c.bytes && c.offset < offset + bytes) return false;
    return true;
  };
  std::optional<size_t> offset;
  if (fits(0)) offset = 0;
  for (size_t i = 0; !offset && i < host_copies_.size(); ++i) {
    const size_t candidate = (host_copies_[i].offset + host_copies_[i].bytes + 255) / 256 * 256;
    if (fits(candidate)) offset = candidate;
  }
  if (!offset) {
    wait_host_copies();  // earlier copies land in the old buffer
    if (copy_host_) XI_CUDA_CHECK(cudaFreeHost(copy_host_));
    copy_host_bytes_ = std::max<size_t>(2 * copy_host_bytes_, std::max<size_t>(bytes, 64 << 10));
    XI_CUDA_CHECK(cudaMallocHost(&copy_host_, copy_host_bytes_));
    return to_host_raw_async(src, dst);
  }
  XI_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(copy_host_) + *offset, src.data, bytes,
                                cudaMemcpyDeviceToHost, stream_));
  host_copies_.push_back({dst, *offset, bytes, next_fence_});
}

void CudaBackend::complete_host_copies(uint64_t fence) {
  for (const HostCopy& c : host_copies_)
    if (c.fence <= fence) std::memcpy(c.dst, static_cast<char*>(copy_host_) + c.offset, c.bytes);
  std::erase_if(host_copies_, [&](const HostCopy& c) { return c.fence <= fence; });
  for (const HostFence& f : host_fences_)
    if (f.id <= fence) free_events_.push_back(f.event);
  std::erase_if(host_fences_, [&](const HostFence& f) { return f.id <= fence; });
}

void CudaBackend::wait_host_copies() {
  synchronize();
  complete_host_copies(UINT64_MAX);
}

uint64_t CudaBackend::fence_host_copies() {
  XI_CHECK(!capturing_) << "fence_host_copies() while recording a graph";
  if (open_step_.begin != nullptr) {  // a marked step ends here
    if (!open_step_uploaded_) XI_CUDA_CHECK(cudaEventRecord(open_step_.uploaded, stream_));
    TimedStep t = open_step_;
    t.end = timing_event();
    XI_CUDA_CHECK(cudaEventRecord(t.end, stream_));
    t.fence = next_fence_;
    open_step_ = {};
    if (timed_steps_.size() == kMaxTimedSteps) {  // never read (a caller that does not time its steps)
      for (cudaEvent_t e :
           {timed_steps_.front().begin, timed_steps_.front().uploaded, timed_steps_.front().end})
        free_timing_events_.push_back(e);
      timed_steps_.erase(timed_steps_.begin());
    }
    timed_steps_.push_back(t);
  }
  cudaEvent_t e = nullptr;
  if (free_events_.empty()) {
    XI_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  } else {
    e = free_events_.back();
    free_events_.pop_back();
  }
  XI_CUDA_CHECK(cudaEventRecord(e, stream_));
  host_fences_.push_back({next_fence_, e});
  return next_fence_++;
}

cudaEvent_t CudaBackend::timing_event() {
  cudaEvent_t e = nullptr;
  if (free_timing_events_.empty()) {
    XI_CUDA_CHECK(cudaEventCreate(&e));  // timing enabled, unlike the fences' events
  } else {
    e = free_timing_events_.back();
    free_timing_events_.pop_back();
  }
  return e;
}

void CudaBackend::mark_step_begin() {
  XI_CHECK(!capturing_) << "mark_step_begin() while recording a graph";
  if (open_step_.begin == nullptr) {
    open_step_.begin = timing_event();
    open_step_.uploaded = timing_event();
  }
  open_step_uploaded_ = false;  // a step marked again before its fence starts over
  open_step_.mark = ++marks_;
  XI_CUDA_CHECK(cudaEventRecord(open_step_.begin, stream_));
}

backend::Backend::StepDeviceTime CudaBackend::step_device_time(uint64_t fence) {
  auto it = std::find_if(timed_steps_.begin(), timed_steps_.end(),
                         [&](const TimedStep& t) { return t.fence == fence; });
  if (it == timed_steps_.end()) return {};
  // The fence was waited for: its step's events, recorded before it on the stream, have completed.
  XI_CUDA_CHECK(cudaEventSynchronize(it->end));
  auto seconds = [](cudaEvent_t a, cudaEvent_t b) {
    float ms = 0;
    XI_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    return std::max(0.0, static_cast<double>(ms) * 1e-3);
  };
  StepDeviceTime out;
  out.valid = true;
  out.busy_s = seconds(it->begin, it->end);
  out.copies_s = seconds(it->begin, it->uploaded);
  // Idle only back to the step marked just before this one: steps marked but not read in between (synchronous
  // paths without a fence) would count as idle.
  out.idle_valid = last_step_end_ != nullptr && it->mark == last_read_mark_ + 1;
  if (out.idle_valid) out.idle_s = seconds(last_step_end_, it->begin);
  last_read_mark_ = it->mark;
  // Recycle this step's begin marks, the steps fenced before it (never read) and the previous end.
  for (auto old = timed_steps_.begin(); old != it; ++old)
    for (cudaEvent_t e : {old->begin, old->uploaded, old->end}) free_timing_events_.push_back(e);
  free_timing_events_.push_back(it->begin);
  free_timing_events_.push_back(it->uploaded);
  if (last_step_end_ != nullptr) free_timing_events_.push_back(last_step_end_);
  last_step_end_ = it->end;
  timed_steps_.erase(timed_steps_.begin(), it + 1);
  return out;
}

void CudaBackend::wait_host_copies(uint64_t fence) {
  XI_CHECK_LT(fence, next_fence_) << "wait_host_copies(" << fence << "): no such fence";
  for (const HostFence& f : host_fences_)
    if (f.id == fence) XI_CUDA_CHECK(cudaEventSynchronize(f.event));
  // Fences complete in stream order: waiting for this one waited for every earlier one. A fence no longer
  // listed was completed by an earlier wait.
  complete_host_copies(fence);
}

backend::StepMeta CudaBackend::upload_step(const backend::StepPlan& plan) {
  XI_CHECK(!capturing_) << "upload_step() while recording a graph";
  XI_CHECK_EQ(plan.positions.size(), plan.token_ids.size());
  XI_CHECK_EQ(plan.slot_mapping.size(), plan.token_ids.size());
  XI_CHECK_EQ(plan.query_start_loc.size(), plan.seq_lens.size() + 1);
  XI_CHECK_EQ(plan.block_tables.size(), plan.seq_lens.size() * static_cast<size_t>(plan.max_blocks_per_seq));
  XI_CHECK(plan.token_sources.empty() || plan.token_sources.size() == plan.token_ids.size())
      << "token_sources: one per token or none";
  if (open_step_.begin != nullptr && !open_step_uploaded_) {  // the marked step's KV copies end here
    XI_CUDA_CHECK(cudaEventRecord(open_step_.uploaded, stream_));
    open_step_uploaded_ = true;
  }
  DebugTimer timer("upload_step", 0.2);
  if (timer.enabled()) timer.detail() << plan.num_tokens() << " tokens, " << plan.num_seqs() << " sequences";
  host_step_ = plan;
  attn_host_ = build_attention_plan(plan);

  // Pack every array (16-byte aligned) into the staging buffer.
  const std::vector<int32_t>* arrays[] = {
      &plan.token_ids,       &plan.positions,         &plan.slot_mapping,
      &plan.query_start_loc, &plan.seq_lens,          &plan.block_tables,
      &plan.logit_rows,      &attn_host_.decode_seqs, &attn_host_.prefill_items,
      &attn_host_.token_seq, &attn_host_.decode_lens, &plan.token_sources};
  constexpr int kArrays = sizeof(arrays) / sizeof(arrays[0]);
  size_t offsets[kArrays];
  size_t total = 0;
  for (int i = 0; i < kArrays; ++i) {
    offsets[i] = total;
    total += (arrays[i]->size() * sizeof(int32_t) + 15) / 16 * 16;
  }
  {
    DebugTimer wait("upload_step: staging buffer wait", 0.2);
    XI_CUDA_CHECK(cudaEventSynchronize(step_copied_));  // the previous copy has left the staging buffer
  }
  if (total > step_capacity_) grow_step_buffers(std::max<size_t>(total * 2, 64u << 10));
  for (int i = 0; i < kArrays; ++i)
    if (!arrays[i]->empty())
      std::memcpy(static_cast<char*>(step_host_) + offsets[i], arrays[i]->data(), arrays[i]->size() * sizeof(int32_t));
  XI_CUDA_CHECK(cudaMemcpyAsync(step_device_, step_host_, total, cudaMemcpyHostToDevice, stream_));
  XI_CUDA_CHECK(cudaEventRecord(step_copied_, stream_));

  auto dev = [&](int i) { return reinterpret_cast<const int32_t*>(static_cast<const char*>(step_device_) + offsets[i]); };
  backend::StepMeta m;
  m.num_tokens = plan.num_tokens();
  m.num_seqs = plan.num_seqs();
  m.max_blocks_per_seq = plan.max_blocks_per_seq;
  m.max_seq_len = plan.max_seq_len;
  m.num_logit_rows = static_cast<int>(plan.logit_rows.size());
  m.token_ids = dev(0);
  m.positions = dev(1);
  m.slot_mapping = dev(2);
  m.query_start_loc = dev(3);
  m.seq_lens = dev(4);
  m.block_tables = dev(5);
  m.logit_rows = dev(6);
  attn_view_.num_decode = attn_host_.num_decode();
  attn_view_.max_decode_len = attn_host_.max_decode_len;
  attn_view_.num_prefill_items = attn_host_.num_prefill_items();
  attn_view_.decode_seqs = dev(7);
  attn_view_.prefill_items = dev(8);
  attn_view_.token_seq = dev(9);
  attn_view_.decode_lens = dev(10);
  m.token_sources = plan.token_sources.empty() ? nullptr : dev(11);
  step_token_ids_ = m.token_ids;
  return m;
}

CudaBackend::StepSignature CudaBackend::step_signature() const {
  const backend::StepPlan& p = host_step_;
  return {static_cast<int64_t>(p.token_ids.size()), static_cast<int64_t>(p.seq_lens.size()),
          static_cast<int64_t>(p.block_tables.size()), p.max_blocks_per_seq, p.max_seq_len,
          static_cast<int64_t>(p.logit_rows.size()), attn_host_.num_decode(), attn_host_.num_prefill_items(),
          attn_host_.max_decode_len};
}

void CudaBackend::destroy_graph(Graph& g) {
  if (g.exec) XI_CUDA_CHECK(cudaGraphExecDestroy(g.exec));
  g.exec = nullptr;
}

void CudaBackend::begin_capture() {
  XI_CHECK(!capturing_) << "begin_capture() while recording";
  XI_CHECK(step_token_ids_ != nullptr) << "begin_capture() before any upload_step()";
  XI_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed));
  capturing_ = true;
  capture_failed_ = false;
  capture_ws_floats_ = 0;
  quant_ws_.capture_bytes = segment_ws_.capture_bytes = 0;
}

bool CudaBackend::end_capture(uint64_t key) {
  XI_CHECK(capturing_) << "end_capture() without begin_capture()";
  cudaGraph_t graph = nullptr;
  XI_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
  capturing_ = false;
  if (capture_failed_) {
    if (graph) XI_CUDA_CHECK(cudaGraphDestroy(graph));
    if (capture_ws_floats_ > 0) decode_workspace(capture_ws_floats_);
    for (GrowableBuffer* b : {&quant_ws_, &segment_ws_})
      if (b->capture_bytes > 0) grow(*b, b->capture_bytes, "workspace");
    return false;
  }
  cudaGraphExec_t exec = nullptr;
  XI_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  XI_CUDA_CHECK(cudaGraphDestroy(graph));
  if (auto it = graphs_.find(key); it != graphs_.end()) {
    destroy_graph(it->second);
    graphs_.erase(it);
  }
  graphs_[key] = Graph{exec, step_signature(), step_device_, decode_ws_, quant_ws_.ptr, segment_ws_.ptr};
  return true;
}

bool CudaBackend::replay(uint64_t key) {
  XI_CHECK(!capturing_) << "replay() while recording";
  auto it = graphs_.find(key);
  if (it == graphs_.end()) return false;
  Graph& g = it->second;
  if (g.step_device != step_device_ || g.decode_ws != decode_ws_ || g.quant_ws != quant_ws_.ptr ||
      g.segment_ws != segment_ws_.ptr || g.signature != step_signature()) {
    destroy_graph(g);
    graphs_.erase(it);
    return false;
  }
  XI_CUDA_CHECK(cudaGraphLaunch(g.exec, stream_));
  return true;
}

void CudaBackend::clear_graphs() {
  XI_CHECK(!capturing_) << "clear_graphs() while recording";
  for (auto& [key, g] : graphs_) destroy_graph(g);
  graphs_.clear();
}

void CudaBackend::set_linear_fusion(LinearFusion f) {
  if (f != linear_fusion_) clear_graphs();
  linear_fusion_ = f;
}

void CudaBackend::set_rope_attention_fusion(bool on) {
  if (on != rope_attention_fusion_) clear_graphs();
  rope_attention_fusion_ = on;
}

void CudaBackend::check_step(const backend::StepMeta& step) const {
  XI_CHECK(step.token_ids == step_token_ids_ && step.num_tokens == host_step_.num_tokens())
      << "StepMeta does not come from this backend's last upload_step()";
}

backend::DeviceTensor CudaBackend::random_normal(DType dtype, const Shape& shape, uint64_t seed, float stddev) {
  XI_CHECK(dtype == DType::kBF16 || dtype == DType::kF32) << "random_normal: dtype " << dtype_name(dtype);
  backend::DeviceTensor t = allocate(dtype, shape);
  launch_random_normal({t.view.data, dtype == DType::kF32, static_cast<size_t>(shape.numel()), seed, stddev}, stream_);
  return t;
}

Result<backend::DeviceCeilings> CudaBackend::measure_ceilings() { return measure_device_ceilings(*this); }

std::string CudaBackend::gemm_tuning_cache_path() const {
  if (!options_.gemm_tuning) return "";
  const std::string path =
      options_.gemm_tuning_cache.empty() ? default_gemm_tuning_cache_path() : options_.gemm_tuning_cache;
  return path == "off" || path == "none" ? "" : path;
}

void CudaBackend::tune_linears(const std::vector<GemmShape>& shapes, bool show_progress) {
  XI_CHECK(!capturing_) << "tune_linears() while recording a graph";
  if (!options_.gemm_tuning) {
    XI_LOG(INFO) << "gemm tuner: off (cuBLASLt heuristic for every linear)";
    return;
  }
  GemmTunerOptions o;
  o.show_progress = show_progress;
  o.cache_path = gemm_tuning_cache_path();
  o.gemv_pdl = options_.gemv_pdl;
  XI_LOG(INFO) << gemm_->tune(shapes, o, stream_).to_string();
}

void CudaBackend::reserve_decode_workspace(int max_decode_seqs, int num_heads, int num_kv_heads, int head_dim,
                                           int max_seq_len) {
  if (!decode_attention_supports(head_dim) || num_kv_heads <= 0 || num_heads % num_kv_heads != 0) return;
  (void)max_decode_seqs;  // split-KV grids never exceed one wave of CTAs: the bound holds for any batch/length
  (void)max_seq_len;
  decode_workspace(decode_attention_max_workspace_floats(head_dim, num_sms_));
}

// ---- ops ----

void CudaBackend::embedding(const backend::StepMeta& step, const TensorView& table, const TensorView& out,
                            const backend::VocabRows& rows) {
  check_step(step);
  const int64_t table_rows = table.shape[0], hidden = table.shape[1];
  const int64_t vocab = rows.vocab > 0 ? rows.vocab : table_rows;
  XI_CHECK(rows.begin >= 0 && rows.begin + table_rows <= vocab)
      << "embedding shard [" << rows.begin << ", " << rows.begin + table_rows << ") outside vocab of " << vocab;
  XI_CHECK_EQ(out.shape[0], step.num_tokens);
  XI_CHECK_EQ(last_dim(out), hidden);
  const std::vector<int32_t>& sources = host_step_.token_sources;
  for (size_t t = 0; t < host_step_.token_ids.size(); ++t) {
    const int32_t id = host_step_.token_ids[t];
    // Fed tokens (feed_tokens) come from the device and are not known here.
    XI_CHECK((!sources.empty() && sources[t] >= 0) || (id >= 0 && id < vocab))
        << "token id " << id << " outside vocab of " << vocab;
  }
  // A shard masks the ids it does not hold; the whole table needs no mask (every checked id is in it).
  const bool shard = table_rows < vocab;
  launch_gather_rows({bf16_ptr(table, "embedding table"), step.token_ids, bf16_ptr(out, "embedding out"),
                      step.num_tokens, to_int(hidden), to_int(rows.begin), shard ? to_int(table_rows) : 0},
                     stream_);
}

void CudaBackend::rms_norm(const TensorView& x, const TensorView& weight, float eps, const TensorView& out) {
  const int64_t width = last_dim(x);
  XI_CHECK_EQ(weight.numel(), width);
  XI_CHECK_EQ(out.numel(), x.numel());
  launch_add_rms_norm({bf16_ptr(x, "rms_norm x"), nullptr, bf16_ptr(weight, "rms_norm weight"),
                       bf16_ptr(out, "rms_norm out"), to_int(x.numel() / width), to_int(width), eps}, stream_);
}

void CudaBackend::add_rms_norm(const TensorView& residual, const TensorView& delta, const TensorView& weight, float eps,
                               const TensorView& out) {
  const int64_t width = last_dim(residual);
  XI_CHECK_EQ(weight.numel(), width);
  XI_CHECK_EQ(delta.numel(), residual.numel());
  XI_CHECK_EQ(out.numel(), residual.numel());
  launch_add_rms_norm({bf16_ptr(residual, "residual"), bf16_ptr(delta, "delta"), bf16_ptr(weight, "norm weight"),
                       bf16_ptr(out, "add_rms_norm out"), to_int(residual.numel() / width), to_int(width), eps},
                      stream_);
}

void CudaBackend::linear(const TensorView& x, const backend::LinearWeights& w, const TensorView& out) {
  if (w.segmented()) return segmented_linear(x, w, out);
  const int64_t k = w.in_features(), n = w.out_features();
  const int64_t m = x.numel() / k;
  DebugTimer timer("linear launch", 1.0);  // a slow one only: plans, workspace growth, tuning
  if (timer.enabled()) timer.detail() << "m " << m << " n " << n << " k " << k << " " << quant::format_name(w.format);
  XI_CHECK_EQ(last_dim(x), k) << "linear: input width vs weight [" << n << ", " << k << "]";
  XI_CHECK_EQ(out.numel(), m * n);
  XI_CHECK(out.dtype == DType::kBF16 || out.dtype == DType::kF32) << "linear out dtype " << dtype_name(out.dtype);
  if (!w.bias.empty()) XI_CHECK_EQ(w.bias.numel(), n);
  // x's codes left by swiglu() for this weight (cuda_backend.h quantized_input_): this call consumes the record.
  const QuantizedInput q = std::exchange(quantized_input_, {});
  const bool x_quantized = q.x != nullptr && q.x == x.data && q.numel == x.numel() && q.weight == w.weight.data;
  if (!w.dense()) return quantized_linear(x, w, out, x_quantized);
  gemm_->run({bf16_ptr(x, "linear x"), bf16_ptr(w.weight, "linear weight"),
              w.bias.empty() ? nullptr : bf16_ptr(w.bias, "linear bias"), out.data, out.dtype == DType::kF32,
              to_int(m), to_int(n), to_int(k)},
             stream_);
}

void CudaBackend::segmented_linear(const TensorView& x, const backend::LinearWeights& w,
                                   const TensorView& out) {
  const int64_t k = w.in_features(), n = w.out_features(), m = x.numel() / k;
  XI_CHECK_EQ(last_dim(x), k) << "linear: input width vs segmented weight [" << n << ", " << k << "]";
  XI_CHECK_EQ(out.numel(), m * n);
  XI_CHECK(out.dtype == DType::kBF16 || out.dtype == DType::kF32)
      << "linear out dtype " << dtype_name(out.dtype);
  quantized_input_ = {};  // no W8A8 segment consumes codes a swiglu() left
  if (m == 0 || segments_gemm(x, w, out)) return;
  const size_t elem = dtype_bytes(out.dtype, 1);
  int64_t col = 0;
  for (const backend::LinearWeights& s : w.segments) {
    const int64_t ns = s.out_features();
    XI_CHECK_EQ(s.in_features(), k) << "segmented linear: segments differ in input width";
    char* dst = static_cast<char*>(out.data) + static_cast<size_t>(col) * elem;
    col += ns;
    if (m == 1) {  // a contiguous run of out
      linear(x, s, TensorView{dst, out.dtype, Shape{1, ns}, out.device});
      continue;
    }
    if (quant::is_weight_only_int(s.format) &&
        weight_only_linear(x, s, dst, out.dtype == DType::kF32, static_cast<int>(n)))
      continue;
    auto* ws = static_cast<char*>(grow(segment_ws_, static_cast<size_t>(m * ns) * elem, "segments"));
    if (ws == nullptr) return;  // recording failed (see top of cuda_backend_quant.cpp)
    linear(x, s, TensorView{ws, out.dtype, Shape{m, ns}, out.device});
    XI_CUDA_CHECK(cudaMemcpy2DAsync(dst, static_cast<size_t>(n) * elem, ws, static_cast<size_t>(ns) * elem,
                                    static_cast<size_t>(ns) * elem, static_cast<size_t>(m),
                                    cudaMemcpyDeviceToDevice, stream_));
  }
}

namespace {

// The fused decode chain (cuda_backend.h): the linear that makes delta adds it into the residual; the linear
// after the norm reads the residual and applies the norm on its way in.
GemmArgs producer_args(const backend::NormLinearArgs& a) {
  const int64_t k = a.delta_linear.in_features(), n = a.delta_linear.out_features();
  return GemmArgs{bf16_ptr(a.delta_x, "delta_x"), bf16_ptr(a.delta_linear.weight, "delta linear weight"),
                  a.delta_linear.bias.empty() ? nullptr : bf16_ptr(a.delta_linear.bias, "delta linear bias"),
                  bf16_ptr(a.residual, "residual"), false, to_int(a.delta_x.numel() / k), to_int(n), to_int(k)};
}

constexpr GemvFusion kProducerFusion{true, nullptr, 0.0f};

GemmArgs consumer_args(const backend::NormLinearArgs& a) {
  const int64_t k = a.linear.in_features(), n = a.linear.out_features();
  return GemmArgs{bf16_ptr(a.residual, "residual"), bf16_ptr(a.linear.weight, "linear weight"),
                  a.linear.bias.empty() ? nullptr : bf16_ptr(a.linear.bias, "linear bias"),
                  bf16_ptr(a.out, "linear out"), false, to_int(a.residual.numel() / k), to_int(n), to_int(k)};
}

GemvFusion consumer_fusion(const backend::NormLinearArgs& a, bool swiglu) {
  return GemvFusion{false, bf16_ptr(a.norm_weight, "norm weight"), a.eps,
                    swiglu ? bf16_ptr(a.act_out, "act out") : nullptr};
}

}  // namespace

std::optional<FusedLinearPlan> CudaBackend::fused_linear_plan(const backend::NormLinearArgs& a) {
  if (linear_fusion_ == LinearFusion::kOff) return std::nullopt;
  // The fused GEMVs read bf16 weights: quantized linears run the composition (their own kernels).
  if (!a.linear.dense() || (!a.delta_x.empty() && !a.delta_linear.dense())) return std::nullopt;
  const int64_t m = a.residual.numel() / a.linear.in_features();
  if (m < 1 || m > 8 || a.out.dtype != DType::kBF16 || a.residual.dtype != DType::kBF16) return std::nullopt;
  // A delta given as an input needs an add of its own: only a delta made here folds into its linear.
  if (!a.delta.empty() && a.delta_x.empty()) return std::nullopt;
  // The linear after the norm: the configuration the tuner measured faster than add + norm + its plain
  // choice (gemm_tuner.h normed_gemv_for); the one that makes delta: its plain choice, if that is the GEMV.
  const GemmArgs consumer = consumer_args(a);
  FusedLinearPlan plan;
  if (const std::optional<GemvConfig> c = gemm_->normed_gemv_for(consumer)) {
    plan.consumer = *c;
  } else if (linear_fusion_ == LinearFusion::kAlways) {
    plan.consumer = gemv_default_config(consumer);
    if (!a.act_out.empty())
      plan.consumer.rows_per_warp = 2;  // gate and up rows in pairs: the SwiGLU epilogue
  } else {
    return std::nullopt;
  }
  if (!gemv_supports(consumer, consumer_fusion(a, false))) return std::nullopt;
  // SwiGLU in the epilogue where the configuration pairs rows (its dot products are summed as without it).
  plan.swiglu = !a.act_out.empty() && a.act_out.dtype == DType::kBF16 &&
                plan.consumer.rows_per_warp % 2 == 0 && gemv_supports(consumer, consumer_fusion(a, true));
  if (!a.delta_x.empty()) {
    const GemmArgs producer = producer_args(a);
    const GemmChoice choice = gemm_->choice_for(producer);
    if (choice.kind == GemmKind::kGemv)
      plan.producer = choice.gemv;
    else if (linear_fusion_ == LinearFusion::kAlways)
      plan.producer = gemv_default_config(producer);
    else
      return std::nullopt;
    if (!gemv_supports(producer, kProducerFusion)) return std::nullopt;
  }
  return plan;
}

void CudaBackend::add_rms_norm_linear(const backend::NormLinearArgs& a) {
  const int64_t k = a.linear.in_features(), n = a.linear.out_features();
  const int64_t m = a.residual.numel() / k;
  XI_CHECK_EQ(last_dim(a.residual), k) << "add_rms_norm_linear: residual width vs weight [" << n << ", " << k << "]";
  XI_CHECK_EQ(a.norm_weight.numel(), k);
  XI_CHECK_EQ(a.normed_out.numel(), a.residual.numel());
  XI_CHECK_EQ(a.out.numel(), m * n);
  if (!a.linear.bias.empty()) XI_CHECK_EQ(a.linear.bias.numel(), n);
  if (!a.act_out.empty()) XI_CHECK_EQ(2 * a.act_out.numel(), a.out.numel());
  if (!a.delta_x.empty()) {
    XI_CHECK(!a.delta.empty()) << "add_rms_norm_linear: delta_x needs delta (scratch of the composition)";
    XI_CHECK_EQ(a.delta_linear.out_features(), k);
    XI_CHECK_EQ(a.delta_x.numel(), m * a.delta_linear.in_features())
        << "add_rms_norm_linear: delta_x vs weight [" << k << ", " << a.delta_linear.in_features() << "]";
    if (!a.delta_linear.bias.empty()) XI_CHECK_EQ(a.delta_linear.bias.numel(), k);
  }
  if (!a.delta.empty()) XI_CHECK_EQ(a.delta.numel(), a.residual.numel());
  // A quantized input left for delta_x by the previous call's swiglu(): only linear() below may consume it.
  const QuantizedInput pending = std::exchange(quantized_input_, {});
  if (quant_fused_chain(a)) {  // weight-only quantized linears (cuda_backend_quant.cpp)
    ++fused_linears_;
    return;
  }
  const std::optional<FusedLinearPlan> plan = fused_linear_plan(a);
  if (!plan) {
    // The composition (Backend::add_rms_norm_linear), with the W8A8 linears' activation quantization in the
    // norm and the SwiGLU kernels (cuda_backend_quant.cpp).
    if (!a.delta_x.empty()) {
      quantized_input_ = pending;
      linear(a.delta_x, a.delta_linear, a.delta);
    }
    if (!w8a8_norm_linear(a)) {
      if (a.delta.empty())
        rms_norm(a.residual, a.norm_weight, a.eps, a.normed_out);
      else
        add_rms_norm(a.residual, a.delta, a.norm_weight, a.eps, a.normed_out);
      linear(a.normed_out, a.linear, a.out);
    }
    if (!a.act_out.empty()) swiglu(a.out, a.act_out, a.act_linear, a.act_out_unread);
    return;
  }
  if (plan->producer) launch_gemv(producer_args(a), *plan->producer, stream_, kProducerFusion);
  launch_gemv(consumer_args(a), plan->consumer, stream_, consumer_fusion(a, plan->swiglu));
  if (!a.act_out.empty() && !plan->swiglu) silu_mul(a.out, a.act_out);
  ++fused_linears_;
}

void CudaBackend::check_rope_args(const TensorView& qkv, int num_heads, int num_kv_heads, int head_dim,
                                  const TensorView& cos_sin, const backend::LayerKvCache& cache) const {
  XI_CHECK_EQ(last_dim(qkv), static_cast<int64_t>(num_heads + 2 * num_kv_heads) * head_dim);
  XI_CHECK(cos_sin.dtype == DType::kF32) << "cos_sin must be f32";
  XI_CHECK_EQ(cos_sin.shape[1], head_dim);
  XI_CHECK_EQ(cache.k.shape[1], num_kv_heads);
  XI_CHECK_EQ(cache.k.shape[3], head_dim);
  const int64_t max_pos = cos_sin.shape[0];
  for (int32_t pos : host_step_.positions)
    XI_CHECK(pos >= 0 && pos < max_pos) << "position " << pos << " outside rope table of " << max_pos;
}

void CudaBackend::rope_kv_write(const backend::StepMeta& step, const TensorView& qkv, int num_heads,
                                int num_kv_heads, int head_dim, const TensorView& cos_sin,
                                const backend::LayerKvCache& cache) {
  check_step(step);
  check_rope_args(qkv, num_heads, num_kv_heads, head_dim, cos_sin, cache);
  RopeKvWriteArgs args{bf16_ptr(qkv, "qkv"), cos_sin.as<float>(), step.positions, step.slot_mapping,
                       kv_ptr(cache.k, "k cache"), kv_ptr(cache.v, "v cache"), step.num_tokens, num_heads,
                       num_kv_heads, head_dim, to_int(cache.k.shape[2]), cache.fp8(), cache.k_scale, cache.v_scale};
  if (cache.per_head_scales()) {
    args.k_head_scales = cache.k_head_scales.as<float>();
    args.v_head_scales = cache.v_head_scales.as<float>();
  }
  args.k_rotation = cache.k_rotation == backend::KvRotation::kHadamard;
  launch_rope_kv_write(args, stream_);
}

void CudaBackend::qk_norm(const TensorView& qkv, int num_heads, int num_kv_heads, int head_dim,
                          const TensorView& q_weight, const TensorView& k_weight, float eps) {
  const int64_t row = static_cast<int64_t>(num_heads + 2 * num_kv_heads) * head_dim;
  XI_CHECK_EQ(last_dim(qkv), row);
  XI_CHECK_EQ(q_weight.numel(), head_dim);
  XI_CHECK_EQ(k_weight.numel(), head_dim);
  launch_qk_norm({bf16_ptr(qkv, "qkv"), bf16_ptr(q_weight, "q_norm"), bf16_ptr(k_weight, "k_norm"),
                  to_int(qkv.numel() / row), num_heads, num_kv_heads, head_dim, eps},
                 stream_);
}

float* CudaBackend::decode_workspace(size_t floats) {
  if (floats > decode_ws_floats_) {
    DebugTimer timer("decode attention workspace growth (synchronizes)");
    if (timer.enabled()) timer.detail() << decode_ws_floats_ << " -> " << floats << " floats";
    synchronize();
    if (decode_ws_) XI_CUDA_CHECK(cudaFree(decode_ws_));
    decode_ws_floats_ = std::max(floats, decode_ws_floats_ * 2);
    XI_CUDA_CHECK(cudaMalloc(&decode_ws_, decode_ws_floats_ * sizeof(float)));
    XI_CUDA_CHECK(cudaMemsetAsync(decode_ws_, 0, decode_ws_floats_ * sizeof(float), stream_));  // merge counters
  }
  return static_cast<float*>(decode_ws_);
}

PagedAttentionParams paged_attention_params(const backend::StepMeta& step, const TensorView& qkv, int num_heads,
                                      int num_kv_heads, int head_dim, float scale,
                                      const backend::LayerKvCache& cache, const TensorView& out) {
  PagedAttentionParams p{};
  p.qkv = bf16_ptr(qkv, "qkv");
  p.k_cache = kv_ptr(cache.k, "k cache");
  p.v_cache = kv_ptr(cache.v, "v cache");
  XI_CHECK(cache.k.dtype == cache.v.dtype) << "k and v caches differ in dtype";
  p.out = bf16_ptr(out, "attention out");
  p.query_start_loc = step.query_start_loc;
  p.positions = step.positions;
  p.block_tables = step.block_tables;
  p.max_blocks_per_seq = step.max_blocks_per_seq;
  p.num_tokens = step.num_tokens;
  p.num_heads = num_heads;
  p.num_kv_heads = num_kv_heads;
  p.head_dim = head_dim;
  p.block_size = to_int(cache.k.shape[2]);
  p.qkv_stride = (num_heads + 2 * num_kv_heads) * head_dim;
  p.scale = scale;
  if (cache.fp8()) {  // kv_fp8.cuh: the K scale folds into the softmax scale, the V scale into the output
    p.kv_fp8 = true;
    if (cache.per_head_scales()) {  // positive: checked when resolved (engine/kv_cache_dtype.h)
      p.k_head_scales = cache.k_head_scales.as<float>();
      p.v_head_scales = cache.v_head_scales.as<float>();
    } else {
      XI_CHECK(cache.k_scale > 0 && cache.v_scale > 0) << "fp8 KV cache scales must be positive";
      p.scale = scale * cache.k_scale;
      p.v_scale = cache.v_scale;
    }
  }
  return p;
}

void CudaBackend::check_attention_args(const TensorView& qkv, int num_heads, int num_kv_heads, int head_dim,
                                       const backend::LayerKvCache& cache, const TensorView& out) const {
  XI_CHECK_EQ(num_heads % num_kv_heads, 0);
  XI_CHECK_EQ(last_dim(qkv), static_cast<int64_t>(num_heads + 2 * num_kv_heads) * head_dim);
  XI_CHECK_EQ(last_dim(out), static_cast<int64_t>(num_heads) * head_dim);
  XI_CHECK_EQ(cache.k.shape[1], num_kv_heads);
  XI_CHECK_EQ(cache.k.shape[3], head_dim);
  for (size_t s = 0; s < host_step_.seq_lens.size(); ++s) {
    const int32_t last = host_step_.query_start_loc[s + 1] - 1;
    if (last >= host_step_.query_start_loc[s])
      XI_CHECK_LT(host_step_.positions[static_cast<size_t>(last)], host_step_.seq_lens[s])
          << "token position past its sequence's length";
  }
}

bool CudaBackend::decode_launch(int num_heads, int num_kv_heads, int head_dim, int& partition_size, int& warps,
                                float*& workspace) {
  const int group = num_heads / num_kv_heads;
  partition_size =
      decode_partition_size(attn_view_.num_decode, attn_view_.max_decode_len, num_kv_heads, group, num_sms_);
  warps = decode_warps(attn_view_.num_decode, attn_view_.max_decode_len, num_kv_heads, group, num_sms_,
                       decode_many_warps_);
  const size_t ws = decode_attention_workspace_floats(attn_view_.num_decode, num_heads, num_kv_heads,
                                                      head_dim, attn_view_.max_decode_len, partition_size);
  if (capturing_ && ws > decode_ws_floats_) {  // growing would synchronize: fail the recording instead
    capture_failed_ = true;
    capture_ws_floats_ = std::max(capture_ws_floats_, ws);
    return false;
  }
  workspace = ws > 0 ? decode_workspace(ws) : nullptr;
  return true;
}

void CudaBackend::grow_step_buffers(size_t capacity) {
  synchronize();  // kernels of the previous step may still read the device buffer
  if (step_host_) XI_CUDA_CHECK(cudaFreeHost(step_host_));
  if (step_device_) XI_CUDA_CHECK(cudaFree(step_device_));
  XI_CUDA_CHECK(cudaMallocHost(&step_host_, capacity));
  XI_CUDA_CHECK(cudaMalloc(&step_device_, capacity));
  step_capacity_ = capacity;
}

void CudaBackend::reserve_step_upload(size_t bytes) {
  XI_CHECK(!capturing_) << "reserve_step_upload() while recording a graph";
  if (bytes > step_capacity_) grow_step_buffers(bytes);
}

void CudaBackend::set_fp8_kv_decode_prefetch(int mode) {
  XI_CHECK(mode >= 0 && mode <= 2) << "FP8 KV decode prefetch: mode " << mode << " (0, 1 or 2)";
  fp8_kv_decode_prefetch_ = mode;
}

void CudaBackend::paged_attention(const backend::StepMeta& step, const TensorView& qkv, int num_heads,
                                  int num_kv_heads, int head_dim, float scale,
                                  const backend::LayerKvCache& cache, const TensorView& out) {
  check_step(step);
  check_attention_args(qkv, num_heads, num_kv_heads, head_dim, cache, out);
  PagedAttentionParams p = paged_attention_params(step, qkv, num_heads, num_kv_heads, head_dim, scale, cache, out);
  p.kv_fp8_f16 = p.kv_fp8 && fp8_kv_f16_mma_;
  p.kv_fp8_prefetch = p.kv_fp8 ? fp8_kv_decode_prefetch_ : 0;
  if (!decode_attention_supports(head_dim) || !prefill_attention_supports(head_dim)) {
    launch_paged_attention_generic(p, attn_view_, stream_);
    return;
  }
  if (attn_view_.num_decode > 0) {
    int psize = 0, warps = 0;
    float* ws = nullptr;
    if (!decode_launch(num_heads, num_kv_heads, head_dim, psize, warps, ws)) return;
    launch_paged_decode_attention(p, attn_view_, psize, warps, ws, stream_);
  }
  const bool wgmma = prefer_wgmma_prefill(attn_host_) && (!p.kv_fp8 || fp8_kv_wgmma_prefill_);
  const PrefillKernel wgmma_kernel =
      prefill_ws_ && prefill_ws_supports(head_dim) ? PrefillKernel::kWgmmaWs : PrefillKernel::kWgmmaSimple;
  launch_paged_prefill_attention(p, attn_view_, stream_, wgmma ? wgmma_kernel : PrefillKernel::kMmaSync);
}

bool CudaBackend::fuses_rope_attention(int head_dim, const TensorView& cos_sin,
                                       const backend::LayerKvCache& cache) const {
  if (!rope_attention_fusion_) return false;
  if (cache.fp8()) return false;  // the fused kernel writes bf16 caches only
  if (cache.k_rotation != backend::KvRotation::kNone) return false;  // nor rotates q and k (kv_rotation.h)
  // paged_attention would run the decode kernel, and it alone: every token is a decode.
  if (!decode_attention_supports(head_dim) || !prefill_attention_supports(head_dim)) return false;
  if (attn_host_.num_decode() == 0 || attn_host_.num_prefill_items() > 0 ||
      attn_host_.num_decode() != host_step_.num_tokens())
    return false;
  // Large decode batches: the separate rope kernel costs little next to attention, and the fused kernel's
  // extra work per CTA measured slower (H200, Llama-3.1-8B heads, ctx 256: 1.18x faster at 1 sequence,
  // 1.24x at 32, 1.06x at 128, 0.98x at 512; docs/PERF.md).
  if (attn_host_.num_decode() > kMaxFusedRopeDecodes) return false;
  if (reinterpret_cast<uintptr_t>(cos_sin.data) % 16 != 0)
    return false;  // the kernel reads its rows as float4
  // The kernel attends to the newest k, v it writes without reading them back: the composition reads them
  // where the block table puts the position, so the slot must be that place (or negative: no write).
  // Checked on the step that records a graph; its replays rely on slots being made from the block tables
  // (ModelRunner does), as the graph's step layout does not include this condition.
  const int64_t bs = cache.k.shape[2];
  const size_t width = static_cast<size_t>(host_step_.max_blocks_per_seq);
  for (int i = 0; i < attn_host_.num_decode(); ++i) {
    const auto s = static_cast<size_t>(attn_host_.decode_seqs[static_cast<size_t>(i)]);
    const auto t = static_cast<size_t>(host_step_.query_start_loc[s]);
    const int64_t slot = host_step_.slot_mapping[t], pos = host_step_.positions[t];
    if (slot < 0) continue;
    if (pos < 0 || static_cast<size_t>(pos / bs) >= width) return false;
    if (slot != host_step_.block_tables[s * width + static_cast<size_t>(pos / bs)] * bs + pos % bs)
      return false;
  }
  return true;
}

void CudaBackend::rope_paged_attention(const backend::StepMeta& step, const TensorView& qkv, int num_heads,
                                       int num_kv_heads, int head_dim, const TensorView& cos_sin, float scale,
                                       const backend::LayerKvCache& cache, const TensorView& out) {
  check_step(step);
  DebugTimer timer("rope_paged_attention launch", 1.0);
  if (timer.enabled()) timer.detail() << step.num_tokens << " tokens";
  if (!fuses_rope_attention(head_dim, cos_sin, cache))
    return Backend::rope_paged_attention(step, qkv, num_heads, num_kv_heads, head_dim, cos_sin, scale, cache,
                                         out);
  check_rope_args(qkv, num_heads, num_kv_heads, head_dim, cos_sin, cache);
  check_attention_args(qkv, num_heads, num_kv_heads, head_dim, cache, out);
  const PagedAttentionParams p =
      paged_attention_params(step, qkv, num_heads, num_kv_heads, head_dim, scale, cache, out);
  int psize = 0, warps = 0;
  float* ws = nullptr;
  if (!decode_launch(num_heads, num_kv_heads, head_dim, psize, warps, ws)) return;
  const DecodeRopeParams rope{cos_sin.as<float>(), step.slot_mapping, bf16_ptr(cache.k, "k cache"),
                              bf16_ptr(cache.v, "v cache")};
  launch_paged_decode_attention_rope(p, attn_view_, rope, psize, warps, ws, stream_);
  ++fused_rope_attentions_;
}

void CudaBackend::silu_mul(const TensorView& gate_up, const TensorView& out) {
  const int64_t inter = last_dim(out);
  XI_CHECK_EQ(last_dim(gate_up), 2 * inter);
  XI_CHECK_EQ(gate_up.numel(), 2 * out.numel());
  launch_silu_mul({bf16_ptr(gate_up, "gate_up"), bf16_ptr(out, "silu_mul out"), to_int(out.numel() / inter),
                   to_int(inter)}, stream_);
}

void CudaBackend::gather_rows(const backend::StepMeta& step, const TensorView& x, const TensorView& out) {
  check_step(step);
  const int64_t width = last_dim(x), rows = x.numel() / width;
  XI_CHECK_EQ(out.numel(), static_cast<int64_t>(step.num_logit_rows) * width);
  for (int32_t r : host_step_.logit_rows) XI_CHECK(r >= 0 && r < rows) << "logit row " << r << " of " << rows;
  launch_gather_rows({bf16_ptr(x, "gather x"), step.logit_rows, bf16_ptr(out, "gather out"), step.num_logit_rows,
                      to_int(width)}, stream_);
}

void CudaBackend::feed_tokens(const backend::StepMeta& step, const TensorView& ids) {
  check_step(step);
  XI_CHECK(!capturing_) << "feed_tokens() while recording a graph (feed before the replay)";
  if (step.token_sources == nullptr) return;
  XI_CHECK(ids.dtype == DType::kI32) << "feed_tokens ids must be i32, got " << dtype_name(ids.dtype);
  XI_CHECK(ids.device == Device::kCuda) << "feed_tokens ids must be on the device";
  for (int32_t r : host_step_.token_sources) XI_CHECK_LT(r, ids.numel()) << "token source row";
  // StepMeta's arrays are const for the ops that read them; this op owns the token ids' update.
  launch_feed_tokens(
      {const_cast<int32_t*>(step.token_ids), step.token_sources, ids.as<int32_t>(), step.num_tokens},
      stream_);
}

void CudaBackend::argmax_rows(const TensorView& logits, const TensorView& out) {
  XI_CHECK(logits.dtype == DType::kF32) << "argmax_rows logits must be f32, got " << dtype_name(logits.dtype);
  XI_CHECK(out.dtype == DType::kI32) << "argmax_rows out must be i32, got " << dtype_name(out.dtype);
  XI_CHECK_EQ(logits.shape.rank(), 2);
  XI_CHECK_EQ(out.numel(), logits.shape[0]);
  launch_argmax_rows({logits.as<float>(), out.as<int32_t>(), to_int(logits.shape[0]), to_int(logits.shape[1])},
                     stream_);
}

}  // namespace xinfer::cuda
