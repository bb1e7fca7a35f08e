// GgufFile against a file written by the `gguf` Python package's GGUFWriter (tools/make_gguf_fixtures.py,
// data/tiny_llama_q4_1.gguf), and broken copies of it: every truncation, a patched tensor type, absurd
// counts, a bad alignment. The values expected below are the ones the script wrote.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <string>

#include "xinfer/model/gguf_config.h"
#include "xinfer/model/gguf_file.h"
#include "xinfer/quant/gguf_types.h"

namespace xinfer::model {
namespace {

std::string fixture() {
  const char* src = std::getenv("XINFER_SOURCE_DIR");
  std::ifstream f(std::string(src ? src : ".") + "/tests/unit/model/data/tiny_llama_q4_1.gguf",
                  std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// Offset just past the name of tensor `name` in its tensor info.
size_t after_tensor_name(const std::string& img, const std::string& name) {
  std::string key(8, '\0');
  const uint64_t n = name.size();
  std::memcpy(key.data(), &n, 8);
  key += name;
  const size_t at = img.find(key);
  EXPECT_NE(at, std::string::npos);
  return at + key.size();
}

TEST(GgufFile, ReadsMetadataOfEveryTypeWrittenByGgufPackage) {
  const std::string img = fixture();
  ASSERT_GT(img.size(), 1000u);
  Result<GgufFile> f = parse_gguf(img.data(), img.size(), "tiny.gguf");
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->alignment(), 32u);
  EXPECT_EQ(*f->get_string("general.architecture"), "llama");
  EXPECT_EQ(*f->get_int("test.u8"), 200);
  EXPECT_EQ(*f->get_int("test.i8"), -100);
  EXPECT_EQ(*f->get_int("test.u16"), 60000);
  EXPECT_EQ(*f->get_int("test.i16"), -30000);
  EXPECT_EQ(*f->get_int("test.u32"), 4000000000);
  EXPECT_EQ(*f->get_int("test.i32"), -2000000000);
  EXPECT_EQ(f->find("test.u64")->u, (uint64_t{1} << 63) + 5);
  EXPECT_FALSE(f->get_int("test.u64").ok());  // does not fit an int64
  EXPECT_EQ(*f->get_int("test.i64"), -(int64_t{1} << 62));
  EXPECT_EQ(*f->get_float("test.f32"), 0.15625);
  EXPECT_EQ(*f->get_float("test.f64"), 1e-300);
  EXPECT_TRUE(*f->get_bool("test.bool"));
  EXPECT_EQ(*f->get_string("test.string"), "h\xC3\xA9llo");
  EXPECT_EQ(**f->get_int_array("test.ints"), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(**f->get_float_array("test.floats"), (std::vector<double>{0.5, -1.5}));
  EXPECT_EQ(**f->get_string_array("test.strings"), (std::vector<std::string>{"a", "", "ccc"}));
  EXPECT_EQ((*f->get_string_array("tokenizer.ggml.tokens"))->size(), 96u);
  // Wrong types and missing keys name the file and the key.
  Result<std::string> wrong = f->get_string("test.u8");
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().message(), "tiny.gguf: metadata key 'test.u8': expected a string, found u8");
  EXPECT_EQ(f->get_int("nope").status().message(), "tiny.gguf: missing metadata key 'nope'");

  EXPECT_EQ(f->tensors().size(), 2u + 9u * 2u);
  const GgufTensorInfo* q = f->find_tensor("blk.0.attn_q.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->type, quant::GgufType::kQ4_1);
  EXPECT_EQ(q->shape(), (Shape{64, 64}));
  EXPECT_EQ(q->bytes, 64u * 2u * 20u);
  const GgufTensorInfo* e = f->find_tensor("token_embd.weight");
  EXPECT_EQ(e->type, quant::GgufType::kQ8_0);
  EXPECT_EQ(e->shape(), (Shape{96, 64}));
  EXPECT_EQ(f->find_tensor("blk.1.ffn_norm.weight")->type, quant::GgufType::kF32);
  Result<const GgufTensorInfo*> bad = f->tensor("blk.0.ffn_up.weight", Shape{64, 128});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "tiny.gguf: tensor 'blk.0.ffn_up.weight': field 'shape': expected [64, 128], found [128, 64]");

  Result<ModelConfig> c = gguf_model_config(*f);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->hidden_size, 64);
  EXPECT_EQ(c->num_layers, 2);
  EXPECT_EQ(c->num_heads, 4);
  EXPECT_EQ(c->num_kv_heads, 2);
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_EQ(c->intermediate_size, 128);
  EXPECT_EQ(c->vocab_size, 96);
  EXPECT_EQ(c->max_position_embeddings, 256);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int32_t>{2}));
}

