// Device sampling (CudaBackend::sample_rows, kernels/sampling): token frequencies against the exact filtered
// distribution computed from the definitions (tests/common/sampling_reference.h) - every kernel path: shared-memory
// candidates (small vocab, top-k, min-p), radix selects (top-k by count, top-p by mass, exact ties), the
// full-row draw - at vocab 7, 1000, 3000, 12000, 20000, 32001 (misaligned rows), 50257 and 128256; logit
// adjustments (mask, bias, penalties) from SamplingParams through the engine's planner; greedy rows equal to
// the host Sampler's argmax; batches issued back to back (staging buffers taking turns); determinism and
// independence from batch position; and the Engine on CUDA using
// the device path with seeded runs that repeat exactly.
#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <mutex>
#include <numeric>
#include <optional>
#include <random>
#include <string>

#include "common/sampling_reference.h"
#include "gpu_test_util.h"
#include "xinfer/engine/device_sampling.h"
#include "xinfer/engine/engine.h"
#include "xinfer/engine/sampler.h"

namespace xinfer::gpu_test {
namespace {

using namespace test_ref;

std::vector<float> normal_logits(int vocab, uint32_t seed, float stddev) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, stddev);
  std::vector<float> v(static_cast<size_t>(vocab));
  for (float& x : v) x = d(gen);
  return v;
}

backend::SamplingRow row_for(const Filter& f, int vocab) {
  backend::SamplingRow r;
  r.greedy = false;
  r.temperature = f.temperature;
  r.inv_temperature = 1.0f / f.temperature;
  r.top_k = f.top_k > 0 && f.top_k < vocab ? f.top_k : 0;
  r.top_p = f.top_p;
  r.min_p = f.min_p;
  return r;
}

uint64_t draw_bits(uint64_t seed, int64_t draw) { return backend::splitmix64(seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(draw)); }

// Runs sample_rows on `batch` over logits [rows, V] (host), returning the ids; checks that the logits are
// unchanged afterwards.
std::vector<int32_t> sample(const std::vector<float>& logits, int vocab, const backend::SamplingBatch& batch) {
  const int64_t rows = static_cast<int64_t>(logits.size()) / vocab;
  auto dev = gpu().upload(host_view(logits, Shape{rows, vocab}), DType::kF32);
  auto out = gpu().allocate(DType::kI32, Shape{static_cast<int64_t>(batch.rows.size())});
  const Status st = gpu().sample_rows(dev.view, batch, out.view);
  EXPECT_TRUE(st.ok()) << st.to_string();
  std::vector<int32_t> ids(batch.rows.size());
  gpu().to_host_raw(out.view, ids.data());
  if (!batch.adjustments.empty()) {
    std::vector<float> after(logits.size());
    gpu().to_host_raw(dev.view, after.data());
    EXPECT_EQ(std::memcmp(after.data(), logits.data(), logits.size() * sizeof(float)), 0) << "logits not restored";
  }
  return ids;
}

