// engine::evaluate_perplexity with a recorded reference (RecordedLogits, as `xinfer quantize --table` uses
// it) gives exactly the figures of the reference model run again: the bundled model quantized (W4A16 g64
// RTN with the MSE clip search, all layers) scored against a second, float copy on 3 windows of 32 tokens
// (stride 24: overlapping windows, context-only tokens); and a recording of other tokens is refused.
#include <vector>

#include <gtest/gtest.h>

#include "bundled_model_fixture.h"
#include "xinfer/compress/model_quantizer.h"
#include "xinfer/engine/perplexity.h"

namespace xinfer::compress {
namespace {

TEST(RecordedReference, EqualsTheReferenceModelRunAgain) {
  test_support::BundledModel quantized, reference;
  const int V = quantized.model->config().vocab_size;
  std::vector<int32_t> tokens;
  for (int i = 0; i < 80; ++i) tokens.push_back((i * 7919 + 13) % V);

  QuantizeOptions o;
  o.scheme.scheme = Scheme::kW4A16;
  o.scheme.group_size = 64;
  o.scheme.mse_clip = true;
  o.progress = false;
  ModelQuantizer q(*quantized.model, *quantized.backend, o);
  QuantizeHooks hooks;
  hooks.forward = [&](std::span<const int32_t> w) { quantized.runner->run(w, 0, static_cast<int>(w.size())); };
  const std::vector<std::vector<int32_t>> windows = {std::vector<int32_t>(tokens.begin(), tokens.begin() + 48)};
  ASSERT_TRUE(q.calibrate(windows, hooks).ok());
  ASSERT_TRUE(q.prepare().ok());
  ASSERT_TRUE(q.select(hooks).ok());

  engine::PerplexityOptions po;
  po.ctx = 32;
  po.stride = 24;
  po.show_progress = false;
  auto direct = engine::evaluate_perplexity(*quantized.runner, reference.runner.get(), tokens, po);
  ASSERT_TRUE(direct.ok()) << direct.status().to_string();
  engine::RecordedLogits rec;
  auto base = engine::evaluate_perplexity(*reference.runner, nullptr, tokens, po, &rec);
  ASSERT_TRUE(base.ok());
  EXPECT_EQ(rec.vocab, V);
  EXPECT_EQ(rec.positions(), base->tokens_scored);
  auto replay = engine::evaluate_perplexity(*quantized.runner, nullptr, tokens, po, nullptr, &rec);
  ASSERT_TRUE(replay.ok()) << replay.status().to_string();
  EXPECT_TRUE(replay->has_reference);
  EXPECT_EQ(replay->tokens_scored, direct->tokens_scored);
  EXPECT_EQ(replay->nll_sum, direct->nll_sum);
  EXPECT_EQ(replay->kl_sum, direct->kl_sum);
  EXPECT_EQ(replay->top1_agree, direct->top1_agree);
  EXPECT_GT(direct->mean_kl(), 0.0);  // the quantization did change the model

  const std::vector<int32_t> fewer(tokens.begin(), tokens.begin() + 60);
  auto refused = engine::evaluate_perplexity(*quantized.runner, nullptr, fewer, po, nullptr, &rec);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().to_string().find("recorded reference logits"), std::string::npos)
      << refused.status().to_string();
}

}  // namespace
}  // namespace xinfer::compress
