// Wave quantization of the decode attention grid over a throughput row's decode steps, the scheduler in
// simulation (no model: every sampled token is the same non-stop id, every request runs to its length).
//
//   build/<dir>/bench/decode_wave_sim [input_len output_len num_prompts max_num_seqs num_blocks swap_blocks
//                                      ctas_per_wave]
//
// Defaults: the 128/2048 row on one H200 (Llama-3.1-8B, FP8 cache: 116,519 blocks of 16 tokens, 16,384 swap
// blocks, --max-num-seqs 1024, 16,384 batched tokens) and the 4-warp decode kernel's wave (4 CTAs x 132 SMs).
// Each decode is one CTA per KV head (8), all of about the same context within a step, so a step runs
// ceil(ctas / wave) waves where w = ctas / wave would do: the printed bound on the attention time lost to the
// last, partly filled wave assumes a CTA takes as long in it as in a full one (each warp has one tile in
// flight, so a CTA's pace is its loads' latency, docs/PERF.md session 22), an upper bound where the few CTAs
// of the last wave draw more bandwidth each. Measured (session 29, `gpu_kernel_bench --kv-fp8`): the kernel's
// time is linear in the decodes across the wave boundary (857 / 870 / 1000 decodes at 1,104 tokens: 459.3 /
// 468.2 / 536.8 us, 0.536 / 0.538 / 0.537 us a decode), so the bound does not materialize on an H200: the
// last wave's CTAs run faster. The simulation stays for the rows' step mix (decodes and contexts per step).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>

#include <set>
#include <utility>

#include "xinfer/backend/decode_graph_buckets.h"
#include "xinfer/scheduler/scheduler.h"

int main(int argc, char** argv) {
  auto arg = [&](int i, int def) { return argc > i ? std::atoi(argv[i]) : def; };
  const int in = arg(1, 128), out_len = arg(2, 2048), n = arg(3, 1000), max_seqs = arg(4, 1024);
  const int wave = arg(7, 4 * 132), kv_heads = 8;
  xinfer::sched::SchedulerConfig c;
  c.num_blocks = arg(5, 116519);
  c.num_swap_blocks = arg(6, 16384);
  c.enable_prefix_caching = false;
  c.max_num_seqs = max_seqs;
  c.max_num_batched_tokens = 16384;
  c.max_model_len = in + out_len;
  xinfer::sched::Scheduler s(c);
  std::mt19937 rng(1);
  for (int i = 0; i < n; ++i) {
    xinfer::sched::Request r;
    r.id = static_cast<uint64_t>(i);
    for (int j = 0; j < in; ++j) r.prompt.push_back(3 + static_cast<int32_t>(rng() % 30000));
    r.max_new_tokens = out_len;
    r.ignore_eos = true;
    if (!s.add(r).ok()) return 1;
  }
  xinfer::sched::StepOutput out;
  long steps = 0, decode_steps = 0;
  double work = 0, waves_run = 0, rows = 0, spread = 0;  // work and waves weighted by the step's mean context
  int hist[10] = {};                                     // the last wave's fill, in tenths
  // CUDA graphs the engine records on first use (ModelRunner::graph_shape): one per (row bucket, block-table
  // width) key, the width the power of two >= 16 blocks holding the longest context, capped at max_model_len.
  const int bs = 16, cap = (c.max_model_len + bs - 1) / bs;
  std::set<std::pair<int, int>> keys;
  long new_key_steps_small =
      0;  // recordings at a bucket of <= 256 rows (short steps: less device time to hide them)
  while (s.num_running() + s.num_waiting() > 0) {
    const xinfer::sched::ScheduledStep st = s.schedule();
    ++steps;
    int decodes = 0, lo = 1 << 30, hi = 0;
    double ctx = 0;
    bool decode_only = !st.seqs.empty();
    for (const auto& q : st.seqs) {
      if (!q.is_decode()) {
        decode_only = false;
        continue;
      }
      ++decodes;
      ctx += q.start_pos + 1;
      lo = std::min(lo, q.start_pos + 1);
      hi = std::max(hi, q.start_pos + 1);
    }
    if (decode_only) {
      int width = 16;
      while (width < (hi + bs - 1) / bs) width *= 2;
      const int bucket = xinfer::backend::decode_graph_bucket(decodes);
      if (bucket > 0 && keys.insert({bucket, std::min(width, cap)}).second && bucket <= 256)
        ++new_key_steps_small;
      ++decode_steps;
      const double w = static_cast<double>(decodes) * kv_heads / wave, mean_ctx = ctx / decodes;
      work += w * mean_ctx;
      waves_run += std::ceil(w) * mean_ctx;
      rows += decodes;
      spread += hi - lo;
      ++hist[std::min(9, static_cast<int>(10 * (w - std::floor(w))))];
    }
    out.token_ids.assign(static_cast<size_t>(st.num_sampling), 7);
    s.update(out);
  }
  std::printf(
      "%d/%d x %d, --max-num-seqs %d, %d blocks, %d swap blocks, %d CTAs a wave: %ld steps, %ld decode-only; "
      "%.1f decodes a step, context spread within a step %.0f tokens\n",
      in, out_len, n, max_seqs, c.num_blocks, c.num_swap_blocks, wave, steps, decode_steps,
      rows / decode_steps, spread / decode_steps);
  std::printf(
      "decode attention: waves run / waves of work (context-weighted) %.4f: up to %.1f%% of its time in the "
      "last wave's idle slots\n",
      waves_run / work, 100.0 * (waves_run - work) / waves_run);
  std::printf("CUDA graphs recorded on first use: %zu (row bucket, width) keys, %ld of them at <= 256 rows\n",
              keys.size(), new_key_steps_small);
  std::printf("the last wave's fill (tenths, decode-only steps):");
  for (int i = 0; i < 10; ++i) std::printf(" %d", hist[i]);
  std::printf("\n");
  return 0;
}
