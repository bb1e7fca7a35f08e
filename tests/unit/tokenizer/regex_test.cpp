#include "xinfer/tokenizer/regex.h"

#include <gtest/gtest.h>

namespace xinfer::tok {
namespace {

std::vector<std::string> matches(const Regex& re, std::string_view s) {
  std::vector<std::pair<size_t, size_t>> m;
  re.find_all(s, m);
  std::vector<std::string> out;
  for (auto [b, e] : m) out.emplace_back(s.substr(b, e - b));
  return out;
}

TEST(Regex, OnigWhitespaceIncludesNel) {
  EXPECT_EQ(onig_to_pcre2(R"(\s+(?!\S))"), R"([\s\x{85}]+(?![^\s\x{85}]))");
  EXPECT_EQ(onig_to_pcre2(R"([^\s\p{L}])"), R"([^\s\x{85}\p{L}])");
  auto re = Regex::compile(R"(\s+)");
  ASSERT_TRUE(re.ok());
  EXPECT_EQ(matches(*re, "a\xc2\x85 b"), std::vector<std::string>{"\xc2\x85 "});
}

TEST(Regex, Llama3PatternSplitsLikeHuggingFace) {
  auto re = Regex::compile(
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)");
  ASSERT_TRUE(re.ok());
  EXPECT_EQ(matches(*re, "I'LL pay 12345!!  ok\n\n"),
            (std::vector<std::string>{"I", "'LL", " pay", " ", "123", "45", "!!", " ", " ok", "\n\n"}));
}

TEST(Regex, BadPatternIsAnError) { EXPECT_FALSE(Regex::compile("(unclosed").ok()); }

}  // namespace
}  // namespace xinfer::tok
