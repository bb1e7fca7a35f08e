#include "xinfer/backend/cuda/kernels/gemm/gemm_tuner.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <iomanip>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>

#include "xinfer/backend/cuda/cuda_check.h"
#include "xinfer/backend/cuda/kernels/device_launch.h"
#include "xinfer/backend/cuda/kernels/gemm/cublaslt_algo_choice.h"
#include "xinfer/backend/cuda/kernels/gemm/gemm_tuning_cache.h"
#include "xinfer/backend/cuda/kernels/norm/rms_norm.h"
#include "xinfer/backend/cuda/kernels/random/random_normal.h"
#include "xinfer/core/logging.h"
#include "xinfer/core/progress_bar.h"

namespace xinfer::cuda {
namespace {

// Bump when the GEMV kernel changes in a way that can change which configuration wins: cached choices
// of older kernels are then ignored (the version is part of the cache's device key).
constexpr int kGemvVersion = 3;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kTargetRunUs = 200;  // device time per timed run: enough launches to average out noise

// Only the presence of a bias shapes cuBLASLt's descriptors; checks never dereference it.
const __nv_bfloat16* const kSomeBias = reinterpret_cast<const __nv_bfloat16*>(uintptr_t{256});

GemmArgs shape_args(const GemmTuningKey& key) {
  return GemmArgs{nullptr, nullptr, key.bias ? kSomeBias : nullptr, nullptr, key.y_f32, key.m, key.n, key.k};
}

bool same_shape(const GemmTuningKey& a, const GemmTuningKey& b) {
  return a.n == b.n && a.k == b.k && a.y_f32 == b.y_f32 && a.bias == b.bias;
}

class EventPair {
 public:
  EventPair() {
    XI_CUDA_CHECK(cudaEventCreate(&a_));
    XI_CUDA_CHECK(cudaEventCreate(&b_));
  }
  ~EventPair() {
    cudaEventDestroy(a_);
    cudaEventDestroy(b_);
  }
  // Device microseconds of `launches` calls of op(next index), one run.
  double run_us(cudaStream_t s, int launches, int* index, const std::function<bool(int)>& op) {
    XI_CUDA_CHECK(cudaEventRecord(a_, s));
    for (int i = 0; i < launches; ++i) op((*index)++);
    XI_CUDA_CHECK(cudaEventRecord(b_, s));
    XI_CUDA_CHECK(cudaEventSynchronize(b_));
    float ms = 0;
    XI_CUDA_CHECK(cudaEventElapsedTime(&ms, a_, b_));
    return 1e3 * static_cast<double>(ms) / launches;
  }

 private:
  cudaEvent_t a_ = nullptr, b_ = nullptr;
};

// Microseconds per launch of op: a warm-up, then the median of 3 runs. A candidate already 3x slower
// than `bound_us` on its first timed launch is not refined. op returns false if it could not launch.
double time_us(cudaStream_t s, EventPair& ev, double bound_us, const std::function<bool(int)>& op) {
  int index = 0;
  if (!op(index++)) return kInf;
  const double first = ev.run_us(s, 1, &index, op);
  if (first > 3 * bound_us) return first;
  const int launches = std::clamp(static_cast<int>(kTargetRunUs / std::max(first, 1.0)), 2, 25);
  double runs[3];
  for (double& r : runs) r = ev.run_us(s, launches, &index, op);
  std::sort(runs, runs + 3);
  return runs[1];
}

// Choices measured in this process, per device key: a later tuner (another engine or backend on the same
// GPU model) takes them instead of measuring again, so every engine of a process computes each linear
// the same way even without a cache file. Choice: GemmChoice or NormedGemvChoice (one table each).
template <typename Choice>
std::map<GemmTuningKey, Choice>& process_choices(const std::string& device_key, std::unique_lock<std::mutex>* lock) {
  static std::mutex mu;
  static std::map<std::string, std::map<GemmTuningKey, Choice>> choices;
  *lock = std::unique_lock<std::mutex>(mu);
  return choices[device_key];
}

std::string device_key_now() {
  int dev = 0, runtime = 0;
  XI_CUDA_CHECK(cudaGetDevice(&dev));
  cudaDeviceProp p{};
  XI_CUDA_CHECK(cudaGetDeviceProperties(&p, dev));
  XI_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  std::ostringstream os;
  os << p.name << "|sm" << p.major << p.minor << '|' << p.multiProcessorCount << " SMs|cudart " << runtime
     << "|cublasLt " << cublasLtGetVersion() << "|gemv " << kGemvVersion;
  return os.str();
}

}  // namespace

// Device buffers for timing one shape: `copies` weight matrices (rotated so L2 cannot hold them all),
// x and y for the largest m, and a bias.
struct GemmTuner::Scratch {
  std::vector<void*> w;
  void* x = nullptr;
  void* y = nullptr;
  void* bias = nullptr;
  bool ok = true;