// `draws` tokens for `proto` from `logits`: rows of 4096 draws per call, each with its own random bits, all
// reading logits row 1 (row 0 holds the reversed logits: a wrong row shows). With `adjust` (row-local
// adjustments of one row), each of 512 rows per call gets its own copy of the logits.
std::vector<int64_t> draw_counts(const std::vector<float>& logits, const backend::SamplingRow& proto, int64_t draws,
                                 uint64_t seed, const std::vector<backend::LogitAdjustment>& adjust = {}) {
  const int V = static_cast<int>(logits.size());
  const int per_call = adjust.empty() ? 4096 : 512;
  std::vector<float> host;
  if (adjust.empty()) {
    host.assign(logits.rbegin(), logits.rend());
    host.insert(host.end(), logits.begin(), logits.end());
  } else {
    for (int r = 0; r < per_call; ++r) host.insert(host.end(), logits.begin(), logits.end());
  }
  auto dev = gpu().upload(host_view(host, Shape{static_cast<int64_t>(host.size()) / V, V}), DType::kF32);
  auto out = gpu().allocate(DType::kI32, Shape{per_call});
  std::vector<int64_t> counts(static_cast<size_t>(V), 0);
  std::vector<int32_t> ids(static_cast<size_t>(per_call));
  backend::SamplingBatch batch;
  for (int64_t start = 0; start < draws; start += per_call) {
    const int n = static_cast<int>(std::min<int64_t>(per_call, draws - start));
    batch.clear();
    for (int r = 0; r < n; ++r) {
      backend::SamplingRow row = proto;
      row.logit_row = adjust.empty() ? 1 : r;
      row.random_bits = draw_bits(seed, start + r);
      batch.rows.push_back(row);
      for (backend::LogitAdjustment a : adjust) {
        a.row = r;
        batch.adjustments.push_back(a);
      }
    }
    const Status st = gpu().sample_rows(dev.view, batch, out.view);
    EXPECT_TRUE(st.ok()) << st.to_string();
    gpu().to_host_raw(out.view.rows(0, n), ids.data());
    for (int r = 0; r < n; ++r) {
      EXPECT_TRUE(ids[static_cast<size_t>(r)] >= 0 && ids[static_cast<size_t>(r)] < V) << ids[static_cast<size_t>(r)];
      if (ids[static_cast<size_t>(r)] >= 0 && ids[static_cast<size_t>(r)] < V) ++counts[static_cast<size_t>(ids[static_cast<size_t>(r)])];
    }
  }
  if (!adjust.empty()) {
    std::vector<float> after(host.size());
    gpu().to_host_raw(dev.view, after.data());
    EXPECT_EQ(std::memcmp(after.data(), host.data(), host.size() * sizeof(float)), 0) << "logits not restored";
  }
  return counts;
}

struct DistributionCase {
  std::string name;
  int vocab;
  std::function<std::vector<float>(int)> logits;
  Filter filter;
  int64_t draws = 200000;
};

void PrintTo(const DistributionCase& c, std::ostream* os) { *os << c.name; }

std::vector<float> small7(int) { return {2.0f, 1.5f, 1.4f, 1.0f, 0.5f, 0.3f, 0.0f}; }
// Three logit levels by id % 3 (1.0, 0.5, 0.0): top-p cuts fall inside groups of equal weights.
std::vector<float> levels(int vocab) {
  std::vector<float> v(static_cast<size_t>(vocab));
  for (int i = 0; i < vocab; ++i) v[static_cast<size_t>(i)] = i % 3 == 0 ? 1.0f : (i % 3 == 1 ? 0.5f : 0.0f);
  return v;
}
// Integer-valued logits: many ties at any top-k boundary.
std::vector<float> integers(int vocab) {
  std::vector<float> v = normal_logits(vocab, 17, 3.0f);
  for (float& x : v) x = std::floor(x);
  return v;
}
std::vector<float> equal(int vocab) { return std::vector<float>(static_cast<size_t>(vocab), 0.25f); }
// Logits within 0.01 of each other: the first radix level cannot split them (the second level does).
std::function<std::vector<float>(int)> narrow(uint32_t seed) {
  return [seed](int vocab) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> u(0.0f, 0.01f);
    std::vector<float> v(static_cast<size_t>(vocab));
    for (float& x : v) x = u(gen);
    return v;
  };
}
// One token in 12 at logit 5, the rest at 0: a nucleus of tied weights above a long tail of small ones.
std::vector<float> tied_peak(int vocab) {
  std::vector<float> v(static_cast<size_t>(vocab), 0.0f);
  for (int i = 0; i < vocab; i += 12) v[static_cast<size_t>(i)] = 5.0f;
  return v;
}
std::function<std::vector<float>(int)> normal(uint32_t seed, float stddev) {
  return [seed, stddev](int vocab) { return normal_logits(vocab, seed, stddev); };
}

Filter filter(float t, int top_k = 0, float top_p = 1.0f, float min_p = 0.0f) { return Filter{t, top_k, top_p, min_p}; }

class SampleRowsDistribution : public ::testing::TestWithParam<DistributionCase> {};

