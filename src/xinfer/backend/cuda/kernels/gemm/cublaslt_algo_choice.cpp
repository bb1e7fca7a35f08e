#include "xinfer/backend/cuda/kernels/gemm/cublaslt_algo_choice.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "xinfer/backend/cuda/cuda_check.h"
#include "xinfer/backend/cuda/kernels/device_launch.h"
#include "xinfer/backend/decode_graph_buckets.h"

namespace xinfer::cuda {
namespace {

template <typename T>
T config_attr(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attr) {
  T v{};
  size_t written = 0;
  if (cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &v, sizeof(v), &written) != CUBLAS_STATUS_SUCCESS) return T{};
  return v;
}

template <typename T>
T cap_attr(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoCapAttributes_t attr) {
  T v{};
  size_t written = 0;
  if (cublasLtMatmulAlgoCapGetAttribute(&algo, attr, &v, sizeof(v), &written) != CUBLAS_STATUS_SUCCESS) return T{};
  return v;
}

template <typename T>
std::vector<T> cap_list(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoCapAttributes_t attr) {
  size_t bytes = 0;
  if (cublasLtMatmulAlgoCapGetAttribute(&algo, attr, nullptr, 0, &bytes) != CUBLAS_STATUS_SUCCESS ||
      bytes == 0)
    return {};
  std::vector<T> v(bytes / sizeof(T));
  if (cublasLtMatmulAlgoCapGetAttribute(&algo, attr, v.data(), bytes, &bytes) != CUBLAS_STATUS_SUCCESS)
    return {};
  return v;
}

template <typename T>
T desc_attr(cublasLtMatmulDesc_t op, cublasLtMatmulDescAttributes_t attr) {
  T v{};
  size_t written = 0;
  XI_CUBLAS_CHECK(cublasLtMatmulDescGetAttribute(op, attr, &v, sizeof(v), &written));
  return v;
}

template <typename T>
bool set_config(cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attr, T value) {
  return cublasLtMatmulAlgoConfigSetAttribute(&algo, attr, &value, sizeof(value)) == CUBLAS_STATUS_SUCCESS;
}

// The first split-K reduction scheme base supports (in cuBLASLt's order of preference), or NONE.
uint32_t reduction_scheme(const cublasLtMatmulAlgo_t& base) {
  const uint32_t schemes = cap_attr<uint32_t>(base, CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK);
  for (uint32_t s : {static_cast<uint32_t>(CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE),
                     static_cast<uint32_t>(CUBLASLT_REDUCTION_SCHEME_INPLACE),
                     static_cast<uint32_t>(CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE)})
    if (schemes & s) return s;
  return CUBLASLT_REDUCTION_SCHEME_NONE;
}

// Index of algo in algos, or -1.
int find_algo(const std::vector<cublasLtMatmulAlgo_t>& algos, const cublasLtMatmulAlgo_t& algo) {
  for (size_t i = 0; i < algos.size(); ++i)
    if (same_algo(algos[i], algo)) return static_cast<int>(i);
  return -1;
}

void add_new(const cublasLtMatmulAlgo_t& algo, std::vector<cublasLtMatmulAlgo_t>& algos) {
  if (find_algo(algos, algo) < 0) algos.push_back(algo);
}

// Grows the device buffer p (bytes held in have) to at least `bytes`; contents are not kept.
void* grow(void*& p, size_t& have, size_t bytes) {
  if (bytes > have) {
    if (p) XI_CUDA_CHECK(cudaFree(p));
    XI_CUDA_CHECK(cudaMalloc(&p, bytes));
    have = bytes;
  }
  return p;
}

bool accepts(const AlgoQuery& q, const cublasLtMatmulAlgo_t& algo) {
  cublasLtMatmulHeuristicResult_t check{};
  return cublasLtMatmulAlgoCheck(q.handle, q.op, q.a, q.b, q.c, q.d, &algo, &check) == CUBLAS_STATUS_SUCCESS &&
         check.state == CUBLAS_STATUS_SUCCESS && check.workspaceSize <= q.workspace_bytes;
}

void heuristic(const AlgoQuery& q, cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
               int max_algos, std::vector<cublasLtMatmulHeuristicResult_t>& out) {
  cublasLtMatmulPreference_t pref = nullptr;
  XI_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  XI_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                       &q.workspace_bytes, sizeof(q.workspace_bytes)));
  out.assign(static_cast<size_t>(max_algos), cublasLtMatmulHeuristicResult_t{});
  int found = 0;
  if (cublasLtMatmulAlgoGetHeuristic(q.handle, q.op, q.a, b, c, d, pref, max_algos, out.data(), &found) !=
      CUBLAS_STATUS_SUCCESS)
    found = 0;
  out.resize(static_cast<size_t>(found));
  cublasLtMatmulPreferenceDestroy(pref);
}

}  // namespace

