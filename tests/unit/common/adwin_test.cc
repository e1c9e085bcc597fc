// ADWIN on synthetic streams with fixed seeds: it detects a known change of the mean soon after
// it happens and keeps only the newer part of the window, and on stationary streams it stays
// quiet. Broken on purpose: with the bound's ln(2 / delta') term divided by 100 (a detector far
// too eager), all three tests failed (detections on the stationary streams, and before the
// change); with the cut test never passing, the two change tests failed.
#include "services/common/ml/adwin.h"

#include <random>

#include <gtest/gtest.h>

namespace strata {
namespace {

// Values of a Bernoulli(p) stream: a replica's per-window error is a mean of such values.
class Bernoulli {
 public:
  explicit Bernoulli(uint64_t seed) : rng_(seed) {}
  double Next(double p) { return std::bernoulli_distribution(p)(rng_) ? 1.0 : 0.0; }

 private:
  std::mt19937_64 rng_;
};

TEST(Adwin, DetectsAChangeOfTheErrorRateSoonAfterItHappens) {
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    SCOPED_TRACE(seed);
    Adwin adwin;
    Bernoulli stream(seed);
    int64_t first_detection = -1;
    for (int64_t i = 0; i < 4000; ++i) {
      const bool changed = adwin.Update(stream.Next(i < 2000 ? 0.2 : 0.6));
      if (changed && first_detection < 0) first_detection = i;
    }
    // Nothing before the change; detected within 300 values after it.
    ASSERT_GE(first_detection, 2000);
    EXPECT_LT(first_detection, 2300);
    // The window has let go of the old part: its mean is the new rate's.
    EXPECT_LT(adwin.width(), 2100);
    EXPECT_NEAR(adwin.mean(), 0.6, 0.05);
  }
}

TEST(Adwin, StaysQuietOnAStationaryStream) {
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    SCOPED_TRACE(seed);
    Adwin adwin;
    Bernoulli stream(100 + seed);
    for (int64_t i = 0; i < 20000; ++i) adwin.Update(stream.Next(0.3));
    EXPECT_EQ(adwin.detections(), 0);
    EXPECT_EQ(adwin.width(), 20000);
    EXPECT_NEAR(adwin.mean(), 0.3, 0.02);
  }
}

TEST(Adwin, DetectsASmallerChangeOnMeansOfWindows) {
  // A replica's per-window error rate over 64 events: less noisy values, a 10-point change.
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    SCOPED_TRACE(seed);
    Adwin adwin;
    std::mt19937_64 rng(seed);
    int64_t first_detection = -1;
    for (int64_t i = 0; i < 3000; ++i) {
      std::binomial_distribution<int> errors(64, i < 1500 ? 0.15 : 0.25);
      if (adwin.Update(errors(rng) / 64.0) && first_detection < 0) first_detection = i;
    }
    ASSERT_GE(first_detection, 1500);
    EXPECT_LT(first_detection, 1700);
  }
}

}  // namespace
}  // namespace strata