TEST_P(SampleRowsDistribution, MatchesTheFilteredDistribution) {
  const DistributionCase& c = GetParam();
  const std::vector<float> logits = c.logits(c.vocab);
  const Expected ex = expected_distribution(logits, c.filter);
  // The cut must not sit on a cumulative mass (where float weights and fixed-point sums may legitimately
  // decide otherwise than double). Each case's kept set was also checked to equal that of an emulation of
  // the device arithmetic (float weights by the host polynomial, 2^-44 fixed-point masses).
  ASSERT_GT(ex.top_p_margin, 1e-7) << "top_p sits on a cumulative mass: the case tests rounding, not the cut";
  const auto counts = draw_counts(logits, row_for(c.filter, c.vocab), c.draws, 1234);
  const ChiSquared chi = chi_squared(counts, ex.prob, c.draws);
  const int64_t support = std::count_if(ex.prob.begin(), ex.prob.end(), [](double p) { return p > 0; });
  std::printf("[ sampling ] %-26s vocab %6d kept %6lld: chi2 %.1f df %d, impossible draws %lld\n", c.name.c_str(),
              c.vocab, static_cast<long long>(support), chi.stat, chi.df, static_cast<long long>(chi.impossible_draws));
  EXPECT_EQ(chi.impossible_draws, 0);
  EXPECT_TRUE(chi.plausible()) << "chi2 " << chi.stat << " df " << chi.df;
  // Power: without its filter a case would draw dropped tokens (>= 20 expected) or fail the chi-squared test.
  if (c.filter.top_k > 0 || c.filter.top_p < 1 || c.filter.min_p > 0) {
    const std::vector<double> plain = expected_distribution(logits, filter(c.filter.temperature)).prob;
    double dropped = 0;
    for (size_t i = 0; i < plain.size(); ++i) dropped += ex.prob[i] == 0 ? plain[i] : 0.0;
    // (dropped == 0: the filter keeps everything by definition, e.g. top-k inside one tie group.)
    EXPECT_TRUE(dropped == 0 || dropped * static_cast<double>(c.draws) >= 20 ||
                !chi_squared(counts, plain, c.draws).plausible())
        << "the filter makes no visible difference: the case cannot fail";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Paths, SampleRowsDistribution,
    ::testing::Values(
        // Shared-memory candidates (vocab <= 4096, or a top-k / min-p bound that leaves few).
        DistributionCase{"v7_t1", 7, small7, filter(1.0f)},
        DistributionCase{"v7_t07_k3_p08", 7, small7, filter(0.7f, 3, 0.8f)},
        DistributionCase{"v7_t13_minp03", 7, small7, filter(1.3f, 0, 1.0f, 0.3f)},
        DistributionCase{"v1000_t13_p08", 1000, normal(1, 2.0f), filter(1.3f, 0, 0.8f)},
        DistributionCase{"v1000_k20_ties", 1000, integers, filter(1.0f, 20)},
        DistributionCase{"v1000_k50_p09_minp", 1000, normal(2, 2.0f), filter(0.9f, 50, 0.9f, 0.02f)},
        DistributionCase{"v3000_levels_p03", 3000, levels, filter(1.0f, 0, 0.3f)},
        DistributionCase{"v3000_levels_p07", 3000, levels, filter(1.0f, 0, 0.7f)},
        DistributionCase{"v50257_k1000_minp", 50257, normal(3, 2.0f), filter(1.0f, 1000, 1.0f, 0.02f)},
        DistributionCase{"v128256_k50_p09", 128256, normal(4, 2.0f), filter(1.0f, 50, 0.9f)},
        DistributionCase{"v128256_k40_t05", 128256, normal(5, 2.0f), filter(0.5f, 40)},
        // Radix selects over the row (top-p by mass; top-k by count when no bound fits).
        DistributionCase{"v12000_levels_p03", 12000, levels, filter(1.0f, 0, 0.3f)},
        DistributionCase{"v12000_levels_p07", 12000, levels, filter(1.0f, 0, 0.7f)},
        DistributionCase{"v32001_t07_p095", 32001, normal(6, 2.0f), filter(0.7f, 0, 0.95f)},
        DistributionCase{"v50257_k700_t09", 50257, normal(7, 2.0f), filter(0.9f, 700)},
        DistributionCase{"v128256_p09", 128256, normal(8, 2.0f), filter(1.0f, 0, 0.9f)},
        DistributionCase{"v128256_k600_p05", 128256, normal(9, 3.0f), filter(1.0f, 600, 0.5f)},
        DistributionCase{"v20000_narrow_p05", 20000, narrow(1), filter(1.0f, 0, 0.5f)},
        DistributionCase{"v20000_narrow_k3000", 20000, narrow(2), filter(1.0f, 3000)},
        // Top-p over a small nucleus above a long tail (a language model's usual shape): the radix select's
        // boundary bin fits in shared memory early; tied weights at the cut; min-p leaving too many for it.
        DistributionCase{"v128256_peaked_p09", 128256, normal(13, 5.0f), filter(1.0f, 0, 0.9f)},
        DistributionCase{"v128256_peaked_t07_p095", 128256, normal(14, 4.0f), filter(0.7f, 0, 0.95f)},
        DistributionCase{"v12000_tied_peak_p05", 12000, tied_peak, filter(1.0f, 0, 0.5f)},
        DistributionCase{"v128256_minp_p08", 128256, normal(15, 5.0f), filter(1.0f, 0, 0.8f, 1e-6f)},
        // Exact keys with more ties than shared memory: all tied tokens (top-k), the lowest ids (top-p).
        DistributionCase{"v20000_equal_k10", 20000, equal, filter(1.0f, 10)},
        DistributionCase{"v20000_equal_p04", 20000, equal, filter(1.0f, 0, 0.400025f)},
        // Full-row draw: plain temperature, and a min-p bound that leaves too many for shared memory.
        DistributionCase{"v128256_t1_sd4", 128256, normal(10, 4.0f), filter(1.0f)},
        DistributionCase{"v128256_minp_1e-4", 128256, normal(11, 3.0f), filter(1.0f, 0, 1.0f, 1e-4f)},
        DistributionCase{"v128256_minp_01", 128256, normal(12, 2.5f), filter(1.0f, 0, 1.0f, 0.1f)}),
    [](const ::testing::TestParamInfo<DistributionCase>& p) {
      std::string n = p.param.name;
      std::replace(n.begin(), n.end(), '-', '_');
      return n;
    });

// Logit adjustments built by the engine's planner from SamplingParams (min_tokens masking, logit_bias,
// repetition / presence / frequency penalties) give the distribution of the adjusted logits.
TEST(SampleRows, AdjustmentsFromSamplingParams) {
  const int V = 1000;
  const std::vector<float> raw = normal_logits(V, 31, 1.5f);
  const std::vector<int32_t> eos = {2};
  std::vector<int32_t> prompt = {5, 6, 7, 5, 100};
  std::vector<int32_t> output = {7, 8, 8, 8, 9, 2};
  engine::SamplingParams p;
  p.temperature = 0.8f;
  p.top_k = 60;
  p.top_p = 0.95f;
  p.repetition_penalty = 1.3f;
  p.presence_penalty = 0.4f;
  p.frequency_penalty = 0.3f;
  p.logit_bias = {{10, 3.0f}, {11, -100.0f}, {8, 0.5f}};
  p.min_tokens = 10;
  p.stop_token_ids = {12};
  p.max_tokens = 20;
  ASSERT_TRUE(engine::validate(p, V).ok());
  const engine::SequenceRng rng = engine::SequenceRng::from_seed(1);
  engine::DeviceSamplingPlanner planner(V);
  planner.add(engine::SampleInput{nullptr, &p, &rng, prompt, output}, 0, eos);
  const backend::SamplingBatch& b = planner.batch();
  ASSERT_EQ(b.rows.size(), 1u);
  ASSERT_FALSE(b.adjustments.empty());

  const std::vector<float> adjusted = adjusted_logits(raw, p, prompt, output, eos);
  const Expected ex = expected_distribution(adjusted, filter(p.temperature, p.top_k, p.top_p));
  ASSERT_GT(ex.top_p_margin, 1e-5);
  const int64_t draws = 200000;
  const auto counts = draw_counts(raw, b.rows[0], draws, 77, b.adjustments);
  const ChiSquared chi = chi_squared(counts, ex.prob, draws);
  std::printf("[ sampling ] adjustments (mask, bias, penalties, k60 p0.95): chi2 %.1f df %d\n", chi.stat, chi.df);
  EXPECT_TRUE(chi.plausible()) << "chi2 " << chi.stat << " df " << chi.df;
  EXPECT_EQ(counts[2] + counts[11] + counts[12], 0) << "masked or banned tokens drawn";
  EXPECT_GT(counts[10], draws / 20) << "the +3 bias should make token 10 common";
  // The raw logits' distribution is rejected (the test has power).
  EXPECT_FALSE(chi_squared(counts, expected_distribution(raw, filter(p.temperature, p.top_k, p.top_p)).prob, draws)
                   .plausible());
}

// Greedy rows inside a mixed batch are the host Sampler's argmax (ties -> lowest id; -inf / NaN rows), and
// a non-greedy row whose max is -inf is greedy too (as on the host).
TEST(SampleRows, GreedyRowsInAMixedBatchAreTheHostArgmax) {
  const int V = 50257;
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<std::vector<float>> rows;
  rows.push_back(normal_logits(V, 41, 2.0f));
  rows.push_back(normal_logits(V, 42, 2.0f));
  rows[1][77] = rows[1][4000] = rows[1][50000] = 30.0f;  // ties -> 77
  rows.push_back(std::vector<float>(static_cast<size_t>(V), -inf));
  rows.back()[9] = std::nanf("");
  rows.push_back(std::vector<float>(static_cast<size_t>(V), std::nanf("")));
  rows.push_back(normal_logits(V, 43, 2.0f));
  rows.back()[V - 1] = 50.0f;
  std::vector<float> host;
  for (const auto& r : rows) host.insert(host.end(), r.begin(), r.end());
  engine::Sampler sampler(V);
  engine::SamplingParams greedy;
  greedy.temperature = 0.0f;
  backend::SamplingBatch batch;
  std::vector<int32_t> expect;
  for (size_t r = 0; r < rows.size(); ++r) {
    const engine::SampleInput in{rows[r].data(), &greedy, nullptr, {}, {}};
    expect.push_back(sampler.sample(std::span(&in, 1))[0].token);
    backend::SamplingRow g;
    g.logit_row = static_cast<int32_t>(r);
    g.greedy = r != 2;  // row 2 (all -inf) as a random-sampling row: greedy on the host too
    batch.rows.push_back(g);
    backend::SamplingRow s = row_for(filter(1.0f, 0, 0.9f), V);  // a sampling row between greedy rows
    s.logit_row = static_cast<int32_t>(r);
    s.random_bits = 99 + r;
    batch.rows.push_back(s);
  }
  const auto ids = sample(host, V, batch);
  EXPECT_EQ(expect[1], 77);
  EXPECT_EQ(expect[2], 0);
  for (size_t r = 0; r < rows.size(); ++r) EXPECT_EQ(ids[2 * r], expect[r]) << "row " << r;
  EXPECT_EQ(ids[5], 0) << "all -inf: greedy at -inf gives the lowest id";
}

// Batches issued back to back, none waited for before the next (as with a step in flight): the pinned
// staging buffers take turns and one of them grows (a 2000-row batch) while the other's copy may be pending;
// greedy rows (one with its argmax masked) give known answers for every call.
TEST(SampleRows, BackToBackBatchesBeforeAnyDownload) {
  const int V = 5000, R = 6;
  std::vector<float> host;
  std::vector<int32_t> best(R), second(R);
  for (int r = 0; r < R; ++r) {
    const std::vector<float> row = normal_logits(V, 70 + static_cast<uint32_t>(r), 2.0f);
    std::vector<int32_t> order(static_cast<size_t>(V));
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + 2, order.end(), [&](int32_t a, int32_t b) {
      return row[static_cast<size_t>(a)] > row[static_cast<size_t>(b)];
    });
    best[static_cast<size_t>(r)] = order[0];
    second[static_cast<size_t>(r)] = order[1];
    host.insert(host.end(), row.begin(), row.end());
  }
  auto dev = gpu().upload(host_view(host, Shape{R, V}), DType::kF32);
  const std::vector<int> sizes = {3, 6, 2000, 5};
  std::vector<backend::DeviceTensor> outs;
  std::vector<std::vector<int32_t>> want;
  for (size_t call = 0; call < sizes.size(); ++call) {
    backend::SamplingBatch batch;
    std::vector<int32_t> w;
    for (int i = 0; i < sizes[call]; ++i) {
      backend::SamplingRow row;
      row.logit_row = static_cast<int32_t>((i + 2 * call) % R);
      batch.rows.push_back(row);
      w.push_back(best[static_cast<size_t>(row.logit_row)]);
    }
    if (call == 1) {  // mask row 0's argmax: its second-best wins (and the logits are restored after)
      backend::LogitAdjustment mask;
      mask.row = 0;
      mask.token = best[static_cast<size_t>(batch.rows[0].logit_row)];
      mask.masked = true;
      batch.adjustments.push_back(mask);
      w[0] = second[static_cast<size_t>(batch.rows[0].logit_row)];
    }
    outs.push_back(gpu().allocate(DType::kI32, Shape{sizes[call]}));
    const Status st = gpu().sample_rows(dev.view, batch, outs.back().view);
    ASSERT_TRUE(st.ok()) << st.to_string();
    want.push_back(std::move(w));
  }
  for (size_t call = 0; call < sizes.size(); ++call) {
    std::vector<int32_t> got(static_cast<size_t>(sizes[call]));
    gpu().to_host_raw(outs[call].view, got.data());
    EXPECT_EQ(got, want[call]) << "call " << call;
  }
  std::vector<float> after(host.size());
  gpu().to_host_raw(dev.view, after.data());
  EXPECT_EQ(std::memcmp(after.data(), host.data(), host.size() * sizeof(float)), 0) << "logits not restored";
}

