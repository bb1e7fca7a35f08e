// Python str semantics; expected values are what CPython 3.11 prints.
#include "xinfer/tokenizer/jinja/py_text.h"

#include <gtest/gtest.h>

namespace xinfer::jinja::py {
namespace {

TEST(PyText, FloatRepr) {
  EXPECT_EQ(float_repr(1.0), "1.0");
  EXPECT_EQ(float_repr(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(float_repr(1e16), "1e+16");
  EXPECT_EQ(float_repr(1e15), "1000000000000000.0");
  EXPECT_EQ(float_repr(1e-5), "1e-05");
  EXPECT_EQ(float_repr(0.0001), "0.0001");
  EXPECT_EQ(float_repr(-2.5e-300), "-2.5e-300");
  EXPECT_EQ(float_repr(-0.0), "-0.0");
}

TEST(PyText, Repr) {
  EXPECT_EQ(repr("it's"), "\"it's\"");
  EXPECT_EQ(repr("a\"b'c"), "'a\"b\\'c'");
  EXPECT_EQ(repr("\n\t\x01\\"), "'\\n\\t\\x01\\\\'");
  EXPECT_EQ(repr("é日\u2028"), "'é日\\u2028'");
}

TEST(PyText, SplitStripSlice) {
  EXPECT_EQ(split("  a  b ", std::nullopt, -1), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(split("a b  c  ", std::nullopt, 1), (std::vector<std::string>{"a", "b  c  "}));
  EXPECT_EQ(rsplit("a b  c", std::nullopt, 1), (std::vector<std::string>{"a b", "c"}));
  EXPECT_EQ(split("a,,b", std::string(","), -1), (std::vector<std::string>{"a", "", "b"}));
  EXPECT_EQ(strip("\u3000 x\u00a0", std::nullopt, true, true), "x");
  EXPECT_EQ(strip("xxhixx", std::string("x"), true, false), "hixx");
  EXPECT_EQ(slice_indices(5, std::nullopt, std::nullopt, -1), (std::vector<int64_t>{4, 3, 2, 1, 0}));
  EXPECT_EQ(slice_indices(5, -2, std::nullopt, std::nullopt), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(length("日本語"), 3);
  EXPECT_EQ(title("hello wORLD's 1st"), "Hello World'S 1St");
  EXPECT_EQ(upper("straße é"), "STRAßE É");  // simple case mapping (Python gives 'STRASSE É')
}

}  // namespace
}  // namespace xinfer::jinja::py
