// Prompt log-probabilities (GenerationRequest::prompt_logprobs, vLLM's `prompt_logprobs`): the step that
// scores them. A request asking for them prefills in all_logits chunks, and a step holding such a chunk
// brings back the host logits of every row of it (ModelRunner::run), never pipelined or drawn on the device.
//
// Logits layout of such a step: [num_rows, vocab], the rows of the step's chunks in chunk order. An
// all_logits chunk contributes tokens.size() rows (row j is position start_pos + j; its last row is also
// the sampling row when want_logits is set), any other want_logits chunk 1 row, the rest none.
// Row j (position p) predicts token p + 1: it scores prompt token p + 1 into entry p of the request's
// [num_prompt_tokens - 1] entries, up to the prompt's last token (rows past it score nothing).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "xinfer/engine/engine_client.h"
#include "xinfer/engine/model_runner.h"

namespace xinfer::engine {

// Where one all_logits chunk's scores go: its request's state.
struct PromptScoring {
  std::span<const int32_t> tokens;  // the sequence's tokens, prompt first: [>= num_prompt_tokens]
  int num_prompt_tokens = 0;
  int32_t num_top = 0;                   // alternatives kept per position (prompt_logprobs)
  std::vector<TokenLogprob>* out = nullptr;  // [num_prompt_tokens - 1]; entry p scores token p + 1
};

// Scores the prompt rows of every all_logits chunk of a step (scoring(i) names chunk i's destination; it is
// called for all_logits chunks only) and returns the logits row of every want_logits chunk, in chunk order
// (the step's sampling rows).
// logits: [num_rows, vocab] as above; CHECK-fails when its size is not num_rows x vocab.
std::vector<const float*> score_prompt_rows(std::span<const float> logits, size_t vocab,
                                            std::span<const SequenceChunk> chunks,
                                            const std::function<PromptScoring(size_t chunk)>& scoring);

}  // namespace xinfer::engine
