// Serving-policy simulator: the real Scheduler, a simulated clock and a step-time model of the GPU, driven by a
// closed-loop client like bench/serve_bench.py's fixed-concurrency mode. It answers "what do TTFT and ITL
// percentiles look like under policy X at concurrency C" in a second on a laptop, so scheduler knobs can be
// explored here and only the winners measured on the GPU (issue 19 item 4).
//
//   build/<dir>/bench/serving_sim [--concurrency 256] [--num-prompts 1024] [--warmup 256] [--input-len 128]
//       [--output-len 128] [--steady] [scheduler flags: --max-num-batched-tokens N
//       --prefill-tokens-per-decode X --min-prefill-budget N --decode-interval N --min-decode-interval N
//       --max-decode-interval N --max-num-seqs N --reorder-window N --num-blocks N --num-swap-blocks N] [--sweep]
//       [--mix] [--no-groups]
//
// --client-delay S (default 0.0005): seconds from a finish to the client's next send; --step-scale X scales
// the step-time model (another card, another host). Preemptions (and the KV tokens they drop) print when there are
// any; --num-swap-blocks N gives the scheduler a swap space (swap-to-host preemption), whose copies cost their
// bytes at 50 GB/s (the measured PCIe rate of the copy kernel, PERF.md session 26). --mix prints what the measured steps carried (share with prefill, decode rows and prefill tokens per step,
// admissions); --no-groups sends group-0 requests (the server gives every HTTP request its own group).
//
// Step-time model (h200-8b: Llama-3.1-8B bf16 on one H200, fitted to docs/PERF.md's measurements: batch-1
// decode 4.05 ms, 2048-token prefill 46.5 ms, 256-sequence decode ~10.3 ms):
//   t = 3.6 ms + 21.4 us * tokens (GEMMs: weight reads, then compute-bound) + 27.3 ns * context tokens read
//       by attention (131 KB of bf16 K/V per token at 4.8 TB/s) + 0.3 ms (launch and host overhead)
// The client sends its next request the moment one finishes (plus 0.5 ms); a request's TTFT is from its
// send to the end of the step that samples its first token, ITLs are the gaps between later tokens (the
// scheduler's own RequestMetrics on the simulated clock). The engine's asynchronous scheduling is not
// modelled (steps run back to back), which shifts every figure by the same host time.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <numeric>
#include <string>
#include <vector>

#include "xinfer/scheduler/scheduler.h"

