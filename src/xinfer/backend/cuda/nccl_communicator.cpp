#include "xinfer/backend/cuda/nccl_communicator.h"

#include <dlfcn.h>
#include <nccl.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "xinfer/backend/cuda/cuda_check.h"
#include "xinfer/core/check.h"
#include "xinfer/core/logging.h"

namespace xinfer::cuda {
namespace {

static_assert(sizeof(NcclId) == sizeof(ncclUniqueId), "NcclId must hold an ncclUniqueId");

// The NCCL entry points we use, resolved from libnccl.so.2 once.
struct NcclApi {
  decltype(&ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&ncclCommInitRankConfig) comm_init_rank_config = nullptr;
  decltype(&ncclCommGetAsyncError) comm_get_async_error = nullptr;
  decltype(&ncclCommAbort) comm_abort = nullptr;
  decltype(&ncclCommDestroy) comm_destroy = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
  decltype(&ncclAllGather) all_gather = nullptr;
  decltype(&ncclBroadcast) broadcast = nullptr;
  decltype(&ncclGetErrorString) get_error_string = nullptr;
  std::string error;  // why loading failed; empty when loaded
};

const NcclApi& nccl() {
  static NcclApi api = [] {
    NcclApi a;
    void* lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_GLOBAL);
    if (lib == nullptr) lib = dlopen("libnccl.so", RTLD_NOW | RTLD_GLOBAL);
    if (lib == nullptr) {
      const char* e = dlerror();
      a.error = std::string("cannot load NCCL (libnccl.so.2): ") + (e ? e : "not found") +
                "; install the CUDA toolkit's NCCL or add its lib directory to LD_LIBRARY_PATH";
      return a;
    }
    auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      if (fn == nullptr && a.error.empty()) a.error = std::string("NCCL library lacks ") + name;
    };
    sym(a.get_unique_id, "ncclGetUniqueId");
    sym(a.comm_init_rank_config, "ncclCommInitRankConfig");
    sym(a.comm_get_async_error, "ncclCommGetAsyncError");
    sym(a.comm_abort, "ncclCommAbort");
    sym(a.comm_destroy, "ncclCommDestroy");
    sym(a.all_reduce, "ncclAllReduce");
    sym(a.all_gather, "ncclAllGather");
    sym(a.broadcast, "ncclBroadcast");
    sym(a.get_error_string, "ncclGetErrorString");
    return a;
  }();
  return api;
}

std::string nccl_error(ncclResult_t r) {
  return nccl().get_error_string ? nccl().get_error_string(r) : ("NCCL error " + std::to_string(r));
}

ncclDataType_t nccl_dtype(DType t) {
  switch (t) {
    case DType::kBF16: return ncclBfloat16;
    case DType::kF16: return ncclFloat16;
    case DType::kF32: return ncclFloat32;
    default: break;
  }
  XI_CHECK(false) << "nccl: unsupported dtype " << dtype_name(t);
  return ncclFloat32;
}

// Leaves NCCL_NVLS_ENABLE as the user set it; off when unset (NVLink multicast is never switched on here).
void default_nvls_off() {
  static std::once_flag once;
  std::call_once(once, [] { setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0); });
}

}  // namespace

Result<NcclId> NcclCommunicator::new_id() {
  if (!nccl().error.empty()) return unavailable(nccl().error);
  default_nvls_off();
  ncclUniqueId id;
  const ncclResult_t r = nccl().get_unique_id(&id);
  if (r != ncclSuccess) return unavailable("ncclGetUniqueId: " + nccl_error(r));
  NcclId out;
  std::memcpy(out.bytes, &id, sizeof(id));
  return out;
}

