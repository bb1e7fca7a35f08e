// Every non-attention op of CudaBackend (bf16) against CpuBackend (f32) on the same bf16-valued random
// inputs of awkward sizes; CUDA outputs are NaN-poisoned first so unwritten elements fail.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>

#include "gpu_test_util.h"

namespace xinfer::gpu_test {
namespace {

constexpr double kBf16Tol = 1e-2;

// A step with `t` tokens of one sequence at the given positions / slots (ops that read only these).
backend::StepPlan token_step(const std::vector<int32_t>& ids, const std::vector<int32_t>& positions,
                             const std::vector<int32_t>& slots) {
  backend::StepPlan p;
  p.token_ids = ids;
  p.positions = positions;
  p.slot_mapping = slots;
  p.query_start_loc = {0, static_cast<int32_t>(ids.size())};
  p.seq_lens = {*std::max_element(positions.begin(), positions.end()) + 1};
  p.max_blocks_per_seq = 1;
  p.block_tables = {0};
  p.max_seq_len = p.seq_lens[0];
  return p;
}

class EmbeddingTest : public ::testing::TestWithParam<std::tuple<int, int>> {};
TEST_P(EmbeddingTest, MatchesCpu) {
  const auto [tokens, hidden] = GetParam();
  std::mt19937 rng(tokens * 31 + hidden);
  const int vocab = 1000;
  auto table = upload_both(random_bf16(static_cast<size_t>(vocab) * hidden, rng), Shape{vocab, hidden});
  std::vector<int32_t> ids(static_cast<size_t>(tokens));
  for (auto& id : ids) id = static_cast<int32_t>(rng() % vocab);
  ids[0] = vocab - 1;
  const auto plan = token_step(ids, std::vector<int32_t>(ids.size(), 0), std::vector<int32_t>(ids.size(), 0));
  auto out = allocate_both(Shape{tokens, hidden});
  poison(out.g.view);
  cpu().embedding(cpu().upload_step(plan), table.c.view, out.c.view);
  gpu().embedding(gpu().upload_step(plan), table.g.view, out.g.view);
  const Compare c = expect_close(out.g.view, out.c.view, 1e-7, "embedding");
  EXPECT_EQ(c.max_abs, 0.0);
}
INSTANTIATE_TEST_SUITE_P(Shapes, EmbeddingTest,
                         ::testing::Values(std::make_tuple(1, 64), std::make_tuple(7, 4096), std::make_tuple(97, 100)));

class NormTest : public ::testing::TestWithParam<std::tuple<int, int>> {};
TEST_P(NormTest, RmsNormMatchesCpu) {
  const auto [rows, width] = GetParam();
  std::mt19937 rng(rows * 17 + width);
  auto x = upload_both(random_bf16(static_cast<size_t>(rows) * width, rng), Shape{rows, width});
  auto w = upload_both(random_bf16(static_cast<size_t>(width), rng), Shape{width});
  auto out = allocate_both(Shape{rows, width});
  poison(out.g.view);
  cpu().rms_norm(x.c.view, w.c.view, 1e-6f, out.c.view);
  gpu().rms_norm(x.g.view, w.g.view, 1e-6f, out.g.view);
  expect_close(out.g.view, out.c.view, kBf16Tol, "rms_norm");
}
TEST_P(NormTest, AddRmsNormMatchesCpu) {
  const auto [rows, width] = GetParam();
  std::mt19937 rng(rows * 19 + width);
  const size_t n = static_cast<size_t>(rows) * width;
  auto res = upload_both(random_bf16(n, rng), Shape{rows, width});
  auto delta = upload_both(random_bf16(n, rng, 0.5f), Shape{rows, width});
  auto w = upload_both(random_bf16(static_cast<size_t>(width), rng), Shape{width});
  auto out = allocate_both(Shape{rows, width});
  poison(out.g.view);
  cpu().add_rms_norm(res.c.view, delta.c.view, w.c.view, 1e-5f, out.c.view);
  gpu().add_rms_norm(res.g.view, delta.g.view, w.g.view, 1e-5f, out.g.view);
  expect_close(out.g.view, out.c.view, kBf16Tol, "add_rms_norm out");
  expect_close(res.g.view, res.c.view, kBf16Tol, "add_rms_norm residual");
}
INSTANTIATE_TEST_SUITE_P(Shapes, NormTest,
                         ::testing::Values(std::make_tuple(1, 64), std::make_tuple(7, 4096), std::make_tuple(97, 100),
                                           std::make_tuple(3, 5120), std::make_tuple(33, 13)));

struct LinearCase {
  int m, n, k;
  bool bias;
  bool f32_out;
};
class LinearTest : public ::testing::TestWithParam<LinearCase> {};
TEST_P(LinearTest, MatchesCpu) {
  const LinearCase lc = GetParam();
  std::mt19937 rng(lc.m * 7 + lc.n * 3 + lc.k);
  auto x = upload_both(random_bf16(static_cast<size_t>(lc.m) * lc.k, rng), Shape{lc.m, lc.k});
  auto w = upload_both(random_bf16(static_cast<size_t>(lc.n) * lc.k, rng, 0.05f), Shape{lc.n, lc.k});
  Both b;
  if (lc.bias) b = upload_both(random_bf16(static_cast<size_t>(lc.n), rng), Shape{lc.n});
  auto out = allocate_both(Shape{lc.m, lc.n}, lc.f32_out ? DType::kF32 : DType::kBF16);
  poison(out.g.view);
  cpu().linear(x.c.view, {w.c.view, lc.bias ? b.c.view : TensorView{}}, out.c.view);
  gpu().linear(x.g.view, {w.g.view, lc.bias ? b.g.view : TensorView{}}, out.g.view);
  expect_close(out.g.view, out.c.view, lc.f32_out ? 1e-3 : kBf16Tol, "linear");
}
INSTANTIATE_TEST_SUITE_P(Shapes, LinearTest,
                         ::testing::Values(LinearCase{1, 4096, 4096, false, false}, LinearCase{7, 96, 64, true, false},
                                           LinearCase{97, 264, 200, false, false}, LinearCase{33, 512, 64, false, true},
                                           LinearCase{300, 1024, 512, true, false}, LinearCase{2, 32000, 256, false, true}));

struct HeadsCase {
  int hq, hkv, d, block_size, tokens;
};
class RopeKvWriteTest : public ::testing::TestWithParam<HeadsCase> {};
TEST_P(RopeKvWriteTest, MatchesCpu) {
  const HeadsCase hc = GetParam();
  std::mt19937 rng(hc.hq * 13 + hc.d + hc.block_size);
  const int width = (hc.hq + 2 * hc.hkv) * hc.d, max_pos = 300;
  // Enough slots for every token to get its own (shared slots would make the writes race).
  const int num_blocks = std::max(40, hc.tokens / hc.block_size + 2);
  auto qkv = upload_both(random_bf16(static_cast<size_t>(hc.tokens) * width, rng), Shape{hc.tokens, width});
  // cos/sin of random angles (the model's table is tested in tests/unit/model/rope_test).
  std::vector<float> cs(static_cast<size_t>(max_pos) * hc.d);
  std::uniform_real_distribution<float> angle(-3.2f, 3.2f);
  for (int p = 0; p < max_pos; ++p)
    for (int i = 0; i < hc.d / 2; ++i) {
      const float a = angle(rng);
      cs[static_cast<size_t>(p) * hc.d + i] = std::cos(a);
      cs[static_cast<size_t>(p) * hc.d + hc.d / 2 + i] = std::sin(a);
    }
  backend::DeviceTensor cs_c = cpu().upload(host_view(cs, Shape{max_pos, hc.d}), DType::kF32);
  backend::DeviceTensor cs_g = gpu().upload(host_view(cs, Shape{max_pos, hc.d}), DType::kF32);
  std::vector<int32_t> slots(static_cast<size_t>(num_blocks * hc.block_size));
  std::iota(slots.begin(), slots.end(), 0);
  std::shuffle(slots.begin(), slots.end(), rng);
  slots.resize(static_cast<size_t>(hc.tokens));
  std::vector<int32_t> positions(static_cast<size_t>(hc.tokens));
  for (auto& p : positions) p = static_cast<int32_t>(rng() % max_pos);
  const auto plan = token_step(std::vector<int32_t>(positions.size(), 0), positions, slots);
  backend::KvCacheSpec spec{1, num_blocks, hc.block_size, hc.hkv, hc.d, DType::kF32};
  backend::KvCache kc = cpu().allocate_kv_cache(spec);
  spec.dtype = DType::kBF16;
  backend::KvCache kg = gpu().allocate_kv_cache(spec);
  cpu().rope_kv_write(cpu().upload_step(plan), qkv.c.view, hc.hq, hc.hkv, hc.d, cs_c.view, kc.layers[0]);
  gpu().rope_kv_write(gpu().upload_step(plan), qkv.g.view, hc.hq, hc.hkv, hc.d, cs_g.view, kg.layers[0]);
  expect_close(qkv.g.view, qkv.c.view, kBf16Tol, "rope qkv");
  expect_close(kg.layers[0].k, kc.layers[0].k, kBf16Tol, "k cache");
  const Compare v = expect_close(kg.layers[0].v, kc.layers[0].v, 1e-7, "v cache");
  EXPECT_EQ(v.max_abs, 0.0) << "v is copied exactly";
}
INSTANTIATE_TEST_SUITE_P(Shapes, RopeKvWriteTest,
                         ::testing::Values(HeadsCase{4, 2, 16, 16, 7}, HeadsCase{32, 8, 128, 16, 97},
                                           HeadsCase{8, 1, 64, 1, 54}, HeadsCase{4, 4, 32, 16, 1},
                                           HeadsCase{28, 4, 128, 1, 33},
                                           HeadsCase{4, 2, 24, 16, 9}));  // d % 16 != 0: the scalar kernel

class QkNormTest : public ::testing::TestWithParam<HeadsCase> {};
TEST_P(QkNormTest, MatchesCpu) {
  const HeadsCase hc = GetParam();
  std::mt19937 rng(hc.hq * 11 + hc.d);
  const int width = (hc.hq + 2 * hc.hkv) * hc.d;
  auto qkv = upload_both(random_bf16(static_cast<size_t>(hc.tokens) * width, rng), Shape{hc.tokens, width});
  auto qw = upload_both(random_bf16(static_cast<size_t>(hc.d), rng), Shape{hc.d});
  auto kw = upload_both(random_bf16(static_cast<size_t>(hc.d), rng), Shape{hc.d});
  cpu().qk_norm(qkv.c.view, hc.hq, hc.hkv, hc.d, qw.c.view, kw.c.view, 1e-6f);
  gpu().qk_norm(qkv.g.view, hc.hq, hc.hkv, hc.d, qw.g.view, kw.g.view, 1e-6f);
  expect_close(qkv.g.view, qkv.c.view, kBf16Tol, "qk_norm");
}
INSTANTIATE_TEST_SUITE_P(Shapes, QkNormTest,
                         ::testing::Values(HeadsCase{4, 2, 32, 16, 7}, HeadsCase{32, 8, 128, 16, 97},
                                           HeadsCase{16, 1, 64, 16, 1}, HeadsCase{4, 2, 48, 16, 3}));

class SiluMulTest : public ::testing::TestWithParam<std::tuple<int, int>> {};
TEST_P(SiluMulTest, MatchesCpu) {
  const auto [rows, inter] = GetParam();
  std::mt19937 rng(rows * 5 + inter);
  auto gu = upload_both(random_bf16(static_cast<size_t>(rows) * 2 * inter, rng, 2.0f), Shape{rows, 2 * inter});
  auto out = allocate_both(Shape{rows, inter});
  poison(out.g.view);
  cpu().silu_mul(gu.c.view, out.c.view);
  gpu().silu_mul(gu.g.view, out.g.view);
  expect_close(out.g.view, out.c.view, kBf16Tol, "silu_mul");
}
INSTANTIATE_TEST_SUITE_P(Shapes, SiluMulTest,
                         ::testing::Values(std::make_tuple(1, 176), std::make_tuple(7, 14336), std::make_tuple(97, 100),
                                           std::make_tuple(5, 33)));

TEST(GatherRowsTest, MatchesCpu) {
  std::mt19937 rng(3);
  const int rows = 97, width = 264;
  auto x = upload_both(random_bf16(static_cast<size_t>(rows) * width, rng), Shape{rows, width});
  auto plan = token_step(std::vector<int32_t>(rows, 0), std::vector<int32_t>(rows, 0), std::vector<int32_t>(rows, 0));
  plan.logit_rows = {96, 0, 53, 53, 7};
  auto out = allocate_both(Shape{5, width});
  poison(out.g.view);
  cpu().gather_rows(cpu().upload_step(plan), x.c.view, out.c.view);
  gpu().gather_rows(gpu().upload_step(plan), x.g.view, out.g.view);
  const Compare c = expect_close(out.g.view, out.c.view, 1e-7, "gather_rows");
  EXPECT_EQ(c.max_abs, 0.0);
}

// argmax_rows on f32 logits: must equal the CPU op (itself checked against the host Sampler in
// tests/unit/engine/argmax_rows_test.cpp) exactly, on rows with exact ties at the max, -inf, huge values,
// NaN, all -inf / all NaN rows, and -0/+0 ties; vocab sizes taking the 16-byte and the scalar path.
std::vector<float> awkward_logits(int rows, int vocab, std::mt19937& rng) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x = random_bf16(static_cast<size_t>(rows) * vocab, rng, 3.0f);  // bf16 values: many ties
  for (int r = 0; r < rows; ++r) {
    float* row = x.data() + static_cast<size_t>(r) * vocab;
    const auto at = [&](uint32_t k) -> float& { return row[k % static_cast<uint32_t>(vocab)]; };
    switch (r % 7) {
      case 0:
        at(rng()) = 50.0f;
        at(rng()) = 50.0f;
        at(rng()) = 50.0f;
        break;
      case 1:
        at(rng()) = 3.0e38f;
        at(rng()) = 3.0e38f;
        at(rng()) = -inf;
        break;
      case 2:
        at(rng()) = std::nanf("");
        at(rng()) = 40.0f;
        row[0] = row[vocab - 1] = std::nanf("");
        break;
      case 3:
        for (int c = 0; c < vocab; ++c) row[c] = -inf;
        if (vocab > 2) row[vocab - 1] = row[vocab - 2] = -1.0f;
        break;
      case 4:
        for (int c = 0; c < vocab; ++c) row[c] = -inf;
        break;
      case 5:
        for (int c = 0; c < vocab; ++c) row[c] = std::nanf("");
        break;
      case 6:
        for (int c = 0; c < vocab; ++c) row[c] = (c % 3 == 0) ? -0.0f : 0.0f;
        if (r % 2 == 1) at(rng()) = inf;
        break;
    }
  }
  return x;
}

class ArgmaxRowsTest : public ::testing::TestWithParam<std::tuple<int, int>> {};
TEST_P(ArgmaxRowsTest, MatchesCpuExactly) {
  const auto [rows, vocab] = GetParam();
  std::mt19937 rng(rows * 7 + vocab);
  // One spare row in front: the GPU op also runs on rows(1, rows + 1), a view whose base is not 16-byte
  // aligned when vocab is odd.
  const std::vector<float> x = awkward_logits(rows + 1, vocab, rng);
  const TensorView hv = host_view(x, Shape{rows + 1, vocab});
  backend::DeviceTensor lc = cpu().upload(hv, DType::kF32), lg = gpu().upload(hv, DType::kF32);
  backend::DeviceTensor oc = cpu().allocate(DType::kI32, Shape{rows + 1}), og = gpu().allocate(DType::kI32, Shape{rows + 1});
  std::vector<int32_t> want(static_cast<size_t>(rows) + 1), got(want.size());
  for (const int64_t first : {int64_t{0}, int64_t{1}}) {
    const int64_t n = first == 0 ? rows + 1 : rows;
    poison(og.view);
    cpu().argmax_rows(lc.view.rows(first, first + n), oc.view.rows(0, n));
    gpu().argmax_rows(lg.view.rows(first, first + n), og.view.rows(0, n));
    cpu().to_host_raw(oc.view.rows(0, n), want.data());
    gpu().to_host_raw(og.view.rows(0, n), got.data());
    for (int64_t r = 0; r < n; ++r) {
      EXPECT_EQ(got[static_cast<size_t>(r)], want[static_cast<size_t>(r)]) << "first " << first << " row " << r;
      const int64_t src = first + r;  // the row of x: its kind is src % 7 (awkward_logits)
      if (src % 7 == 3 && vocab > 2) {
        EXPECT_EQ(got[static_cast<size_t>(r)], vocab - 2) << "tie of two late ids";
      }
      if (src % 7 == 4 || src % 7 == 5 || (src % 7 == 6 && src % 2 == 0)) {
        EXPECT_EQ(got[static_cast<size_t>(r)], 0) << "all -inf / all NaN / all zeros row " << src;
      }
    }
  }
}
INSTANTIATE_TEST_SUITE_P(Shapes, ArgmaxRowsTest,
                         ::testing::Values(std::make_tuple(1, 128256), std::make_tuple(3, 128256),
                                           std::make_tuple(257, 128256), std::make_tuple(3, 1001),
                                           std::make_tuple(257, 151936), std::make_tuple(20, 7)));

TEST(UploadTest, RoundTripsEveryFloatDtype) {
  std::mt19937 rng(5);
  const auto v = random_bf16(1000, rng);
  for (DType src : {DType::kF32, DType::kBF16, DType::kF16}) {
    std::vector<char> raw(dtype_bytes(src, v.size()));
    convert_from_f32(src, v.data(), raw.data(), v.size());
    backend::DeviceTensor t = gpu().upload(TensorView{raw.data(), src, Shape{1000}, Device::kCpu}, DType::kBF16);
    std::vector<float> expect(v.size());
    convert_to_f32(src, raw.data(), expect.data(), v.size());
    for (float& e : expect) e = to_float(to_bf16(e));
    EXPECT_EQ(download(gpu(), t.view), expect) << dtype_name(src);
  }
  const auto info = gpu().info();
  EXPECT_NE(info.name.find("cuda:0"), std::string::npos);
  EXPECT_GT(info.total_memory, info.free_memory);
}

// ---- KV swap space: CudaBackend::copy_kv_blocks (a kernel on mapped host memory) against the host backends'
// reference (Backend::copy_kv_blocks: memcpy per layer, K then V) on the same random cache bytes. Cases: the
// 8B FP8 block (16 KB per layer's K, 16-byte copies), bf16, and 8-byte blocks (byte copies); batches past one
// launch.
class KvBlockCopyTest : public ::testing::TestWithParam<std::tuple<DType, int, int, int>> {};

TEST_P(KvBlockCopyTest, SwapOutAndInEqualTheHostCopies) {
  const auto [dtype, kv_heads, block_size, head_dim] = GetParam();
  backend::KvCacheSpec spec{3, 600, block_size, kv_heads, head_dim, dtype};
  spec.num_swap_blocks = 520;
  backend::KvCache dev = gpu().allocate_kv_cache(spec);
  // The reference: host memory with the same bytes per row (f32 rows of half the bf16 elements; the CPU
  // backend keeps no bf16 cache) and the default copy_kv_blocks.
  backend::KvCacheSpec host_spec = spec;
  if (dtype == DType::kBF16) {
    host_spec.dtype = DType::kF32;
    host_spec.head_dim = head_dim / 2;
  }
  ASSERT_EQ(host_spec.bytes_per_block(), spec.bytes_per_block());
  backend::KvCache ref = cpu().allocate_kv_cache(host_spec);
  std::mt19937 rng(11);
  for (size_t l = 0; l < dev.layers.size(); ++l) {
    for (int kv = 0; kv < 2; ++kv) {
      const TensorView& d = kv == 0 ? dev.layers[l].k : dev.layers[l].v;
      const TensorView& h = kv == 0 ? ref.layers[l].k : ref.layers[l].v;
      ASSERT_EQ(d.bytes(), h.bytes());
      std::vector<uint8_t> bytes(d.bytes());
      for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
      std::memcpy(h.data, bytes.data(), bytes.size());
      XI_CUDA_CHECK(cudaMemcpy(d.data, bytes.data(), bytes.size(), cudaMemcpyHostToDevice));
    }
  }
  // Swap out 300 scattered blocks (two launches), then bring 290 of them back into other blocks.
  std::vector<int32_t> blocks(599), swap(520);
  std::iota(blocks.begin(), blocks.end(), 1);
  std::iota(swap.begin(), swap.end(), 0);
  std::shuffle(blocks.begin(), blocks.end(), rng);
  std::shuffle(swap.begin(), swap.end(), rng);
  backend::KvCopyBatch out{true, {}}, in{false, {}};
  for (int i = 0; i < 300; ++i)
    out.copies.push_back({blocks[static_cast<size_t>(i)], swap[static_cast<size_t>(i)]});
  for (int i = 0; i < 290; ++i)
    in.copies.push_back({swap[static_cast<size_t>(i)], blocks[static_cast<size_t>(i + 300)]});
  for (backend::Backend* b :
       {static_cast<backend::Backend*>(&gpu()), static_cast<backend::Backend*>(&cpu())}) {
    backend::KvCache& c = b == &cpu() ? ref : dev;
    b->copy_kv_blocks(c, out);
    b->copy_kv_blocks(c, in);
  }
  gpu().synchronize();
  const size_t swap_bytes = static_cast<size_t>(spec.num_swap_blocks) * spec.bytes_per_block();
  ASSERT_EQ(dev.swap->bytes(), swap_bytes);
  const auto* ds = static_cast<const uint8_t*>(dev.swap->data());
  const auto* hs = static_cast<const uint8_t*>(ref.swap->data());
  for (int i = 0; i < 300; ++i) {
    const size_t off = static_cast<size_t>(swap[static_cast<size_t>(i)]) * spec.bytes_per_block();
    ASSERT_EQ(std::memcmp(ds + off, hs + off, spec.bytes_per_block()), 0)
        << "swap block " << swap[static_cast<size_t>(i)];
  }
  for (size_t l = 0; l < dev.layers.size(); ++l) {
    for (int kv = 0; kv < 2; ++kv) {
      const TensorView& d = kv == 0 ? dev.layers[l].k : dev.layers[l].v;
      const TensorView& h = kv == 0 ? ref.layers[l].k : ref.layers[l].v;
      std::vector<uint8_t> got(d.bytes());
      XI_CUDA_CHECK(cudaMemcpy(got.data(), d.data, got.size(), cudaMemcpyDeviceToHost));
      EXPECT_EQ(std::memcmp(got.data(), h.data, got.size()), 0) << "layer " << l << (kv == 0 ? " K" : " V");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, KvBlockCopyTest,
                         ::testing::Values(std::tuple{DType::kFP8E4M3, 8, 16, 128},
                                           std::tuple{DType::kBF16, 2, 16, 64},
                                           std::tuple{DType::kBF16, 1, 1, 4}));

}  // namespace
}  // namespace xinfer::gpu_test
