// model/shard_weights.h: for every weight format of quant/ (dense f32/bf16, int8-channel, int4/int8 per
// group with and without zero points and g_idx, W8A8 int8 / fp8 per channel and per tensor, GGUF Q8_0 and
// Q4_K), the shards of a random linear, dequantized by quant::dequantize_matrix (the formats' float
// reference) and concatenated along the split axis, equal the dequantized unsharded weight bit for bit -
// at boundaries of the format (exact slices) and off them (the dequantized fallback). Fused parts
// (concat_shards) equal the stacked parts. Also: the ModelShard description's splits and its errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "xinfer/backend/cpu/cpu_backend.h"
#include "xinfer/model/shard.h"
#include "xinfer/model/shard_weights.h"

namespace xinfer::model {
namespace {

using quant::WeightFormat;

HostTensor random_bytes(DType dt, Shape s, std::mt19937& rng) {
  HostTensor t(dt, s);
  auto* p = t.data<uint8_t>();
  for (size_t i = 0; i < t.view().bytes(); ++i) p[i] = static_cast<uint8_t>(rng() & 0xff);
  return t;
}
HostTensor random_f32(Shape s, std::mt19937& rng, float lo = 0.01f, float hi = 1.0f) {
  HostTensor t(DType::kF32, s);
  std::uniform_real_distribution<float> d(lo, hi);
  for (int64_t i = 0; i < s.numel(); ++i) t.data<float>()[i] = d(rng);
  return t;
}

struct Case {
  std::string name;
  WeightFormat format;
  bool g_idx = false;     // IntGroup: a g_idx (trivial: k / group, or scattered)
  bool scattered = false;
};

ShardedLinear make_linear(const Case& c, int64_t n, int64_t k, std::mt19937& rng) {
  ShardedLinear w;
  w.format = c.format;
  w.n = n;
  w.k = k;
  w.bias = random_f32(Shape{n}, rng, -1, 1);
  std::visit(
      [&](const auto& f) {
        using F = std::decay_t<decltype(f)>;
        if constexpr (std::is_same_v<F, quant::DenseFormat>) {
          HostTensor f32 = random_f32(Shape{n, k}, rng, -1, 1);
          w.weight = HostTensor(f.dtype, Shape{n, k});
          if (f.dtype == DType::kF32) {
            w.weight = std::move(f32);
          } else {
            w.weight = random_bytes(f.dtype, Shape{n, k}, rng);
            // keep bf16 finite: clear the top exponent bit
            auto* p = w.weight.data<uint16_t>();
            for (int64_t i = 0; i < n * k; ++i) p[i] &= 0xbfff;
          }
        } else if constexpr (std::is_same_v<F, quant::Int8ChannelFormat> || std::is_same_v<F, quant::W8A8Int8Format>) {
          w.weight = random_bytes(DType::kI8, Shape{n, k}, rng);
          w.scales = random_f32(Shape{n}, rng);
          if constexpr (std::is_same_v<F, quant::W8A8Int8Format>)
            if (f.act == quant::ActScaleMode::kStaticPerTensor) w.input_scale = random_f32(Shape{1}, rng);
        } else if constexpr (std::is_same_v<F, quant::W8A8Fp8Format>) {
          w.weight = random_bytes(DType::kFP8E4M3, Shape{n, k}, rng);
          auto* p = w.weight.data<uint8_t>();
          for (int64_t i = 0; i < n * k; ++i) p[i] &= 0xf7;  // no NaN (e4m3 NaN is S.1111.111)
          w.scales = random_f32(f.per_channel ? Shape{n} : Shape{1}, rng);
          if (f.act == quant::ActScaleMode::kStaticPerTensor) w.input_scale = random_f32(Shape{1}, rng);
        } else if constexpr (std::is_same_v<F, quant::IntGroupFormat>) {
          const int64_t groups = (k + f.group_size - 1) / f.group_size;
          w.weight = random_bytes(DType::kU8, Shape{n, f.bits == 4 ? (k + 1) / 2 : k}, rng);
          w.scales = random_f32(Shape{n, groups}, rng);
          if (f.zero_point) w.zeros = random_bytes(DType::kU8, Shape{n, groups}, rng);
          if (f.zero_point && f.bits == 4)
            for (int64_t i = 0; i < n * groups; ++i) w.zeros.data<uint8_t>()[i] &= 0x0f;
          if (c.g_idx) {
            w.g_idx = HostTensor(DType::kI32, Shape{k});
            for (int64_t i = 0; i < k; ++i)
              w.g_idx.data<int32_t>()[i] = static_cast<int32_t>(c.scattered ? (i * 7) % groups : i / f.group_size);
          }
        } else {
          const int64_t b = quant::gguf_block_elems(f.type), bb = quant::gguf_block_bytes(f.type);
          w.weight = random_bytes(DType::kU8, Shape{n, k / b * bb}, rng);
          // f16 block scales: keep them finite and small (clear the top exponent bits of every byte pair).
          auto* p = w.weight.data<uint8_t>();
          for (int64_t i = 1; i < n * (k / b * bb); i += 2) p[i] &= 0x3b;
        }
      },
      c.format);
  return w;
}

std::vector<float> dequantized(const ShardedLinear& w) {
  ShardedLinear d = dequantize_shard(w.view());
  return std::vector<float>(d.weight.data<float>(), d.weight.data<float>() + w.n * w.k);
}

std::vector<Case> cases() {
  using namespace quant;
  return {
      {"dense-f32", DenseFormat{DType::kF32}},
      {"dense-bf16", DenseFormat{DType::kBF16}},
      {"int8-channel", Int8ChannelFormat{}},
      {"int4-g64", IntGroupFormat{4, 64, false}},
      {"int4-g64-zp", IntGroupFormat{4, 64, true}},
      {"int8-g64-zp", IntGroupFormat{8, 64, true}},
      {"int4-g64-gidx", IntGroupFormat{4, 64, false}, true, false},
      {"int4-g64-gidx-actorder", IntGroupFormat{4, 64, true}, true, true},
      {"w8a8-int8-dynamic", W8A8Int8Format{ActScaleMode::kDynamicPerToken}},
      {"w8a8-int8-static", W8A8Int8Format{ActScaleMode::kStaticPerTensor}},
      {"w8a8-fp8-channel", W8A8Fp8Format{true, ActScaleMode::kDynamicPerToken}},
      {"w8a8-fp8-tensor-static", W8A8Fp8Format{false, ActScaleMode::kStaticPerTensor}},
      {"gguf-q8_0", GgufFormat{GgufType::kQ8_0}},
      {"gguf-q4_1", GgufFormat{GgufType::kQ4_1}},
      {"gguf-q4_0", GgufFormat{GgufType::kQ4_0}},
      {"gguf-q4_k", GgufFormat{GgufType::kQ4_K}},
  };
}

TEST(ShardWeights, RowShardsConcatenatedEqualTheWeight) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    std::mt19937 rng(1);
    const int64_t n = 10, k = 512;
    ShardedLinear w = make_linear(c, n, k, rng);
    const std::vector<float> full = dequantized(w);
    for (const std::vector<int64_t>& cuts : {std::vector<int64_t>{0, 5, 10}, {0, 4, 7, 10}, {0, 3, 3, 6, 10}}) {
      std::vector<float> got;
      std::vector<float> bias;
      std::vector<ShardedLinear> parts;
      for (size_t i = 0; i + 1 < cuts.size(); ++i) {
        Result<ShardedLinear> s = shard_rows(w.view(), cuts[i], cuts[i + 1], "w");
        ASSERT_TRUE(s.ok()) << s.status().to_string();
        EXPECT_EQ(s->n, cuts[i + 1] - cuts[i]);
        EXPECT_EQ(quant::format_name(s->format), quant::format_name(w.format));
        if (s->n > 0) {
          const std::vector<float> d = dequantized(*s);
          got.insert(got.end(), d.begin(), d.end());
          bias.insert(bias.end(), s->bias.data<float>(), s->bias.data<float>() + s->n);
          parts.push_back(std::move(*s));
        }
      }
      ASSERT_EQ(got.size(), full.size());
      EXPECT_EQ(0, std::memcmp(got.data(), full.data(), full.size() * sizeof(float)));
      EXPECT_EQ(0, std::memcmp(bias.data(), w.bias.data<float>(), static_cast<size_t>(n) * sizeof(float)));
      // Fusing the shards back (as q, k, v -> qkv) restores the weight.
      Result<ShardedLinear> fused = concat_shards(parts, "w");
      ASSERT_TRUE(fused.ok()) << fused.status().to_string();
      // Per-tensor FP8 scales of several parts are stacked as per-channel scales (exact).
      const bool per_tensor = c.name == "w8a8-fp8-tensor-static" && parts.size() > 1;
      EXPECT_EQ(quant::format_name(fused->format),
                per_tensor ? "w8a8-fp8-channel-static" : quant::format_name(w.format));
      const std::vector<float> f = dequantized(*fused);
      EXPECT_EQ(0, std::memcmp(f.data(), full.data(), full.size() * sizeof(float)));
    }
  }
}