TEST(GgufFile, EveryTruncationIsAnErrorNamingTheFile) {
  const std::string img = fixture();
  for (size_t cut = 0; cut < img.size(); cut += cut < 4096 ? 1 : 97) {
    Result<GgufFile> f = parse_gguf(img.data(), cut, "cut.gguf");
    ASSERT_FALSE(f.ok()) << cut;
    EXPECT_EQ(f.status().code(), StatusCode::kDataLoss) << cut << ": " << f.status().to_string();
    EXPECT_EQ(f.status().message().rfind("cut.gguf: ", 0), 0u) << f.status().message();
  }
  Result<GgufFile> last = parse_gguf(img.data(), img.size() - 1, "cut.gguf");
  EXPECT_NE(last.status().message().find("tensor 'output_norm.weight': field 'offset'"), std::string::npos)
      << last.status().message();
}

TEST(GgufFile, UnknownTensorTypeNamesTensorAndField) {
  std::string img = fixture();
  const size_t at = after_tensor_name(img, "blk.0.attn_k.weight");
  uint32_t n_dims = 0;
  std::memcpy(&n_dims, img.data() + at, 4);
  const uint32_t bad = 99;
  std::memcpy(img.data() + at + 4 + 8 * n_dims, &bad, 4);
  Result<GgufFile> f = parse_gguf(img.data(), img.size(), "t.gguf");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kUnimplemented);
  EXPECT_EQ(f.status().message(),
            "t.gguf: tensor 'blk.0.attn_k.weight': field 'type': unknown GGUF tensor type 99");
}

TEST(GgufFile, AbsurdCountsFailBeforeAllocating) {
  std::string img = fixture();
  std::string t = img;
  const uint64_t huge = uint64_t{1} << 60;
  std::memcpy(t.data() + 8, &huge, 8);  // tensor_count
  EXPECT_NE(parse_gguf(t.data(), t.size(), "t.gguf").status().message().find("field 'tensor_count'"),
            std::string::npos);
  t = img;
  std::memcpy(t.data() + 16, &huge, 8);  // kv_count
  EXPECT_NE(parse_gguf(t.data(), t.size(), "t.gguf").status().message().find("field 'kv_count'"),
            std::string::npos);
  // the count of tokenizer.ggml.tokens: after its key, the u32 value type and the u32 element type
  t = img;
  const std::string key = "tokenizer.ggml.tokens";
  const size_t at = t.find(key) + key.size() + 8;
  std::memcpy(t.data() + at, &huge, 8);
  Result<GgufFile> f = parse_gguf(t.data(), t.size(), "t.gguf");
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("metadata key 'tokenizer.ggml.tokens': field 'array count'"),
            std::string::npos)
      << f.status().message();
}

TEST(GgufFile, RejectsBadMagicVersionAndDims) {
  std::string img = fixture();
  std::string t = img;
  t[0] = 'X';
  EXPECT_EQ(parse_gguf(t.data(), t.size(), "t.gguf").status().message(),
            "t.gguf: not a GGUF file (magic is not 'GGUF')");
  t = img;
  const uint32_t v1 = 1;
  std::memcpy(t.data() + 4, &v1, 4);
  EXPECT_EQ(parse_gguf(t.data(), t.size(), "t.gguf").status().code(), StatusCode::kUnimplemented);
  t = img;
  const size_t at = after_tensor_name(t, "blk.0.attn_q.weight");
  const uint32_t dims = 7;
  std::memcpy(t.data() + at, &dims, 4);
  EXPECT_EQ(parse_gguf(t.data(), t.size(), "t.gguf").status().message(),
            "t.gguf: tensor 'blk.0.attn_q.weight': field 'n_dims': 7 (expected 1 to 4)");
}

