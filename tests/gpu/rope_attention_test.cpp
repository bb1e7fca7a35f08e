// Backend::rope_paged_attention on CudaBackend: on decode-only steps one decode-attention kernel rotates q
// and the newest k itself and writes the newest k, v to the cache (paged_decode_attention.h). Checked against
//  - the GPU composition rope_kv_write -> paged_attention, bit for bit: attention out and the WHOLE K and V
//    caches (so a write to a wrong row, a missing write or a different rounding all show), and a second
//    launch on the same inputs (split-KV merge counters reset, stale newest rows in the cache ignored);
//  - the CPU backend's composition (f32): out within the attention tests' tolerance, the written K rows
//    within bf16 rounding, the written V rows exactly.
// Decode-only steps of batch 1, 3, 5, 7, 33, 64 and 128 (the last two on 4-warp CTAs); kv lengths 1, 2, 17, 54, 97, 256, 2048, 2049 (a last
// partition holding only the newest row) and 2100 (one partition, split-KV with the merge, partitions past a
// short sequence's end); GQA groups 1, 4, 7, 8 and 16 (two head tiles: one of them writes); head_dim 64 and
// 128; block sizes 16 and 32; graph-bucket padding rows (slot -1). Also: a mixed prefill + decode step and
// the fusion turned off run the composition (asserted through fused_rope_attentions()) and still equal it; a
// CUDA graph of the fused op replayed on new steps of its bucket equals the composition at every step.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "attention_test_util.h"
#include "gpu_test_util.h"

