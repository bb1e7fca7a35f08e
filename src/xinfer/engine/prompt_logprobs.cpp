#include "xinfer/engine/prompt_logprobs.h"

#include <utility>

#include "xinfer/core/check.h"
#include "xinfer/engine/sampler.h"

namespace xinfer::engine {

std::vector<const float*> score_prompt_rows(std::span<const float> logits, size_t vocab,
                                            std::span<const SequenceChunk> chunks,
                                            const std::function<PromptScoring(size_t chunk)>& scoring) {
  std::vector<const float*> sample_rows;
  std::vector<std::pair<float, int32_t>> scratch;
  size_t row = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const SequenceChunk& c = chunks[i];
    const size_t n = c.all_logits ? c.tokens.size() : (c.want_logits ? 1 : 0);
    XI_CHECK_LE((row + n) * vocab, logits.size()) << "logits rows of chunk " << i;
    if (c.all_logits) {
      const PromptScoring s = scoring(i);
      XI_CHECK(s.out != nullptr) << "chunk " << i;
      for (size_t j = 0; j < n; ++j) {
        const size_t p = static_cast<size_t>(c.start_pos) + j;
        if (p + 1 >= static_cast<size_t>(s.num_prompt_tokens)) break;
        XI_CHECK_LT(p + 1, s.tokens.size()) << "chunk " << i;
        XI_CHECK_LT(p, s.out->size()) << "chunk " << i;
        const int32_t target = s.tokens[p + 1];
        PositionLogprobs lp =
            position_logprobs(logits.subspan((row + j) * vocab, vocab), target, s.num_top, &scratch);
        (*s.out)[p] = TokenLogprob{target, lp.logprob, std::move(lp.top), lp.rank};
      }
    }
    if (c.want_logits) sample_rows.push_back(logits.data() + (row + n - 1) * vocab);
    row += n;
  }
  XI_CHECK_EQ(row * vocab, logits.size());
  return sample_rows;
}

}  // namespace xinfer::engine