TEST(ShardWeights, ColumnShardsConcatenatedEqualTheWeight) {
  for (const Case& c : cases()) {
    const int64_t n = 6, k = 512;
    // On boundaries of every format (256: Q4_K's block), and off them (dequantized fallback).
    for (const std::vector<int64_t>& cuts : {std::vector<int64_t>{0, 256, 512}, {0, 96, 320, 512}}) {
      SCOPED_TRACE(c.name + " cut at " + std::to_string(cuts[1]));
      std::mt19937 rng(2);
      ShardedLinear w = make_linear(c, n, k, rng);
      const std::vector<float> full = dequantized(w);
      std::vector<float> got(full.size(), -1.0f);
      bool any_quantized = false;
      for (size_t i = 0; i + 1 < cuts.size(); ++i) {
        Result<ShardedLinear> s = shard_cols(w.view(), cuts[i], cuts[i + 1], "w");
        ASSERT_TRUE(s.ok()) << s.status().to_string();
        ASSERT_EQ(s->k, cuts[i + 1] - cuts[i]);
        any_quantized = any_quantized || quant::format_name(s->format) == quant::format_name(w.format);
        const std::vector<float> d = dequantized(*s);
        for (int64_t r = 0; r < n; ++r)
          std::memcpy(&got[static_cast<size_t>(r * k + cuts[i])], &d[static_cast<size_t>(r * s->k)],
                      static_cast<size_t>(s->k) * sizeof(float));
        // The bias is not sliced (the caller adds it once).
        EXPECT_EQ(0, std::memcmp(s->bias.data<float>(), w.bias.data<float>(), static_cast<size_t>(n) * sizeof(float)));
      }
      EXPECT_EQ(0, std::memcmp(got.data(), full.data(), full.size() * sizeof(float)));
      // Exact slices (no fallback) where the format allows them.
      const bool on_boundary = cuts[1] == 256;
      if (on_boundary && !c.scattered) {
        EXPECT_TRUE(any_quantized) << "a split on the format's boundaries must stay in the format";
      }
    }
  }
}