  Scratch(const GemmShape& s, int max_m, cudaStream_t stream) {
    const size_t wbytes = static_cast<size_t>(s.n) * s.k * 2;
    const size_t copies = static_cast<size_t>(rotated_copies(wbytes));
    for (size_t c = 0; c < copies && ok; ++c) w.push_back(alloc(wbytes));
    x = alloc(static_cast<size_t>(max_m) * s.k * 2);
    y = alloc(static_cast<size_t>(max_m) * s.n * (s.y_f32 ? 4 : 2));
    if (s.bias) bias = alloc(static_cast<size_t>(s.n) * 2);
    if (!ok) return;
    for (size_t c = 0; c < w.size(); ++c)
      launch_random_normal({w[c], false, static_cast<size_t>(s.n) * s.k, 1000 + c, 0.05f}, stream);
    launch_random_normal({x, false, static_cast<size_t>(max_m) * s.k, 7, 1.0f}, stream);
    if (bias) launch_random_normal({bias, false, static_cast<size_t>(s.n), 8, 1.0f}, stream);
  }
  ~Scratch() {
    for (void* p : w) cudaFree(p);
    for (void* p : {x, y, bias})
      if (p) cudaFree(p);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

 private:
  void* alloc(size_t bytes) {
    if (!ok) return nullptr;
    void* p = nullptr;
    if (cudaMalloc(&p, std::max<size_t>(bytes, 256)) != cudaSuccess) {
      (void)cudaGetLastError();  // out of memory is not sticky; leave no error behind
      ok = false;
      return nullptr;
    }
    return p;
  }
};

GemmTuner::GemmTuner(size_t cublaslt_workspace_bytes)
    : cublaslt_(cublaslt_workspace_bytes), device_key_(device_key_now()) {
  int driver = 0;
  XI_CUDA_CHECK(cudaDriverGetVersion(&driver));
  pdl_supported_ = driver >= 12030;  // programmatic dependent launch under stream capture
}

std::vector<int> GemmTuner::tuned_ms(int max_m) {
  std::vector<int> ms;
  for (int m = 1; m < max_m; m *= 2) ms.push_back(m);
  if (max_m >= 1) ms.push_back(max_m);
  return ms;
}

void GemmTuner::clear() {
  table_.clear();
  resolved_.clear();
  normed_.clear();
}

bool GemmTuner::valid(const GemmTuningKey& key, const GemmChoice& choice) {
  const GemmArgs args = shape_args(key);
  // A stored outcome "cuBLASLt has nothing here" must still be true (and vice versa).
  const bool have_heuristic = cublaslt_.find_heuristic(args) != nullptr;
  if (choice.heuristic_us.has_value() != have_heuristic) return false;
  switch (choice.kind) {
    case GemmKind::kHeuristic: return have_heuristic;
    case GemmKind::kCublasLt: return cublaslt_.check(args, choice.algo);
    case GemmKind::kGemv: {
      if (key.m > 8 && have_heuristic) return false;  // past 8 rows the GEMV is only a fallback
      const auto configs = gemv_candidates(args, choice.gemv.pdl);
      return std::find(configs.begin(), configs.end(), choice.gemv) != configs.end();
    }
    case GemmKind::kNone: return !have_heuristic && !gemv_supports(args);
  }
  return false;
}

GemmChoice GemmTuner::resolve(const GemmArgs& args) {
  const GemmTuningKey exact{args.n, args.k, args.y_f32, args.bias != nullptr, args.m};
  const GemmChoice* bucket = nullptr;
  int bucket_m = 0;
  auto it = table_.lower_bound(exact);
  if (it != table_.end() && same_shape(it->first, exact)) {  // the smallest tuned m >= m
    bucket = &it->second;
    bucket_m = it->first.m;
  } else if (it != table_.begin() && same_shape(std::prev(it)->first, exact)) {  // m is past every tuned m
    bucket = &std::prev(it)->second;
    bucket_m = std::prev(it)->first.m;
  }
  GemmChoice out;  // kHeuristic
  if (bucket) switch (bucket->kind) {
      case GemmKind::kHeuristic: out = *bucket; break;
      case GemmKind::kCublasLt:
        if (bucket_m == args.m || cublaslt_.check(args, bucket->algo)) out = *bucket;
        break;
      case GemmKind::kGemv:
        // Tuned at m <= 8 it won against cuBLASLt for few rows; tuned past 8 rows it was the only
        // candidate (cuBLASLt had nothing) and serves any m. Alignment is checked per call.
        if (args.m <= 8 || bucket_m > 8) out = *bucket;
        break;
      case GemmKind::kNone: break;  // decided below for this exact m
    }
  if (out.kind == GemmKind::kHeuristic && cublaslt_.find_heuristic(args) == nullptr) {
    // cuBLASLt has no algorithm for this m: the GEMV kernel (in chunks of 8 rows), if it takes the shape.
    const GemmArgs shape = shape_args(exact);
    out = GemmChoice{};
    if (gemv_supports(shape)) {
      out.kind = GemmKind::kGemv;
      out.gemv = bucket && bucket->kind == GemmKind::kGemv ? bucket->gemv : gemv_default_config(shape);
    } else {
      out.kind = GemmKind::kNone;
    }
  }
  return out;
}

GemmChoice GemmTuner::choice_for(const GemmArgs& args) {
  const GemmTuningKey exact{args.n, args.k, args.y_f32, args.bias != nullptr, args.m};
  auto it = resolved_.find(exact);
  if (it == resolved_.end()) {
    DebugTimer timer("bf16 GEMM choice");
    if (timer.enabled()) timer.detail() << "m " << args.m << " n " << args.n << " k " << args.k;
    it = resolved_.emplace(exact, resolve(args)).first;
  }
  GemmChoice c = it->second;
  if (c.kind == GemmKind::kGemv && !gemv_supports(args)) {  // these pointers are not 16-byte aligned
    c = GemmChoice{};
    if (cublaslt_.find_heuristic(args) == nullptr) c.kind = GemmKind::kNone;
  }
  return c;
}

void GemmTuner::run(const GemmArgs& args, cudaStream_t stream) {
  if (args.m == 0 || args.n == 0) return;
  const GemmChoice c = choice_for(args);
  switch (c.kind) {
    case GemmKind::kGemv: launch_gemv(args, c.gemv, stream); return;
    case GemmKind::kCublasLt: cublaslt_.run(args, c.algo, stream); return;
    case GemmKind::kHeuristic: cublaslt_.run(args, stream); return;
    case GemmKind::kNone: break;
  }
  XI_CHECK(false) << "no GEMM implementation for " << CublasLtGemm::shape_text(args)
                  << ": cuBLASLt has no algorithm for it, and the GEMV kernel needs k >= 8, k % 8 == 0 and "
                     "16-byte aligned x and w";
}

GemmChoice GemmTuner::measure(const GemmShape& shape, int m, Scratch& scratch, const GemmTunerOptions& options,
                              cudaStream_t stream) {
  const GemmArgs a{static_cast<const __nv_bfloat16*>(scratch.x), static_cast<const __nv_bfloat16*>(scratch.w[0]),
                   static_cast<const __nv_bfloat16*>(scratch.bias), scratch.y, shape.y_f32, m, shape.n, shape.k};
  const size_t copies = scratch.w.size();
  auto with_copy = [&](int i) {
    GemmArgs b = a;
    b.w = static_cast<const __nv_bfloat16*>(scratch.w[static_cast<size_t>(i) % copies]);
    return b;
  };
  EventPair ev;
  // cuBLASLt may have nothing for a shape: then its heuristic time stays absent (kInf here) and only the
  // GEMV competes, at any m.
  const cublasLtMatmulAlgo_t* heuristic = cublaslt_.find_heuristic(a);
  const double heuristic_us =
      heuristic == nullptr
          ? kInf
          : time_us(stream, ev, kInf, [&](int i) { return cublaslt_.try_run(with_copy(i), *heuristic, stream); });
  const bool have_heuristic = std::isfinite(heuristic_us);

  GemmChoice best;  // the fastest other than the heuristic
  double best_us = kInf;
  // Large m is compute-bound and the heuristic is good there: fewer candidates keep start-up short.
  const int requested = m > 512 ? std::min(options.cublaslt_candidates, 8) : options.cublaslt_candidates;
  for (const cublasLtMatmulAlgo_t& algo : cublaslt_.candidates(a, requested)) {
    if (heuristic != nullptr && CublasLtGemm::same(algo, *heuristic)) continue;
    const double t = time_us(stream, ev, std::min(heuristic_us, best_us),
                             [&](int i) { return cublaslt_.try_run(with_copy(i), algo, stream); });
    if (t < best_us) {
      best_us = t;
      best.kind = GemmKind::kCublasLt;
      best.algo = algo;
    }
  }
  // The GEMV competes for few rows (if enabled), and is the fallback wherever cuBLASLt has nothing.
  if ((options.gemv && m <= 8) || !have_heuristic) {
    for (const GemvConfig& g : gemv_candidates(a, pdl_supported_ && options.gemv_pdl)) {
      const double t = time_us(stream, ev, std::min(heuristic_us, best_us), [&](int i) {
        launch_gemv(with_copy(i), g, stream);
        return true;
      });
      if (t < best_us) {
        best_us = t;
        best.kind = GemmKind::kGemv;
        best.gemv = g;
      }
    }
  }
  XI_CUDA_CHECK(cudaStreamSynchronize(stream));
  // The heuristic keeps its place unless clearly beaten (noise should not flip choices between runs).
  if (have_heuristic && !(best_us < 0.99 * heuristic_us)) {
    best = GemmChoice{};
    best_us = heuristic_us;
  }
  if (!std::isfinite(best_us)) {  // nothing could run: no cuBLASLt algorithm and no GEMV for this shape
    best = GemmChoice{};
    best.kind = GemmKind::kNone;
    best_us = 0;
  }
  best.us = static_cast<float>(best_us);
  if (have_heuristic) best.heuristic_us = static_cast<float>(heuristic_us);
  return best;
}

GemmTuneSummary GemmTuner::tune(const std::vector<GemmShape>& shapes, const GemmTunerOptions& options,
                                cudaStream_t stream) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  XI_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  XI_CHECK(capture == cudaStreamCaptureStatusNone) << "GemmTuner::tune() while a CUDA graph is being recorded";
  const auto t0 = std::chrono::steady_clock::now();
  GemmTuneSummary sum;