bool same_algo(const cublasLtMatmulAlgo_t& a, const cublasLtMatmulAlgo_t& b) {
  return std::memcmp(a.data, b.data, sizeof(a.data)) == 0;
}

std::string describe_algo(const cublasLtMatmulAlgo_t& algo) {
  return "algo " + std::to_string(config_attr<int32_t>(algo, CUBLASLT_ALGO_CONFIG_ID)) + " tile " +
         std::to_string(config_attr<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_TILE_ID)) + " stages " +
         std::to_string(config_attr<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID)) + " splitk " +
         std::to_string(config_attr<int32_t>(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM)) + " reduction " +
         std::to_string(config_attr<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME)) + " swizzle " +
         std::to_string(config_attr<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING)) + " custom " +
         std::to_string(config_attr<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION)) + " cluster " +
         std::to_string(config_attr<uint16_t>(algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID));
}

void add_split_k_variants(const cublasLtMatmulAlgo_t& base, int k, const AlgoCheck& check,
                          std::vector<cublasLtMatmulAlgo_t>& algos) {
  if (cap_attr<int32_t>(base, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT) == 0) return;
  const uint32_t scheme = reduction_scheme(base);
  if (scheme == CUBLASLT_REDUCTION_SCHEME_NONE) return;
  for (int32_t splits : {2, 4, 8, 16}) {
    if (k / splits < 256) break;
    cublasLtMatmulAlgo_t v = base;
    if (set_config(v, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, splits) &&
        set_config(v, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, scheme) && check(v))
      add_new(v, algos);
  }
}

void add_config_variants(const cublasLtMatmulAlgo_t& base, const AlgoCheck& check,
                         std::vector<cublasLtMatmulAlgo_t>& algos) {
  std::vector<uint32_t> tiles = cap_list<uint32_t>(base, CUBLASLT_ALGO_CAP_TILE_IDS);
  if (tiles.empty()) tiles.push_back(config_attr<uint32_t>(base, CUBLASLT_ALGO_CONFIG_TILE_ID));
  // Each tile as the heuristic's first runs it (its cluster shape and custom option) and as one CTA per
  // cluster with custom option 0: on an H200 the tile decides (up to 1.65x at 448 rows), those two the last
  // 1-2% (PERF.md session 27), and every (cluster, option) pair would multiply the candidates by ~24.
  const std::pair<uint16_t, uint32_t> combos[] = {
      {config_attr<uint16_t>(base, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID),
       config_attr<uint32_t>(base, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION)},
      {static_cast<uint16_t>(CUBLASLT_CLUSTER_SHAPE_1x1x1), 0u}};
  for (const uint32_t tile : tiles) {
    if (tile == CUBLASLT_MATMUL_TILE_UNDEFINED) continue;
    for (const auto& [cluster, custom] : combos) {
      cublasLtMatmulAlgo_t v = base;
      if (set_config(v, CUBLASLT_ALGO_CONFIG_TILE_ID, tile) && set_config(v, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, cluster) &&
          set_config(v, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, custom) && find_algo(algos, v) < 0 && check(v))
        algos.push_back(v);
    }
  }
}