// Slices of the fixture's tensors (written by the gguf package): rows and whole blocks of columns read in
// place equal the same part of the whole tensor, dequantized with the reference-checked dequantizer.
TEST(GgufFileSlices, RowsAndBlockColumnsEqualTheWholeTensor) {
  const std::string img = fixture();
  Result<GgufFile> f = parse_gguf(img.data(), img.size(), "tiny.gguf");
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  for (const char* name : {"blk.0.attn_q.weight", "token_embd.weight", "blk.1.ffn_down.weight"}) {
    SCOPED_TRACE(name);
    const GgufTensorInfo* t = f->find_tensor(name);
    ASSERT_NE(t, nullptr);
    const int64_t k = t->ne[0], n = t->ne[1];
    const size_t row_bytes = *quant::gguf_row_bytes(t->type, k);
    std::vector<float> whole(static_cast<size_t>(n * k));
    for (int64_t r = 0; r < n; ++r)
      XI_CHECK_OK(quant::dequantize_gguf(t->type, t->data + r * row_bytes, k, whole.data() + r * k));
    for (auto [r0, r1] : std::vector<std::pair<int64_t, int64_t>>{{0, n}, {5, 6}, {n / 3, n - 1}}) {
      Result<GgufTensorInfo> s = f->tensor_rows(name, r0, r1);
      ASSERT_TRUE(s.ok()) << s.status().to_string();
      EXPECT_EQ(s->shape(), (Shape{r1 - r0, k}));
      EXPECT_EQ(s->bytes, row_bytes * static_cast<size_t>(r1 - r0));
      std::vector<float> got(static_cast<size_t>(k));
      for (int64_t r = r0; r < r1; ++r) {
        XI_CHECK_OK(quant::dequantize_gguf(s->type, s->data + (r - r0) * row_bytes, k, got.data()));
        ASSERT_EQ(std::memcmp(got.data(), whole.data() + r * k, got.size() * sizeof(float)), 0) << "row " << r;
      }
    }
    const int64_t blk = quant::gguf_block_elems(t->type);
    for (auto [c0, c1] : std::vector<std::pair<int64_t, int64_t>>{{0, k}, {blk, 2 * blk}, {k - blk, k}}) {
      Result<HostTensor> c = f->read_cols(name, c0, c1);
      ASSERT_TRUE(c.ok()) << c.status().to_string();
      const int64_t w = c1 - c0;
      ASSERT_EQ(c->shape(), (Shape{n, static_cast<int64_t>(*quant::gguf_row_bytes(t->type, w))}));
      std::vector<float> got(static_cast<size_t>(w));
      for (int64_t r = 0; r < n; ++r) {
        XI_CHECK_OK(quant::dequantize_gguf(t->type, c->data<uint8_t>() + r * c->shape()[1], w, got.data()));
        ASSERT_EQ(std::memcmp(got.data(), whole.data() + r * k + c0, got.size() * sizeof(float)), 0) << "row " << r;
      }
    }
  }
}

TEST(GgufFileSlices, BadRangesNameFileTensorAndField) {
  const std::string img = fixture();
  Result<GgufFile> f = parse_gguf(img.data(), img.size(), "tiny.gguf");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->tensor_rows("token_embd.weight", 0, 97).status().message(),
            "tiny.gguf: tensor 'token_embd.weight': field 'rows': [0, 97) outside [0, 96)");
  EXPECT_EQ(f->read_cols("token_embd.weight", 16, 64).status().message(),
            "tiny.gguf: tensor 'token_embd.weight': field 'cols': [16, 64) does not fall on Q8_0 block boundaries "
            "(32 columns)");
  EXPECT_EQ(f->read_cols("blk.1.ffn_norm.weight", 0, 8).status().message(),
            "tiny.gguf: tensor 'blk.1.ffn_norm.weight': field 'cols': a column slice needs a 2-D tensor, found [64]");
  EXPECT_EQ(f->tensor_rows("nope", 0, 1).status().code(), StatusCode::kNotFound);
}

TEST(GgufConfig, QkRowPermutationInvertsTheConverters) {
  // convert_hf_to_gguf.py: w.reshape(heads, 2, D/2, K).swapaxes(1, 2): GGUF row (h, j, i) = HF row (h, i, j).
  const int64_t D = 8;
  for (int64_t h = 0; h < 3; ++h)
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < D / 2; ++j)
        EXPECT_EQ(gguf_row_of_hf_row(h * D + i * D / 2 + j, D), h * D + j * 2 + i);
}

}  // namespace
}  // namespace xinfer::model
