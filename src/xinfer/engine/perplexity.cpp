#include "xinfer/engine/perplexity.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "xinfer/core/check.h"
#include "xinfer/core/progress_bar.h"
#include "xinfer/core/thread_pool.h"
#include "xinfer/engine/model_runner.h"

namespace xinfer::engine {

Result<std::vector<ScoreWindow>> plan_score_windows(int64_t num_tokens, int ctx, int stride) {
  if (num_tokens < 2)
    return invalid_argument("nothing to score: the text has " + std::to_string(num_tokens) +
                            " token(s); at least 2 are needed (token 0 is never scored)");
  if (ctx < 2) return invalid_argument("ctx must be at least 2, got " + std::to_string(ctx));
  if (stride <= 0 || stride > ctx)
    return invalid_argument("stride must be in [1, ctx = " + std::to_string(ctx) + "], got " +
                            std::to_string(stride));
  std::vector<ScoreWindow> windows;
  int64_t prev_end = 0;
  for (int64_t begin = 0; begin < num_tokens; begin += stride) {
    const int64_t end = std::min(begin + ctx, num_tokens);
    windows.push_back({begin, end, std::max(prev_end, begin + 1)});
    prev_end = end;
    if (end == num_tokens) break;
  }
  return windows;
}

namespace {

// log(sum(exp(x))) in double, shifted by the maximum.
double log_sum_exp(std::span<const float> x) {
  double m = -std::numeric_limits<double>::infinity();
  for (float v : x) m = std::max(m, static_cast<double>(v));
  double s = 0;
  for (float v : x) s += std::exp(static_cast<double>(v) - m);
  return m + std::log(s);
}

// KL(softmax(ref) || softmax(x)) given x's log-sum-exp; the reference's is computed here and returned in
// *lse_ref. One exp per vocabulary entry: exp(ref_v - max) serves both the reference's sum and p_ref(v).
// `e`: scratch of ref's size.
double kl_and_ref_lse(std::span<const float> ref_logits, std::span<const float> logits, double lse, std::vector<double>& e,
                      double* lse_ref) {
  double m = -std::numeric_limits<double>::infinity();
  for (float v : ref_logits) m = std::max(m, static_cast<double>(v));
  e.resize(ref_logits.size());
  double sum = 0;
  for (size_t v = 0; v < ref_logits.size(); ++v) sum += (e[v] = std::exp(static_cast<double>(ref_logits[v]) - m));
  *lse_ref = m + std::log(sum);
  double kl = 0;
  for (size_t v = 0; v < logits.size(); ++v) {
    const double lp_ref = static_cast<double>(ref_logits[v]) - *lse_ref;
    kl += e[v] * (lp_ref - (static_cast<double>(logits[v]) - lse));
  }
  return std::max(kl / sum, 0.0);  // rounding can leave -1e-17 for identical rows
}

// One scored position's figures.
struct RowScore {
  double lp = 0, ref_lp = 0, kl = 0;
  bool agree = false;
};

// e: scratch (kl_and_ref_lse).
RowScore score_row(std::span<const float> row, std::span<const float> ref, int32_t token, std::vector<double>& e) {
  XI_CHECK(token >= 0 && static_cast<size_t>(token) < row.size()) << "token " << token << " vocab " << row.size();
  RowScore s;
  const double lse = log_sum_exp(row);
  s.lp = static_cast<double>(row[static_cast<size_t>(token)]) - lse;
  if (!ref.empty()) {
    double lse_ref = 0;
    s.kl = kl_and_ref_lse(ref, row, lse, e, &lse_ref);
    s.ref_lp = static_cast<double>(ref[static_cast<size_t>(token)]) - lse_ref;
    s.agree = argmax_first(ref) == argmax_first(row);
  }
  return s;
}

std::vector<double> window_means(const std::vector<double>& sums, const std::vector<int64_t>& counts) {
  std::vector<double> out(sums.size());
  for (size_t w = 0; w < sums.size(); ++w)
    out[w] = counts[w] ? sums[w] / static_cast<double>(counts[w]) : 0.0;
  return out;
}

}  // namespace

double token_logprob(std::span<const float> logits, int32_t token) {
  XI_CHECK(token >= 0 && static_cast<size_t>(token) < logits.size())
      << "token " << token << " vocab " << logits.size();
  return static_cast<double>(logits[static_cast<size_t>(token)]) - log_sum_exp(logits);
}

double kl_divergence(std::span<const float> ref_logits, std::span<const float> logits) {
  XI_CHECK_EQ(ref_logits.size(), logits.size());
  std::vector<double> e;
  double lse_ref = 0;
  return kl_and_ref_lse(ref_logits, logits, log_sum_exp(logits), e, &lse_ref);
}

int32_t argmax_first(std::span<const float> logits) {
  XI_CHECK(!logits.empty());
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

double PerplexityResult::ppl() const {
  return std::exp(mean_nll());
}

double PerplexityResult::reference_ppl() const {
  return std::exp(tokens_scored ? ref_nll_sum / static_cast<double>(tokens_scored) : 0.0);
}

std::vector<double> PerplexityResult::window_mean_nll() const { return window_means(window_nll_sum, window_tokens); }
std::vector<double> PerplexityResult::window_ref_mean_nll() const {
  return window_means(window_ref_nll_sum, window_tokens);
}

Result<PplIncrease> paired_ppl_increase(std::span<const double> window_nll, std::span<const double> base_window_nll) {
  if (window_nll.empty() || window_nll.size() != base_window_nll.size())
    return invalid_argument("paired PPL increase: " + std::to_string(window_nll.size()) + " windows against " +
                            std::to_string(base_window_nll.size()));
  const size_t W = window_nll.size();
  std::vector<double> d(W);
  double mean = 0;
  for (size_t i = 0; i < W; ++i) mean += (d[i] = window_nll[i] - base_window_nll[i]) / static_cast<double>(W);
  double var = 0;
  for (double x : d) var += (x - mean) * (x - mean) / static_cast<double>(W > 1 ? W - 1 : 1);
  PplIncrease r;
  r.percent = 100.0 * (std::exp(mean) - 1.0);
  r.se_percent = W > 1 ? 100.0 * std::exp(mean) * std::sqrt(var / static_cast<double>(W)) : 0.0;
  for (double x : d) r.window_percent.push_back(100.0 * (std::exp(x) - 1.0));
  return r;
}

WindowLogits::WindowLogits(model::LlamaModel& model, backend::Backend& backend, int ctx, int chunk,
                           int block_size, StepFollowers* followers, const KvCacheSettings* kv)
    : model_(model), backend_(backend), ctx_(ctx), chunk_(chunk), block_size_(block_size), followers_(followers) {
  XI_CHECK_GT(chunk, 0);
  XI_CHECK_GT(block_size, 0);
  XI_CHECK_LE(chunk, model.options().max_tokens);
  XI_CHECK_LE(chunk, model.options().max_logit_rows);
  XI_CHECK_LE(ctx, model.max_model_len());
  const model::ModelConfig& cfg = model.config();
  const int blocks = (ctx + block_size - 1) / block_size;
  spec_ = backend::KvCacheSpec{cfg.num_layers,           blocks + 1,   block_size,
                               model.shard().num_kv_heads, cfg.head_dim, backend.info().activation_dtype};
  if (kv != nullptr) kv->apply_to(spec_);
  spec_.kv_head_begin = model.shard().kv_head_begin;
  kv_ = backend.allocate_kv_cache(spec_);
  for (int b = 1; b <= blocks; ++b) block_table_.push_back(b);
}

const std::vector<float>& WindowLogits::run(std::span<const int32_t> tokens, int start_pos, int first_row) {
  const int len = static_cast<int>(tokens.size());
  XI_CHECK(len > 0 && len <= chunk_) << "len " << len << " chunk " << chunk_;
  XI_CHECK_LE(start_pos + len, ctx_);
  XI_CHECK(first_row >= 0 && first_row <= len) << "first_row " << first_row << " len " << len;
  const SequenceChunk seq{tokens, start_pos, block_table_, false};
  backend::StepPlan plan = ModelRunner::plan(std::span(&seq, 1), block_size_);
  for (int r = first_row; r < len; ++r) plan.logit_rows.push_back(r);
  if (followers_ != nullptr) followers_->launch(plan);
  const backend::StepMeta meta = backend_.upload_step(plan);
  const TensorView dev = model_.forward(meta, kv_);
  logits_.resize(static_cast<size_t>(len - first_row) * static_cast<size_t>(vocab_size()));
  if (first_row < len) {
    XI_CHECK_EQ(static_cast<size_t>(dev.numel()), logits_.size());
    backend_.to_host_f32(dev, logits_.data());
  }
  return logits_;
}

Result<PerplexityResult> evaluate_perplexity(WindowLogits& model, WindowLogits* reference,
                                             std::span<const int32_t> tokens,
                                             const PerplexityOptions& options, RecordedLogits* record,
                                             const RecordedLogits* recorded_reference) {
  XI_ASSIGN_OR_RETURN(std::vector<ScoreWindow> windows,
                      plan_score_windows(static_cast<int64_t>(tokens.size()), options.ctx, options.stride));
  if (reference) {
    XI_CHECK_EQ(reference->vocab_size(), model.vocab_size());
    XI_CHECK_EQ(reference->chunk(), model.chunk());
  }
  XI_CHECK(reference == nullptr || recorded_reference == nullptr) << "a reference model or a recording, not both";
  const int V = model.vocab_size();
  const int chunk = model.chunk();
  if (recorded_reference) {
    int64_t scored = 0;
    for (const ScoreWindow& w : windows) scored += w.end - w.first_target;
    if (recorded_reference->vocab != V || recorded_reference->positions() != scored)
      return invalid_argument("recorded reference logits: vocabulary " + std::to_string(recorded_reference->vocab) +
                              " x " + std::to_string(recorded_reference->positions()) + " positions, expected " +
                              std::to_string(V) + " x " + std::to_string(scored));
  }
  if (record) {
    record->vocab = V;
    record->rows.clear();
  }
  PerplexityResult res;
  res.windows = static_cast<int64_t>(windows.size());
  res.has_reference = reference != nullptr || recorded_reference != nullptr;
  if (options.keep_token_logprobs)
    res.token_logprobs.assign(tokens.size(), std::numeric_limits<double>::quiet_NaN());
  ThreadPool pool(options.threads);
  std::vector<RowScore> scores;
  ProgressBar bar("Scoring windows", res.windows, "windows", options.show_progress);
  for (const ScoreWindow& w : windows) {
    // Window positions 0 .. fed - 1 are fed; rows first_row .. fed - 1 predict targets first_target .. end
    // - 1.
    const int fed = static_cast<int>(w.end - w.begin) - 1;
    const int first_row = static_cast<int>(w.first_target - w.begin) - 1;
    int64_t w_tokens = 0;
    double w_nll = 0, w_ref_nll = 0;
    for (int pos = 0; pos < fed; pos += chunk) {
      const int len = std::min(chunk, fed - pos);
      const auto part = tokens.subspan(static_cast<size_t>(w.begin + pos), static_cast<size_t>(len));
      const int row0 = std::clamp(first_row - pos, 0, len);
      const std::vector<float>& rows = model.run(part, pos, row0);
      const std::vector<float>* ref_rows = reference ? &reference->run(part, pos, row0) : nullptr;
      const int64_t recorded0 = res.tokens_scored;  // the recorded reference's row of this chunk's row0
      auto row_of = [&](const std::vector<float>& m, int r) {
        return std::span(m).subspan(static_cast<size_t>(r - row0) * V, static_cast<size_t>(V));
      };
      scores.assign(static_cast<size_t>(len - row0), RowScore{});
      pool.parallel_for(row0, len, [&](int64_t b, int64_t e) {
        std::vector<double> scratch;
        for (int r = static_cast<int>(b); r < static_cast<int>(e); ++r) {
          const int32_t target = tokens[static_cast<size_t>(w.begin + pos + r + 1)];
          std::span<const float> ref;
          if (ref_rows) ref = row_of(*ref_rows, r);
          else if (recorded_reference)
            ref = std::span(recorded_reference->rows)
                      .subspan(static_cast<size_t>(recorded0 + r - row0) * V, static_cast<size_t>(V));
          scores[static_cast<size_t>(r - row0)] = score_row(row_of(rows, r), ref, target, scratch);
        }
      });
      for (int r = row0; r < len; ++r) {
        const int64_t target = w.begin + pos + r + 1;
        const RowScore& s = scores[static_cast<size_t>(r - row0)];
        res.nll_sum -= s.lp;
        w_nll -= s.lp;
        ++w_tokens;
        ++res.tokens_scored;
        if (options.keep_token_logprobs) res.token_logprobs[static_cast<size_t>(target)] = s.lp;
        if (record) {
          const auto row = row_of(rows, r);
          record->rows.insert(record->rows.end(), row.begin(), row.end());
        }
        if (res.has_reference) {
          res.kl_sum += s.kl;
          res.ref_nll_sum -= s.ref_lp;
          w_ref_nll -= s.ref_lp;
          res.top1_agree += s.agree ? 1 : 0;
        }
      }
    }
    res.window_tokens.push_back(w_tokens);
    res.window_nll_sum.push_back(w_nll);
    res.window_ref_nll_sum.push_back(w_ref_nll);
    bar.advance();
  }
  bar.finish();
  return res;
}

}  // namespace xinfer::engine