TEST(ShardWeights, OutOfRangeIsAnError) {
  std::mt19937 rng(3);
  ShardedLinear w = make_linear({"dense", quant::DenseFormat{DType::kF32}}, 4, 8, rng);
  EXPECT_FALSE(shard_rows(w.view(), 2, 5, "w").ok());
  Result<ShardedLinear> bad = shard_cols(w.view(), 0, 9, "layers.0.o_proj");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().to_string().find("layers.0.o_proj"), std::string::npos);
}

ModelConfig smollm2_like() {
  ModelConfig c;
  c.hidden_size = 576;
  c.intermediate_size = 1536;
  c.num_layers = 30;
  c.num_heads = 9;
  c.num_kv_heads = 3;
  c.head_dim = 64;
  c.vocab_size = 49152;
  c.tie_word_embeddings = true;
  return c;
}

TEST(ModelShard, SplitsHeadsFfnAndVocab) {
  const ModelConfig c = smollm2_like();
  for (int r = 0; r < 3; ++r) {
    Result<ModelShard> s = ModelShard::make(c, 3, r);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    EXPECT_EQ(s->num_heads, 3);
    EXPECT_EQ(s->head_begin, 3 * r);
    EXPECT_EQ(s->num_kv_heads, 1);
    EXPECT_EQ(s->kv_head_begin, r);
    EXPECT_EQ(s->ffn, 512);
    EXPECT_EQ(s->ffn_begin, 512 * r);
    EXPECT_EQ(s->vocab_begin, 16384 * r);
    EXPECT_EQ(s->qkv_rows(), (3 + 2) * 64);
  }
  // More ranks than kv heads: each kv head replicated on N / Hkv ranks, q heads still in their group.
  ModelConfig g = c;
  g.num_heads = 8;
  g.num_kv_heads = 2;
  for (int r = 0; r < 4; ++r) {
    Result<ModelShard> s = ModelShard::make(g, 4, r);
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(s->num_kv_heads, 1);
    EXPECT_EQ(s->kv_head_begin, r / 2);
    EXPECT_EQ(s->head_begin / (g.num_heads / g.num_kv_heads), s->kv_head_begin);  // q head's group
  }
  // Vocabulary not divisible: ranges differ by at most one and cover [0, V).
  ModelConfig v = c;
  v.vocab_size = 10;
  int64_t prev = 0;
  for (int r = 0; r < 3; ++r) {
    Result<ModelShard> s = ModelShard::make(v, 3, r);
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(s->vocab_begin, prev);
    EXPECT_TRUE(s->local_vocab() == 3 || s->local_vocab() == 4);
    prev = s->vocab_end;
  }
  EXPECT_EQ(prev, 10);
  // The shards' parameters add up to the model's, plus the replicated norms: the embedding and the lm_head are
  // vocabulary-parallel (local_vocab x H each, tied: one table), an odd vocabulary too.
  for (const bool tied : {false, true}) {
    for (const int64_t vocab : {c.vocab_size, c.vocab_size + 1}) {
      SCOPED_TRACE(std::string(tied ? "tied" : "untied") + " vocab " + std::to_string(vocab));
      ModelConfig u = c;
      u.tie_word_embeddings = tied;
      u.vocab_size = vocab;
      int64_t total = 0;
      for (int r = 0; r < 3; ++r) {
        const ModelShard s = *ModelShard::make(u, 3, r);
        const int64_t vocab_rows = (vocab + 2 - r) / 3;  // ceil for the first V % 3 ranks, floor after
        EXPECT_EQ(s.local_vocab(), vocab_rows);
        const int64_t layer = 2 * u.hidden_size + s.qkv_rows() * u.hidden_size + u.hidden_size * s.o_cols() +
                              3 * s.ffn * u.hidden_size;
        EXPECT_EQ(s.parameter_count(u), vocab_rows * u.hidden_size * (tied ? 1 : 2) + layer * u.num_layers +
                                            u.hidden_size);
        total += s.parameter_count(u);
      }
      const int64_t whole = ModelShard::whole(u).parameter_count(u);
      const int64_t replicated = (2 * u.num_layers + 1) * u.hidden_size;
      // kv heads: 3 of them on 3 ranks -> not replicated here.
      EXPECT_EQ(total, whole + 2 * replicated);
    }
  }
}

