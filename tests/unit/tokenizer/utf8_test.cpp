// Expected strings are Python's bytes.decode("utf-8", errors="replace") of the same bytes.
#include "xinfer/tokenizer/utf8.h"

#include <gtest/gtest.h>

#include "xinfer/tokenizer/byte_level.h"

namespace xinfer::tok {
namespace {

const std::string R(kReplacementChar);

TEST(Utf8Lossy, MaximalSubpartsBecomeOneReplacementEach) {
  EXPECT_EQ(utf8_lossy("a\xe6\x97" "b"), "a" + R + "b");
  EXPECT_EQ(utf8_lossy("\xf0\x9f\x98"), R);
  EXPECT_EQ(utf8_lossy("\xc0\xaf"), R + R);                    // overlong lead
  EXPECT_EQ(utf8_lossy("\xed\xa0\x80"), R + R + R);            // surrogate
  EXPECT_EQ(utf8_lossy("\xf4\x90\x80\x80"), R + R + R + R);    // > U+10FFFF
  EXPECT_EQ(utf8_lossy("\xe6\x97\xa5\xff"), "\xe6\x97\xa5" + R);
  EXPECT_EQ(utf8_lossy("plain"), "plain");
}

TEST(Utf8, ValidPrefixAndCodepoints) {
  EXPECT_EQ(valid_utf8_prefix("ab\xe6\x97"), 2u);
  EXPECT_TRUE(is_valid_utf8("\xf0\x9f\xa4\x96"));
  std::string s;
  append_codepoint(0x1F916, s);
  size_t i = 0;
  EXPECT_EQ(next_codepoint(s, i), 0x1F916u);
  EXPECT_EQ(i, 4u);
}

TEST(ByteLevelMap, RoundTripsEveryByte) {
  const auto& m = ByteLevelMap::get();
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  std::string mapped, back;
  m.encode(all, mapped);
  ASSERT_TRUE(m.decode(mapped, back));
  EXPECT_EQ(back, all);
  EXPECT_EQ(m.byte_to_utf8[' '], "\xc4\xa0");  // 'Ġ'
  EXPECT_EQ(m.byte_to_utf8['\n'], "\xc4\x8a");  // 'Ċ'
}

}  // namespace
}  // namespace xinfer::tok