// Every path, repeated, and the same rows placed differently (other logits rows, other batch positions,
// other neighbours): the same tokens. Different random bits give different tokens.
TEST(SampleRows, DeterministicAndIndependentOfBatchPosition) {
  const int V = 128256;
  const std::vector<Filter> filters = {filter(1.0f),          filter(1.0f, 50, 0.9f), filter(1.0f, 0, 0.9f),
                                       filter(0.8f, 0, 1.0f, 0.05f), filter(1.0f, 700),      filter(1.0f, 0, 1.0f, 1e-4f),
                                       filter(1.2f, 20)};
  std::vector<std::vector<float>> logits = {normal_logits(V, 51, 2.0f), normal_logits(V, 52, 3.0f)};
  backend::SamplingBatch a;
  for (size_t i = 0; i < filters.size(); ++i)
    for (int l = 0; l < 2; ++l) {
      backend::SamplingRow r = row_for(filters[i], V);
      r.logit_row = l;
      r.random_bits = draw_bits(5, static_cast<int64_t>(i));
      a.rows.push_back(r);
    }
  std::vector<float> host_a = logits[0];
  host_a.insert(host_a.end(), logits[1].begin(), logits[1].end());
  const auto ids_a = sample(host_a, V, a);
  EXPECT_EQ(sample(host_a, V, a), ids_a) << "repeat";
  // Batch b: logits rows [decoy, 1, decoy, 0], rows reversed with greedy neighbours in between.
  std::vector<float> host_b = normal_logits(V, 60, 1.0f);
  host_b.insert(host_b.end(), logits[1].begin(), logits[1].end());
  const auto decoy = normal_logits(V, 61, 1.0f);
  host_b.insert(host_b.end(), decoy.begin(), decoy.end());
  host_b.insert(host_b.end(), logits[0].begin(), logits[0].end());
  backend::SamplingBatch b;
  std::vector<size_t> order;
  for (size_t k = a.rows.size(); k-- > 0;) {
    backend::SamplingRow r = a.rows[k];
    r.logit_row = r.logit_row == 0 ? 3 : 1;
    b.rows.push_back(r);
    order.push_back(k);
    backend::SamplingRow n = row_for(filter(1.0f, 0, 0.5f), V);
    n.logit_row = 2;
    n.random_bits = k;
    b.rows.push_back(n);
  }
  const auto ids_b = sample(host_b, V, b);
  for (size_t j = 0; j < order.size(); ++j) EXPECT_EQ(ids_b[2 * j], ids_a[order[j]]) << "row " << order[j];
  // Other random bits: different draws (flat top-p row: a nucleus of tens of thousands of tokens).
  backend::SamplingBatch c;
  for (int d = 0; d < 64; ++d) {
    backend::SamplingRow r = row_for(filter(1.0f, 0, 0.9f), V);
    r.random_bits = draw_bits(6, d);
    c.rows.push_back(r);
  }
  auto ids_c = sample(host_a, V, c);
  std::sort(ids_c.begin(), ids_c.end());
  EXPECT_GT(std::unique(ids_c.begin(), ids_c.end()) - ids_c.begin(), 50);
}