Result<std::unique_ptr<NcclCommunicator>> NcclCommunicator::create(const NcclId& id, int size, int rank, int device,
                                                                   cudaStream_t stream,
                                                                   std::chrono::milliseconds timeout) {
  if (!nccl().error.empty()) return unavailable(nccl().error);
  if (size < 1 || rank < 0 || rank >= size)
    return invalid_argument("nccl: rank " + std::to_string(rank) + " of " + std::to_string(size));
  default_nvls_off();
  XI_CUDA_CHECK(cudaSetDevice(device));
  ncclUniqueId uid;
  std::memcpy(&uid, id.bytes, sizeof(uid));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // poll below against the timeout instead of hanging inside NCCL
  ncclComm_t comm = nullptr;
  ncclResult_t r = nccl().comm_init_rank_config(&comm, size, uid, rank, &config);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  if (r == ncclSuccess || r == ncclInProgress) {
    ncclResult_t state = ncclInProgress;
    while (true) {
      r = nccl().comm_get_async_error(comm, &state);
      if (r != ncclSuccess || state != ncclInProgress) break;
      if (std::chrono::steady_clock::now() > deadline) {
        nccl().comm_abort(comm);
        return unavailable("tensor parallel: rank " + std::to_string(rank) + " (cuda:" + std::to_string(device) +
                           ") could not reach all " + std::to_string(size) + " ranks within " +
                           std::to_string(timeout.count()) + " ms (a rank failed to start, or NCCL cannot "
                           "connect the GPUs: run with NCCL_DEBUG=INFO for details)");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (r == ncclSuccess) r = state;
  }
  if (r != ncclSuccess) {
    if (comm != nullptr) nccl().comm_abort(comm);
    return unavailable("tensor parallel: rank " + std::to_string(rank) + " (cuda:" + std::to_string(device) +
                       "): ncclCommInitRankConfig failed: " + nccl_error(r));
  }
  std::unique_ptr<NcclCommunicator> c(new NcclCommunicator(comm, size, rank, device, stream));
  c->timeout_ = timeout;
  XI_LOG(INFO) << "tensor parallel: rank " << rank << " of " << size << " joined on cuda:" << device << " (NCCL, "
               << "NCCL_NVLS_ENABLE=" << (std::getenv("NCCL_NVLS_ENABLE") ? std::getenv("NCCL_NVLS_ENABLE") : "")
               << ")";
  return c;
}

NcclCommunicator::NcclCommunicator(void* comm, int size, int rank, int device, cudaStream_t stream)
    : comm_(comm), size_(size), rank_(rank), device_(device), stream_(stream) {
  XI_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&barrier_word_), sizeof(float)));
}

NcclCommunicator::~NcclCommunicator() {
  cudaStreamSynchronize(stream_);
  if (staging_ != nullptr) cudaFree(staging_);
  if (barrier_word_ != nullptr) cudaFree(barrier_word_);
  if (comm_ != nullptr) nccl().comm_destroy(static_cast<ncclComm_t>(comm_));
}

void NcclCommunicator::wait_enqueued(int result, const char* what) {
  ncclResult_t r = static_cast<ncclResult_t>(result);
  if (r == ncclInProgress) {
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    ncclResult_t state = ncclInProgress;
    do {
      r = nccl().comm_get_async_error(static_cast<ncclComm_t>(comm_), &state);
      XI_CHECK(std::chrono::steady_clock::now() < deadline)
          << "tensor parallel: rank " << rank_ << " (cuda:" << device_ << "): " << what << " not queued within "
          << timeout_.count() << " ms";
    } while (r == ncclSuccess && state == ncclInProgress);
    if (r == ncclSuccess) r = state;
  }
  XI_CHECK(r == ncclSuccess) << "tensor parallel: rank " << rank_ << " (cuda:" << device_ << "): " << what << ": "
                             << nccl_error(r);
}

// One rank too goes through NCCL (the tensor-parallel code path alone, in tests: its collectives are then
// recorded into and replayed from CUDA graphs on one GPU as on several).
void NcclCommunicator::all_reduce_sum(const TensorView& x) {
  wait_enqueued(nccl().all_reduce(x.data, x.data, static_cast<size_t>(x.numel()), nccl_dtype(x.dtype), ncclSum,
                                  static_cast<ncclComm_t>(comm_), stream_),
                "ncclAllReduce");
}

