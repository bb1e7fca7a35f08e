// Memory management and step upload for the CPU backend (ops are in cpu_ops.cpp / cpu_attention.cpp).
#include "xinfer/backend/cpu/cpu_backend.h"

#include <cblas.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace xinfer::cpu {
namespace {

class HostBuffer final : public backend::DeviceBuffer {
 public:
  explicit HostBuffer(size_t bytes) : bytes_(bytes) {
    size_t rounded = (bytes + 63) / 64 * 64;
    data_ = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
    XI_CHECK(data_ != nullptr) << "out of host memory allocating " << bytes << " bytes";
  }
  ~HostBuffer() override { std::free(data_); }
  void* data() const override { return data_; }
  size_t bytes() const override { return bytes_; }

 private:
  void* data_;
  size_t bytes_;
};

}  // namespace

CpuBackend::CpuBackend(CpuBackendOptions options) : pool_(std::make_unique<ThreadPool>(options.num_threads)) {
  openblas_set_num_threads(pool_->size());
}

CpuBackend::~CpuBackend() = default;

backend::BackendInfo CpuBackend::info() const {
  const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return backend::BackendInfo{"cpu (" + std::to_string(pool_->size()) + " threads, OpenBLAS)", DType::kF32,
                              static_cast<size_t>(sysconf(_SC_PHYS_PAGES)) * page,
                              static_cast<size_t>(sysconf(_SC_AVPHYS_PAGES)) * page};
}

backend::DeviceTensor CpuBackend::allocate(DType dtype, const Shape& shape) {
  auto buf = std::make_shared<HostBuffer>(dtype_bytes(dtype, static_cast<size_t>(shape.numel())));
  std::memset(buf->data(), 0, buf->bytes());
  return backend::DeviceTensor{buf, TensorView{buf->data(), dtype, shape, Device::kCpu}};
}

backend::DeviceTensor CpuBackend::upload(const TensorView& host, DType dtype) {
  backend::DeviceTensor t = allocate(dtype, host.shape);
  const auto n = static_cast<size_t>(host.numel());
  if (host.dtype == dtype) {
    std::memcpy(t.view.data, host.data, host.bytes());
  } else if (dtype == DType::kF32) {
    pool_->parallel_for(0, static_cast<int64_t>(n), [&](int64_t b, int64_t e) {
      convert_to_f32(host.dtype,
                     static_cast<const char*>(host.data) + dtype_bytes(host.dtype, static_cast<size_t>(b)),
                     t.view.as<float>() + b, static_cast<size_t>(e - b));
    }, 1 << 16);
  } else {
    XI_CHECK(host.dtype == DType::kF32) << "cpu upload: " << dtype_name(host.dtype) << " -> "
                                        << dtype_name(dtype) << " not supported";
    convert_from_f32(dtype, host.as<float>(), t.view.data, n);
  }
  return t;
}

void CpuBackend::to_host_f32(const TensorView& src, float* dst) {
  convert_to_f32(src.dtype, src.data, dst, static_cast<size_t>(src.numel()));
}

void CpuBackend::to_host_raw(const TensorView& src, void* dst) { std::memcpy(dst, src.data, src.bytes()); }

backend::StepMeta CpuBackend::upload_step(const backend::StepPlan& plan) {
  XI_CHECK_EQ(plan.positions.size(), plan.token_ids.size());
  XI_CHECK_EQ(plan.slot_mapping.size(), plan.token_ids.size());
  XI_CHECK_EQ(plan.query_start_loc.size(), plan.seq_lens.size() + 1);
  XI_CHECK_EQ(plan.block_tables.size(), plan.seq_lens.size() * static_cast<size_t>(plan.max_blocks_per_seq));
  step_copy_ = plan;
  backend::StepMeta m;
  m.num_tokens = plan.num_tokens();
  m.num_seqs = plan.num_seqs();
  m.max_blocks_per_seq = plan.max_blocks_per_seq;
  m.max_seq_len = plan.max_seq_len;
  m.num_logit_rows = static_cast<int>(plan.logit_rows.size());
  m.token_ids = step_copy_.token_ids.data();
  m.positions = step_copy_.positions.data();
  m.slot_mapping = step_copy_.slot_mapping.data();
  m.query_start_loc = step_copy_.query_start_loc.data();
  m.seq_lens = step_copy_.seq_lens.data();
  m.block_tables = step_copy_.block_tables.data();
  m.logit_rows = step_copy_.logit_rows.data();
  if (!plan.token_sources.empty()) {
    XI_CHECK_EQ(plan.token_sources.size(), plan.token_ids.size());
    m.token_sources = step_copy_.token_sources.data();
  }
  return m;
}

void CpuBackend::feed_tokens(const backend::StepMeta& step, const TensorView& ids) {
  XI_CHECK(step.token_ids == step_copy_.token_ids.data())
      << "StepMeta does not come from the last upload_step()";
  if (step.token_sources == nullptr) return;
  XI_CHECK(ids.dtype == DType::kI32) << "feed_tokens ids must be i32";
  const int32_t* src = ids.as<int32_t>();
  for (size_t t = 0; t < step_copy_.token_ids.size(); ++t) {
    const int32_t r = step_copy_.token_sources[t];
    if (r < 0) continue;
    XI_CHECK_LT(r, ids.numel()) << "token source row of token " << t;
    step_copy_.token_ids[t] = src[r];
  }
}

}  // namespace xinfer::cpu