TEST(SampleRows, RejectsBadBatches) {
  auto logits = gpu().allocate(DType::kF32, Shape{2, 100});
  auto out = gpu().allocate(DType::kI32, Shape{4});
  backend::SamplingBatch b;
  b.rows.resize(1);
  b.rows[0].logit_row = 2;
  EXPECT_FALSE(gpu().sample_rows(logits.view, b, out.view).ok());
  b.rows[0] = row_for(filter(1.0f, 100), 100);
  b.rows[0].top_k = 100;  // must be < vocab
  EXPECT_FALSE(gpu().sample_rows(logits.view, b, out.view).ok());
  b.rows[0] = row_for(filter(1.0f), 100);
  b.rows.push_back(b.rows[0]);  // two rows on logits row 0 with adjustments: refused
  backend::LogitAdjustment adj;
  adj.row = 0;
  adj.token = 3;
  adj.masked = true;
  b.adjustments = {adj};
  adj.row = 1;
  b.adjustments.push_back(adj);
  EXPECT_FALSE(gpu().sample_rows(logits.view, b, out.view).ok());
  b.rows[1].logit_row = 1;
  EXPECT_TRUE(gpu().sample_rows(logits.view, b, out.view).ok());
  gpu().synchronize();
}

// ---- The Engine on CUDA ----