  // One entry per distinct shape, with the largest max_m asked for.
  std::map<GemmTuningKey, GemmShape> distinct;
  for (const GemmShape& s : shapes) {
    XI_CHECK(s.n > 0 && s.k > 0 && s.max_m > 0) << "GEMM shape n=" << s.n << " k=" << s.k << " max_m=" << s.max_m;
    GemmShape& d = distinct[GemmTuningKey{s.n, s.k, s.y_f32, s.bias, 0}];
    const int max_m = std::max(d.max_m, s.max_m);
    const bool normed = d.normed_input || s.normed_input;
    d = s;
    d.max_m = max_m;
    d.normed_input = normed;
  }
  std::vector<GemmTuningKey> points;
  for (const auto& [key, s] : distinct)
    for (int m : tuned_ms(s.max_m)) points.push_back(GemmTuningKey{s.n, s.k, s.y_f32, s.bias, m});
  sum.points = static_cast<int>(points.size());

  // Where each missing point comes from: the cache file (each choice re-validated: a cuBLASLt algorithm
  // must still pass AlgoCheck), else this process's earlier measurements, else a measurement now.
  const bool pdl = pdl_supported_ && options.gemv_pdl;
  auto adapt = [&](GemmChoice c) {  // a stored PDL choice runs without PDL where PDL is off
    if (c.kind == GemmKind::kGemv) c.gemv.pdl = c.gemv.pdl && pdl;
    return c;
  };
  std::vector<GemmTuningEntry> not_in_file;  // choices to add to the cache file
  if (!options.cache_path.empty()) {
    const CachedGemmChoices cached =
        read_gemm_tuning_cache(options.cache_path, device_key_, "the GEMM choices");
    using State = CachedGemmChoices::State;
    sum.cache = options.cache_path + (cached.state == State::kNew          ? " (new)"
                                      : cached.state == State::kUnreadable ? " (was unreadable)"
                                                                           : "");
    std::map<GemmTuningKey, GemmChoice> by_key;
    for (const GemmTuningEntry& e : cached.entries) by_key[e.key] = e.choice;
    for (const GemmTuningKey& p : points) {
      auto it = by_key.find(p);
      if (it == by_key.end() || table_.count(p)) continue;
      const GemmChoice c = adapt(it->second);
      if (valid(p, c)) table_[p] = c;
    }
  } else {
    sum.cache = "none";
  }
  if (options.reuse_process_choices) {
    std::unique_lock<std::mutex> lock;
    const auto& known = process_choices<GemmChoice>(device_key_, &lock);
    for (const GemmTuningKey& p : points)
      if (auto it = known.find(p); it != known.end() && !table_.count(p)) {
        table_[p] = adapt(it->second);
        not_in_file.push_back(GemmTuningEntry{p, it->second});
      }
  }

