#include "xinfer/cli/flags.h"

#include <gtest/gtest.h>

#include <vector>

namespace xinfer::cli {
namespace {

Status parse(FlagSet& flags, std::vector<std::string> args) {
  std::vector<char*> argv;
  std::string prog = "prog";
  argv.push_back(prog.data());
  for (auto& a : args) argv.push_back(a.data());
  return flags.parse(static_cast<int>(argv.size()), argv.data());
}

TEST(Flags, ParsesEveryTypeInBothSpellings) {
  std::string model;
  int n = 1;
  float t = 0.5f;
  bool on = true;
  std::optional<int64_t> seed;
  ByteSize mem{1024};
  FlagSet flags("prog", "test");
  flags.add("--model", &model, "m");
  flags.add("--n", &n, "n");
  flags.add("--t", &t, "t");
  flags.add("--on", &on, "on");
  flags.add("--seed", &seed, "seed");
  flags.add("--mem", &mem, "mem");
  ASSERT_TRUE(parse(flags, {"--model", "dir", "--n=3", "--t", "0.25", "--no-on", "--seed", "-7", "--mem", "1.5GiB"}).ok());
  EXPECT_EQ(model, "dir");
  EXPECT_EQ(n, 3);
  EXPECT_EQ(t, 0.25f);
  EXPECT_FALSE(on);
  EXPECT_EQ(seed, -7);
  EXPECT_EQ(mem.bytes, 3ull << 29);
  EXPECT_TRUE(flags.was_set("--mem"));
  EXPECT_NE(flags.help().find("--mem SIZE"), std::string::npos);
  EXPECT_NE(flags.help().find("(default: 1 KiB)"), std::string::npos);
}

TEST(Flags, DefaultTextCanBeReplacedAfterRegistration) {
  int n = 512;
  FlagSet flags("prog", "test");
  flags.add("--n", &n, "n");
  EXPECT_NE(flags.help().find("(default: 512)"), std::string::npos);
  flags.set_default_text("--n", "1024 on a large GPU, else 512");
  EXPECT_NE(flags.help().find("(default: 1024 on a large GPU, else 512)"), std::string::npos);
  EXPECT_EQ(flags.help().find("(default: 512)"), std::string::npos);
  EXPECT_DEATH(flags.set_default_text("--missing", "x"), "no flag --missing");
}

TEST(Flags, ErrorsNameTheFlagAndTheValue) {
  int n = 0;
  ByteSize mem;
  FlagSet flags("prog", "test");
  flags.add("--n", &n, "n");
  flags.add("--mem", &mem, "mem");
  EXPECT_EQ(parse(flags, {"--n", "x"}).message(), "--n expects an integer, got 'x'");
  EXPECT_EQ(parse(flags, {"--n"}).message(), "--n needs a value");
  EXPECT_EQ(parse(flags, {"--bogus"}).message(), "unknown flag '--bogus'");
  EXPECT_EQ(parse(flags, {"stray"}).message(), "unexpected argument 'stray'");
  EXPECT_NE(parse(flags, {"--mem", "3 parsecs"}).message().find("unknown size unit"), std::string::npos);
  EXPECT_NE(parse(flags, {"--mem", "-1GiB"}).message().find("is not a size"), std::string::npos);
}

TEST(Flags, ByteSizeUnits) {
  EXPECT_EQ(*parse_byte_size("123"), 123u);
  EXPECT_EQ(*parse_byte_size("2KiB"), 2048u);
  EXPECT_EQ(*parse_byte_size("2KB"), 2000u);
  EXPECT_EQ(*parse_byte_size("32MiB"), 32u << 20);
  EXPECT_EQ(*parse_byte_size("4G"), 4ull << 30);
  EXPECT_EQ(*parse_byte_size("1TB"), 1000000000000ull);
  EXPECT_EQ(format_byte_size(512u << 20), "512 MiB");
  EXPECT_EQ(format_byte_size(100), "100 B");
}

}  // namespace
}  // namespace xinfer::cli
