// CudaBackend::sample_rows: checks the batch, packs its rows and adjustments (kernels/sampling/sample_rows.h
// layout) into a pinned staging buffer, copies them with one async copy into a device buffer that also holds
// the adjustment scratch, and launches adjust -> sample -> restore on the backend's stream. Buffers grow
// (never shrink) outside graph recordings. Two staging buffers take turns, each reused only after its last
// copy completed: with a step in flight (asynchronous scheduling) the next step's batch is packed while the
// previous copy still waits behind that step's forward, without blocking the host on it. One device buffer
// suffices: stream order puts each copy after the kernels that read the previous batch.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "xinfer/backend/cuda/cuda_backend.h"
#include "xinfer/backend/cuda/cuda_check.h"
#include "xinfer/backend/cuda/kernels/sampling/sample_rows.h"

namespace xinfer::cuda {

struct CudaBackend::SamplingState {
  // A pinned staging buffer (rows, adjustments) and the event of its last copy to the device.
  struct Staging {
    void* host = nullptr;
    size_t capacity = 0;
    cudaEvent_t copied = nullptr;
  };
  SamplingState() {
    for (Staging& s : staging) XI_CUDA_CHECK(cudaEventCreateWithFlags(&s.copied, cudaEventDisableTiming));
  }
  ~SamplingState() {
    for (Staging& s : staging) {
      if (s.host) cudaFreeHost(s.host);
      cudaEventDestroy(s.copied);
    }
    if (device) cudaFree(device);
  }
  SamplingState(const SamplingState&) = delete;
  SamplingState& operator=(const SamplingState&) = delete;

