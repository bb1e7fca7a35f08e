// The ModelRunner side of asynchronous scheduling, checked on any backend: decode steps run pipelined
// (start_greedy of step k, whose chunks feed placeholders with token_source = the row of step k-1, before
// finish_greedy of step k-1) produce bit-identical ids to the same steps run one after the other with the
// tokens known on the host. Every few steps a new sequence's prompt is prefilled in the same step as the
// decodes (a mixed step: fed rows beside a prefill chunk of known tokens), so token
// sources point at rows other than the chunk's own index. With `sampled` params (backends that
// supports_sampling()): the sequential runner draws with run_sampled(), the pipelined one with
// start_sampled() (outputs ending in the placeholder): the same seeded draws. Used by tests/unit/engine (CPU)
// and tests/gpu (CUDA, graphs on and off).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "xinfer/engine/model_runner.h"
#include "xinfer/engine/sampler.h"
#include "xinfer/scheduler/scheduled_step.h"

namespace xinfer::engine::testing {

// Runs the check on two runners over the same model and backend (each has its own KV cache).
// Returns the number of fed tokens (> 0 when the check did something).
inline int64_t check_pipelined_greedy(ModelRunner& sequential, ModelRunner& pipelined, int vocab,
                                      int block_size, int num_seqs, int num_steps,
                                      const SamplingParams* sampled = nullptr) {
  struct Seq {
    std::vector<int32_t> tokens;  // prompt + outputs (sequential runner's truth)
    std::vector<int32_t> table;
    int computed = 0;          // tokens in the KV cache
    int join_step = 0;         // step whose forward prefills it
    bool fed_pending = false;  // pipelined: its next token comes from the previous step's row
    int prev_row = -1;         // that row
    int num_prompt = 0;
    SequenceRng rng = SequenceRng::from_seed(0);  // sampled: the request's
    std::vector<int32_t> pipe_outputs;  // outputs as the pipelined engine knows them (placeholder last)
  };
  Sampler host_sampler(vocab);
  std::vector<Seq> seqs(static_cast<size_t>(num_seqs));
  int next_block = 1;
  for (int s = 0; s < num_seqs; ++s) {
    Seq& q = seqs[static_cast<size_t>(s)];
    const int len = 3 + (s * 29) % 40;
    for (int i = 0; i < len; ++i) q.tokens.push_back((s * 131 + i * 17 + 5) % vocab);
    for (int b = 0; b < (len + num_steps + block_size) / block_size; ++b) q.table.push_back(next_block++);
    q.join_step = s < num_seqs / 2 ? 0 : 1 + (s % 3);  // half join later, beside decodes
    q.num_prompt = len;
    if (sampled != nullptr) q.rng = SequenceRng::for_request(*sampled, static_cast<uint64_t>(s));
  }
  const int32_t pending = sched::kPendingToken;
  std::vector<int32_t> pending_token{pending};
  int64_t fed = 0;
  std::vector<std::vector<int32_t>> seq_ids, pipe_ids;  // per step, in sampling order
  for (int step = 0; step < num_steps; ++step) {
    std::vector<SequenceChunk> ref_chunks, pipe_chunks;
    std::vector<SampleInput> ref_inputs, pipe_inputs;
    std::vector<size_t> sampled_seqs;
    for (size_t s = 0; s < seqs.size(); ++s) {
      Seq& q = seqs[s];
      if (step < q.join_step) continue;
      const int n = static_cast<int>(q.tokens.size()) - q.computed;
      const std::span<const int32_t> span(q.tokens.data() + q.computed, static_cast<size_t>(n));
      ref_chunks.push_back({span, q.computed, q.table, true});
      SequenceChunk p{span, q.computed, q.table, true};
      if (q.fed_pending) {
        p.tokens = pending_token;
        p.token_source = q.prev_row;
        ++fed;
      }
      pipe_chunks.push_back(p);
      sampled_seqs.push_back(s);
      if (sampled != nullptr) {
        const std::span<const int32_t> all(q.tokens);
        ref_inputs.push_back({nullptr, sampled, &q.rng, all.first(static_cast<size_t>(q.num_prompt)),
                              all.subspan(static_cast<size_t>(q.num_prompt))});
        q.pipe_outputs.assign(q.tokens.begin() + q.num_prompt, q.tokens.end());
        if (q.fed_pending) q.pipe_outputs.back() = pending;
        pipe_inputs.push_back(
            {nullptr, sampled, &q.rng, all.first(static_cast<size_t>(q.num_prompt)), q.pipe_outputs});
      }
    }
    // Sequential: run the step, learn its ids at once.
    if (sampled == nullptr) {
      seq_ids.push_back(sequential.run_greedy(ref_chunks));
    } else {
      seq_ids.emplace_back();
      for (const SampleOutput& o : sequential.run_sampled(ref_chunks, ref_inputs, host_sampler))
        seq_ids.back().push_back(o.token);
    }
    // Pipelined: start this step behind the previous one, then finish the previous one.
    if (sampled == nullptr) {
      pipelined.start_greedy(pipe_chunks);
    } else {
      pipelined.start_sampled(pipe_chunks, pipe_inputs, {});
    }
    if (step > 0) pipe_ids.push_back(pipelined.finish_greedy());
    EXPECT_EQ(seq_ids.back().size(), sampled_seqs.size());
    for (size_t r = 0; r < sampled_seqs.size(); ++r) {
      Seq& q = seqs[sampled_seqs[r]];
      q.computed = static_cast<int>(q.tokens.size());
      q.tokens.push_back(seq_ids.back()[r]);
      q.fed_pending = true;
      q.prev_row = static_cast<int>(r);
    }
  }
  pipe_ids.push_back(pipelined.finish_greedy());
  EXPECT_EQ(pipelined.num_greedy_in_flight(), 0);
  EXPECT_EQ(pipe_ids.size(), seq_ids.size());
  for (size_t k = 0; k < seq_ids.size() && k < pipe_ids.size(); ++k)
    EXPECT_EQ(pipe_ids[k], seq_ids[k]) << "step " << k << ": pipelined ids differ from the sequential run";
  return fed;
}

}  // namespace xinfer::engine::testing
