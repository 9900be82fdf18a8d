#include "common/shape.h"

#include <cstdint>
#include <limits>

#include "gtest/gtest.h"

namespace fuseserve {
namespace {

TEST(ShapeTest, FormatsAsBracketedList) {
  EXPECT_EQ(ShapeToString({2, 3, 4}), "[2, 3, 4]");
  EXPECT_EQ(ShapeToString({}), "[]");
}

TEST(ShapeTest, CountsElements) {
  EXPECT_EQ(*CheckedNumElements({2, 3, 4}), 24);
  EXPECT_EQ(*CheckedNumElements({}), 1);
  EXPECT_EQ(*CheckedNumElements({5, 0}), 0);
}

TEST(ShapeTest, RejectsNegativeDimensions) {
  auto count = CheckedNumElements({2, -1});
  ASSERT_FALSE(count.ok());
  EXPECT_EQ(count.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ShapeTest, RejectsOverflow) {
  const int64_t big = std::numeric_limits<int64_t>::max() / 2;
  EXPECT_FALSE(CheckedNumElements({big, 3}).ok());
}

}  // namespace
}  // namespace fuseserve
