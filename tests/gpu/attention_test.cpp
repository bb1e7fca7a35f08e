// Paged attention of CudaBackend (decode split-KV kernel, tensor-core prefill kernel, generic kernel)
// against CpuBackend on random caches, random block tables and mixed steps (decodes and prefill chunks
// with cached prefixes together), for GQA ratios 1, 4, 7, 8, MQA, block sizes 1 and 16, kv lengths
// 1, 54, 97 and past 2048.
#include <algorithm>
#include <numeric>

#include "gpu_test_util.h"
#include "xinfer/backend/cuda/kernels/attention/attention_plan.h"

namespace xinfer::gpu_test {
namespace {

struct Seq {
  int cached;  // context already in the cache
  int q_len;   // new tokens this step (1: decode)
};
struct AttnCase {
  std::string name;
  int hq, hkv, d, block_size;
  std::vector<Seq> seqs;
};
void PrintTo(const AttnCase& c, std::ostream* os) { *os << c.name; }

class PagedAttentionTest : public ::testing::TestWithParam<AttnCase> {};

TEST_P(PagedAttentionTest, MatchesCpu) {
  const AttnCase& ac = GetParam();
  std::mt19937 rng(static_cast<unsigned>(std::hash<std::string>()(ac.name)));
  backend::StepPlan plan;
  int max_blocks = 0, total_blocks = 1;  // block 0: null block
  for (const Seq& s : ac.seqs) {
    const int blocks = (s.cached + s.q_len + ac.block_size - 1) / ac.block_size;
    max_blocks = std::max(max_blocks, blocks);
    total_blocks += blocks;
  }
  std::vector<int32_t> ids(static_cast<size_t>(total_blocks - 1));
  std::iota(ids.begin(), ids.end(), 1);
  std::shuffle(ids.begin(), ids.end(), rng);  // scattered, non-monotonic block tables
  size_t next = 0;
  plan.max_blocks_per_seq = max_blocks;
  plan.query_start_loc.push_back(0);
  for (const Seq& s : ac.seqs) {
    const int len = s.cached + s.q_len;
    std::vector<int32_t> table(static_cast<size_t>(max_blocks), 0);
    for (int b = 0; b < (len + ac.block_size - 1) / ac.block_size; ++b) table[static_cast<size_t>(b)] = ids[next++];
    for (int i = 0; i < s.q_len; ++i) {
      const int pos = s.cached + i;
      plan.token_ids.push_back(0);
      plan.positions.push_back(pos);
      plan.slot_mapping.push_back(table[static_cast<size_t>(pos / ac.block_size)] * ac.block_size + pos % ac.block_size);
    }
    plan.block_tables.insert(plan.block_tables.end(), table.begin(), table.end());
    plan.seq_lens.push_back(len);
    plan.query_start_loc.push_back(static_cast<int32_t>(plan.token_ids.size()));
    plan.max_seq_len = std::max(plan.max_seq_len, len);
  }
  const int T = plan.num_tokens();
  const int width = (ac.hq + 2 * ac.hkv) * ac.d;
  const Shape cache_shape{total_blocks, ac.hkv, ac.block_size, ac.d};
  const size_t cache_n = static_cast<size_t>(cache_shape.numel());
  auto qkv = upload_both(random_bf16(static_cast<size_t>(T) * width, rng), Shape{T, width});
  auto k = upload_both(random_bf16(cache_n, rng), cache_shape);
  auto v = upload_both(random_bf16(cache_n, rng), cache_shape);
  auto out = allocate_both(Shape{T, ac.hq * ac.d});
  poison(out.g.view);
  const float scale = 1.0f / std::sqrt(static_cast<float>(ac.d));
  cpu().paged_attention(cpu().upload_step(plan), qkv.c.view, ac.hq, ac.hkv, ac.d, scale, {k.c.view, v.c.view}, out.c.view);
  gpu().paged_attention(gpu().upload_step(plan), qkv.g.view, ac.hq, ac.hkv, ac.d, scale, {k.g.view, v.g.view}, out.g.view);
  const Compare c = expect_close(out.g.view, out.c.view, 1e-2, ac.name);
  std::printf("[ attention ] %-28s T=%-5d rel_l2=%.2e max_abs=%.2e\n", ac.name.c_str(), T, c.rel_l2, c.max_abs);
}

// Host-side plan of the Engine test's first step (5 + 28 + a 31-token chunk) and of a mixed step: every
// token maps to its sequence, single-token rows are decodes, longer ones prefill tiles of 64 rows.
TEST(AttentionPlan, ShortPromptBesidePrefillChunks) {
  auto make = [](const std::vector<Seq>& seqs) {
    backend::StepPlan p;
    p.query_start_loc.push_back(0);
    p.max_blocks_per_seq = 16;
    for (const Seq& s : seqs) {
      for (int i = 0; i < s.q_len; ++i) {
        p.token_ids.push_back(1);
        p.positions.push_back(s.cached + i);
        p.slot_mapping.push_back(0);
      }
      p.query_start_loc.push_back(p.num_tokens());
      p.seq_lens.push_back(s.cached + s.q_len);
      p.block_tables.resize(p.block_tables.size() + 16, 0);
    }
    return p;
  };
  const cuda::AttentionPlanHost a = cuda::build_attention_plan(make({{0, 5}, {0, 28}, {0, 31}}));
  EXPECT_EQ(a.num_decode(), 0);
  EXPECT_EQ(a.prefill_items, (std::vector<int32_t>{0, 0, 1, 0, 2, 0}));
  ASSERT_EQ(a.token_seq.size(), 64u);
  for (int t = 0; t < 64; ++t) EXPECT_EQ(a.token_seq[static_cast<size_t>(t)], t < 5 ? 0 : t < 33 ? 1 : 2) << t;
  const cuda::AttentionPlanHost b = cuda::build_attention_plan(make({{4, 1}, {0, 130}, {20, 1}, {0, 2}}));
  EXPECT_EQ(b.decode_seqs, (std::vector<int32_t>{0, 2}));
  EXPECT_EQ(b.max_decode_len, 21);
  EXPECT_EQ(b.prefill_items, (std::vector<int32_t>{1, 0, 1, 64, 1, 128, 3, 0}));
  EXPECT_EQ(b.token_seq.front(), 0);
  EXPECT_EQ(b.token_seq[130], 1);
  EXPECT_EQ(b.token_seq[131], 2);
  EXPECT_EQ(b.token_seq.size(), 134u);
  EXPECT_EQ(b.token_seq.back(), 3);
}

std::vector<Seq> decodes(std::initializer_list<int> kv_lens) {
  std::vector<Seq> s;
  for (int n : kv_lens) s.push_back({n - 1, 1});
  return s;
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
        // prefill kernel: fresh prompts, chunks with cached prefixes, mixed with decodes
        AttnCase{"prefill_gqa4_d128_bs16", 32, 8, 128, 16, {{0, 97}, {0, 54}, {0, 200}}},
        AttnCase{"prefill_prefix_gqa4_d64", 8, 2, 64, 16, {{97, 33}, {2048, 70}, {5, 130}}},
        AttnCase{"prefill_mqa_d64_bs1", 4, 1, 64, 1, {{10, 64}, {0, 129}}},
        AttnCase{"mixed_gqa4_d128_bs16", 32, 8, 128, 16, {{53, 1}, {0, 97}, {2047, 1}, {100, 65}, {0, 1}, {0, 2}}},
        AttnCase{"mixed_gqa1_d64_bs1", 4, 4, 64, 1, {{0, 1}, {96, 1}, {1, 54}}},
        // generic kernel (head dims of the tiny test models and others)
        AttnCase{"generic_d16_mixed", 4, 2, 16, 16, {{0, 7}, {32, 1}, {5, 33}, {2100, 1}}},
        // the Engine test's first step: a 5-token prompt beside a 28-token one and a 31-token chunk
        AttnCase{"generic_d16_engine_step1", 4, 2, 16, 16, {{0, 5}, {0, 28}, {0, 31}}},
        AttnCase{"generic_d32_bs1", 4, 2, 32, 1, {{0, 33}, {53, 1}}},
        AttnCase{"generic_d8_mha", 8, 8, 8, 16, {{0, 1}, {96, 1}, {0, 97}}},
        AttnCase{"generic_d80_mqa", 5, 1, 80, 16, {{0, 54}, {200, 1}}},
        AttnCase{"generic_d256", 4, 2, 256, 16, {{0, 20}, {60, 1}}}),
    [](const auto& param_info) { return param_info.param.name; });

}  // namespace
}  // namespace xinfer::gpu_test
