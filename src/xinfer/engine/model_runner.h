// ModelRunner: turns one scheduled step (a list of sequence chunks: prefill chunks and single decode
// tokens, mixed) into a StepPlan, runs the model once on the backend and returns the logits of the
// chunks that asked for them, on the host.
//
// Each chunk feeds `tokens` at positions [start_pos, start_pos + tokens.size()) of its sequence; the
// sequence's KV cache lives in the blocks of `block_table` (block_table[p / block_size] holds position
// p), which must already cover every position up to start_pos + tokens.size() - 1.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "xinfer/backend/backend.h"
#include "xinfer/model/llama.h"

namespace xinfer::engine {

struct SequenceChunk {
  std::span<const int32_t> tokens;       // tokens to feed this step
  int32_t start_pos = 0;                 // position of tokens[0] (= tokens already in the KV cache)
  std::span<const int32_t> block_table;  // block ids of the sequence, in order
  bool want_logits = false;              // return logits of the chunk's last token
};

class ModelRunner {
 public:
  ModelRunner(model::LlamaModel& model, backend::Backend& backend, const backend::KvCacheSpec& kv_spec);

  // Runs one forward. Returns logits [number of chunks with want_logits, vocab], row-major, valid until
  // the next call.
  const std::vector<float>& run(std::span<const SequenceChunk> chunks);

  const backend::KvCacheSpec& kv_spec() const { return kv_spec_; }
  int vocab_size() const { return model_.config().vocab_size; }
  model::LlamaModel& model() { return model_; }

  // Builds the StepPlan for `chunks` (exposed for tests).
  static backend::StepPlan plan(std::span<const SequenceChunk> chunks, int block_size);

 private:
  model::LlamaModel& model_;
  backend::Backend& backend_;
  backend::KvCacheSpec kv_spec_;
  backend::KvCache kv_;
  std::vector<float> logits_;
};

}  // namespace xinfer::engine
