// Paged attention of CudaBackend (decode flash-decoding kernel, tensor-core prefill kernel, generic kernel)
// against CpuBackend on random caches, random block tables and mixed steps (decodes and prefill chunks
// with cached prefixes together), for GQA ratios 1, 4, 7, 8, 16, MQA, block sizes 1, 8, 16 and 32, kv
// lengths 1, 54, 97, 2048 and 5000, batches 1, 3, 17, 64, 200 and 300. Every case runs twice on the GPU (the
// second launch must be bit-identical: the split-KV merge counters reset themselves), steps of many
// one-partition CTAs again at 8, 4 and 2 warps per CTA, and a captured decode step replayed with new lengths
// (a graph bucket) must still match the CPU.
#include <algorithm>
#include <cstring>
#include <numeric>

#include "attention_test_util.h"
#include "gpu_test_util.h"
#include "xinfer/backend/cuda/kernels/attention/attention_plan.h"
#include "xinfer/backend/cuda/kernels/attention/paged_prefill_attention.h"

namespace xinfer::gpu_test {
namespace {

struct AttnCase {
  std::string name;
  int hq, hkv, d, block_size;
  std::vector<Seq> seqs;
  int width = 0;           // > 0: block tables padded to this width, attention sized for width * block_size
  float q_scale = 1.0f;    // query std: larger makes the softmax peakier
};
void PrintTo(const AttnCase& c, std::ostream* os) { *os << c.name; }

class PagedAttentionTest : public ::testing::TestWithParam<AttnCase> {};

TEST_P(PagedAttentionTest, MatchesCpu) {
  const AttnCase& ac = GetParam();
  std::mt19937 rng(static_cast<unsigned>(std::hash<std::string>()(ac.name)));
  const int total_blocks = 1 + blocks_needed(ac.seqs, ac.block_size);
  const backend::StepPlan plan = make_plan(ac.seqs, ac.block_size, shuffled_blocks(total_blocks, rng), ac.width);
  const int T = plan.num_tokens();
  const int width = (ac.hq + 2 * ac.hkv) * ac.d;
  const Shape cache_shape{total_blocks, ac.hkv, ac.block_size, ac.d};
  const size_t cache_n = static_cast<size_t>(cache_shape.numel());
  auto qkv = upload_both(random_bf16(static_cast<size_t>(T) * width, rng, ac.q_scale), Shape{T, width});
  auto k = upload_both(random_bf16(cache_n, rng), cache_shape);
  auto v = upload_both(random_bf16(cache_n, rng), cache_shape);
  auto out = allocate_both(Shape{T, ac.hq * ac.d});
  poison(out.g.view);
  const float scale = 1.0f / std::sqrt(static_cast<float>(ac.d));
  cpu().paged_attention(cpu().upload_step(plan), qkv.c.view, ac.hq, ac.hkv, ac.d, scale, {k.c.view, v.c.view}, out.c.view);
  const backend::StepMeta meta = gpu().upload_step(plan);
  gpu().paged_attention(meta, qkv.g.view, ac.hq, ac.hkv, ac.d, scale, {k.g.view, v.g.view}, out.g.view);
  const Compare c = expect_close(out.g.view, out.c.view, 1e-2, ac.name);
  std::printf("[ attention ] %-28s T=%-5d rel_l2=%.2e max_abs=%.2e\n", ac.name.c_str(), T, c.rel_l2, c.max_abs);

  // The same step again (as a graph replay would run it): split-KV merge state must have reset itself.
  const std::vector<float> first = download(gpu(), out.g.view);
  poison(out.g.view);
  gpu().paged_attention(meta, qkv.g.view, ac.hq, ac.hkv, ac.d, scale, {k.g.view, v.g.view}, out.g.view);
  const std::vector<float> second = download(gpu(), out.g.view);
  size_t differ = 0;
  for (size_t i = 0; i < first.size(); ++i) differ += std::memcmp(&first[i], &second[i], sizeof(float)) != 0;
  EXPECT_EQ(differ, 0u) << ac.name << ": second launch differs from the first";

  // Steps with more one-partition CTAs than a wave of 8-warp CTAs also run with 4 and 2 warps per CTA.
  at_each_decode_warps(plan.num_seqs(), ac.hkv, ac.hq / ac.hkv, [&](int w) {
    poison(out.g.view);
    gpu().paged_attention(meta, qkv.g.view, ac.hq, ac.hkv, ac.d, scale, {k.g.view, v.g.view}, out.g.view);
    const Compare cw = expect_close(out.g.view, out.c.view, 1e-2, ac.name + " (" + std::to_string(w) + " warps)");
    std::printf("[ attention ] %-28s %d warps rel_l2=%.2e max_abs=%.2e\n", ac.name.c_str(), w, cw.rel_l2, cw.max_abs);
  });
}

// The host plan (decode_partition_size, decode_warps, build_attention_plan, prefer_wgmma_prefill) is tested on
// the CPU: tests/unit/attention_plan/attention_plan_test.cpp.

// `batch` decodes: kv lengths 1, 54, 97, max_len, then scattered in [1, max_len].
std::vector<Seq> decode_batch(int batch, int max_len) {
  std::vector<int> lens;
  const int fixed[] = {1, 54, 97, max_len};
  for (int i = 0; i < batch; ++i)
    lens.push_back(i < 4 ? fixed[i] : 1 + static_cast<int>((static_cast<uint32_t>(i) * 2654435761u >> 7) % max_len));
  return decodes(lens);
}

// A decode step recorded in a CUDA graph and replayed with other lengths in the same bucket (batch,
// block-table width): the grid is sized for the bucket, CTAs past a sequence's end exit, and the split-KV
// merge counters reset themselves between replays. Each replay must match the CPU.
TEST(DecodeAttentionGraph, ReplayWithNewLengthsMatchesCpu) {
  const int hq = 32, hkv = 8, d = 128, bs = 16, width = 2048 / bs, batch = 5;
  std::mt19937 rng(1234);
  const int total_blocks = 1 + batch * width;
  const Shape cache_shape{total_blocks, hkv, bs, d};
  const size_t cache_n = static_cast<size_t>(cache_shape.numel());
  const int row = (hq + 2 * hkv) * d;
  auto qkv = upload_both(random_bf16(static_cast<size_t>(batch) * row, rng, 2.0f), Shape{batch, row});
  auto k = upload_both(random_bf16(cache_n, rng), cache_shape);
  auto v = upload_both(random_bf16(cache_n, rng), cache_shape);
  auto out = allocate_both(Shape{batch, hq * d});
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const std::vector<std::vector<int>> steps = {
      {2048, 1, 700, 97, 1500}, {5, 2000, 1, 1, 129}, {1, 1, 1, 1, 1}, {2048, 2048, 2048, 2048, 2048}, {300, 54, 2047, 1, 9}};
  const uint64_t key = 0xdec0de;
  for (size_t i = 0; i < steps.size(); ++i) {
    SCOPED_TRACE("step " + std::to_string(i));
    const backend::StepPlan plan = make_plan(decodes(steps[i]), bs, shuffled_blocks(total_blocks, rng), width);
    const backend::StepMeta meta = gpu().upload_step(plan);
    auto run = [&] { gpu().paged_attention(meta, qkv.g.view, hq, hkv, d, scale, {k.g.view, v.g.view}, out.g.view); };
    if (i == 0) {
      run();  // sizes the decode workspace outside the recording
      gpu().begin_capture();
      run();
      ASSERT_TRUE(gpu().end_capture(key));
    }
    poison(out.g.view);
    ASSERT_TRUE(gpu().replay(key)) << "the step no longer matches the recording";
    cpu().paged_attention(cpu().upload_step(plan), qkv.c.view, hq, hkv, d, scale, {k.c.view, v.c.view}, out.c.view);
    const Compare c = expect_close(out.g.view, out.c.view, 1e-2, "replay step " + std::to_string(i));
    std::printf("[ attention ] graph replay step %zu rel_l2=%.2e max_abs=%.2e\n", i, c.rel_l2, c.max_abs);
  }
  gpu().clear_graphs();  // the recording points at this test's buffers
}

INSTANTIATE_TEST_SUITE_P(
    Cases, PagedAttentionTest,
    ::testing::Values(
        // decode kernel (split-KV past one partition)
        AttnCase{"decode_gqa1_d128_bs16", 8, 8, 128, 16, decodes({1, 54, 97, 2048, 2100})},
        AttnCase{"decode_gqa4_d128_bs16", 32, 8, 128, 16, decodes({1, 17, 54, 97, 300, 2048, 4097})},
        AttnCase{"decode_gqa8_d128_bs1", 64, 8, 128, 1, decodes({1, 54, 97, 2049})},
        AttnCase{"decode_mqa_d64_bs16", 8, 1, 64, 16, decodes({1, 54, 97, 2048, 33})},
        AttnCase{"decode_gqa7_d128_bs16", 28, 4, 128, 16, decodes({54, 1000, 3})},
        AttnCase{"decode_batch1_2048", 32, 8, 128, 16, decodes({2048})},
        AttnCase{"decode_mqa32_d128_bs16", 32, 1, 128, 16, decodes({97, 1500})},
        // flash-decoding shapes on the H200 (132 SMs): one partition, split-KV (up to 2 CTAs per SM), partitions
        // past a short sequence's end, tail tiles, 2 head tiles (group 16), block sizes 8 and 32, a graph bucket
        AttnCase{"decode_b1_gqa4_d128_5000", 32, 8, 128, 16, decodes({5000})},
        AttnCase{"decode_b1_gqa4_d64_1", 32, 8, 64, 16, decodes({1})},
        AttnCase{"decode_b1_gqa8_d64_bs32_peaky", 64, 8, 64, 32, decodes({97}), 0, 4.0f},
        AttnCase{"decode_b3_gqa8_d128_bs32_peaky", 64, 8, 128, 32, decodes({1, 5000, 97}), 0, 4.0f},
        AttnCase{"decode_b3_gqa1_d64_bs8", 4, 4, 64, 8, decodes({54, 2048, 5000})},
        AttnCase{"decode_b17_gqa8_d64_bs8", 16, 2, 64, 8, decode_batch(17, 2048)},
        AttnCase{"decode_b17_gqa4_d128_bs16", 32, 8, 128, 16, decode_batch(17, 1200)},
        AttnCase{"decode_b64_gqa8_d128_bs16", 32, 4, 128, 16, decode_batch(64, 700)},
        AttnCase{"decode_b64_gqa4_d64_bs16", 8, 2, 64, 16, decode_batch(64, 2048)},
        // many one-partition CTAs (more than a wave of 8-warp CTAs): also at 4 and 2 warps per CTA
        AttnCase{"decode_b300_gqa4_d128_bs16", 32, 8, 128, 16, decode_batch(300, 256)},
        AttnCase{"decode_b200_gqa8_d64_bs8", 16, 2, 64, 8, decode_batch(200, 700)},
        AttnCase{"decode_gqa16_d128_bs16", 16, 1, 128, 16, decodes({54, 2048, 1})},
        AttnCase{"decode_b5_gqa4_d128_bucket4096", 32, 8, 128, 16, decodes({1, 54, 97, 700, 2048}), 4096 / 16},
        // prefill kernel: fresh prompts, chunks with cached prefixes, mixed with decodes
        AttnCase{"prefill_gqa4_d128_bs16", 32, 8, 128, 16, {{0, 97}, {0, 54}, {0, 200}}},
        AttnCase{"prefill_prefix_gqa4_d64", 8, 2, 64, 16, {{97, 33}, {2048, 70}, {5, 130}}},
        AttnCase{"prefill_mqa_d64_bs1", 4, 1, 64, 1, {{10, 64}, {0, 129}}},
        AttnCase{"mixed_gqa4_d128_bs16", 32, 8, 128, 16, {{53, 1}, {0, 97}, {2047, 1}, {100, 65}, {0, 1}, {0, 2}}},
        AttnCase{"mixed_gqa1_d64_bs1", 4, 4, 64, 1, {{0, 1}, {96, 1}, {1, 54}}},
        AttnCase{"mixed_gqa8_d64_bs16_long_decode", 16, 2, 64, 16, {{4999, 1}, {0, 97}, {30, 1}, {200, 54}}},
        // generic kernel (head dims of the tiny test models and others)
        AttnCase{"generic_d16_mixed", 4, 2, 16, 16, {{0, 7}, {32, 1}, {5, 33}, {2100, 1}}},
        // the Engine test's first step: a 5-token prompt beside a 28-token one and a 31-token chunk
        AttnCase{"generic_d16_engine_step1", 4, 2, 16, 16, {{0, 5}, {0, 28}, {0, 31}}},
        AttnCase{"generic_d32_bs1", 4, 2, 32, 1, {{0, 33}, {53, 1}}},
        AttnCase{"generic_d8_mha", 8, 8, 8, 16, {{0, 1}, {96, 1}, {0, 97}}},
        AttnCase{"generic_d80_mqa", 5, 1, 80, 16, {{0, 54}, {200, 1}}},
        AttnCase{"generic_d256", 4, 2, 256, 16, {{0, 20}, {60, 1}}}),
    [](const auto& param_info) { return param_info.param.name; });

// ---- prefill kernels ----
// Prefill-only steps through the backend and through each prefill kernel launched directly (kWgmma, which
// the backend uses, kWgmmaSimple and the kMmaSync fallback), against the CPU: chunk lengths around the
// 128-row tile (2..65-row tiles, 1-row and 127-row tails), cached prefixes 0, 37, 1000, 2048, 3584 (chunks
// starting mid-block), several sequences per step, head_dim 64 and 128, GQA groups 1, 4, 8, block sizes 1
// and 16, and a peaky softmax (the online rescaling).

class PrefillKernelTest : public ::testing::TestWithParam<AttnCase> {};

TEST_P(PrefillKernelTest, BothKernelsMatchCpu) {
  const AttnCase& ac = GetParam();
  for (const Seq& s : ac.seqs)
    ASSERT_GE(s.q_len, 2) << "prefill-only steps: the prefill kernel writes every row";
  std::mt19937 rng(static_cast<unsigned>(std::hash<std::string>()(ac.name)));
  const int total_blocks = 1 + blocks_needed(ac.seqs, ac.block_size);
  const backend::StepPlan plan = make_plan(ac.seqs, ac.block_size, shuffled_blocks(total_blocks, rng), 0);
  const int T = plan.num_tokens();
  const int width = (ac.hq + 2 * ac.hkv) * ac.d;
  const Shape cache_shape{total_blocks, ac.hkv, ac.block_size, ac.d};
  const size_t cache_n = static_cast<size_t>(cache_shape.numel());
  auto qkv = upload_both(random_bf16(static_cast<size_t>(T) * width, rng, ac.q_scale), Shape{T, width});
  auto k = upload_both(random_bf16(cache_n, rng), cache_shape);
  auto v = upload_both(random_bf16(cache_n, rng), cache_shape);
  auto out = allocate_both(Shape{T, ac.hq * ac.d});
  const float scale = 1.0f / std::sqrt(static_cast<float>(ac.d));
  cpu().paged_attention(cpu().upload_step(plan), qkv.c.view, ac.hq, ac.hkv, ac.d, scale, {k.c.view, v.c.view},
                        out.c.view);
  const backend::StepMeta meta = gpu().upload_step(plan);

  poison(out.g.view);
  gpu().paged_attention(meta, qkv.g.view, ac.hq, ac.hkv, ac.d, scale, {k.g.view, v.g.view}, out.g.view);
  Compare c = expect_close(out.g.view, out.c.view, 1e-2, ac.name + " (backend)");
  std::printf("[ attention ] prefill %-30s backend  T=%-5d rel_l2=%.2e max_abs=%.2e\n", ac.name.c_str(), T,
              c.rel_l2, c.max_abs);

  const cuda::AttentionPlanHost host = cuda::build_attention_plan(plan);
  ASSERT_EQ(host.num_decode(), 0);
  const DeviceInts items(host.prefill_items);
  cuda::PagedAttentionParams p{};
  p.qkv = static_cast<const __nv_bfloat16*>(qkv.g.view.data);
  p.k_cache = static_cast<const __nv_bfloat16*>(k.g.view.data);
  p.v_cache = static_cast<const __nv_bfloat16*>(v.g.view.data);
  p.out = static_cast<__nv_bfloat16*>(out.g.view.data);
  p.query_start_loc = meta.query_start_loc;
  p.positions = meta.positions;
  p.block_tables = meta.block_tables;
  p.max_blocks_per_seq = meta.max_blocks_per_seq;
  p.num_tokens = T;
  p.num_heads = ac.hq;
  p.num_kv_heads = ac.hkv;
  p.head_dim = ac.d;
  p.block_size = ac.block_size;
  p.qkv_stride = width;
  p.scale = scale;
  cuda::AttentionPlanView view{};
  view.num_prefill_items = host.num_prefill_items();
  view.prefill_items = items.ptr;
  const std::pair<cuda::PrefillKernel, const char*> kernels[] = {
      {cuda::PrefillKernel::kWgmma, "wgmma"},
      {cuda::PrefillKernel::kWgmmaSimple, "wgmma-s"},
      {cuda::PrefillKernel::kWgmmaWs, "wgmma-ws"},
      {cuda::PrefillKernel::kMmaSync, "mma.sync"}};
  for (const auto& [kernel, label] : kernels) {
    if (kernel == cuda::PrefillKernel::kWgmmaWs && !cuda::prefill_ws_supports(ac.d)) continue;
    poison(out.g.view);
    cuda::launch_paged_prefill_attention(p, view, gpu().stream(), kernel);
    c = expect_close(out.g.view, out.c.view, 1e-2, ac.name + " (" + label + ")");
    std::printf("[ attention ] prefill %-30s %-8s T=%-5d rel_l2=%.2e max_abs=%.2e\n", ac.name.c_str(), label,
                T, c.rel_l2, c.max_abs);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, PrefillKernelTest,
    ::testing::Values(
        AttnCase{"tiles_gqa4_d128", 32, 8, 128, 16,
                 {{0, 2}, {0, 17}, {0, 63}, {0, 64}, {0, 65}, {0, 129}, {0, 255}}},
        AttnCase{"prefix37_gqa1_d128", 8, 8, 128, 16, {{37, 2}, {37, 100}, {37, 130}}},
        AttnCase{"prefix1000_gqa8_d64", 16, 2, 64, 16, {{1000, 300}, {1000, 17}, {1001, 2}}},
        AttnCase{"single_2100_gqa4_d128", 8, 2, 128, 16, {{0, 2100}}},
        AttnCase{"bs1_gqa4_d64", 8, 2, 64, 1, {{5, 70}, {0, 33}, {200, 129}}},
        AttnCase{"bs1_gqa4_d128", 8, 2, 128, 1, {{3, 131}, {0, 2}}},
        AttnCase{"mid_block_gqa8_d128", 16, 2, 128, 16, {{1005, 77}, {55, 250}, {16, 3}}},
        AttnCase{"many_seqs_gqa4_d128", 32, 8, 128, 16,
                 {{0, 3}, {5, 40}, {100, 128}, {0, 130}, {64, 64}, {1, 255}, {300, 2}, {17, 19}, {0, 128},
                  {129, 127}}},
        AttnCase{"mha_d64_prefix2048", 4, 4, 64, 16, {{2048, 200}, {0, 2}}},
        AttnCase{"chunk512_on_3584_gqa4_d128", 4, 1, 128, 16, {{3584, 512}}},
        AttnCase{"peaky_gqa4_d128", 8, 2, 128, 16, {{0, 300}, {40, 90}}, 0, 4.0f},
        AttnCase{"peaky_gqa8_d64", 16, 2, 64, 16, {{500, 260}}, 0, 4.0f}),
    [](const auto& param_info) { return param_info.param.name; });

}  // namespace
}  // namespace xinfer::gpu_test