  Staging staging[2];  // taking turns (see above)
  int next_staging = 0;
  void* device = nullptr;  // rows, adjustments, saved logits
  size_t device_capacity = 0;
  std::vector<SampleRowArgs> rows;
  std::vector<LogitAdjustArgs> adjust;
  std::vector<int32_t> seen_rows;  // logit rows of rows with adjustments (distinctness check)
};

namespace {

size_t align16(size_t n) { return (n + 15) / 16 * 16; }

}  // namespace

Status CudaBackend::sample_rows(const TensorView& logits, const backend::SamplingBatch& batch, const TensorView& out) {
  XI_CHECK(!capturing_) << "sample_rows() while recording a graph";
  if (logits.dtype != DType::kF32 || logits.shape.rank() != 2 || logits.device != Device::kCuda)
    return invalid_argument("sample_rows: logits must be a 2-d f32 cuda tensor");
  if (out.dtype != DType::kI32 || out.device != Device::kCuda)
    return invalid_argument("sample_rows: out must be an i32 cuda tensor");
  const int64_t num_logit_rows = logits.shape[0], vocab = logits.shape[1];
  const auto n = static_cast<int64_t>(batch.rows.size());
  if (out.numel() < n)
    return invalid_argument("sample_rows: out holds " + std::to_string(out.numel()) + " ids, batch has " +
                            std::to_string(n) + " rows");
  if (vocab < 1 || vocab > kMaxSampleVocab)
    return invalid_argument("sample_rows: vocab " + std::to_string(vocab) + " outside [1, " +
                            std::to_string(kMaxSampleVocab) + "]");
  if (n == 0) return Status();
  if (!sampling_) sampling_ = std::make_shared<SamplingState>();
  SamplingState& st = *sampling_;

  st.rows.resize(static_cast<size_t>(n));
  for (int64_t r = 0; r < n; ++r) {
    const backend::SamplingRow& s = batch.rows[static_cast<size_t>(r)];
    auto where = [r] { return "sample_rows: row " + std::to_string(r) + ": "; };  // built only for errors
    if (s.logit_row < 0 || s.logit_row >= num_logit_rows)
      return invalid_argument(where() + "logit_row " + std::to_string(s.logit_row) + " outside [0, " +
                              std::to_string(num_logit_rows) + ")");
    SampleRowArgs& a = st.rows[static_cast<size_t>(r)];
    a = SampleRowArgs{};
    a.logit_row = s.logit_row;
    a.greedy = s.greedy ? 1 : 0;
    if (!s.greedy) {
      if (!(s.temperature > 0.0f) || !std::isfinite(s.inv_temperature))
        return invalid_argument(where() + "temperature must be > 0, got " + std::to_string(s.temperature));
      if (s.top_k < 0 || s.top_k >= vocab)
        return invalid_argument(where() + "top_k must be 0 (off) or in [1, vocab), got " +
                                std::to_string(s.top_k));
      if (!(s.top_p > 0.0f && s.top_p <= 1.0f))
        return invalid_argument(where() + "top_p must be in (0, 1], got " + std::to_string(s.top_p));
      if (!(s.min_p >= 0.0f && s.min_p <= 1.0f))
        return invalid_argument(where() + "min_p must be in [0, 1], got " + std::to_string(s.min_p));
    }
    a.temperature = s.temperature;
    a.inv_temperature = s.inv_temperature;
    a.has_min_p = s.min_p > 0.0f ? 1 : 0;
    a.log_min_p = s.min_p > 0.0f ? std::log(s.min_p) : 0.0f;  // the host Sampler's std::log(float)
    a.top_k = s.top_k;
    a.top_p = s.top_p;
    a.repetition_penalty = s.repetition_penalty;
    a.presence_penalty = s.presence_penalty;
    a.frequency_penalty = s.frequency_penalty;
    a.random_bits = s.random_bits;
  }
  st.adjust.resize(batch.adjustments.size());
  st.seen_rows.clear();
  int32_t last_row = -1;
  for (size_t e = 0; e < batch.adjustments.size(); ++e) {
    const backend::LogitAdjustment& j = batch.adjustments[e];
    if (j.row < 0 || j.row >= n || j.token < 0 || j.token >= vocab)
      return invalid_argument("sample_rows: adjustment " + std::to_string(e) + " (row " + std::to_string(j.row) +
                              ", token " + std::to_string(j.token) + ") out of range");
    if (j.repeated && !(batch.rows[static_cast<size_t>(j.row)].repetition_penalty > 0.0f))
      return invalid_argument("sample_rows: repetition_penalty must be > 0");
    if (j.row != last_row) st.seen_rows.push_back(batch.rows[static_cast<size_t>(j.row)].logit_row);
    last_row = j.row;
    st.adjust[e] = LogitAdjustArgs{j.row, j.token, j.bias, j.count,
                                   (j.masked ? kAdjustMasked : 0) | (j.has_bias ? kAdjustBias : 0) |
                                       (j.repeated ? kAdjustRepeated : 0)};
  }
  // Adjustments write logits in place: two rows with adjustments must not share a logits row.
  std::sort(st.seen_rows.begin(), st.seen_rows.end());
  if (std::adjacent_find(st.seen_rows.begin(), st.seen_rows.end()) != st.seen_rows.end())
    return invalid_argument("sample_rows: rows with adjustments share a logits row (or adjustments are not "
                            "grouped by row)");

  const size_t rows_bytes = align16(st.rows.size() * sizeof(SampleRowArgs));
  const size_t adjust_bytes = align16(st.adjust.size() * sizeof(LogitAdjustArgs));
  const size_t host_bytes = rows_bytes + adjust_bytes;
  const size_t device_bytes = host_bytes + align16(st.adjust.size() * sizeof(float));
  SamplingState::Staging& sg = st.staging[st.next_staging];
  st.next_staging ^= 1;
  XI_CUDA_CHECK(cudaEventSynchronize(sg.copied));  // this buffer's last copy (two calls ago) has left it
  if (host_bytes > sg.capacity) {
    if (sg.host) XI_CUDA_CHECK(cudaFreeHost(sg.host));
    sg.capacity = std::max<size_t>(host_bytes * 2, 64u << 10);
    XI_CUDA_CHECK(cudaMallocHost(&sg.host, sg.capacity));
  }
  if (device_bytes > st.device_capacity) {
    synchronize();  // earlier launches may still read the old buffer
    if (st.device) XI_CUDA_CHECK(cudaFree(st.device));
    st.device_capacity = std::max<size_t>(device_bytes * 2, 64u << 10);
    XI_CUDA_CHECK(cudaMalloc(&st.device, st.device_capacity));
  }
  std::memcpy(sg.host, st.rows.data(), st.rows.size() * sizeof(SampleRowArgs));
  if (!st.adjust.empty())
    std::memcpy(static_cast<char*>(sg.host) + rows_bytes, st.adjust.data(),
                st.adjust.size() * sizeof(LogitAdjustArgs));
  XI_CUDA_CHECK(cudaMemcpyAsync(st.device, sg.host, host_bytes, cudaMemcpyHostToDevice, stream_));
  XI_CUDA_CHECK(cudaEventRecord(sg.copied, stream_));

  char* dev = static_cast<char*>(st.device);
  SampleRowsArgs args{};
  args.logits = logits.as<float>();
  args.vocab = static_cast<int>(vocab);
  args.rows = reinterpret_cast<const SampleRowArgs*>(dev);
  args.num_rows = static_cast<int>(n);
  args.adjust = reinterpret_cast<const LogitAdjustArgs*>(dev + rows_bytes);
  args.saved = reinterpret_cast<float*>(dev + host_bytes);
  args.num_adjust = static_cast<int>(st.adjust.size());
  args.out = out.as<int32_t>();
  launch_sample_rows(args, stream_);
  sampled_rows_ += n;
  return Status();
}

}  // namespace xinfer::cuda