// The tuner's and the workspaces' shapes come from the shard: column-parallel linears split N, row-parallel ones
// K (their biases on rank 0 only), the lm_head the vocabulary; over the ranks they add up to the whole model's.
TEST(ModelShard, LinearShapesAreTheRanksShares) {
  ModelConfig c = smollm2_like();
  c.attention_bias = c.o_bias = c.mlp_bias = true;
  const std::vector<LinearShape> whole = ModelShard::whole(c).linear_shapes(c);
  ASSERT_EQ(whole.size(), 5u);
  EXPECT_EQ(whole[0].n, (9 + 2 * 3) * 64);  // qkv
  EXPECT_EQ(whole[3].k, 1536);              // down
  std::vector<int64_t> n_sum(5, 0), k_sum(5, 0);
  for (int r = 0; r < 3; ++r) {
    const std::vector<LinearShape> l = ModelShard::make(c, 3, r)->linear_shapes(c);
    ASSERT_EQ(l.size(), 5u);
    EXPECT_STREQ(l[0].name, "qkv");
    EXPECT_EQ(l[0].n, (3 + 2) * 64);
    EXPECT_EQ(l[0].k, 576);
    EXPECT_TRUE(l[0].bias && l[0].normed_input);
    EXPECT_EQ(l[1].n, 576);  // o: row-parallel
    EXPECT_EQ(l[1].k, 3 * 64);
    EXPECT_EQ(l[1].bias, r == 0);
    EXPECT_EQ(l[2].n, 2 * 512);  // gate_up
    EXPECT_TRUE(l[2].normed_input);
    EXPECT_EQ(l[3].k, 512);  // down
    EXPECT_EQ(l[3].bias, r == 0);
    EXPECT_TRUE(l[4].lm_head);
    EXPECT_EQ(l[4].n, 16384);
    for (size_t i = 0; i < 5; ++i) {
      n_sum[i] += l[i].n;
      k_sum[i] += l[i].k;
    }
  }
  for (size_t i : {size_t{2}, size_t{4}}) EXPECT_EQ(n_sum[i], whole[i].n) << whole[i].name;  // gate_up, lm_head
  for (size_t i : {size_t{1}, size_t{3}}) EXPECT_EQ(k_sum[i], whole[i].k) << whole[i].name;  // o, down
  EXPECT_EQ(n_sum[0], whole[0].n);  // qkv: 3 kv heads on 3 ranks, none replicated
}

