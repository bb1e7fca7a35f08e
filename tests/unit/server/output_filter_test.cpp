// OutputFilter: stop strings and rules over text that arrives in arbitrary pieces. The reference for every
// split is the whole text processed at once (and Python-like str.find semantics for the expectations).
#include "xinfer/server/output_filter.h"

#include <gtest/gtest.h>

#include <random>

namespace xinfer::server {
namespace {

struct FilterRun {
  std::string text;        // everything emitted
  FilterStop stop = FilterStop::kNone;
  size_t max_held = 0;
};

FilterRun feed(OutputFilter& f, const std::vector<std::string>& pieces) {
  FilterRun r;
  for (const std::string& p : pieces) {
    FilterOutput o = f.push(p);
    r.text += o.text;
    r.max_held = std::max(r.max_held, f.held_bytes());
    if (o.stop != FilterStop::kNone) {
      r.stop = o.stop;
      return r;
    }
  }
  FilterOutput o = f.finish();
  r.text += o.text;
  r.stop = o.stop;
  return r;
}

std::vector<std::string> chars(const std::string& s) {
  std::vector<std::string> out;
  for (char c : s) out.emplace_back(1, c);
  return out;
}

TEST(OutputFilter, StopStringAcrossPiecesNeverLeaks) {
  OutputFilter f({"girl named"}, nullptr);
  std::string emitted;
  for (const std::string& piece : {std::string("a little gi"), std::string("rl"), std::string(" na"),
                                   std::string("med Lily")}) {
    FilterOutput o = f.push(piece);
    emitted += o.text;
    // Nothing of the stop string ever reaches the client.
    EXPECT_EQ(emitted.find("girl"), std::string::npos) << emitted;
    if (o.stop != FilterStop::kNone) {
      EXPECT_EQ(o.stop, FilterStop::kStopString);
      EXPECT_EQ(o.matched, "girl named");
      break;
    }
  }
  EXPECT_EQ(emitted, "a little ");
  EXPECT_TRUE(f.stopped());
  EXPECT_EQ(f.push("more").text, "");
}

TEST(OutputFilter, HoldsOnlyWhatCouldStillMatch) {
  OutputFilter f({"abc"}, nullptr);
  EXPECT_EQ(f.push("xxab").text, "xx");  // "ab" could start "abc"
  EXPECT_EQ(f.held_bytes(), 2u);
  EXPECT_EQ(f.push("x").text, "abx");    // it did not
  EXPECT_EQ(f.held_bytes(), 0u);
  EXPECT_EQ(f.push("a").text, "");
  FilterOutput o = f.finish();           // end of generation: a held prefix is plain text
  EXPECT_EQ(o.text, "a");
  EXPECT_EQ(o.stop, FilterStop::kNone);
}

TEST(OutputFilter, EarliestStopWinsAndIncludeStopStr) {
  OutputFilter f({"cd", "bcdef"}, nullptr, /*include_stop_str=*/true);
  FilterRun r = feed(f, chars("abcdefg"));
  // "bcdef" starts earlier than "cd": it is held until resolved, then wins.
  EXPECT_EQ(r.text, "abcdef");
  EXPECT_EQ(r.stop, FilterStop::kStopString);
}

TEST(OutputFilter, EverySplitGivesTheSameResult) {
  const std::string text = "Once upon a time, there was a little girl named Lily. She loved to play.";
  const std::vector<std::vector<std::string>> stop_sets = {{"girl named"}, {"e w"}, {"Lily.", "zzz"}, {"nothere"},
                                                           {"y. S", "time"}};
  std::mt19937 rng(7);
  for (const auto& stops : stop_sets) {
    size_t first = std::string::npos;
    for (const auto& s : stops) first = std::min(first, text.find(s));
    const std::string expected = first == std::string::npos ? text : text.substr(0, first);
    for (int trial = 0; trial < 200; ++trial) {
      std::vector<std::string> pieces;
      for (size_t i = 0; i < text.size();) {
        const size_t n = std::min<size_t>(text.size() - i, 1 + rng() % 6);
        pieces.push_back(text.substr(i, n));
        i += n;
      }
      OutputFilter f(stops, nullptr);
      FilterRun r = feed(f, pieces);
      ASSERT_EQ(r.text, expected) << stops[0];
      EXPECT_EQ(r.stop, first == std::string::npos ? FilterStop::kNone : FilterStop::kStopString);
      size_t longest = 0;
      for (const auto& s : stops) longest = std::max(longest, s.size());
      EXPECT_LT(r.max_held, longest);  // never holds a whole stop string's worth
    }
  }
}

TEST(OutputFilter, MaskRuleLiteralAndRegex) {
  auto rules = FilterRules::create({{"Lily", false, FilterAction::kMask, "[name]"},
                                    {"[0-9]{3}-[0-9]{4}", true, FilterAction::kMask, "<phone>"}});
  ASSERT_TRUE(rules.ok()) << rules.status().to_string();
  OutputFilter f({}, *rules);
  FilterRun r = feed(f, chars("Lily called 555-1234 and Lily."));
  EXPECT_EQ(r.text, "[name] called <phone> and [name].");
  EXPECT_EQ(r.stop, FilterStop::kNone);
}

TEST(OutputFilter, GreedyRegexWaitsForItsEnd) {
  auto rules = FilterRules::create({{"a+", true, FilterAction::kMask, "A"}});
  ASSERT_TRUE(rules.ok());
  OutputFilter f({}, *rules);
  EXPECT_EQ(f.push("xaa").text, "x");  // "aa" could grow
  EXPECT_EQ(f.push("a").text, "");
  EXPECT_EQ(f.push("b").text, "Ab");   // one match of the whole run
  EXPECT_EQ(f.finish().text, "");
}

TEST(OutputFilter, StopAndContentFilterRules) {
  auto rules = FilterRules::create({{"bad\\s+word", true, FilterAction::kContentFilter, ""},
                                    {"END", false, FilterAction::kStop, ""}});
  ASSERT_TRUE(rules.ok());
  {
    OutputFilter f({}, *rules);
    FilterRun r = feed(f, chars("this is a bad  word here"));
    EXPECT_EQ(r.text, "this is a ");
    EXPECT_EQ(r.stop, FilterStop::kContentFilter);
  }
  {
    OutputFilter f({}, *rules);
    FilterRun r = feed(f, {"fine text E", "N", "D trailing"});
    EXPECT_EQ(r.text, "fine text ");
    EXPECT_EQ(r.stop, FilterStop::kStopRule);
  }
}

TEST(OutputFilter, MultibyteTextStaysWhole) {
  OutputFilter f({"\xC3\xA9t\xC3\xA9"}, nullptr);  // "été"
  FilterRun r = feed(f, {"l'\xC3\xA9", "t\xC3", "\xA9 est"});  // pieces may split code points only if input does
  EXPECT_EQ(r.text, "l'");
  EXPECT_EQ(r.stop, FilterStop::kStopString);
}

TEST(FilterRules, ParseJsonAndErrors) {
  auto ok = FilterRules::parse_json(R"([{"pattern": "x", "action": "mask"},
                                        {"pattern": "y+", "type": "regex", "action": "stop"}])");
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ((*ok)->size(), 2u);
  EXPECT_EQ((*ok)->compiled()[0].rule.replacement, "***");
  for (const char* bad : {"{", "{}", R"([{"action": "mask"}])", R"([{"pattern": "x", "action": "zap"}])",
                          R"([{"pattern": "(", "type": "regex", "action": "mask"}])",
                          R"([{"pattern": "a*", "type": "regex", "action": "mask"}])",
                          R"([{"pattern": "", "action": "stop"}])",
                          R"([{"pattern": "x", "type": "glob", "action": "stop"}])"}) {
    auto r = FilterRules::parse_json(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
    }
  }
  EXPECT_EQ(FilterRules::load("/nonexistent/rules.json").status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace xinfer::server