namespace xinfer::gpu_test {
namespace {

constexpr double kTol = 1e-2;  // relative L2 of bf16 results vs the f32 CPU backend (attention_test.cpp's)

// `batch` decodes: the lengths of `fixed` first, then scattered in [1, max_len].
std::vector<Seq> decode_batch(int batch, const std::vector<int>& fixed, int max_len) {
  std::vector<int> lens;
  for (int i = 0; i < batch; ++i)
    lens.push_back(i < static_cast<int>(fixed.size())
                       ? fixed[static_cast<size_t>(i)]
                       : 1 + static_cast<int>((static_cast<uint32_t>(i) * 2654435761u >> 7) % max_len));
  return decodes(lens);
}

struct Case {
  std::string name;
  int hq, hkv, d, block_size;
  std::vector<Seq> seqs;
  int padding = 0;  // graph-bucket padding rows after the sequences (as ModelRunner::padded_decode_plan)
  int width = 0;    // > 0: block tables padded to this width, attention sized for width * block_size tokens
};
void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name;
}

// Host values of one problem: qkv, both caches (random everywhere, the null block and the rows about to be
// written included, so a missing or misplaced write shows) and a RoPE table of random angles.
struct Problem {
  int hq, hkv, d, T;
  Shape qkv_shape, cache_shape, cs_shape;
  std::vector<float> qkv, k, v, cos_sin;
  backend::DeviceTensor cs_gpu, cs_cpu;
  Problem(int hq_, int hkv_, int d_, int block_size, int total_blocks, const backend::StepPlan& plan,
          std::mt19937& rng)
      : hq(hq_), hkv(hkv_), d(d_), T(plan.num_tokens()) {
    const int width = (hq + 2 * hkv) * d;
    qkv_shape = Shape{T, width};
    cache_shape = Shape{total_blocks, hkv, block_size, d};
    qkv = random_bf16(static_cast<size_t>(T) * width, rng);
    k = random_bf16(static_cast<size_t>(cache_shape.numel()), rng);
    v = random_bf16(static_cast<size_t>(cache_shape.numel()), rng);
    const int max_pos = *std::max_element(plan.positions.begin(), plan.positions.end()) + 3;
    cs_shape = Shape{max_pos, d};
    cos_sin.resize(static_cast<size_t>(max_pos) * d);
    std::uniform_real_distribution<float> angle(-3.2f, 3.2f);
    for (int p = 0; p < max_pos; ++p)
      for (int i = 0; i < d / 2; ++i) {
        const float a = angle(rng);
        cos_sin[static_cast<size_t>(p) * d + i] = std::cos(a);
        cos_sin[static_cast<size_t>(p) * d + d / 2 + i] = std::sin(a);
      }
    cs_gpu = gpu().upload(host_view(cos_sin, cs_shape), DType::kF32);
    cs_cpu = cpu().upload(host_view(cos_sin, cs_shape), DType::kF32);
  }
  float scale() const { return 1.0f / std::sqrt(static_cast<float>(d)); }
};

// One copy of a problem's inputs on one backend, and its output (NaN-poisoned on the GPU).
struct OpRun {
  backend::DeviceTensor qkv, k, v, out;
  backend::LayerKvCache cache() const { return {k.view, v.view}; }
};
OpRun make_run(backend::Backend& b, const Problem& pr) {
  const DType dt = &b == static_cast<backend::Backend*>(&gpu()) ? DType::kBF16 : DType::kF32;
  OpRun r{b.upload(host_view(pr.qkv, pr.qkv_shape), dt), b.upload(host_view(pr.k, pr.cache_shape), dt),
          b.upload(host_view(pr.v, pr.cache_shape), dt), b.allocate(dt, Shape{pr.T, pr.hq * pr.d})};
  if (dt == DType::kBF16) poison(r.out.view);
  return r;
}

// The composition, op by op (what Backend::rope_paged_attention's default does).
void run_composition(backend::Backend& b, const backend::StepMeta& meta, const Problem& pr, const OpRun& r,
                     const TensorView& cos_sin) {
  b.rope_kv_write(meta, r.qkv.view, pr.hq, pr.hkv, pr.d, cos_sin, r.cache());
  b.paged_attention(meta, r.qkv.view, pr.hq, pr.hkv, pr.d, pr.scale(), r.cache(), r.out.view);
}

void expect_same_results(const OpRun& got, const OpRun& want, const std::string& what) {
  expect_same_bits(got.out.view, want.out.view, what + ": attention out");
  expect_same_bits(got.k.view, want.k.view, what + ": k cache");
  expect_same_bits(got.v.view, want.v.view, what + ": v cache");
}

// The GPU result against the CPU composition: out, and the cache rows the step writes (every KV head of
// every token with a slot); returns out's error.
Compare expect_close_to_cpu(const OpRun& g, const OpRun& c, const backend::StepPlan& plan, const Problem& pr,
                            const std::string& what) {
  const Compare out = expect_close(g.out.view, c.out.view, kTol, what + ": out vs cpu");
  const auto gk = download(gpu(), g.k.view), gv = download(gpu(), g.v.view);
  const auto ck = download(cpu(), c.k.view), cv = download(cpu(), c.v.view);
  const int64_t bs = pr.cache_shape[2];
  std::vector<float> rows_gk, rows_ck, rows_gv, rows_cv;
  for (int32_t slot : plan.slot_mapping) {
    if (slot < 0) continue;
    for (int h = 0; h < pr.hkv; ++h) {
      const size_t base =
          static_cast<size_t>(((slot / bs) * pr.hkv + h) * bs + slot % bs) * static_cast<size_t>(pr.d);
      rows_gk.insert(rows_gk.end(), gk.begin() + static_cast<std::ptrdiff_t>(base),
                     gk.begin() + static_cast<std::ptrdiff_t>(base + static_cast<size_t>(pr.d)));
      rows_ck.insert(rows_ck.end(), ck.begin() + static_cast<std::ptrdiff_t>(base),
                     ck.begin() + static_cast<std::ptrdiff_t>(base + static_cast<size_t>(pr.d)));
      rows_gv.insert(rows_gv.end(), gv.begin() + static_cast<std::ptrdiff_t>(base),
                     gv.begin() + static_cast<std::ptrdiff_t>(base + static_cast<size_t>(pr.d)));
      rows_cv.insert(rows_cv.end(), cv.begin() + static_cast<std::ptrdiff_t>(base),
                     cv.begin() + static_cast<std::ptrdiff_t>(base + static_cast<size_t>(pr.d)));
    }
  }
  const Compare k = compare(rows_gk, rows_ck), v = compare(rows_gv, rows_cv);
  EXPECT_EQ(k.nans, 0) << what;
  EXPECT_LT(k.rel_l2, kTol) << what << ": written k rows vs cpu (max abs " << k.max_abs << ")";
  EXPECT_EQ(v.nans, 0) << what;
  EXPECT_EQ(v.max_abs, 0.0) << what << ": written v rows are copies";
  return out;
}

// Sets the fusion policy for a scope, restoring the backend's previous one.
struct FusionScope {
  explicit FusionScope(bool on) : saved(gpu().rope_attention_fusion()) {
    gpu().set_rope_attention_fusion(on);
  }
  ~FusionScope() { gpu().set_rope_attention_fusion(saved); }
  FusionScope(const FusionScope&) = delete;
  FusionScope& operator=(const FusionScope&) = delete;
  bool saved;
};

// Runs `c` through rope_paged_attention with the fusion on or off and checks it against the GPU composition
// (bit for bit) and the CPU composition; `expect_fused`: whether the fused kernel must have run.
void check_case(const Case& c, bool fusion, bool expect_fused) {
  std::mt19937 rng(static_cast<unsigned>(std::hash<std::string>()(c.name)));
  const int total_blocks = 1 + blocks_needed(c.seqs, c.block_size);
  const backend::StepPlan plan =
      make_plan(c.seqs, c.block_size, shuffled_blocks(total_blocks, rng), c.width, c.padding);
  const Problem pr(c.hq, c.hkv, c.d, c.block_size, total_blocks, plan, rng);
  const backend::StepMeta meta = gpu().upload_step(plan);
  const FusionScope scope(fusion);

  const OpRun ref = make_run(gpu(), pr);
  run_composition(gpu(), meta, pr, ref, pr.cs_gpu.view);

  const OpRun fused = make_run(gpu(), pr);
  const int64_t before = gpu().fused_rope_attentions();
  gpu().rope_paged_attention(meta, fused.qkv.view, pr.hq, pr.hkv, pr.d, pr.cs_gpu.view, pr.scale(),
                             fused.cache(), fused.out.view);
  EXPECT_EQ(gpu().fused_rope_attentions() - before, expect_fused ? 1 : 0)
      << c.name << (expect_fused ? ": the fused kernel did not run" : ": the fused kernel ran");
  expect_same_results(fused, ref, c.name);

  // Again on the same buffers with qkv restored (as a graph replay runs it): the merge counters must have
  // reset, and the newest rows now in the cache must make no difference.
  const backend::DeviceTensor qkv0 = gpu().upload(host_view(pr.qkv, pr.qkv_shape), DType::kBF16);
  XI_CUDA_CHECK(cudaMemcpyAsync(fused.qkv.view.data, qkv0.view.data, qkv0.view.bytes(),
                                cudaMemcpyDeviceToDevice, gpu().stream()));
  poison(fused.out.view);
  gpu().rope_paged_attention(meta, fused.qkv.view, pr.hq, pr.hkv, pr.d, pr.cs_gpu.view, pr.scale(),
                             fused.cache(), fused.out.view);
  expect_same_results(fused, ref, c.name + " (second launch)");

  const OpRun cpu_run = make_run(cpu(), pr);
  cpu().rope_paged_attention(cpu().upload_step(plan), cpu_run.qkv.view, pr.hq, pr.hkv, pr.d, pr.cs_cpu.view,
                             pr.scale(), cpu_run.cache(), cpu_run.out.view);
  const Compare cmp = expect_close_to_cpu(fused, cpu_run, plan, pr, c.name);
  std::printf("[ attention ] rope+attn %-34s %s T=%-4d == composition: %s, vs cpu rel_l2=%.2e\n",
              c.name.c_str(), expect_fused ? "fused" : "composed", pr.T,
              ::testing::Test::HasFailure() ? "NO" : "yes", cmp.rel_l2);
}

class RopeAttentionTest : public ::testing::TestWithParam<Case> {};

TEST_P(RopeAttentionTest, FusedEqualsComposition) {
  check_case(GetParam(), true, true);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, RopeAttentionTest,
    ::testing::Values(
        // Llama-3.1-8B heads at batch 1: one partition (256), 16 partitions + merge (2048), a last partition
        // holding only the newest row (2049), a one-token context
        Case{"b1_gqa4_d128_bs16_256", 32, 8, 128, 16, decodes({256})},
        Case{"b1_gqa4_d128_bs16_2048", 32, 8, 128, 16, decodes({2048})},
        Case{"b1_gqa4_d128_bs16_2049", 32, 8, 128, 16, decodes({2049})},
        Case{"b1_gqa4_d64_bs32_1", 32, 8, 64, 32, decodes({1})},
        Case{"b3_gqa4_d64_bs32", 32, 8, 64, 32, decodes({2, 17, 2100})},
        Case{"b3_mha_d128_bs32", 8, 8, 128, 32, decodes({54, 97, 2048})},
        Case{"b7_gqa7_d128_bs16", 28, 4, 128, 16, decodes({1, 2, 17, 54, 97, 256, 2100})},
        Case{"b7_gqa8_d64_bs16", 64, 8, 64, 16, decodes({2048, 1, 2, 17, 54, 97, 256})},
        Case{"b33_mha_d64_bs32", 4, 4, 64, 32, decode_batch(33, {1, 2, 17, 54, 97, 256, 2049}, 1200)},
        Case{"b33_gqa4_d128_bs16", 32, 8, 128, 16, decode_batch(33, {1, 2, 17, 54, 97, 256}, 600)},
        // more CTAs than a wave of 8-warp CTAs: both sides run 4-warp CTAs (attention_plan.h decode_warps)
        Case{"b64_gqa4_d128_bs16", 32, 8, 128, 16, decode_batch(64, {1, 2, 17, 54, 97, 256}, 400)},
        Case{"b128_gqa8_d64_bs16", 64, 8, 64, 16, decode_batch(128, {1, 17, 97, 256, 511}, 300)},
        // two head tiles per KV head: only tile 0 writes, tile 1 attends to its own copy of the new row
        Case{"b3_gqa16_d128_bs16", 32, 2, 128, 16, decodes({1, 300, 2048})},
        // a graph bucket: attention sized for 2048 tokens, 3 padding rows (slot -1: no write; they attend to
        // the null block's row as the composition does)
        Case{"b7_gqa4_d128_bs16_padded", 32, 8, 128, 16, decodes({1, 54, 97, 700}), 3, 2048 / 16}),
    [](const auto& param_info) { return param_info.param.name; });

// A step with prefill chunks beside the decodes is not fused (the prefill kernel runs too): the composition.
TEST(RopeAttention, MixedStepRunsTheComposition) {
  check_case(Case{"mixed_gqa4_d128_bs16", 32, 8, 128, 16, {{53, 1}, {0, 97}, {2047, 1}, {100, 65}, {0, 1}}},
             true, false);
}

// CudaBackendOptions::rope_attention_fusion / set_rope_attention_fusion(false): the composition.
TEST(RopeAttention, FusionOffRunsTheComposition) {
  check_case(Case{"off_b7_gqa7_d128_bs16", 28, 4, 128, 16, decodes({1, 2, 17, 54, 97, 256, 2100})}, false,
             false);
}

// More decodes than kMaxFusedRopeDecodes (where the fused kernel measured slower): the composition.
TEST(RopeAttention, LargeDecodeBatchRunsTheComposition) {
  check_case(Case{"large_b" + std::to_string(cuda::kMaxFusedRopeDecodes + 1) + "_gqa4_d128_bs16", 32, 8, 128, 16,
                  decode_batch(cuda::kMaxFusedRopeDecodes + 1, {1, 17, 97, 256}, 300)},
             true, false);
}

// Other head dims run the generic kernel: the composition.
TEST(RopeAttention, GenericHeadDimRunsTheComposition) {
  check_case(Case{"generic_d32_gqa2", 4, 2, 32, 16, decodes({1, 97, 300})}, true, false);
}

// The fused op recorded in a CUDA graph (a decode bucket: batch 5, block tables 128 wide) and replayed on new
// steps of the bucket (other lengths and slots): every replay equals the composition run eagerly on a copy
// of the inputs, bit for bit (out and both caches; the caches accumulate every step's rows on both sides).
TEST(RopeAttention, GraphReplayEqualsComposition) {
  const int hq = 32, hkv = 8, d = 128, bs = 16, width = 2048 / bs, batch = 5;
  std::mt19937 rng(4321);
  const int total_blocks = 1 + batch * width;
  const std::vector<std::vector<int>> steps = {{2048, 1, 700, 97, 1500},
                                               {5, 2000, 1, 1, 129},
                                               {1, 1, 1, 1, 1},
                                               {2048, 2048, 2048, 2048, 2048},
                                               {300, 54, 2047, 1, 9}};
  std::vector<backend::StepPlan> plans;
  for (const auto& lens : steps)
    plans.push_back(make_plan(decodes(lens), bs, shuffled_blocks(total_blocks, rng), width));
  const Problem pr(hq, hkv, d, bs, total_blocks, plans[0], rng);  // cos/sin for positions up to 2049
  const OpRun graph = make_run(gpu(), pr), ref = make_run(gpu(), pr);
  const backend::DeviceTensor qkv0 = gpu().upload(host_view(pr.qkv, pr.qkv_shape), DType::kBF16);
  auto restore_qkv = [&](const OpRun& r) {
    XI_CUDA_CHECK(cudaMemcpyAsync(r.qkv.view.data, qkv0.view.data, qkv0.view.bytes(),
                                  cudaMemcpyDeviceToDevice, gpu().stream()));
  };
  const FusionScope scope(true);
  const uint64_t key = 0x60be;
  for (size_t i = 0; i < plans.size(); ++i) {
    SCOPED_TRACE("step " + std::to_string(i));
    const backend::StepMeta meta = gpu().upload_step(plans[i]);
    auto fused_op = [&] {
      gpu().rope_paged_attention(meta, graph.qkv.view, hq, hkv, d, pr.cs_gpu.view, pr.scale(), graph.cache(),
                                 graph.out.view);
    };
    if (i == 0) {
      fused_op();  // sizes the decode workspace outside the recording (writes the rows the replay writes
                   // again)
      const int64_t before = gpu().fused_rope_attentions();
      gpu().begin_capture();
      fused_op();
      ASSERT_TRUE(gpu().end_capture(key));
      EXPECT_EQ(gpu().fused_rope_attentions(), before + 1) << "the recording holds the composition";
    }
    restore_qkv(graph);
    poison(graph.out.view);
    ASSERT_TRUE(gpu().replay(key)) << "the step no longer matches the recording";
    restore_qkv(ref);
    poison(ref.out.view);
    run_composition(gpu(), meta, pr, ref, pr.cs_gpu.view);
    expect_same_results(graph, ref, "replay step " + std::to_string(i));
    std::printf("[ attention ] rope+attn graph replay step %zu == composition: %s\n", i,
                ::testing::Test::HasFailure() ? "NO" : "yes");
  }
  gpu().clear_graphs();  // the recording points at this test's buffers
}

}  // namespace
}  // namespace xinfer::gpu_test