namespace {

using xinfer::sched::FinishedRequest;
using xinfer::sched::Request;
using xinfer::sched::ScheduledStep;
using xinfer::sched::Scheduler;
using xinfer::sched::SchedulerConfig;
using xinfer::sched::StepOutput;

struct Options {
  int concurrency = 256;
  int num_prompts = 1024;
  int warmup = 256;
  int input_len = 128;
  int output_len = 128;
  double client_delay_s = 0.0005;
  double step_scale = 1.0;  // --step-scale: every step's modelled time times this (card-to-card spread)
  // false (serve_bench.py --warmup): the warm-up requests finish before the measured ones start, so the
  // measured run opens with `concurrency` simultaneous requests. true (serve_bench.py --warmup-overlap): one
  // closed loop of warmup + num_prompts requests, the first `warmup` sent not measured: steady state.
  bool steady = false;
  // true (as the server): every request is its own nonzero Request::group (the server gives each HTTP
  // request one); false: group 0. Built against a scheduler without groups (-DSERVING_SIM_NO_GROUPS): off.
  bool groups = true;
  bool show_mix = false;  // --mix: print the measured steps' composition too
  SchedulerConfig sched;
};

// What the measured phase's steps carried: the composition that decides the ITL distribution.
struct StepMix {
  int64_t steps = 0, with_prefill = 0, admissions = 0, decode_rows = 0, prefill_tokens = 0;
  int64_t by_prefill[4] = {0, 0, 0, 0};  // steps with 0, 1-127, 128-255, >= 256 prefill tokens
  void add(const ScheduledStep& step) {
    int64_t prefill = 0, decodes = 0;
    for (const auto& q : step.seqs) {
      if (q.is_decode()) ++decodes;
      else prefill += q.num_tokens();
    }
    ++steps;
    with_prefill += prefill > 0;
    decode_rows += decodes;
    prefill_tokens += prefill;
    admissions += step.metrics.num_admitted;
    ++by_prefill[prefill == 0 ? 0 : prefill < 128 ? 1 : prefill < 256 ? 2 : 3];
  }
};

// Seconds one forward of `step` takes on the modelled device.
double step_time_s(const ScheduledStep& step) {
  int64_t tokens = 0, context = 0;
  for (const auto& s : step.seqs) {
    tokens += s.num_tokens();
    // Attention reads the cached context once per chunk (decode: start_pos + 1 positions; a prefill chunk
    // reads its prefix for every query block, which at these lengths is about once as well).
    context += s.start_pos + s.num_tokens();
  }
  if (tokens == 0) return 0;
  // Swap copies: 16-token blocks of 131 KB per token (bf16 K/V of the 8B model) over PCIe at 50 GB/s.
  const double swap_blocks = static_cast<double>(step.swap_out.size() + step.swap_in.size());
  return 3.6e-3 + 21.4e-6 * static_cast<double>(tokens) + 27.3e-9 * static_cast<double>(context) + 0.3e-3 +
         swap_blocks * 16 * 131072 / 50e9;
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const size_t i = static_cast<size_t>(pos);
  const double f = pos - static_cast<double>(i);
  return i + 1 < v.size() ? v[i] * (1 - f) + v[i + 1] * f : v[i];
}

struct Result {
  double ttft_p50, ttft_p99, itl_p50, itl_p99, tok_s, duration_s;
  StepMix mix;
  double itl_p25, itl_p40, itl_p60, itl_p75, itl_mean;
  int64_t preemptions = 0, preempted_tokens = 0;  // the scheduler's, over the whole run (warm-up included)
  int64_t swap_outs = 0, swapped_out_tokens = 0;
};

// Runs `n` requests at `concurrency` from time `t` (advanced); returns the figures of the requests sent after
// the first `skip` (and the output tokens and time from the first measured send on).
Result run_phase(Scheduler& s, double& t, const Options& o, int n, uint64_t& next_id, int skip = 0) {
  std::vector<double> ttft, itl;
  int sent = 0, done = 0, in_flight = 0;
  std::deque<double> send_times;  // pending sends (client delay after a finish)
  double start = t;
  const uint64_t first_measured = next_id + static_cast<uint64_t>(skip);
  int64_t output_tokens = 0;
  StepMix mix;
  bool measuring = skip == 0;
  auto send = [&](double when) {
    Request r;
    r.id = next_id++;
    r.prompt.resize(static_cast<size_t>(o.input_len));
    for (int i = 0; i < o.input_len; ++i) r.prompt[static_cast<size_t>(i)] = static_cast<int32_t>((r.id * 7919 + i * 31) % 120000 + 1);
    r.max_new_tokens = o.output_len;
    r.ignore_eos = true;
    r.arrival_time = when;
#ifndef SERVING_SIM_NO_GROUPS
    if (o.groups) r.group = r.id + 1;
#endif
    if (r.id == first_measured) {
      start = when;
      output_tokens = 0;
      measuring = true;
    }
    if (!s.add(r).ok()) std::abort();
    ++sent;
    ++in_flight;
  };
  for (int i = 0; i < std::min(o.concurrency, n); ++i) send(t);
  StepOutput out;
  while (done < n) {
    while (!send_times.empty() && send_times.front() <= t) {
      send(send_times.front());
      send_times.pop_front();
    }
    ScheduledStep step = s.schedule();
    const double dt = step_time_s(step) * o.step_scale;
    if (dt == 0) {  // idle: jump to the next send
      if (send_times.empty()) std::abort();
      t = send_times.front();
      continue;
    }
    t += dt;
    if (measuring) mix.add(step);
    out.token_ids.assign(static_cast<size_t>(step.num_sampling), 5);
    output_tokens += step.num_sampling;
    for (const FinishedRequest& f : s.update(out)) {
      ++done;
      --in_flight;
      if (f.id < first_measured) {
        if (sent + static_cast<int>(send_times.size()) < n) send_times.push_back(t + o.client_delay_s);
        continue;
      }
      ttft.push_back(f.metrics.time_to_first_token_s());
      itl.insert(itl.end(), f.metrics.inter_token_latencies_s.begin(), f.metrics.inter_token_latencies_s.end());
      if (sent + static_cast<int>(send_times.size()) < n) send_times.push_back(t + o.client_delay_s);
    }
  }
  const double dur = t - start;
  return {percentile(ttft, 0.5), percentile(ttft, 0.99), percentile(itl, 0.5), percentile(itl, 0.99),
          static_cast<double>(output_tokens) / dur, dur, mix,
          percentile(itl, 0.25), percentile(itl, 0.40), percentile(itl, 0.60), percentile(itl, 0.75),
          itl.empty() ? 0.0 : std::accumulate(itl.begin(), itl.end(), 0.0) / static_cast<double>(itl.size())};
}

Result simulate(const Options& o) {
  double t = 0;
  SchedulerConfig c = o.sched;
  Scheduler s(c, [&t] { return t; });
  uint64_t id = 0;
  Result r;
  if (o.steady) {
    r = run_phase(s, t, o, o.warmup + o.num_prompts, id, o.warmup);
  } else {
    if (o.warmup > 0) run_phase(s, t, o, o.warmup, id);
    r = run_phase(s, t, o, o.num_prompts, id);
  }
  r.preemptions = s.stats().num_preemptions;
  r.preempted_tokens = s.stats().num_preempted_tokens;
  r.swap_outs = s.stats().num_swap_outs;
  r.swapped_out_tokens = s.stats().num_swapped_out_tokens;
  return r;
}

void print(const char* label, const Options& o, const Result& r) {
  std::printf("%-44s c=%-4d tok/s %8.0f  TTFT p50 %7.1f p99 %7.1f ms (%.2fx)  ITL p50 %6.2f p99 %6.2f ms (%.2fx)\n",
              label, o.concurrency, r.tok_s, r.ttft_p50 * 1e3, r.ttft_p99 * 1e3, r.ttft_p99 / r.ttft_p50,
              r.itl_p50 * 1e3, r.itl_p99 * 1e3, r.itl_p99 / r.itl_p50);
  if (r.preemptions > 0)
    std::printf("    preemptions %lld, their KV tokens to compute again %lld; %lld swapped out (%lld tokens)\n",
                static_cast<long long>(r.preemptions), static_cast<long long>(r.preempted_tokens),
                static_cast<long long>(r.swap_outs), static_cast<long long>(r.swapped_out_tokens));
  if (!o.show_mix) return;
  const StepMix& m = r.mix;
  const double n = static_cast<double>(std::max<int64_t>(1, m.steps));
  std::printf("    steps %lld: %.1f%% with prefill, %.1f decode rows and %.1f prefill tokens a step, %.2f admissions a step;"
              " prefill tokens 0 / 1-127 / 128-255 / >=256: %.1f / %.1f / %.1f / %.1f%% of steps\n",
              static_cast<long long>(m.steps), 100.0 * static_cast<double>(m.with_prefill) / n,
              static_cast<double>(m.decode_rows) / n, static_cast<double>(m.prefill_tokens) / n,
              static_cast<double>(m.admissions) / n, 100.0 * static_cast<double>(m.by_prefill[0]) / n,
              100.0 * static_cast<double>(m.by_prefill[1]) / n, 100.0 * static_cast<double>(m.by_prefill[2]) / n,
              100.0 * static_cast<double>(m.by_prefill[3]) / n);
  std::printf("    ITL p25 / p40 / p50 / p60 / p75 %.2f / %.2f / %.2f / %.2f / %.2f ms, mean %.2f ms\n", r.itl_p25 * 1e3,
              r.itl_p40 * 1e3, r.itl_p50 * 1e3, r.itl_p60 * 1e3, r.itl_p75 * 1e3, r.itl_mean * 1e3);
}

bool take_int(int& i, int argc, char** argv, const char* name, int& v) {
  if (std::strcmp(argv[i], name) != 0 || i + 1 >= argc) return false;
  v = std::atoi(argv[++i]);
  return true;
}
bool take_double(int& i, int argc, char** argv, const char* name, double& v) {
  if (std::strcmp(argv[i], name) != 0 || i + 1 >= argc) return false;
  v = std::atof(argv[++i]);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  o.sched.num_blocks = 1 + 256 * 64;  // plenty: 128/128 needs 16 blocks a sequence
  bool sweep = false;
  for (int i = 1; i < argc; ++i) {
    auto& c = o.sched;
    if (take_int(i, argc, argv, "--concurrency", o.concurrency) || take_int(i, argc, argv, "--num-prompts", o.num_prompts) ||
        take_int(i, argc, argv, "--warmup", o.warmup) || take_int(i, argc, argv, "--input-len", o.input_len) ||
        take_int(i, argc, argv, "--output-len", o.output_len) ||
        take_int(i, argc, argv, "--max-num-batched-tokens", c.max_num_batched_tokens) ||
        take_double(i, argc, argv, "--prefill-tokens-per-decode", c.prefill_tokens_per_decode) ||
        take_int(i, argc, argv, "--min-prefill-budget", c.min_prefill_budget) ||
        take_int(i, argc, argv, "--decode-interval", c.decode_interval) ||
        take_int(i, argc, argv, "--min-decode-interval", c.min_decode_interval) ||
        take_int(i, argc, argv, "--max-decode-interval", c.max_decode_interval) ||
        take_int(i, argc, argv, "--max-num-seqs", c.max_num_seqs) ||
        take_int(i, argc, argv, "--reorder-window", c.reorder_window) ||
        take_int(i, argc, argv, "--num-blocks", c.num_blocks) ||
        take_int(i, argc, argv, "--num-swap-blocks", c.num_swap_blocks) ||
        take_double(i, argc, argv, "--client-delay", o.client_delay_s) ||
        take_double(i, argc, argv, "--step-scale", o.step_scale))
      continue;
    if (std::strcmp(argv[i], "--steady") == 0) {
      o.steady = true;
      continue;
    }
    if (std::strcmp(argv[i], "--mix") == 0) {
      o.show_mix = true;
      continue;
    }
    if (std::strcmp(argv[i], "--no-groups") == 0) {
      o.groups = false;
      continue;
    }
    if (std::strcmp(argv[i], "--sweep") == 0) {
      sweep = true;
      continue;
    }
    std::fprintf(stderr, "unknown or incomplete flag %s (see the header of bench/serving_sim.cpp)\n", argv[i]);
    return 2;
  }
  if (auto st = o.sched.validate(); !st.ok()) {
    std::fprintf(stderr, "%s\n", st.to_string().c_str());
    return 2;
  }
  if (!sweep) {
    print("as configured", o, simulate(o));
    return 0;
  }
  // The policy grid the GPU runs are chosen from.
  for (int c : {1, 16, 64, 256}) {
    Options oc = o;
    oc.concurrency = c;
    oc.num_prompts = c == 1 ? 32 : std::max(64, 4 * c);
    oc.warmup = c;
    Options off = oc;
    off.sched.prefill_tokens_per_decode = 0;
    print("prefill budget lever off", off, simulate(off));
    print("as configured", oc, simulate(oc));
  }
  return 0;
}
