// EngineClient: the thread boundary between the server (or any front end) and the engine loop.
//
//   submit(request, on_output)  enqueues a request; the engine thread calls on_output once per engine
//                               step in which the request produced tokens, and exactly once with
//                               finished == true (stop, length, abort, error). After that call the
//                               callback is never invoked again and is destroyed.
//   abort(request_id)           any time, from any thread; the request's blocks are freed within one
//                               engine step and its callback gets a final output with kAbort.
//
// Callbacks run on the engine thread: they must not block (post the output to the server's own
// executor and return). The engine never waits on a socket; the server never blocks the engine loop.
// Token ids only cross this boundary: detokenization, stop strings and output filters belong to the
// caller, which calls abort() when a stop string ends a request (finish reason reported by the caller).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "xinfer/core/status.h"
#include "xinfer/engine/sampling_params.h"

namespace xinfer::engine {

struct GenerationRequest {
  std::string request_id;            // unique among live requests (the server makes them)
  std::vector<int32_t> prompt_ids;   // non-empty
  SamplingParams sampling;           // validated by submit(); max_tokens unset = up to the context length
  int priority = 0;                  // lower value = more important (as vLLM)
  uint64_t rng_stream = 0;           // index of this sequence among a request's n choices (seeded RNG stream)
  double arrival_time = -1;          // steady-clock seconds; < 0: now
  // Prompt log-probabilities (vLLM's prompt_logprobs): set = for every prompt token after the first, its
  // log-probability given the tokens before it and the this-many most likely tokens there (0..kMaxLogprobs),
  // from the raw logits (no temperature, penalties or bias). Costs a logits row per prompt token and skips
  // the prefix cache for this prompt (sched::Request::prompt_logits).
  std::optional<int32_t> prompt_logprobs;
  // Nonzero: the client request this one belongs to (the server gives a request's prompts x n choices one
  // group): admission alternates between groups, so one client's batch does not hold others back
  // (sched::Request::group). 0: a group of its own.
  uint64_t group = 0;
};

enum class FinishReason { kNone, kStop, kLength, kAbort, kError };
const char* finish_reason_name(FinishReason r);  // "", "stop", "length", "abort", "error"

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;  // most likely first; empty unless logprobs requested
  int32_t rank = 0;  // 1 + tokens with a larger logit; 0 = not computed (sampled tokens)
};

struct RequestTimings {
  double queue_time_s = -1;       // arrival -> first scheduled
  double ttft_s = -1;             // arrival -> first token
  double e2e_s = -1;              // arrival -> finished
  std::vector<double> itl_s;      // inter-token latencies (filled in the final output)
};

// What one engine step produced for one request (a delta).
struct RequestOutput {
  std::string request_id;
  std::vector<int32_t> new_token_ids;      // tokens generated in this step (usually 1)
  std::vector<TokenLogprob> new_logprobs;  // parallel to new_token_ids when sampling.logprobs is set
  // With GenerationRequest::prompt_logprobs, in the request's first output only (the one carrying its first
  // token): [num_prompt_tokens - 1], entry i scores prompt token i + 1 (token 0 has no logprob).
  std::vector<TokenLogprob> prompt_logprobs;
  bool finished = false;
  FinishReason finish_reason = FinishReason::kNone;
  std::string error;                       // set with kError
  int num_prompt_tokens = 0;
  int num_output_tokens = 0;               // cumulative, including new_token_ids
  int num_cached_prompt_tokens = 0;        // prefix-cache hits
  RequestTimings timings;                  // complete in the final output
};

using OutputCallback = std::function<void(RequestOutput)>;