  std::vector<GemmTuningKey> missing;
  for (const GemmTuningKey& p : points)
    if (!table_.count(p)) missing.push_back(p);
  sum.tuned = static_cast<int>(missing.size());
  sum.cached = sum.points - sum.tuned;

  if (!missing.empty()) {
    ProgressBar bar("Tuning GEMMs", static_cast<int64_t>(missing.size()), "points",
                    options.show_progress && isatty(STDERR_FILENO) != 0);
    std::vector<GemmTuningEntry> fresh;
    size_t i = 0;
    while (i < missing.size()) {  // points of one shape are adjacent (map order): one scratch per shape
      size_t j = i;
      int max_m = 0;
      while (j < missing.size() && same_shape(missing[j], missing[i])) max_m = std::max(max_m, missing[j++].m);
      const GemmShape shape{missing[i].n, missing[i].k, missing[i].y_f32, missing[i].bias, max_m};
      {
        Scratch scratch(shape, max_m, stream);
        if (!scratch.ok)
          XI_LOG(WARN) << "GEMM tuner: no memory for scratch buffers of n=" << shape.n << " k=" << shape.k
                       << ": its heuristic choice stays";
        for (size_t p = i; p < j; ++p) {
          const GemmChoice c = scratch.ok ? measure(shape, missing[p].m, scratch, options, stream) : GemmChoice{};
          table_[missing[p]] = c;
          if (scratch.ok) fresh.push_back(GemmTuningEntry{missing[p], c});
          bar.advance();
        }
        XI_CUDA_CHECK(cudaStreamSynchronize(stream));  // scratch is freed next
      }
      i = j;
    }
    bar.finish();
    std::unique_lock<std::mutex> lock;
    auto& known = process_choices<GemmChoice>(device_key_, &lock);
    for (const GemmTuningEntry& e : fresh) known[e.key] = e.choice;
    not_in_file.insert(not_in_file.end(), fresh.begin(), fresh.end());
  }
  if (!options.cache_path.empty() && !not_in_file.empty()) {
    const Status st = save_gemm_tuning_cache(options.cache_path, device_key_, not_in_file);
    if (st.ok()) {
      sum.cache = options.cache_path + " (written)";
    } else {
      XI_LOG(WARN) << "GEMM tuning cache not saved: " << st.to_string();
      sum.cache = options.cache_path + " (not saved)";
    }
  }

