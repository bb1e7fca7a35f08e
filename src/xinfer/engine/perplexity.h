// Perplexity of a model on a token sequence, scored with sliding windows as Hugging Face transformers'
// perplexity guide ("Perplexity of fixed-length models") does, and the divergence of the model from a
// reference model on the same positions (`xinfer eval ppl`; quantization searches measure with it too).
//
// Windows (plan_score_windows), n tokens: window w covers [begin, end), begin = w * stride,
// end = min(begin + ctx, n); the last window is the first whose end reaches n. Each window runs alone from
// an empty KV cache, its tokens at positions 0 .. end - begin - 1. Its targets are [first_target, end) with
// first_target = max(end of the previous window, begin + 1): tokens scored by an earlier window are only
// context, and a window's first token is never a target (nothing in the window predicts it). Hence token 0
// is never scored; with stride < ctx every other token is scored exactly once, with stride == ctx the first
// token of every window is skipped too (n - windows tokens scored), both exactly as in the guide. Target t is
// scored with the logits of window position t - 1 - begin; a window's last token is never fed (its logits
// would predict a token outside the window).
//
// Scores, in double from the f32 logits rows: nll(t) = -log_softmax(logits)[token t];
// ppl = exp(nll_sum / tokens_scored), the exact mean over scored tokens (the guide's sample code instead
// weights each window's mean loss by its label count minus one, which differs slightly when stride < ctx).
// With a reference: per target position KL(p_ref || p) = sum_v p_ref(v) (log p_ref(v) - log p(v)) over the
// full vocabulary, and top-1 agreement argmax(p) == argmax(p_ref) (ties -> lowest id, as the Sampler).
// The rows of a chunk are scored on `threads` threads (each row's figures alone, log-sum-exp once per row
// and model, the reference's exponentials reused for p_ref); the sums add the rows in scoring order, so the
// result does not depend on the thread count.
// Per window the sums of the scored tokens' NLL (and the reference's) are kept: paired_ppl_increase()
// gives the PPL increase over the reference with a standard error from the spread over windows.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "xinfer/backend/backend.h"
#include "xinfer/core/status.h"
#include "xinfer/engine/kv_cache_dtype.h"
#include "xinfer/engine/step_followers.h"
#include "xinfer/model/llama.h"

namespace xinfer::engine {

struct ScoreWindow {
  int64_t begin = 0;         // first token of the window (window position 0)
  int64_t end = 0;           // one past its last token
  int64_t first_target = 0;  // first token scored in it; targets are [first_target, end)
};

// The windows for n tokens. INVALID_ARGUMENT when num_tokens < 2 (nothing to score), ctx < 2, or stride
// outside [1, ctx].
Result<std::vector<ScoreWindow>> plan_score_windows(int64_t num_tokens, int ctx, int stride);

// logits: [V]. log_softmax(logits)[token], computed in double.
double token_logprob(std::span<const float> logits, int32_t token);
// ref_logits, logits: [V] each. KL(softmax(ref_logits) || softmax(logits)) in double (>= 0).
double kl_divergence(std::span<const float> ref_logits, std::span<const float> logits);
// logits: [V]. The first index of the largest value.
int32_t argmax_first(std::span<const float> logits);

// Runs one model over windows: prefill chunks of at most `chunk` tokens into its own KV cache, returning the
// logits rows asked for. The model must have been loaded with max_tokens >= chunk, max_logit_rows >= chunk
// and max_model_len >= ctx. Tensor parallelism: `model` is rank 0's shard (the KV cache holds its local kv
// heads) and `followers` (the other ranks, whose KV caches the caller allocated with kv_spec()) run every
// chunk's plan too.
class WindowLogits {
 public:
  // kv: the KV cache's dtype and scales (resolve_kv_cache()); nullptr: the activation dtype.
  WindowLogits(model::LlamaModel& model, backend::Backend& backend, int ctx, int chunk, int block_size,
               StepFollowers* followers = nullptr, const KvCacheSettings* kv = nullptr);

  int vocab_size() const { return model_.config().vocab_size; }
  int chunk() const { return chunk_; }
  const backend::KvCacheSpec& kv_spec() const { return spec_; }
  // The window's KV cache (this rank's KV heads): position p at block 1 + p / block_size, row p % block_size;
  // valid until the next run() (compress/kv_scales.h reads it).
  const backend::KvCache& kv_cache() const { return kv_; }
  // tokens: [len], window positions [start_pos, start_pos + len), len <= chunk; positions < start_pos must
  // have been fed by earlier calls since the window began at position 0. Returns logits [len - first_row, V]
  // of rows first_row .. len - 1 (none when first_row == len), valid until the next call.
  const std::vector<float>& run(std::span<const int32_t> tokens, int start_pos, int first_row);

