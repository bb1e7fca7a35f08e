#include "xinfer/tokenizer/streaming_detokenizer.h"

#include <random>

#include <gtest/gtest.h>

#include "tiny_tokenizer.h"

namespace xinfer::tok {
namespace {

using V = std::vector<int32_t>;

std::vector<std::string> stream(const Tokenizer& t, const V& ids, bool skip = true, const V& prompt = {}) {
  StreamingDetokenizer s(t, skip, prompt);
  std::vector<std::string> out;
  for (int32_t id : ids) out.push_back(s.push(id));
  out.push_back(s.flush());
  return out;
}

std::string concat(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& p : v) s += p;
  return s;
}

TEST(StreamingDetokenizer, HoldsByteRunsUntilTheyEnd) {
  auto t = testing::tiny_tokenizer();
  ASSERT_NE(t, nullptr);
  // "abc" + bytes of U+65E5 + " hello": the character appears only with the token after its last byte.
  const auto pieces = stream(*t, V{274, 233, 154, 168, 272});
  EXPECT_EQ(pieces, (std::vector<std::string>{"abc", "", "", "", "\xe6\x97\xa5 hello", ""}));
  // A valid byte followed by an invalid one: Hugging Face turns the whole run into U+FFFDs, so the
  // first byte ('a' = 0x61) must not be emitted early.
  const V ids{3 + 0x61, 3 + 0xE6, 274};
  EXPECT_EQ(concat(stream(*t, ids)), t->decode(ids));
  EXPECT_EQ(t->decode(ids), "\xef\xbf\xbd\xef\xbf\xbd" "abc");
}

TEST(StreamingDetokenizer, LeadingSpaceFollowsThePrompt) {
  auto t = testing::tiny_tokenizer();
  ASSERT_NE(t, nullptr);
  // "▁hello" is stripped at the start of a text but keeps its space after a prompt.
  EXPECT_EQ(concat(stream(*t, V{272})), "hello");
  EXPECT_EQ(concat(stream(*t, V{272}, true, V{1, 274})), " hello");
}

TEST(StreamingDetokenizer, RandomSequencesConcatenateToDecode) {
  auto t = testing::tiny_tokenizer();
  ASSERT_NE(t, nullptr);
  std::mt19937 rng(11);
  for (int i = 0; i < 3000; ++i) {
    V ids(1 + rng() % 30);
    for (auto& id : ids) id = rng() % 3 == 0 ? static_cast<int32_t>(3 + 0x80 + rng() % 0x80) : static_cast<int32_t>(rng() % 278);
    for (bool skip : {true, false}) {
      const auto pieces = stream(*t, ids, skip);
      ASSERT_EQ(concat(pieces), t->decode(ids, skip)) << "case " << i;
    }
  }
}

}  // namespace
}  // namespace xinfer::tok
