// The reading of a drift's recovery from the replicas' accuracy curves (drift_recovery.h), on
// curves written by hand where the answer is known.
#include "orchestrator/record/drift_recovery.h"

#include <gtest/gtest.h>

namespace strata {
namespace {

// A replica's result with points (seq, accuracy) every 1,000 events.
nlohmann::json Replica(const std::vector<std::pair<int64_t, double>>& points) {
  nlohmann::json curve = nlohmann::json::array();
  int64_t scored = 0;
  for (const auto& [seq, accuracy] : points) curve.push_back({seq, scored += 1000, accuracy});
  return {{"accuracy_curve", curve}};
}

TEST(DriftRecovery, TheLevelIsTheLastFivePointsAndRecoveryTheFirstPointBackAfterAFall) {
  // Level: mean of 0.80, 0.86, 0.86, 0.86, 0.86, 0.86's last five = 0.86. Falls at 10,500, is
  // within a point (0.851 >= 0.85) at 14,500: 4,500 events after the drift at 10,000.
  const auto r = ReadDriftRecovery(
      {Replica({{4500, 0.80}, {5500, 0.86}, {6500, 0.86}, {7500, 0.86}, {8500, 0.86},
                {9500, 0.86}, {10500, 0.20}, {12500, 0.70}, {14500, 0.851}, {16500, 0.90}})},
      10000);
  ASSERT_TRUE(r.has_value());
  ASSERT_EQ(r->replicas.size(), 1u);
  EXPECT_NEAR(r->level_before, 0.86, 1e-12);
  ASSERT_TRUE(r->events_to_recover.has_value());
  EXPECT_EQ(*r->events_to_recover, 4500);
  EXPECT_NEAR(r->final_accuracy, 0.90, 1e-12);
  const nlohmann::json j = DriftRecoveryJson(*r);
  EXPECT_EQ(j["recovered"], true);
  EXPECT_EQ(j["events_to_recover"], 4500);
}

TEST(DriftRecovery, NeverWhenHalfTheReplicasNeverCameBackOtherwiseTheMedian) {
  const auto fell_and_back = [](int64_t back) {
    return Replica({{9000, 0.85}, {11000, 0.10}, {back, 0.85}});
  };
  const nlohmann::json never = Replica({{9000, 0.85}, {11000, 0.10}, {20000, 0.50}});
  const nlohmann::json never_fell = Replica({{9000, 0.85}, {11000, 0.85}});
  auto two = ReadDriftRecovery({fell_and_back(13000), never}, 10000);
  ASSERT_TRUE(two.has_value());
  EXPECT_FALSE(two->events_to_recover.has_value());
  EXPECT_EQ(DriftRecoveryJson(*two)["events_to_recover"], nullptr);
  EXPECT_EQ(DriftRecoveryJson(*two)["recovered"], false);
  auto three = ReadDriftRecovery({fell_and_back(13000), never, fell_and_back(17000)}, 10000);
  ASSERT_TRUE(three.has_value());
  ASSERT_TRUE(three->events_to_recover.has_value());
  EXPECT_EQ(*three->events_to_recover, 7000);  // 3,000, 7,000 and never: the middle one
  // A replica that never fell a point has nothing to come back from: 0 events.
  auto steady = ReadDriftRecovery({never_fell}, 10000);
  ASSERT_TRUE(steady.has_value());
  ASSERT_TRUE(steady->events_to_recover.has_value());
  EXPECT_EQ(*steady->events_to_recover, 0);
}

TEST(DriftRecovery, NothingToReadWithoutADriftOrAPointBeforeIt) {
  const nlohmann::json late = Replica({{12000, 0.5}, {13000, 0.6}});
  EXPECT_FALSE(ReadDriftRecovery({late}, 10000).has_value());
  EXPECT_FALSE(ReadDriftRecovery({Replica({{9000, 0.8}})}, 0).has_value());
  // Malformed results and points are passed over, not trusted.
  EXPECT_FALSE(ReadDriftRecovery({nlohmann::json("x"), nlohmann::json::object()}, 10000));
  const nlohmann::json odd = {{"accuracy_curve", {{9000, 1000}, "x", {9500, 2000, 0.8}}}};
  auto r = ReadDriftRecovery({odd}, 10000);
  ASSERT_TRUE(r.has_value());
  EXPECT_NEAR(r->level_before, 0.8, 1e-12);
}

}  // namespace
}  // namespace strata