TEST(ModelShard, BadSizesAreClearErrors) {
  const ModelConfig c = smollm2_like();
  Result<ModelShard> two = ModelShard::make(c, 2, 0);
  ASSERT_FALSE(two.ok());
  EXPECT_NE(two.status().to_string().find("does not divide the model's 9 attention heads"), std::string::npos)
      << two.status().to_string();
  ModelConfig f = c;
  f.num_heads = 12;
  f.num_kv_heads = 6;
  f.intermediate_size = 1537;
  Result<ModelShard> ffn = ModelShard::make(f, 3, 0);
  ASSERT_FALSE(ffn.ok());
  EXPECT_NE(ffn.status().to_string().find("intermediate_size"), std::string::npos);
  ModelConfig kv = c;
  kv.num_heads = 12;
  kv.num_kv_heads = 3;
  Result<ModelShard> kvs = ModelShard::make(kv, 4, 0);  // 4 ranks, 3 kv heads
  ASSERT_FALSE(kvs.ok());
  EXPECT_NE(kvs.status().to_string().find("num_key_value_heads"), std::string::npos);
  EXPECT_FALSE(ModelShard::make(c, 0, 0).ok());
  EXPECT_FALSE(ModelShard::make(c, 3, 3).ok());
  // Per-group formats: shares must be whole groups (SmolLM2 TP 3: down shares 512, o shares 192).
  const ModelShard s = *ModelShard::make(c, 3, 0);
  EXPECT_TRUE(validate_group_size(s, 64, "int4").ok());
  const Status g128 = validate_group_size(s, 128, "model.layers.*.self_attn.o_proj (int4-g128)");
  ASSERT_FALSE(g128.ok());
  EXPECT_NE(g128.to_string().find("o_proj"), std::string::npos);
  EXPECT_NE(g128.to_string().find("group size 128"), std::string::npos);
}

}  // namespace
}  // namespace xinfer::model