std::string golden_model() { return "tests/golden/llama_gqa"; }

struct Generated {
  std::vector<int32_t> tokens;
  std::vector<engine::TokenLogprob> logprobs;
};

// Submits `requests` together and waits for all of them.
std::vector<Generated> generate(engine::Engine& eng, const std::vector<engine::GenerationRequest>& requests) {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Generated> out(requests.size());
  size_t done = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    engine::GenerationRequest req = requests[i];
    req.request_id = std::to_string(i);
    EXPECT_TRUE(eng.submit(req, [&, i](engine::RequestOutput o) {
                     std::lock_guard<std::mutex> l(mu);
                     out[i].tokens.insert(out[i].tokens.end(), o.new_token_ids.begin(), o.new_token_ids.end());
                     out[i].logprobs.insert(out[i].logprobs.end(), o.new_logprobs.begin(), o.new_logprobs.end());
                     EXPECT_NE(o.finish_reason, engine::FinishReason::kError) << o.error;
                     if (o.finished && ++done == requests.size()) cv.notify_all();
                   }).ok());
  }
  std::unique_lock<std::mutex> l(mu);
  cv.wait(l, [&] { return done == requests.size(); });
  return out;
}

engine::GenerationRequest request(std::vector<int32_t> prompt, float temperature, std::optional<int64_t> seed,
                                  int max_tokens = 24) {
  engine::GenerationRequest r;
  r.prompt_ids = std::move(prompt);
  r.sampling.temperature = temperature;
  r.sampling.seed = seed;
  r.sampling.ignore_eos = true;
  r.sampling.max_tokens = max_tokens;
  return r;
}