// Engine-wide figures for /metrics and logs; a consistent snapshot.
struct EngineStats {
  int num_running = 0;
  int num_waiting = 0;
  double kv_usage = 0;                 // fraction of KV blocks in use
  int num_free_blocks = 0;
  int num_total_blocks = 0;
  int64_t num_preemptions = 0;         // cumulative
  int64_t num_preempted_tokens = 0;    // cumulative: KV tokens preemptions dropped (SchedulerStats)
  int64_t num_swap_outs = 0;           // cumulative: preemptions that copied the KV to the swap space
  int64_t num_swapped_out_tokens = 0;  // cumulative: tokens of KV those copied (not recomputed)
  int64_t num_swap_ins = 0;            // cumulative: admissions that copied it back
  int num_swap_blocks = 0;             // the swap space (blocks; 0: preempted sequences recompute)
  int num_free_swap_blocks = 0;
  int64_t prefix_query_tokens = 0;     // cumulative
  int64_t prefix_hit_tokens = 0;       // cumulative
  int64_t prompt_tokens = 0;           // cumulative, finished + running
  int64_t generation_tokens = 0;       // cumulative
  int64_t num_steps = 0;
  int64_t requests_finished = 0;
  int64_t requests_aborted = 0;
  // Where the engine thread's time goes (cumulative seconds), split by step kind. "device" is the model
  // runner call: upload, forward, sampling and the wait for the result; "host" is scheduling plus the
  // bookkeeping and callbacks after the result. With asynchronous scheduling a pipelined step's "device"
  // time is its period (previous step's results to its own) and its "host" time the host work done in
  // that period outside the wait, which overlaps the device instead of adding to it.
  int64_t async_steps = 0;             // steps launched while the previous step was still in flight
  int64_t decode_only_steps = 0;       // steps whose every sequence feeds one token
  int64_t mixed_steps = 0;             // steps with at least one prefill chunk
  int64_t decode_only_tokens = 0;
  int64_t mixed_tokens = 0;
  double decode_only_device_s = 0;
  double mixed_device_s = 0;
  double host_s = 0;
  double decode_only_host_s = 0, mixed_host_s = 0;  // host_s by the kind of the step it was booked to
  // Of host_s, the pipelined steps' launches (the forward, argmax and copies enqueued on the device): the
  // host's share of a step that the device cannot overlap once it exceeds the step's device time. Also split
  // by step kind (a decode-only step may replay a CUDA graph, a mixed one launches every kernel).
  double launch_s = 0;
  int64_t decode_only_launches = 0, mixed_launches = 0;
  double decode_only_launch_s = 0, mixed_launch_s = 0;
  // CUDA graphs of decode-only steps: recordings made (one per new (row bucket, block-table width) key, or
  // again after the backend dropped one), the host seconds they took (failed recordings too), and steps
  // replayed from one.
  int64_t graph_captures = 0, graph_replays = 0;
  double graph_capture_s = 0;
  // The device's own time of the steps whose ids came back through the device paths (greedy or sampled; CUDA
  // events, Backend::step_device_time): busy from the step's KV copies and upload to its ids (host time
  // inside the step counts where the device had nothing else queued), of which the KV block copies
  // (swap-to-host preemption); and, over the timed steps that directly follow another timed one (idle_steps),
  // the device's idle time before them (the host had not queued them yet). A busy time below the step's
  // period says where the rest went: idle, or host time the period holds.
  int64_t decode_only_timed_steps = 0, mixed_timed_steps = 0;
  double decode_only_busy_s = 0, mixed_busy_s = 0;
  double decode_only_copies_s = 0, mixed_copies_s = 0;
  int64_t decode_only_idle_steps = 0, mixed_idle_steps = 0;
  double decode_only_idle_s = 0, mixed_idle_s = 0;
};

// Static facts about the served model, for validation and /v1/models.
struct EngineInfo {
  std::string model_name;              // served name (directory base name unless overridden)
  int max_model_len = 0;               // prompt + generated tokens per sequence
  int vocab_size = 0;
  std::vector<int32_t> eos_token_ids;
  int max_waiting = 0;                 // submit() beyond this many waiting requests -> RESOURCE_EXHAUSTED
};

class EngineClient {
 public:
  virtual ~EngineClient() = default;
  // Errors (the callback is then never called): INVALID_ARGUMENT (empty prompt, bad sampling params,
  // duplicate id), OUT_OF_RANGE (prompt + max_tokens > max_model_len), RESOURCE_EXHAUSTED (queue full),
  // UNAVAILABLE (engine stopping).
  virtual Status submit(GenerationRequest request, OutputCallback on_output) = 0;
  virtual void abort(const std::string& request_id) = 0;
  virtual EngineStats stats() const = 0;
  virtual const EngineInfo& info() const = 0;
  // Appends the engine's metrics in Prometheus text exposition format (names close to vLLM's:
  // xinfer:time_to_first_token_seconds histogram, xinfer:num_requests_running gauge, ...).
  virtual void render_metrics(std::string* out) const = 0;
};

}  // namespace xinfer::engine
