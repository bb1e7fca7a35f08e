#include "xinfer/server/metrics_prefix.h"

namespace xinfer::server {

namespace {

constexpr std::string_view kOurs = "xinfer:";
constexpr std::string_view kVllm = "vllm:";

// Rewrites one line's metric name prefix; `name_out` gets the metric's name (prefix excluded) or "".
std::string rename_line(std::string_view line, std::string_view* name_out) {
  *name_out = {};
  for (std::string_view lead :
       {std::string_view("# HELP "), std::string_view("# TYPE "), std::string_view()}) {
    if (line.substr(0, lead.size()) != lead) continue;
    std::string_view rest = line.substr(lead.size());
    if (rest.substr(0, kOurs.size()) != kOurs) continue;
    rest.remove_prefix(kOurs.size());
    *name_out = rest.substr(0, rest.find_first_of(" {"));
    return std::string(lead) + std::string(kVllm) + std::string(rest);
  }
  return std::string(line);
}

std::string to_vllm(const std::string& text) {
  std::string out, alias;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view name;
    std::string line = rename_line(std::string_view(text).substr(pos, end - pos), &name);
    out += line;
    out += '\n';
    if (name == "kv_cache_usage_perc") {
      const size_t at = line.find("kv_cache_usage_perc");
      alias += line.replace(at, 19, "gpu_cache_usage_perc") + '\n';
    }
    pos = end + 1;
  }
  return out + alias;
}

}  // namespace

std::optional<MetricsPrefix> parse_metrics_prefix(std::string_view name) {
  if (name == "xinfer") return MetricsPrefix::kXinfer;
  if (name == "vllm") return MetricsPrefix::kVllm;
  if (name == "both") return MetricsPrefix::kBoth;
  return std::nullopt;
}

std::string apply_metrics_prefix(const std::string& text, MetricsPrefix prefix) {
  switch (prefix) {
    case MetricsPrefix::kXinfer:
      return text;
    case MetricsPrefix::kVllm:
      return to_vllm(text);
    case MetricsPrefix::kBoth:
      return text + to_vllm(text);
  }
  return text;
}

}  // namespace xinfer::server
