#include "xinfer/compress/layer_selection.h"

#include <gtest/gtest.h>

namespace xinfer::compress {
namespace {

std::vector<bool> mask_of(const std::string& spec, int layers, const std::vector<int>& order = {}) {
  auto s = parse_layer_selection(spec, layers);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return selection_mask(*s, layers, order);
}

TEST(LayerSelection, Modes) {
  EXPECT_EQ(mask_of("all", 3), (std::vector<bool>{true, true, true}));
  EXPECT_EQ(mask_of("first:2", 4), (std::vector<bool>{true, true, false, false}));
  EXPECT_EQ(mask_of("last:1", 4), (std::vector<bool>{false, false, false, true}));
  EXPECT_EQ(mask_of("0,2-3", 5), (std::vector<bool>{true, false, true, true, false}));
  const std::vector<int> order = order_by_sensitivity({0.5, 0.1, 0.3, 0.1});
  EXPECT_EQ(order, (std::vector<int>{1, 3, 2, 0}));
  EXPECT_EQ(mask_of("2", 4, order), (std::vector<bool>{false, true, false, true}));
}

TEST(LayerSelection, BadSpecsNameTheFlag) {
  for (const char* bad : {"first:9", "x", "3-1", "0,7", "last:", "1,a"}) {
    auto s = parse_layer_selection(bad, 4);
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_NE(s.status().message().find("--quantized-layers"), std::string::npos) << s.status().message();
  }
}

}  // namespace
}  // namespace xinfer::compress