engine::EngineConfig cuda_engine_config() {
  engine::EngineConfig ec;
  ec.model_dir = golden_model();
  ec.threads = 4;
  ec.scheduler.max_num_batched_tokens = 64;
  ec.backend = engine::BackendKind::kCuda;
  ec.gpu_memory_utilization = 0.05;  // the test binary shares the GPU with its other backends
  return ec;
}

TEST(DeviceSamplingEngine, SeededRequestsUseTheDeviceAndRepeat) {
  auto eng = engine::Engine::create(cuda_engine_config());
  ASSERT_TRUE(eng.ok()) << eng.status().to_string();
  auto& cb = dynamic_cast<cuda::CudaBackend&>((*eng)->backend());
  std::vector<int32_t> prompt;
  for (int i = 0; i < 37; ++i) prompt.push_back((i * 13 + 5) % 500 + 1);

  std::vector<engine::GenerationRequest> kinds;
  kinds.push_back(request(prompt, 0.8f, 7));
  kinds.push_back(request(prompt, 1.0f, 8));
  kinds.back().sampling.top_k = 40;
  kinds.back().sampling.top_p = 0.9f;
  kinds.push_back(request(prompt, 0.7f, 9));
  kinds.back().sampling.min_p = 0.05f;
  kinds.back().sampling.repetition_penalty = 1.2f;
  kinds.back().sampling.presence_penalty = 0.3f;
  kinds.back().sampling.logit_bias = {{17, 2.0f}, {18, -100.0f}};
  for (size_t k = 0; k < kinds.size(); ++k) {
    // One request at a time: every step has the same layout on both runs, so the logits are identical.
    const int64_t before = cb.sampled_rows();
    const auto first = generate(**eng, {kinds[k]});
    EXPECT_EQ(cb.sampled_rows() - before, 24) << "kind " << k << ": every token drawn by sample_rows";
    const auto again = generate(**eng, {kinds[k]});
    ASSERT_EQ(first[0].tokens.size(), 24u);
    EXPECT_EQ(again[0].tokens, first[0].tokens) << "kind " << k << ": a seeded request must repeat";
    engine::GenerationRequest other = kinds[k];
    other.sampling.seed = 1000 + static_cast<int64_t>(k);
    EXPECT_NE(generate(**eng, {other})[0].tokens, first[0].tokens) << "kind " << k << ": the seed must matter";
    if (k == 2) {
      for (int32_t t : first[0].tokens) EXPECT_NE(t, 18) << "a -100 logit_bias token was drawn";
    }
  }
  // Mixed step: a logprobs request stays on the host Sampler, a seeded one on the device.
  const int64_t before = cb.sampled_rows();
  engine::GenerationRequest lp = request(prompt, 1.0f, 3, 10);
  lp.sampling.logprobs = 2;
  const auto mixed = generate(**eng, {lp, request(prompt, 0.9f, 4, 12)});
  EXPECT_EQ(cb.sampled_rows() - before, 12);
  ASSERT_EQ(mixed[0].tokens.size(), 10u);
  ASSERT_EQ(mixed[0].logprobs.size(), 10u);
  for (const auto& l : mixed[0].logprobs) {
    EXPECT_LE(l.logprob, 0.0f);
    EXPECT_EQ(l.top.size(), 2u);
  }
  EXPECT_EQ(mixed[1].tokens.size(), 12u);
}

