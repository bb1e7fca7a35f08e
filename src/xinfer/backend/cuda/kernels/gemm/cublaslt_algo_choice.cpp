#include "xinfer/backend/cuda/kernels/gemm/cublaslt_algo_choice.h"

#include <algorithm>
#include <cstring>

#include "xinfer/backend/cuda/cuda_check.h"
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
  const uint32_t schemes = cap_attr<uint32_t>(base, CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK);
  uint32_t scheme = CUBLASLT_REDUCTION_SCHEME_NONE;
  for (uint32_t s : {static_cast<uint32_t>(CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE),
                     static_cast<uint32_t>(CUBLASLT_REDUCTION_SCHEME_INPLACE),
                     static_cast<uint32_t>(CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE)})
    if (schemes & s) {
      scheme = s;
      break;
    }
  if (scheme == CUBLASLT_REDUCTION_SCHEME_NONE) return;
  for (int32_t splits : {2, 4, 8, 16}) {
    if (k / splits < 256) break;
    cublasLtMatmulAlgo_t v = base;
    if (cublasLtMatmulAlgoConfigSetAttribute(&v, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits, sizeof(splits)) !=
            CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulAlgoConfigSetAttribute(&v, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme, sizeof(scheme)) !=
            CUBLAS_STATUS_SUCCESS)
      continue;
    if (check(v)) add_new(v, algos);
  }
}

void add_tile_variants(const cublasLtMatmulAlgo_t& base, const AlgoCheck& check, std::vector<cublasLtMatmulAlgo_t>& algos) {
  size_t bytes = 0;
  if (cublasLtMatmulAlgoCapGetAttribute(&base, CUBLASLT_ALGO_CAP_TILE_IDS, nullptr, 0, &bytes) != CUBLAS_STATUS_SUCCESS ||
      bytes == 0)
    return;
  std::vector<uint32_t> tiles(bytes / sizeof(uint32_t));
  if (cublasLtMatmulAlgoCapGetAttribute(&base, CUBLASLT_ALGO_CAP_TILE_IDS, tiles.data(), bytes, &bytes) !=
      CUBLAS_STATUS_SUCCESS)
    return;
  const uint32_t own = config_attr<uint32_t>(base, CUBLASLT_ALGO_CONFIG_TILE_ID);
  for (uint32_t tile : tiles) {
    if (tile == own || tile == CUBLASLT_MATMUL_TILE_UNDEFINED) continue;
    cublasLtMatmulAlgo_t v = base;
    if (cublasLtMatmulAlgoConfigSetAttribute(&v, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof(tile)) !=
        CUBLAS_STATUS_SUCCESS)
      continue;
    if (check(v)) add_new(v, algos);
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
    add_tile_variants(first, check, algos);
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
  return rows >= 2 && rows <= 256 && backend::decode_graph_bucket(rows) == rows;
}

int algo_row_bucket(int rows) {
  int b = 1;
  while (b < rows) b *= 2;
  return b;
}

AlgoTuneScratch::~AlgoTuneScratch() {
  if (output_) cudaFree(output_);
  if (workspace_) cudaFree(workspace_);
  if (stream_) cudaStreamDestroy(stream_);
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
  float best_ms = 0;
  int best = -1;
  for (int i = 0; i < count; ++i) {
    if (launch(i) != CUBLAS_STATUS_SUCCESS) continue;  // an algorithm that refuses to launch is never chosen
    float t = 1e30f;
    for (int rep = 0; rep < 3; ++rep) {
      XI_CUDA_CHECK(cudaEventRecord(start, tune_stream));
      for (int it = 0; it < 4; ++it) XI_CUBLAS_CHECK(launch(i));
      XI_CUDA_CHECK(cudaEventRecord(stop, tune_stream));
      XI_CUDA_CHECK(cudaEventSynchronize(stop));
      float ms = 0;
      XI_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
      t = std::min(t, ms);
    }
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
