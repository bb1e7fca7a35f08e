// Metric-name prefixes of /metrics: ours ("xinfer:") or vLLM's ("vllm:"), so dashboards written for vLLM
// read our metrics as they are (same names after the prefix, same model_name label), or both.
//
// The engine and the server render with "xinfer:"; apply_metrics_prefix rewrites a rendered Prometheus
// text: every "# HELP xinfer:", "# TYPE xinfer:" and sample line "xinfer:..." gets the new prefix. vLLM
// mode also adds vllm:gpu_cache_usage_perc (the name of vLLM's V0 engine) next to vllm:kv_cache_usage_perc.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace xinfer::server {

enum class MetricsPrefix { kXinfer, kVllm, kBoth };

// "xinfer" | "vllm" | "both"; nullopt otherwise.
std::optional<MetricsPrefix> parse_metrics_prefix(std::string_view name);

// text: Prometheus exposition rendered with the "xinfer:" prefix. Returns it as `prefix` wants it
// (kBoth: the xinfer text followed by the vllm one).
std::string apply_metrics_prefix(const std::string& text, MetricsPrefix prefix);

}  // namespace xinfer::server
