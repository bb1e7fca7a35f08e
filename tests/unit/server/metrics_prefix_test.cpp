// /metrics name prefixes: the vLLM names dashboards query (written out here from vLLM's documentation,
// not derived from our rewriting code).
#include "xinfer/server/metrics_prefix.h"

#include <gtest/gtest.h>

namespace xinfer::server {
namespace {

const char* kText =
    "# HELP xinfer:num_requests_running Number of requests in model execution batches.\n"
    "# TYPE xinfer:num_requests_running gauge\n"
    "xinfer:num_requests_running{model_name=\"m\"} 2\n"
    "# HELP xinfer:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.\n"
    "# TYPE xinfer:kv_cache_usage_perc gauge\n"
    "xinfer:kv_cache_usage_perc{model_name=\"m\"} 0.25\n"
    "xinfer:time_to_first_token_seconds_bucket{model_name=\"m\",le=\"0.001\"} 1\n"
    "xinfer:server_ready 1\n";

TEST(MetricsPrefix, Parse) {
  EXPECT_EQ(parse_metrics_prefix("xinfer"), MetricsPrefix::kXinfer);
  EXPECT_EQ(parse_metrics_prefix("vllm"), MetricsPrefix::kVllm);
  EXPECT_EQ(parse_metrics_prefix("both"), MetricsPrefix::kBoth);
  EXPECT_EQ(parse_metrics_prefix("VLLM"), std::nullopt);
}

TEST(MetricsPrefix, VllmNames) {
  EXPECT_EQ(apply_metrics_prefix(kText, MetricsPrefix::kXinfer), kText);
  const std::string v = apply_metrics_prefix(kText, MetricsPrefix::kVllm);
  EXPECT_EQ(v.find("xinfer:"), std::string::npos) << v;
  EXPECT_NE(v.find("# TYPE vllm:num_requests_running gauge\n"), std::string::npos);
  EXPECT_NE(v.find("\nvllm:num_requests_running{model_name=\"m\"} 2\n"), std::string::npos);
  EXPECT_NE(v.find("\nvllm:kv_cache_usage_perc{model_name=\"m\"} 0.25\n"), std::string::npos);
  EXPECT_NE(v.find("\nvllm:gpu_cache_usage_perc{model_name=\"m\"} 0.25\n"), std::string::npos);
  EXPECT_NE(v.find("# TYPE vllm:gpu_cache_usage_perc gauge\n"), std::string::npos);
  EXPECT_NE(v.find("\nvllm:time_to_first_token_seconds_bucket{model_name=\"m\",le=\"0.001\"} 1\n"),
            std::string::npos);
  const std::string both = apply_metrics_prefix(kText, MetricsPrefix::kBoth);
  EXPECT_EQ(both.substr(0, std::string(kText).size()), kText);
  EXPECT_NE(both.find("\nvllm:num_requests_running{model_name=\"m\"} 2\n"), std::string::npos);
}

}  // namespace
}  // namespace xinfer::server
