#include "xinfer/engine/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "xinfer/core/check.h"

namespace xinfer::engine {
namespace {

// vLLM's buckets, with finer low ends: CPU steps of tiny models take well under 10 ms.
const std::vector<double> kTtftBuckets = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
                                          1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
const std::vector<double> kItlBuckets = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15,
                                         0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0};
const std::vector<double> kRequestBuckets = {0.01, 0.05, 0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0,
                                             15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0,
                                             1920.0, 7680.0};

// 1, 2, 5, 10, 20, 50, ... up to and including `max` (vLLM's build_1_2_5_buckets).
std::vector<double> one_two_five(int64_t max) {
  std::vector<double> b;
  for (int64_t scale = 1;; scale *= 10) {
    for (int64_t m : {1, 2, 5}) {
      if (m * scale > max) {
        if (b.empty() || b.back() < static_cast<double>(max)) b.push_back(static_cast<double>(max));
        return b;
      }
      b.push_back(static_cast<double>(m * scale));
    }
  }
}

std::string format_number(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  // Short forms for round bucket bounds ("0.1" rather than "0.10000000000000001").
  char shorter[32];
  std::snprintf(shorter, sizeof(shorter), "%.6g", v);
  return std::strtod(shorter, nullptr) == v ? shorter : buf;
}

void header(std::string* out, const std::string& name, const char* type, const char* help) {
  *out += "# HELP " + name + " " + help + "\n";
  *out += "# TYPE " + name + " " + type + "\n";
}

void sample(std::string* out, const std::string& name, const std::string& labels, double v) {
  *out += name + "{" + labels + "} " + format_number(v) + "\n";
}

}  // namespace

std::string escape_label_value(const std::string& v) {
  std::string r;
  r.reserve(v.size());
  for (char c : v) {
    if (c == '\\') r += "\\\\";
    else if (c == '"') r += "\\\"";
    else if (c == '\n') r += "\\n";
    else r += c;
  }
  return r;
}

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {
  XI_CHECK(std::is_sorted(bounds_.begin(), bounds_.end())) << "histogram buckets must ascend";
}

void Histogram::observe(double v) {
  const size_t i = static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  ++counts_[i];  // le semantics: v <= bound
  sum_ += v;
  ++count_;
}

void Histogram::render(const std::string& name, const std::string& labels, std::string* out) const {
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += counts_[i];
    const std::string le = i < bounds_.size() ? format_number(bounds_[i]) : "+Inf";
    *out += name + "_bucket{" + labels + ",le=\"" + le + "\"} " + std::to_string(cumulative) + "\n";
  }
  *out += name + "_sum{" + labels + "} " + format_number(sum_) + "\n";
  *out += name + "_count{" + labels + "} " + std::to_string(count_) + "\n";
}

EngineMetrics::EngineMetrics(std::string model_name, int max_num_batched_tokens, int max_num_seqs)
    : labels_("model_name=\"" + escape_label_value(model_name) + "\""),
      ttft_(kTtftBuckets),
      itl_(kItlBuckets),
      tpot_(kItlBuckets),
      e2e_(kRequestBuckets),
      queue_time_(kRequestBuckets),
      prefill_time_(kRequestBuckets),
      decode_time_(kRequestBuckets),
      prompt_tokens_hist_(one_two_five(1 << 20)),
      generation_tokens_hist_(one_two_five(1 << 20)),
      iteration_tokens_(one_two_five(std::max(1, max_num_batched_tokens))),
      batch_size_(one_two_five(std::max(1, max_num_seqs))) {}

void EngineMetrics::observe_step(const sched::StepMetrics& m) {
  std::lock_guard<std::mutex> lock(mu_);
  iteration_tokens_.observe(m.num_batched_tokens);
  batch_size_.observe(m.num_seqs);
  num_preemptions_ += m.num_preempted;
  prefix_queries_ = m.prefix_query_tokens;  // cumulative in the scheduler
  prefix_hits_ = m.prefix_hit_tokens;
}

void EngineMetrics::observe_first_token(double queue_time_s, double ttft_s, int num_prompt_tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  if (queue_time_s >= 0) queue_time_.observe(queue_time_s);
  if (ttft_s >= 0) ttft_.observe(ttft_s);
  prompt_tokens_ += num_prompt_tokens;
}

void EngineMetrics::observe_generated(int num_tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  generation_tokens_ += num_tokens;
}

void EngineMetrics::observe_finished(const sched::RequestMetrics& m, FinishReason reason) {
  std::lock_guard<std::mutex> lock(mu_);
  for (double itl : m.inter_token_latencies_s) itl_.observe(itl);
  switch (reason) {
    case FinishReason::kStop: ++success_stop_; break;
    case FinishReason::kLength: ++success_length_; break;
    case FinishReason::kAbort: ++aborted_; return;
    case FinishReason::kError: ++errored_; return;
    case FinishReason::kNone: return;
  }
  if (m.e2e_latency_s() >= 0) e2e_.observe(m.e2e_latency_s());
  if (m.first_scheduled_time >= 0 && m.first_token_time >= 0)
    prefill_time_.observe(m.first_token_time - m.first_scheduled_time);
  if (m.first_token_time >= 0 && m.finished_time >= 0) {
    decode_time_.observe(m.finished_time - m.first_token_time);
    if (m.num_output_tokens > 1)
      tpot_.observe((m.finished_time - m.first_token_time) / (m.num_output_tokens - 1));
  }
  prompt_tokens_hist_.observe(m.num_prompt_tokens);
  generation_tokens_hist_.observe(m.num_output_tokens);
}