void add_every_algo(const AlgoQuery& q, size_t max_algos, std::vector<cublasLtMatmulAlgo_t>& algos) {
  const auto compute = desc_attr<cublasComputeType_t>(q.op, CUBLASLT_MATMUL_DESC_COMPUTE_TYPE);
  const auto scale = desc_attr<cudaDataType_t>(q.op, CUBLASLT_MATMUL_DESC_SCALE_TYPE);
  std::vector<int> ids(256);
  int found = 0;
  if (cublasLtMatmulAlgoGetIds(q.handle, compute, scale, q.b_type, q.b_type, q.d_type, q.d_type,
                               static_cast<int>(ids.size()), ids.data(), &found) != CUBLAS_STATUS_SUCCESS)
    return;
  ids.resize(static_cast<size_t>(found));
  const uint16_t clusters[] = {CUBLASLT_CLUSTER_SHAPE_AUTO,  CUBLASLT_CLUSTER_SHAPE_1x1x1,
                               CUBLASLT_CLUSTER_SHAPE_2x1x1, CUBLASLT_CLUSTER_SHAPE_1x2x1,
                               CUBLASLT_CLUSTER_SHAPE_2x2x1, CUBLASLT_CLUSTER_SHAPE_4x1x1,
                               CUBLASLT_CLUSTER_SHAPE_1x4x1};
  for (const int id : ids) {
    cublasLtMatmulAlgo_t base{};
    if (cublasLtMatmulAlgoInit(q.handle, compute, scale, q.b_type, q.b_type, q.d_type, q.d_type, id, &base) !=
        CUBLAS_STATUS_SUCCESS)
      continue;
    std::vector<uint32_t> tiles = cap_list<uint32_t>(base, CUBLASLT_ALGO_CAP_TILE_IDS);
    std::vector<uint32_t> stages = cap_list<uint32_t>(base, CUBLASLT_ALGO_CAP_STAGES_IDS);
    if (tiles.empty()) tiles.push_back(CUBLASLT_MATMUL_TILE_UNDEFINED);
    if (stages.empty()) stages.push_back(CUBLASLT_MATMUL_STAGES_UNDEFINED);
    const bool split_ok = cap_attr<int32_t>(base, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT) != 0;
    const uint32_t scheme = reduction_scheme(base);
    for (const uint32_t tile : tiles)
      for (const uint32_t stage : stages)
        for (const uint16_t cluster : clusters)
          for (const int32_t splits : {1, 2, 4}) {
            if (splits > 1 && (!split_ok || q.k / splits < 1024)) continue;
            cublasLtMatmulAlgo_t v = base;
            if (!set_config(v, CUBLASLT_ALGO_CONFIG_TILE_ID, tile) ||
                !set_config(v, CUBLASLT_ALGO_CONFIG_STAGES_ID, stage) ||
                !set_config(v, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, cluster) ||
                !set_config(v, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, splits))
              continue;
            if (splits > 1 && (scheme == CUBLASLT_REDUCTION_SCHEME_NONE ||
                               !set_config(v, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, scheme)))
              continue;
            if (find_algo(algos, v) < 0 && accepts(q, v)) {
              algos.push_back(v);
              if (algos.size() >= max_algos) return;
            }
          }
  }
}

std::vector<cublasLtMatmulAlgo_t> candidate_algos(const AlgoQuery& q, int max_algos, bool pad_rows, bool variants) {
  std::vector<cublasLtMatmulAlgo_t> algos;
  std::vector<cublasLtMatmulHeuristicResult_t> results;
  heuristic(q, q.b, q.c, q.d, max_algos, results);
  for (const auto& r : results)
    if (r.state == CUBLAS_STATUS_SUCCESS) algos.push_back(r.algo);
  if (algos.empty()) return algos;
  if (variants) {
    const cublasLtMatmulAlgo_t first = algos[0];
    const AlgoCheck check = [&](const cublasLtMatmulAlgo_t& a) { return accepts(q, a); };
    add_config_variants(first, check, algos);
    add_split_k_variants(first, q.k, check, algos);
  }
  if (!pad_rows || q.rows <= 128 || q.rows % 128 == 0) return algos;
  const int mp = (q.rows + 127) / 128 * 128;
  cublasLtMatrixLayout_t bp = nullptr, dp = nullptr;
  XI_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&bp, q.b_type, q.k, mp, q.k));
  XI_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&dp, q.d_type, q.n, mp, q.n));
  heuristic(q, bp, dp, dp, max_algos, results);
  for (const auto& r : results)
    if (r.state == CUBLAS_STATUS_SUCCESS) offer_algo(q, r.algo, algos);
  cublasLtMatrixLayoutDestroy(bp);
  cublasLtMatrixLayoutDestroy(dp);
  return algos;
}

int offer_algo(const AlgoQuery& q, const cublasLtMatmulAlgo_t& algo, std::vector<cublasLtMatmulAlgo_t>& algos) {
  if (const int i = find_algo(algos, algo); i >= 0) return i;
  if (!accepts(q, algo)) return -1;
  algos.push_back(algo);
  return static_cast<int>(algos.size()) - 1;
}