// Greedy with logit adjustments (penalties, bias, min_tokens masking) goes through sample_rows; it must pick
// exactly the host Sampler's tokens (device_sampling off) on the same engine configuration.
TEST(DeviceSamplingEngine, GreedyWithAdjustmentsEqualsHostSampler) {
  std::vector<int32_t> prompt;
  for (int i = 0; i < 29; ++i) prompt.push_back((i * 7 + 3) % 400 + 1);
  engine::GenerationRequest r = request(prompt, 0.0f, std::nullopt);
  r.sampling.repetition_penalty = 1.5f;
  r.sampling.frequency_penalty = 0.2f;
  r.sampling.logit_bias = {{42, 1.5f}};
  r.sampling.min_tokens = 5;
  r.sampling.ignore_eos = false;
  r.sampling.stop_token_ids = {43};
  std::vector<Generated> got[2];
  for (int device = 0; device < 2; ++device) {
    engine::EngineConfig ec = cuda_engine_config();
    ec.device_sampling = device == 1;
    auto eng = engine::Engine::create(ec);
    ASSERT_TRUE(eng.ok()) << eng.status().to_string();
    auto& cb = dynamic_cast<cuda::CudaBackend&>((*eng)->backend());
    got[device] = generate(**eng, {r});
    if (device == 1)
      EXPECT_EQ(cb.sampled_rows(), static_cast<int64_t>(got[1][0].tokens.size()));
    else
      EXPECT_EQ(cb.sampled_rows(), 0);
  }
  EXPECT_FALSE(got[0][0].tokens.empty());
  EXPECT_EQ(got[1][0].tokens, got[0][0].tokens);
}

}  // namespace
}  // namespace xinfer::gpu_test