 private:
  model::LlamaModel& model_;
  backend::Backend& backend_;
  int ctx_, chunk_, block_size_;
  StepFollowers* followers_;
  backend::KvCacheSpec spec_;
  backend::KvCache kv_;
  std::vector<int32_t> block_table_;  // 1 .. blocks (block 0 is the null block)
  std::vector<float> logits_;
};

struct PerplexityOptions {
  int ctx = 1024;
  int stride = 1024;
  bool show_progress = true;         // progress bar over windows (stderr)
  bool keep_token_logprobs = false;  // fill PerplexityResult::token_logprobs
  int threads = 0;                   // scoring threads; 0 = all cores
};

struct PerplexityResult {
  double nll_sum = 0;  // sum over scored tokens of -log p(token)
  int64_t tokens_scored = 0;
  int64_t windows = 0;
  bool has_reference = false;
  double kl_sum = 0;       // sum over scored positions of KL(p_ref || p)
  double ref_nll_sum = 0;  // sum over scored tokens of -log p_ref(token) (with a reference)
  int64_t top1_agree = 0;  // scored positions where argmax p == argmax p_ref
  // With keep_token_logprobs: [num_tokens], log p(token t | its window's context) for scored t, NaN for the
  // others (token 0, and with stride == ctx each window's first token).
  std::vector<double> token_logprobs;
  // Per window (plan_score_windows' order): scored tokens, their NLL sum, the reference's NLL sum.
  std::vector<int64_t> window_tokens;
  std::vector<double> window_nll_sum, window_ref_nll_sum;

  double mean_nll() const { return tokens_scored ? nll_sum / static_cast<double>(tokens_scored) : 0.0; }
  double ppl() const;
  double mean_kl() const { return tokens_scored ? kl_sum / static_cast<double>(tokens_scored) : 0.0; }
  double reference_ppl() const;  // exp(ref_nll_sum / tokens_scored)
  double top1() const { return tokens_scored ? static_cast<double>(top1_agree) / tokens_scored : 0.0; }
  // Mean NLL of each window's scored tokens: this model's, the reference's.
  std::vector<double> window_mean_nll() const;
  std::vector<double> window_ref_mean_nll() const;
};

// The PPL increase of a model over a baseline on the same windows, in percent, and its standard error from
// the windows as paired samples: d_w = the model's mean NLL in window w - the baseline's; increase =
// 100 (exp(mean d) - 1) (windows of equal length: the ratio of the two PPLs up to the shorter last window),
// s.e. = 100 exp(mean d) std(d) / sqrt(W) (0 for one window). INVALID_ARGUMENT when the counts differ or are 0.
struct PplIncrease {
  double percent = 0;
  double se_percent = 0;
  std::vector<double> window_percent;  // 100 (exp(d_w) - 1) per window
};
Result<PplIncrease> paired_ppl_increase(std::span<const double> window_nll, std::span<const double> base_window_nll);

// A model's logits rows at the scored positions of one evaluation, kept so that several models can be
// compared with one reference without running it again (the accuracy table of `xinfer quantize`).
// rows: [scored positions, vocab], in scoring order (windows in order, targets in order).
struct RecordedLogits {
  int64_t vocab = 0;
  std::vector<float> rows;
  int64_t positions() const { return vocab ? static_cast<int64_t>(rows.size()) / vocab : 0; }
};

// Scores `tokens` (ids below both models' vocab) with `model` and, when `reference` is not null, compares
// it against `reference` (same vocabulary size, same chunk) on the same positions. `record` (optional)
// receives `model`'s scored rows; `recorded_reference` (optional, instead of `reference`) is the reference
// as recorded by an earlier call on the same tokens and options: the result equals the one with the
// reference model run again. Errors: those of plan_score_windows; INVALID_ARGUMENT when the recording's
// vocabulary or position count does not match.
Result<PerplexityResult> evaluate_perplexity(WindowLogits& model, WindowLogits* reference,
                                             std::span<const int32_t> tokens,
                                             const PerplexityOptions& options,
                                             RecordedLogits* record = nullptr,
                                             const RecordedLogits* recorded_reference = nullptr);

}  // namespace xinfer::engine
