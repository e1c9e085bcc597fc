// The replay rules of `strata produce` (services/common/stream/event_replay.h): the drift
// permutation and the token bucket with its ramp. With the bucket's rate ignored on purpose
// (Available returning `max` always), TokenBucketHoldsTheRateAndRampsInSteps failed at its first
// check: 1000 tokens at time zero where there were 0.
#include <chrono>
#include <set>

#include <gtest/gtest.h>

#include "services/common/stream/event_replay.h"

namespace strata {
namespace {

TEST(EventReplay, DriftPermutationMovesEveryClassAndIsTheSameForTheSameSeed) {
  for (int32_t classes : {2, 3, 10, 100}) {
    const std::vector<int32_t> p = DriftPermutation(classes, 7);
    ASSERT_EQ(p.size(), static_cast<size_t>(classes));
    EXPECT_EQ(std::set<int32_t>(p.begin(), p.end()).size(), p.size()) << "not a permutation";
    for (int32_t y = 0; y < classes; ++y) EXPECT_NE(p[y], y) << classes << " classes, class " << y;
    EXPECT_EQ(p, DriftPermutation(classes, 7));
  }
  EXPECT_NE(DriftPermutation(10, 1), DriftPermutation(10, 2));
}

TEST(EventReplay, TokenBucketHoldsTheRateAndRampsInSteps) {
  using std::chrono::milliseconds;
  const auto t0 = TokenBucket::Clock::time_point();
  TokenBucket bucket(100, 10, t0);
  EXPECT_EQ(bucket.Available(t0, 1000), 0);
  EXPECT_EQ(bucket.Available(t0 + milliseconds(50), 1000), 5);
  bucket.Spend(5);
  EXPECT_EQ(bucket.Available(t0 + milliseconds(1000), 1000), 10);  // capped at the burst
  bucket.Spend(10);
  EXPECT_EQ(bucket.UntilNext(), std::chrono::microseconds(10000));
  TokenBucket unlimited(0, 1, t0);
  EXPECT_EQ(unlimited.Available(t0, 256), 256);
  EXPECT_DOUBLE_EQ(RampedRate(1000, 500, 10, 9.9), 1000);
  EXPECT_DOUBLE_EQ(RampedRate(1000, 500, 10, 25), 2000);
  EXPECT_DOUBLE_EQ(RampedRate(1000, 0, 10, 25), 1000);
}

}  // namespace
}  // namespace strata
