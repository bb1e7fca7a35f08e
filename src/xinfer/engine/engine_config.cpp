#include "xinfer/engine/engine_config.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <sstream>

namespace xinfer::engine {

const char* backend_kind_name(BackendKind k) {
  switch (k) {
    case BackendKind::kCpu: return "cpu";
    case BackendKind::kCuda: return "cuda";
  }
  return "?";
}

Result<BackendKind> parse_backend_kind(const std::string& s) {
  if (s == "cpu") return BackendKind::kCpu;
  if (s == "cuda") return BackendKind::kCuda;
  return invalid_argument("backend must be 'cpu' or 'cuda', got '" + s + "'");
}

Status EngineConfig::validate() const {
  auto bad = [](const std::string& what) { return invalid_argument("engine config: " + what); };
  if (model_dir.empty()) return bad("model_dir is required");
  if (threads < 0) return bad("threads must be >= 0, got " + std::to_string(threads));
  if (kv_cache_memory == 0) return bad("kv_cache_memory must be > 0");
  if (!(gpu_memory_utilization > 0 && gpu_memory_utilization <= 1))
    return bad("gpu_memory_utilization must be in (0, 1], got " + std::to_string(gpu_memory_utilization));
  if (!(swap_space_gib >= 0) || !std::isfinite(swap_space_gib))
    return bad("swap_space_gib must be >= 0 GiB, got " + std::to_string(swap_space_gib));
  if (max_model_len < 0) return bad("max_model_len must be >= 0, got " + std::to_string(max_model_len));
  if (max_waiting < 1) return bad("max_waiting must be >= 1, got " + std::to_string(max_waiting));
  if (tensor_parallel_size < 1)
    return bad("tensor_parallel_size must be >= 1, got " + std::to_string(tensor_parallel_size));
  // num_blocks is derived later: check the rest with a placeholder.
  sched::SchedulerConfig s = scheduler;
  s.num_blocks = 2;
  s.max_model_len = 0;
  return s.validate();
}

std::string EngineConfig::to_string() const {
  std::ostringstream os;
  os << "model_dir=" << model_dir << " served_model_name=" << served_model_name
     << " backend=" << backend_kind_name(backend) << " threads=" << threads
     << " kv_cache_memory=" << kv_cache_memory << " gpu_memory_utilization=" << gpu_memory_utilization
     << " swap_space_gib=" << swap_space_gib << " load_format=" << model::load_format_name(load_format)
     << " max_model_len=" << max_model_len << " kv_cache_dtype=" << kv_cache_dtype_name(kv_cache_dtype)
     << " kv_cache_scale=" << kv_cache_scale
     << " kv_cache_rotation=" << kv_rotation_choice_name(kv_cache_rotation) << " max_waiting=" << max_waiting
     << " enable_cuda_graphs=" << enable_cuda_graphs << " record_graphs_at_start=" << record_graphs_at_start
     << " device_greedy=" << device_greedy << " device_sampling=" << device_sampling
     << " async_scheduling=" << (async_scheduling ? (*async_scheduling ? "1" : "0") : "auto")
     << " gemm_tuning=" << gemm_tuning
     << " gemm_tuning_cache=" << (gemm_tuning_cache.empty() ? "default" : gemm_tuning_cache)
     << " gemv_pdl=" << gemv_pdl << " fused_linears=" << fused_linears
     << " fused_rope_attention=" << fused_rope_attention << " tensor_parallel_size=" << tensor_parallel_size
     << " | " << scheduler.to_string();
  return os.str();
}

BatchLimits offline_batch_limits(const std::string& device_name, size_t device_memory) {
  std::string name = device_name;
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  if (device_memory >= kLargeGpuBytes && name.find("a100") == std::string::npos)
    return kLargeGpuOfflineBatchLimits;
  return kOfflineBatchLimits;
}

}  // namespace xinfer::engine