namespace xinfer::model {
namespace {

// Row r of the fused [q | k | v] (or [gate | up]) weight holds r in every column: a shard's rows name
// themselves. Expected rows come from the definitions in shard.h, written out here.
TEST(ShardForRank, QkvGateUpAndVocabTakeTheRanksRows) {
  ModelConfig c;
  c.hidden_size = 4;
  c.intermediate_size = 12;
  c.num_layers = 1;
  c.num_heads = 8;
  c.num_kv_heads = 2;
  c.head_dim = 2;
  c.vocab_size = 10;
  const int64_t H = 4, D = 2, q_total = 16, kv_total = 4;
  HostTensor qkv(DType::kF32, Shape{q_total + 2 * kv_total, H});
  for (int64_t r = 0; r < q_total + 2 * kv_total; ++r)
    for (int64_t j = 0; j < H; ++j) qkv.data<float>()[r * H + j] = static_cast<float>(r);
  for (int n : {1, 2, 4}) {
    for (int rank = 0; rank < n; ++rank) {
      SCOPED_TRACE("tp " + std::to_string(n) + " rank " + std::to_string(rank));
      const ModelShard s = *ModelShard::make(c, n, rank);
      Result<HostTensor> got = shard_dense_for_rank(qkv.view(), ShardRole::kQkv, s, "l.self_attn.q_proj.weight");
      ASSERT_TRUE(got.ok()) << got.status().to_string();
      std::vector<float> expected;
      const int qh = 8 / n;
      for (int h = rank * qh; h < (rank + 1) * qh; ++h)
        for (int64_t d = 0; d < D; ++d) expected.push_back(static_cast<float>(h * D + d));
      // kv heads: 2 of them; with 4 ranks each is replicated on 2 ranks (rank / 2).
      const int kvh = n <= 2 ? 2 / n : 1, kv0 = n <= 2 ? rank * kvh : rank / 2;
      for (int part = 0; part < 2; ++part)
        for (int h = kv0; h < kv0 + kvh; ++h)
          for (int64_t d = 0; d < D; ++d) expected.push_back(static_cast<float>(q_total + part * kv_total + h * D + d));
      ASSERT_EQ(got->shape()[0], static_cast<int64_t>(expected.size()));
      for (size_t i = 0; i < expected.size(); ++i) EXPECT_EQ(got->data<float>()[i * H], expected[i]) << i;
      // A fused bias [Hq*D + 2 Hkv*D] splits like the rows.
      HostTensor bias(DType::kF32, Shape{q_total + 2 * kv_total});
      for (int64_t r = 0; r < q_total + 2 * kv_total; ++r) bias.data<float>()[r] = static_cast<float>(r);
      Result<HostTensor> b = shard_dense_for_rank(bias.view(), ShardRole::kQkv, s, "l.self_attn.q_proj.bias");
      ASSERT_TRUE(b.ok());
      for (size_t i = 0; i < expected.size(); ++i) EXPECT_EQ(b->data<float>()[i], expected[i]);
      // lm_head rows: the rank's vocabulary range.
      HostTensor lm(DType::kF32, Shape{10, H});
      for (int64_t r = 0; r < 10; ++r) lm.data<float>()[r * H] = static_cast<float>(r);
      Result<HostTensor> l = shard_dense_for_rank(lm.view(), ShardRole::kVocabRows, s, "lm_head.weight");
      ASSERT_TRUE(l.ok());
      EXPECT_EQ(l->shape()[0], s.local_vocab());
      EXPECT_EQ(l->data<float>()[0], static_cast<float>(s.vocab_begin));
    }
  }
}

// Weights with mins (GGUF Q4_1 repacked, made for unsharded linears only) are refused with a clear error
// rather than sharded without their mins.
TEST(ShardForRank, WeightsWithMinsAreRefused) {
  const ModelConfig c = smollm2_like();
  const int64_t n = 2 * c.intermediate_size, k = c.hidden_size;  // gate_up, Q4_1 repacked
  HostTensor w(DType::kU8, Shape{n, k / 2}), scales(DType::kF32, Shape{n, k / 32});
  HostLinearView v;
  v.format = quant::IntGroupFormat{4, 32, false, true};
  v.n = n;
  v.k = k;
  v.weight = w.view();
  v.scales = scales.view();
  const ModelShard s = *ModelShard::make(c, 3, 0);
  Result<ShardedLinear> got = shard_for_rank(v, ShardRole::kGateUp, s, "l.mlp.gate_proj.weight");
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(got.status().to_string().find("int4-g32-min"), std::string::npos) << got.status().to_string();
}

// The tensor-parallel identity itself: x @ W^T for the row-parallel o / down equals the sum over ranks of
// x[:, cols_r] @ W[:, cols_r]^T (partials added once, the bias only by rank 0); column-parallel gate_up rows
// concatenated over ranks give [gate | up] of the whole model, per rank block.
TEST(ShardForRank, RowParallelPartialsSumToTheWholeProduct) {
  ModelConfig c;
  c.hidden_size = 3;
  c.intermediate_size = 6;
  c.num_layers = 1;
  c.num_heads = 3;
  c.num_kv_heads = 3;
  c.head_dim = 2;
  c.vocab_size = 7;
  std::mt19937 rng(5);
  const int64_t H = 3, I = 6;
  HostTensor down = random_f32(Shape{H, I}, rng, -1, 1);
  HostTensor bias = random_f32(Shape{H}, rng, -1, 1);
  std::vector<float> x(static_cast<size_t>(I));
  for (auto& v : x) v = std::uniform_real_distribution<float>(-1, 1)(rng);
  std::vector<double> whole(static_cast<size_t>(H)), sum(static_cast<size_t>(H), 0.0);
  for (int64_t n = 0; n < H; ++n) {
    double acc = bias.data<float>()[n];
    for (int64_t k = 0; k < I; ++k) acc += static_cast<double>(x[static_cast<size_t>(k)]) * down.data<float>()[n * I + k];
    whole[static_cast<size_t>(n)] = acc;
  }
  for (int rank = 0; rank < 3; ++rank) {
    const ModelShard s = *ModelShard::make(c, 3, rank);
    Result<HostTensor> w = shard_dense_for_rank(down.view(), ShardRole::kRowParallel, s, "mlp.down_proj.weight");
    Result<HostTensor> b = shard_dense_for_rank(bias.view(), ShardRole::kRank0Only, s, "mlp.down_proj.bias");
    ASSERT_TRUE(w.ok() && b.ok());
    ASSERT_EQ(w->shape()[1], 2);
    for (int64_t n = 0; n < H; ++n) {
      double acc = b->data<float>()[n];
      for (int64_t k = 0; k < 2; ++k)
        acc += static_cast<double>(x[static_cast<size_t>(s.ffn_begin + k)]) * w->data<float>()[n * 2 + k];
      sum[static_cast<size_t>(n)] += acc;
    }
  }
  for (int64_t n = 0; n < H; ++n) EXPECT_NEAR(sum[static_cast<size_t>(n)], whole[static_cast<size_t>(n)], 1e-12);
  // Wrong whole shapes are errors naming the tensor.
  const ModelShard s = *ModelShard::make(c, 3, 0);
  Result<HostTensor> bad = shard_dense_for_rank(down.view(), ShardRole::kGateUp, s, "model.layers.0.mlp.gate_proj.weight");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().to_string().find("model.layers.0.mlp.gate_proj.weight"), std::string::npos);
  EXPECT_EQ(shard_role("model.layers.3.self_attn.o_proj.bias"), ShardRole::kRank0Only);
  EXPECT_EQ(shard_role("model.layers.3.self_attn.o_proj.weight"), ShardRole::kRowParallel);
  EXPECT_EQ(shard_role("model.layers.3.input_layernorm.weight"), ShardRole::kReplicated);
  EXPECT_EQ(shard_role("model.embed_tokens.weight"), ShardRole::kVocabRows);
  EXPECT_EQ(shard_role("token_embd.weight"), ShardRole::kVocabRows);
  EXPECT_EQ(shard_role("output.weight"), ShardRole::kVocabRows);
  EXPECT_EQ(shard_role("output_norm.weight"), ShardRole::kReplicated);
}

}  // namespace
}  // namespace xinfer::model