void NcclCommunicator::all_gather_columns(const TensorView& in, const TensorView& out,
                                          std::span<const int64_t> col_offsets) {
  XI_CHECK_EQ(static_cast<int>(col_offsets.size()), size_ + 1);
  XI_CHECK(in.dtype == out.dtype);
  XI_CHECK_EQ(out.shape.rank(), 2);
  const int64_t rows = out.shape[0], cols = out.shape[1];
  XI_CHECK_EQ(cols, col_offsets[static_cast<size_t>(size_)]);
  const size_t elem = dtype_bytes(in.dtype, 1);
  int64_t max_share = 0;
  for (int r = 0; r < size_; ++r) max_share = std::max(max_share, col_offsets[r + 1] - col_offsets[r]);
  const int64_t mine = col_offsets[rank_ + 1] - col_offsets[rank_];
  XI_CHECK_EQ(in.numel(), rows * mine);
  const size_t share_bytes = static_cast<size_t>(rows * max_share) * elem;
  grow_staging(share_bytes * static_cast<size_t>(size_ + 1));  // [size] gathered + my padded send
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  XI_CUDA_CHECK(cudaStreamIsCapturing(stream_, &capturing));
  if (capturing != cudaStreamCaptureStatusNone) recorded_ = true;
  auto* gathered = static_cast<uint8_t*>(staging_);
  uint8_t* send = gathered + share_bytes * static_cast<size_t>(size_);
  // My share padded to [rows, max_share].
  XI_CUDA_CHECK(cudaMemcpy2DAsync(send, static_cast<size_t>(max_share) * elem, in.data,
                                  static_cast<size_t>(mine) * elem, static_cast<size_t>(mine) * elem,
                                  static_cast<size_t>(rows), cudaMemcpyDeviceToDevice, stream_));
  wait_enqueued(nccl().all_gather(send, gathered, static_cast<size_t>(rows * max_share) * elem, ncclUint8,
                                  static_cast<ncclComm_t>(comm_), stream_),
                "ncclAllGather");
  for (int r = 0; r < size_; ++r) {
    const int64_t w = col_offsets[r + 1] - col_offsets[r];
    if (w == 0) continue;
    XI_CUDA_CHECK(cudaMemcpy2DAsync(static_cast<uint8_t*>(out.data) + static_cast<size_t>(col_offsets[r]) * elem,
                                    static_cast<size_t>(cols) * elem, gathered + share_bytes * static_cast<size_t>(r),
                                    static_cast<size_t>(max_share) * elem, static_cast<size_t>(w) * elem,
                                    static_cast<size_t>(rows), cudaMemcpyDeviceToDevice, stream_));
  }
}

void NcclCommunicator::grow_staging(size_t need) {
  if (need <= staging_bytes_) return;
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  XI_CUDA_CHECK(cudaStreamIsCapturing(stream_, &capturing));
  XI_CHECK(capturing == cudaStreamCaptureStatusNone)
      << "all_gather_columns: staging buffer must grow to " << need << " bytes during a graph capture "
      << "(reserve_all_gather() was not called for this size)";
  XI_CHECK(!recorded_) << "all_gather_columns: staging buffer must grow to " << need << " bytes after a graph "
                       << "recorded its address (reserve_all_gather() was not called for this size)";
  XI_CUDA_CHECK(cudaStreamSynchronize(stream_));
  if (staging_ != nullptr) XI_CUDA_CHECK(cudaFree(staging_));
  XI_CUDA_CHECK(cudaMalloc(&staging_, need));
  staging_bytes_ = need;
}

void NcclCommunicator::reserve_all_gather(int64_t max_rows, std::span<const int64_t> col_offsets, DType dtype) {
  XI_CHECK_EQ(static_cast<int>(col_offsets.size()), size_ + 1);
  int64_t max_share = 0;
  for (int r = 0; r < size_; ++r) max_share = std::max(max_share, col_offsets[r + 1] - col_offsets[r]);
  grow_staging(static_cast<size_t>(max_rows * max_share) * dtype_bytes(dtype, 1) * static_cast<size_t>(size_ + 1));
}

void NcclCommunicator::broadcast(const TensorView& x, int root) {
  XI_CHECK(root >= 0 && root < size_) << "broadcast: root " << root << " of " << size_;
  if (x.numel() == 0) return;
  wait_enqueued(nccl().broadcast(x.data, x.data, x.bytes(), ncclUint8, root, static_cast<ncclComm_t>(comm_), stream_),
                "ncclBroadcast");
}

void NcclCommunicator::barrier() {
  wait_enqueued(nccl().all_reduce(barrier_word_, barrier_word_, 1, ncclFloat32, ncclSum,
                                  static_cast<ncclComm_t>(comm_), stream_),
                "ncclAllReduce (barrier)");
  XI_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

}  // namespace xinfer::cuda