bool variant_rows(int rows) {
  return rows >= 2 && backend::decode_graph_bucket(rows) == rows;
}

int algo_row_bucket(int rows) {
  int b = 1;
  while (b < rows) b *= 2;
  return b;
}

AlgoTuneScratch::~AlgoTuneScratch() {
  release();
  if (stream_) cudaStreamDestroy(stream_);
}

void AlgoTuneScratch::release() {
  for (auto [p, bytes] : {std::pair{&output_, &output_bytes_}, std::pair{&workspace_, &workspace_bytes_},
                          std::pair{&weights_, &weights_bytes_}}) {
    if (*p) cudaFree(*p);
    *p = nullptr;
    *bytes = 0;
  }
}

const void* AlgoTuneScratch::weight_copies(const void* w, size_t bytes, int copies) {
  auto* out = static_cast<uint8_t*>(grow(weights_, weights_bytes_, bytes * static_cast<size_t>(copies)));
  for (int c = 0; c < copies; ++c)
    XI_CUDA_CHECK(
        cudaMemcpyAsync(out + static_cast<size_t>(c) * bytes, w, bytes, cudaMemcpyDeviceToDevice, stream()));
  return out;
}

int rotated_copies(size_t bytes) {
  const int64_t l2 = l2_bytes();
  const size_t want = (2 * static_cast<size_t>(l2) + bytes - 1) / std::max<size_t>(bytes, 1);
  return static_cast<int>(std::clamp<size_t>(want, 1, 8));
}

cudaStream_t AlgoTuneScratch::stream() {
  if (!stream_) XI_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  return stream_;
}

void* AlgoTuneScratch::workspace(size_t bytes) { return grow(workspace_, workspace_bytes_, bytes); }

void* AlgoTuneScratch::output(size_t bytes) { return grow(output_, output_bytes_, bytes); }

int fastest_algo(int count, cudaStream_t caller_stream, cudaStream_t tune_stream,
                 const std::function<cublasStatus_t(int)>& launch) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  XI_CUDA_CHECK(cudaStreamIsCapturing(caller_stream, &capture));
  if (capture == cudaStreamCaptureStatusNone) XI_CUDA_CHECK(cudaStreamSynchronize(caller_stream));
  cudaEvent_t start = nullptr, stop = nullptr;
  XI_CUDA_CHECK(cudaEventCreate(&start));
  XI_CUDA_CHECK(cudaEventCreate(&stop));
  // Milliseconds of `launches` back-to-back launches of i (best of `reps`), or -1 when i refuses to launch.
  auto time_of = [&](int i, int reps, int launches) -> float {
    if (launch(i) != CUBLAS_STATUS_SUCCESS) return -1;  // an algorithm that refuses to launch is never chosen
    float t = 1e30f;
    for (int rep = 0; rep < reps; ++rep) {
      XI_CUDA_CHECK(cudaEventRecord(start, tune_stream));
      for (int it = 0; it < launches; ++it) XI_CUBLAS_CHECK(launch(i));
      XI_CUDA_CHECK(cudaEventRecord(stop, tune_stream));
      XI_CUDA_CHECK(cudaEventSynchronize(stop));
      float ms = 0;
      XI_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
      t = std::min(t, ms);
    }
    return t;
  };
  // Many candidates: a short first pass keeps the reference and the kFinalists fastest for the full timing.
  std::vector<int> finalists;
  if (count > kFinalists + 1) {
    std::vector<std::pair<float, int>> quick;
    int reference = -1;
    for (int i = 0; i < count; ++i) {
      const float t = time_of(i, 1, 2);
      if (t < 0) continue;
      if (reference < 0)
        reference = i;
      else
        quick.emplace_back(t, i);
    }
    std::sort(quick.begin(), quick.end());
    if (reference >= 0) finalists.push_back(reference);
    for (size_t j = 0; j < quick.size() && j < static_cast<size_t>(kFinalists); ++j)
      finalists.push_back(quick[j].second);
    std::sort(finalists.begin(), finalists.end());
  } else {
    for (int i = 0; i < count; ++i) finalists.push_back(i);
  }
  float best_ms = 0;
  int best = -1;
  for (const int i : finalists) {
    const float t = time_of(i, 3, 4);
    if (t < 0) continue;
    if (best < 0 || t < best_ms * 0.99f) {
      best_ms = t;
      best = i;
    }
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return best;
}

}  // namespace xinfer::cuda