namespace xinfer::model {
namespace {

// The CPU kernels (quant::quantized_matmul) on column shards: the partial products summed over ranks equal
// the whole product up to f32 rounding (blocks / groups of x quantized the same way on every rank).
TEST(ShardWeights, KernelPartialsSumToTheWholeProduct) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    std::mt19937 rng(9);
    const int64_t n = 8, k = 768, rows = 3;
    ShardedLinear w = make_linear(c, n, k, rng);
    std::vector<float> x(static_cast<size_t>(rows * k));
    for (auto& v : x) v = std::uniform_real_distribution<float>(-1, 1)(rng);
    std::vector<float> whole(static_cast<size_t>(rows * n)), sum(static_cast<size_t>(rows * n), 0.0f);
    const HostLinearView wv = w.view();
    if (std::holds_alternative<quant::DenseFormat>(w.format)) continue;  // cblas path, not quantized_matmul
    quant::quantized_matmul(wv.matrix(), x.data(), rows, whole.data(), nullptr);
    for (int r = 0; r < 3; ++r) {
      Result<ShardedLinear> s = shard_cols(wv, 256 * r, 256 * (r + 1), "w");
      ASSERT_TRUE(s.ok());
      std::vector<float> xr(static_cast<size_t>(rows * 256)), part(static_cast<size_t>(rows * n));
      for (int64_t t = 0; t < rows; ++t)
        std::memcpy(&xr[static_cast<size_t>(t * 256)], &x[static_cast<size_t>(t * k + 256 * r)], 256 * sizeof(float));
      if (std::holds_alternative<quant::DenseFormat>(s->format)) {  // the dequantized fallback: a float product
        for (int64_t t = 0; t < rows; ++t)
          for (int64_t j = 0; j < n; ++j) {
            float acc = 0;
            for (int64_t i = 0; i < 256; ++i) acc += xr[static_cast<size_t>(t * 256 + i)] * s->weight.data<float>()[j * 256 + i];
            part[static_cast<size_t>(t * n + j)] = acc;
          }
      } else {
        quant::quantized_matmul(s->view().matrix(), xr.data(), rows, part.data(), nullptr);
      }
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += part[i];
    }
    double max_diff = 0, max_abs = 0;
    for (size_t i = 0; i < sum.size(); ++i) {
      max_diff = std::max(max_diff, static_cast<double>(std::fabs(sum[i] - whole[i])));
      max_abs = std::max(max_abs, static_cast<double>(std::fabs(whole[i])));
    }
    // W8A8 with dynamic per-token activation scales: each rank quantizes its slice of the row with its own
    // scale (as vLLM's row-parallel layers do), so TP differs from TP 1 by activation-quantization noise.
    const bool dynamic_act = c.name == "w8a8-int8-dynamic" || c.name == "w8a8-fp8-channel";
    EXPECT_LT(max_diff, (dynamic_act ? 5e-2 : 1e-4) * std::max(1.0, max_abs)) << "max |whole| " << max_abs;
  }
}


uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

