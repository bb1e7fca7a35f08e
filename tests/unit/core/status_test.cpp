#include "xinfer/core/status.h"

#include <gtest/gtest.h>

#include "xinfer/core/check.h"
#include "xinfer/core/tensor.h"

namespace xinfer {
namespace {

Result<int> parse_positive(int x) {
  if (x <= 0) return invalid_argument("must be positive, got " + std::to_string(x));
  return x;
}

Result<int> doubled(int x) {
  XI_ASSIGN_OR_RETURN(int v, parse_positive(x));
  return 2 * v;
}

TEST(Status, ResultCarriesValueOrError) {
  EXPECT_EQ(*doubled(4), 8);
  Result<int> bad = doubled(-1);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().to_string(), "INVALID_ARGUMENT: must be positive, got -1");
}

TEST(Check, FailurePrintsOperandsAndLocation) {
  int a = 3, b = 4;
  EXPECT_DEATH(XI_CHECK_EQ(a, b) << "context", "Check failed: a == b \\(3 vs 4\\) context");
  EXPECT_DEATH(XI_CHECK(a > b), "status_test.cpp:[0-9]+\\] Check failed: a > b");
}

TEST(Tensor, RowsViewOffsetsData) {
  HostTensor t(DType::kF32, Shape{4, 3});
  for (int i = 0; i < 12; ++i) t.data<float>()[i] = static_cast<float>(i);
  TensorView v = t.view().rows(1, 3);
  EXPECT_EQ(v.shape, (Shape{2, 3}));
  EXPECT_EQ(v.as<float>()[0], 3.0f);
  EXPECT_EQ(v.bytes(), 24u);
}

}  // namespace
}  // namespace xinfer
