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

TEST(PartitionPlan, BalancedDeterministicAndComplete) {
  auto specs = Specs({100, 90, 80, 10, 10, 5, 5, 1});
  auto plan = PlanPartitions(specs, 3);
  ASSERT_TRUE(plan.ok());
  size_t assigned = 0;
  for (const auto& tensors : plan->tensors_of) assigned += tensors.size();
  EXPECT_EQ(assigned, specs.size());
  const auto [lo, hi] = std::minmax_element(plan->bytes_of.begin(), plan->bytes_of.end());
  EXPECT_LE(*hi - *lo, 100u * 4);  // within one tensor's size
  auto again = PlanPartitions(specs, 3);
  EXPECT_EQ(plan->owner, again->owner);
}

TEST(PartitionPlan, RefusesMoreServersThanTensors) {
  auto plan = PlanPartitions(Specs({1, 2}), 3);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("would own nothing"), std::string::npos);
  EXPECT_FALSE(PlanPartitions(Specs({1}), 0).ok());
}

}  // namespace
}  // namespace strata
