#include "services/common/wire/flat_layout.h"

#include <gtest/gtest.h>

namespace strata {
namespace {

std::vector<TensorSpec> Specs(const std::vector<int64_t>& sizes) {
  std::vector<TensorSpec> specs;
  for (size_t i = 0; i < sizes.size(); ++i) {
    specs.push_back({"t" + std::to_string(i), {sizes[i]}, DType::kFloat32});
  }
  return specs;
}

TEST(FlatLayout, OffsetsAreContiguousAndNamed) {
  auto layout = FlatLayout::Create(Specs({3, 5, 1}));
  ASSERT_TRUE(layout.ok());
  EXPECT_EQ(layout->total_floats(), 9u);
  EXPECT_EQ(layout->Find("t1")->offset, 3u);
  EXPECT_EQ(layout->Find("t2")->offset, 8u);
  EXPECT_EQ(layout->Find("nope"), nullptr);
}

TEST(FlatLayout, RefusesDuplicatesAndNonFloat) {
  auto specs = Specs({1, 2});
  specs[1].name = "t0";
  EXPECT_FALSE(FlatLayout::Create(specs).ok());
  auto ints = Specs({1});
  ints[0].dtype = DType::kInt64;
  EXPECT_FALSE(FlatLayout::Create(ints).ok());
}

}  // namespace
}  // namespace strata