  for (const GemmTuningKey& p : points) {
    const GemmChoice& c = table_.at(p);
    switch (c.kind) {
      case GemmKind::kGemv: ++sum.gemv; break;
      case GemmKind::kCublasLt: ++sum.cublaslt; break;
      case GemmKind::kHeuristic: ++sum.heuristic; break;
      case GemmKind::kNone:
        ++sum.none;
        XI_LOG(WARN) << "GEMM tuner: no implementation for " << CublasLtGemm::shape_text(shape_args(p))
                     << " (cuBLASLt has no algorithm; the GEMV kernel needs k % 8 == 0): running it will fail";
        break;
    }
    // (A kHeuristic choice without a time is a point left untuned for lack of scratch memory.)
    if (!c.heuristic_us && c.kind != GemmKind::kHeuristic) {
      ++sum.no_cublaslt;
    } else if (c.heuristic_us && p.m == 1) {
      sum.m1_us += c.us;
      sum.m1_heuristic_us += *c.heuristic_us;
    }
  }
  std::vector<GemmShape> normed_shapes;
  for (const auto& [key, s] : distinct)
    if (s.normed_input) normed_shapes.push_back(s);
  tune_normed(normed_shapes, options, stream, &sum);
  resolved_.clear();
  sum.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return sum;
}

NormedGemvChoice GemmTuner::measure_normed(const GemmShape& shape, int m, Scratch& scratch,
                                           const GemmTunerOptions& options, cudaStream_t stream) {
  // The fused GEMV reads the residual (x) and the norm weight; the composition's add + RMSNorm reads the
  // residual and a delta, and writes the normed x.
  void* buffers[3] = {};
  const size_t mk = static_cast<size_t>(m) * shape.k;
  for (void*& b : buffers) XI_CUDA_CHECK(cudaMalloc(&b, mk * sizeof(__nv_bfloat16)));
  auto* delta = static_cast<__nv_bfloat16*>(buffers[0]);
  auto* norm_weight = static_cast<__nv_bfloat16*>(buffers[1]);  // [k] of the m * k allocated
  auto* normed = static_cast<__nv_bfloat16*>(buffers[2]);
  launch_random_normal({delta, false, mk, 11, 0.1f}, stream);
  launch_random_normal({norm_weight, false, static_cast<size_t>(shape.k), 12, 1.0f}, stream);
  auto* x = static_cast<__nv_bfloat16*>(scratch.x);
  const GemmArgs a{x, static_cast<const __nv_bfloat16*>(scratch.w[0]), static_cast<const __nv_bfloat16*>(scratch.bias),
                   scratch.y, false, m, shape.n, shape.k};
  EventPair ev;
  NormedGemvChoice c;
  const double norm_us = time_us(stream, ev, kInf, [&](int) {
    launch_add_rms_norm({x, delta, norm_weight, normed, m, shape.k, 1e-5f}, stream);
    return true;
  });
  c.composed_us = static_cast<float>(norm_us + table_.at(GemmTuningKey{shape.n, shape.k, false, shape.bias, m}).us);
  double best_us = kInf;
  const GemvFusion fusion{false, norm_weight, 1e-5f};
  for (const GemvConfig& g : gemv_candidates(a, pdl_supported_ && options.gemv_pdl)) {
    const double t = time_us(stream, ev, best_us, [&](int i) {
      GemmArgs b = a;
      b.w = static_cast<const __nv_bfloat16*>(scratch.w[static_cast<size_t>(i) % scratch.w.size()]);
      launch_gemv(b, g, stream, fusion);
      return true;
    });
    if (t < best_us) {
      best_us = t;
      c.gemv = g;
    }
  }
  c.us = static_cast<float>(best_us);
  XI_CUDA_CHECK(cudaStreamSynchronize(stream));
  for (void* b : buffers) cudaFree(b);
  return c;
}

void GemmTuner::tune_normed(const std::vector<GemmShape>& shapes, const GemmTunerOptions& options,
                            cudaStream_t stream, GemmTuneSummary* sum) {
  if (!options.gemv) return;
  const bool pdl = pdl_supported_ && options.gemv_pdl;
  std::unique_lock<std::mutex> lock;
  auto& known = process_choices<NormedGemvChoice>(device_key_, &lock);
  for (const GemmShape& s : shapes) {
    if (s.y_f32 || s.k < 8 || s.k % 8 != 0) continue;  // the fused GEMV writes bf16; the GEMV's shape rules
    std::vector<int> ms;
    for (int m : tuned_ms(s.max_m))
      if (m <= 8) ms.push_back(m);
    std::optional<Scratch> scratch;
    for (int m : ms) {
      const GemmTuningKey key{s.n, s.k, false, s.bias, m};
      if (!normed_.count(key)) {
        if (auto it = known.find(key); it != known.end() && options.reuse_process_choices) {
          normed_[key] = it->second;
          normed_[key].gemv.pdl = normed_[key].gemv.pdl && pdl;
        } else {
          if (!scratch) scratch.emplace(s, 8, stream);
          if (!scratch->ok) break;  // no memory: these points stay unfused
          normed_[key] = known[key] = measure_normed(s, m, *scratch, options, stream);
        }
      }
      ++sum->normed;
      if (normed_[key].faster()) ++sum->normed_faster;
    }
  }
}

std::optional<GemvConfig> GemmTuner::normed_gemv_for(const GemmArgs& args) const {
  if (args.m < 1 || args.m > 8 || args.y_f32) return std::nullopt;
  const GemmTuningKey exact{args.n, args.k, false, args.bias != nullptr, args.m};
  const auto it = normed_.lower_bound(exact);  // the smallest tuned m >= m
  if (it == normed_.end() || !same_shape(it->first, exact) || !it->second.faster()) return std::nullopt;
  return it->second.gemv;
}

std::string GemmTuneSummary::to_string() const {
  std::ostringstream os;
  os << std::fixed << std::setprecision(2) << "gemm tuner: " << points << " points (shape x m) in " << seconds
     << " s, " << cached << " from cache, " << tuned << " measured; chosen: " << gemv << " gemv, " << cublaslt
     << " other cuBLASLt, " << heuristic << " heuristic";
  if (none > 0) os << ", " << none << " with NO implementation";
  if (no_cublaslt > 0) os << " (" << no_cublaslt << " without a cuBLASLt algorithm)";
  if (normed > 0) os << "; RMSNorm folded into the GEMV faster at " << normed_faster << " of " << normed << " points";
  os << "; m=1 linears " << std::setprecision(1) << m1_us << " us vs heuristic " << m1_heuristic_us
     << " us; cache " << cache;
  return os.str();
}

}  // namespace xinfer::cuda