void EngineMetrics::render(const EngineStats& stats, std::string* out) const {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string& l = labels_;
  auto gauge = [&](const char* name, const char* help, double v) {
    header(out, name, "gauge", help);
    sample(out, name, l, v);
  };
  auto counter = [&](const char* name, const char* help, double v) {
    header(out, name, "counter", help);
    sample(out, name, l, v);
  };
  auto histogram = [&](const char* name, const char* help, const Histogram& h) {
    header(out, name, "histogram", help);
    h.render(name, l, out);
  };
  gauge("xinfer:num_requests_running", "Number of requests in model execution batches.", stats.num_running);
  gauge("xinfer:num_requests_waiting", "Number of requests waiting to be processed.", stats.num_waiting);
  gauge("xinfer:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", stats.kv_usage);
  gauge("xinfer:num_kv_cache_blocks", "Number of usable KV-cache blocks.", stats.num_total_blocks);
  counter("xinfer:num_preemptions_total", "Cumulative number of preemptions from the engine.",
          static_cast<double>(num_preemptions_));
  counter("xinfer:num_preempted_tokens_total",
          "Tokens whose KV preemptions dropped (recomputed when the sequence resumes).",
          static_cast<double>(stats.num_preempted_tokens));
  counter("xinfer:kv_swap_outs_total", "Preemptions that copied the sequence's KV to the host swap space.",
          static_cast<double>(stats.num_swap_outs));
  counter("xinfer:kv_swapped_out_tokens_total", "Tokens of KV copied to the host swap space by preemptions.",
          static_cast<double>(stats.num_swapped_out_tokens));
  counter("xinfer:kv_swap_ins_total", "Resumed sequences whose KV was copied back from the host swap space.",
          static_cast<double>(stats.num_swap_ins));
  gauge("xinfer:kv_swap_space_usage_perc", "Host swap space usage. 1 means 100 percent usage.",
        stats.num_swap_blocks > 0 ? 1.0 - static_cast<double>(stats.num_free_swap_blocks) /
                                              static_cast<double>(stats.num_swap_blocks)
                                  : 0.0);
  counter("xinfer:prompt_tokens_total", "Number of prefill tokens processed.", static_cast<double>(prompt_tokens_));
  counter("xinfer:generation_tokens_total", "Number of generation tokens processed.",
          static_cast<double>(generation_tokens_));
  counter("xinfer:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.",
          static_cast<double>(prefix_queries_));
  counter("xinfer:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.",
          static_cast<double>(prefix_hits_));
  counter("xinfer:num_engine_steps_total", "Number of engine steps (forward passes).",
          static_cast<double>(stats.num_steps));
  // The device's own time of the steps it timed (CUDA events; 0 on the CPU backend), by step kind.
  auto by_kind = [&](const char* name, const char* help, double decode_only, double mixed) {
    header(out, name, "counter", help);
    sample(out, name, l + ",step=\"decode_only\"", decode_only);
    sample(out, name, l + ",step=\"mixed\"", mixed);
  };
  by_kind("xinfer:device_busy_seconds_total",
          "Device time of the timed engine steps, from their KV copies and upload to their sampled ids.",
          stats.decode_only_busy_s, stats.mixed_busy_s);
  by_kind("xinfer:device_idle_seconds_total",
          "Device idle time before timed engine steps that directly follow another (the host had not queued "
          "them).",
          stats.decode_only_idle_s, stats.mixed_idle_s);
  by_kind("xinfer:device_kv_copy_seconds_total",
          "Device time of KV block copies (swap-to-host preemption) at the start of timed engine steps.",
          stats.decode_only_copies_s, stats.mixed_copies_s);
  counter("xinfer:cuda_graph_captures_total", "CUDA graphs recorded for decode steps while serving.",
          static_cast<double>(stats.graph_captures));
  counter("xinfer:cuda_graph_capture_seconds_total",
          "Host time spent recording and instantiating those graphs.", stats.graph_capture_s);

  const char* success = "xinfer:request_success_total";
  header(out, success, "counter", "Count of successfully processed requests.");
  sample(out, success, l + ",finished_reason=\"stop\"", static_cast<double>(success_stop_));
  sample(out, success, l + ",finished_reason=\"length\"", static_cast<double>(success_length_));
  counter("xinfer:request_aborted_total", "Count of aborted requests.", static_cast<double>(aborted_));
  counter("xinfer:request_error_total", "Count of requests that failed inside the engine.",
          static_cast<double>(errored_));

  histogram("xinfer:time_to_first_token_seconds", "Histogram of time to first token in seconds.", ttft_);
  histogram("xinfer:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", itl_);
  histogram("xinfer:time_per_output_token_seconds",
            "Histogram of mean time per output token (after the first) per request, in seconds.", tpot_);
  histogram("xinfer:e2e_request_latency_seconds", "Histogram of end to end request latency in seconds.", e2e_);
  histogram("xinfer:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.",
            queue_time_);
  histogram("xinfer:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.",
            prefill_time_);
  histogram("xinfer:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.",
            decode_time_);
  histogram("xinfer:request_prompt_tokens", "Number of prefill tokens processed.", prompt_tokens_hist_);
  histogram("xinfer:request_generation_tokens", "Number of generation tokens processed.",
            generation_tokens_hist_);
  histogram("xinfer:iteration_tokens_total", "Histogram of number of tokens per engine_step.", iteration_tokens_);
  histogram("xinfer:iteration_batch_size", "Histogram of number of sequences per engine step.", batch_size_);
}

}  // namespace xinfer::engine
