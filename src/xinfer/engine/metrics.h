// EngineMetrics: the engine's Prometheus metrics (counters, gauges, histograms with fixed buckets), fed by
// the engine loop once per step and once per request event, rendered in the text exposition format for the
// server's /metrics. Names follow vLLM's (`vllm:` -> `xinfer:`), every series carries model_name="...".
//
//   per step:     observe_step(StepMetrics)       iteration tokens / batch size histograms, preemptions,
//                                                 prefix-cache queries and hits (cumulative in StepMetrics)
//   per request:  observe_first_token(queue, ttft) when its first token is sampled
//                 observe_finished(metrics, reason) ITLs, e2e, time per output token, token counts
//
// Thread-safety: every method takes one internal mutex; observe_* run on the engine thread, render() on
// any thread. Histograms keep per-bucket (non-cumulative) counts; render() accumulates them into `le`
// buckets as the format requires.
#pragma once

#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "xinfer/engine/engine_client.h"
#include "xinfer/scheduler/request.h"
#include "xinfer/scheduler/scheduled_step.h"

namespace xinfer::engine {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);  // ascending; +Inf is implicit
  void observe(double v);
  // Appends `name_bucket{labels,le="..."}`, `name_sum`, `name_count` lines. labels: `model_name="x"`.
  void render(const std::string& name, const std::string& labels, std::string* out) const;
  uint64_t count() const { return count_; }
  double sum() const { return sum_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // [bounds_.size() + 1], the last is +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

class EngineMetrics {
 public:
  EngineMetrics(std::string model_name, int max_num_batched_tokens, int max_num_seqs);

  void observe_step(const sched::StepMetrics& m);
  void observe_first_token(double queue_time_s, double ttft_s, int num_prompt_tokens);
  void observe_generated(int num_tokens);
  void observe_finished(const sched::RequestMetrics& m, FinishReason reason);

  // Appends every metric; gauges (running, waiting, KV usage) come from `stats`.
  void render(const EngineStats& stats, std::string* out) const;

 private:
  mutable std::mutex mu_;
  std::string labels_;  // model_name="..."
  Histogram ttft_, itl_, tpot_, e2e_, queue_time_, prefill_time_, decode_time_;
  Histogram prompt_tokens_hist_, generation_tokens_hist_, iteration_tokens_, batch_size_;
  int64_t num_preemptions_ = 0;
  int64_t prompt_tokens_ = 0;
  int64_t generation_tokens_ = 0;
  int64_t prefix_queries_ = 0;
  int64_t prefix_hits_ = 0;
  int64_t success_stop_ = 0, success_length_ = 0, aborted_ = 0, errored_ = 0;
};

// `"` `\` and newlines escaped for a Prometheus label value.
std::string escape_label_value(const std::string& v);

}  // namespace xinfer::engine