// Vocabulary-parallel embedding (shard.h): an odd vocabulary (V = 301) over N = 2, 3, 4 ranks, in every format
// the loader keeps a table in (dense: f32, and bf16 / f16 checkpoints; GGUF Q8_0 and Q4_0 packed, as the CPU
// keeps them). The ranks' rows (shard_for_rank with the embedding's role) concatenated are the table bit for bit,
// and the CPU lookup of each rank's shard (Backend::embedding_weights with its VocabRows: its ids' rows, -0.0
// for the others) summed over the ranks in rank order, as the all-reduce does, is the whole table's lookup bit
// for bit (signs of zeros included).
TEST(VocabShard, EmbeddingShardsConcatenateToTheTableAndTheirLookupsSumToIt) {
  using namespace quant;
  const std::vector<Case> formats{{"dense-f32", DenseFormat{DType::kF32}},
                                  {"dense-bf16", DenseFormat{DType::kBF16}},
                                  {"dense-f16", DenseFormat{DType::kF16}},
                                  {"gguf-q8_0", GgufFormat{GgufType::kQ8_0}},
                                  {"gguf-q4_0", GgufFormat{GgufType::kQ4_0}}};
  const int64_t V = 301, H = 64;
  ModelConfig c;
  c.hidden_size = H;
  c.intermediate_size = 12;
  c.num_layers = 1;
  c.num_heads = 12;  // divisible by 2, 3 and 4
  c.num_kv_heads = 12;
  c.head_dim = 16;
  c.vocab_size = V;
  cpu::CpuBackend backend(cpu::CpuBackendOptions{1});
  std::mt19937 rng(17);
  // Every id at least once, both ends of every rank's range included.
  std::vector<int32_t> ids(static_cast<size_t>(V));
  for (int32_t i = 0; i < V; ++i) ids[static_cast<size_t>(i)] = (i * 37) % static_cast<int32_t>(V);
  backend::StepMeta step;
  step.num_tokens = static_cast<int>(ids.size());
  step.token_ids = ids.data();
  const int64_t T = step.num_tokens;
  // The table as the backend keeps it: packed GGUF rows (u8) or dense f32 (other dense dtypes converted at load).
  auto upload = [&](const ShardedLinear& w, std::vector<std::shared_ptr<backend::DeviceBuffer>>& keep) {
    backend::LinearWeights lw;
    if (std::holds_alternative<GgufFormat>(w.format)) {
      backend::DeviceTensor t = backend.upload(w.weight.view(), DType::kU8);
      keep.push_back(t.buffer);
      lw.weight = t.view;
      lw.format = w.format;
      lw.k = w.k;
    } else {
      const ShardedLinear f32 = dequantize_shard(w.view());
      backend::DeviceTensor t = backend.upload(f32.weight.view(), DType::kF32);
      keep.push_back(t.buffer);
      lw.weight = t.view;
    }
    return lw;
  };
  for (const Case& f : formats) {
    const ShardedLinear table = make_linear(f, V, H, rng);
    const std::vector<float> whole_table = dequantized(table);
    std::vector<std::shared_ptr<backend::DeviceBuffer>> keep;
    const backend::LinearWeights whole_w = upload(table, keep);
    std::vector<float> want(static_cast<size_t>(T * H));
    backend.embedding_weights(step, whole_w, TensorView{want.data(), DType::kF32, Shape{T, H}});
    for (const std::string name : {"model.embed_tokens.weight", "token_embd.weight"}) {
      for (int n : {2, 3, 4}) {
        SCOPED_TRACE(f.name + " " + name + " tp " + std::to_string(n));
        std::vector<float> rows, sum(static_cast<size_t>(T * H), -0.0f);
        for (int r = 0; r < n; ++r) {
          const ModelShard s = *ModelShard::make(c, n, r);
          Result<ShardedLinear> mine = shard_for_rank(table.view(), shard_role(name), s, name);
          ASSERT_TRUE(mine.ok()) << mine.status().to_string();
          ASSERT_EQ(mine->n, s.local_vocab());
          ASSERT_EQ(mine->format.index(), table.format.index()) << "kept in its format";
          const std::vector<float> d = dequantized(*mine);
          rows.insert(rows.end(), d.begin(), d.end());
          const backend::LinearWeights w = upload(*mine, keep);
          std::vector<float> out(static_cast<size_t>(T * H), 1.0f);
          backend.embedding_weights(step, w, TensorView{out.data(), DType::kF32, Shape{T, H}},
                                    backend::VocabRows{s.vocab_begin, V});
          for (int64_t t = 0; t < T; ++t) {
            const bool mine_id = ids[static_cast<size_t>(t)] >= s.vocab_begin && ids[static_cast<size_t>(t)] < s.vocab_end;
            for (int64_t j = 0; j < H; ++j) {
              const size_t i = static_cast<size_t>(t * H + j);
              ASSERT_EQ(bits_of(out[i]), mine_id ? bits_of(want[i]) : bits_of(-0.0f)) << "token " << t << " col " << j;
            }
          }
          for (size_t i = 0; i < sum.size(); ++i) sum[i] += out[i];
        }
        ASSERT_EQ(rows.size(), whole_table.size());
        for (size_t i = 0; i < rows.size(); ++i) ASSERT_EQ(bits_of(rows[i]), bits_of(whole_table[i])) << i;
        for (size_t i = 0; i < sum.size(); ++i) ASSERT_EQ(bits_of(sum[i]), bits_of(want[i])) << i;
      }
    }
  }
}

}  // namespace
}  // namespace xinfer::model
