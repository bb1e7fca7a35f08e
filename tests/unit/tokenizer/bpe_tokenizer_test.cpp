// Expected ids and text: Hugging Face `tokenizers` 0.23 on the same JSON (see tiny_tokenizer.h).
#include <random>

#include <gtest/gtest.h>

#include "tiny_tokenizer.h"

namespace xinfer::tok {
namespace {

using V = std::vector<int32_t>;

TEST(TinyBpe, EncodesLikeHuggingFace) {
  auto t = testing::tiny_tokenizer();
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->encode("hello abc"), (V{1, 272, 259, 274}));
  EXPECT_EQ(t->encode("hello<tool>abc</s>"), (V{1, 272, 276, 259, 274, 2}));  // added tokens, Prepend per stretch
  EXPECT_EQ(t->encode("x\xe6\x97\xa5"), (V{1, 259, 275, 233, 154, 168}));     // byte fallback
  EXPECT_EQ(t->encode("abcabc  hello"), (V{1, 259, 274, 274, 259, 272}));
  EXPECT_EQ(t->encode(""), (V{1}));
  EXPECT_EQ(t->encode("hello abc", /*add_special_tokens=*/false), (V{272, 259, 274}));
}

TEST(TinyBpe, DecodesLikeHuggingFace) {
  auto t = testing::tiny_tokenizer();
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->decode(V{1, 274, 233, 154, 168, 2}), "abc\xe6\x97\xa5");
  EXPECT_EQ(t->decode(V{1, 274, 233, 154, 168, 2}, false), "<s>abc\xe6\x97\xa5</s>");
  EXPECT_EQ(t->decode(V{233, 154}), "\xef\xbf\xbd\xef\xbf\xbd");  // invalid run: one U+FFFD per byte
  EXPECT_EQ(t->decode(V{1, 278, 2}, false), "<s></s>");          // unknown id 278 is dropped
}

TEST(TinyBpe, Metadata) {
  auto t = testing::tiny_tokenizer();
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->vocab_size(), 277);
  EXPECT_EQ(t->bos_id(), 1);
  EXPECT_EQ(t->eos_id(), 2);
  EXPECT_TRUE(t->is_special(1));
  EXPECT_FALSE(t->is_special(276));
  EXPECT_EQ(t->token_to_id("<tool>"), 276);
  EXPECT_EQ(t->id_to_token(272), "\xe2\x96\x81hello");
  EXPECT_EQ(t->id_to_token(9999), "");
}

TEST(TinyBpe, AnyBytesAreSafeToEncode) {
  auto t = testing::tiny_tokenizer();
  ASSERT_NE(t, nullptr);
  std::mt19937 rng(7);
  for (int i = 0; i < 2000; ++i) {
    std::string s(rng() % 40, '\0');
    for (auto& c : s) c = static_cast<char>(rng());
    const V ids = t->encode(s);
    ASSERT_FALSE(ids.empty());
    for (int32_t id : ids) ASSERT_LT(id, t->vocab_size());
  }
  // Invalid bytes are repaired to U+FFFD first (not in this vocab: bytes EF BF BD by fallback).
  EXPECT_EQ(t->encode("\xff", false), (V{259, 3 + 0xEF, 3 + 0xBF, 3 + 0xBD}));
}

TEST(TinyBpe, UnsupportedComponentsFailToLoad) {
  auto j = testing::tiny_tokenizer_json();
  j["normalizer"] = {{"type", "BertNormalizer"}};
  auto t = HfTokenizer::from_json(j, nullptr);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace xinfer::tok
