// The sweep's statistics against values known independently: closed forms of the incomplete
// beta function, textbook t quantiles, and SciPy's Levene test with median centres.
#include "orchestrator/sweep/sweep_stats.h"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>

namespace strata::sweep {
namespace {

TEST(SweepStats, DescribesASample) {
  // SciPy's levene example, group a: mean 9.001, sample sd 0.08399074023036356 (Python's
  // statistics.mean / statistics.stdev).
  const std::vector<double> a = {8.88, 9.12, 9.04, 8.98, 9.00, 9.08, 9.01, 8.85, 9.06, 8.99};
  const Describe d = DescribeSample(a);
  EXPECT_EQ(d.n, 10);
  EXPECT_NEAR(d.mean, 9.001, 1e-12);
  EXPECT_NEAR(d.sd, 0.08399074023036356, 1e-12);
  EXPECT_DOUBLE_EQ(d.min, 8.85);
  EXPECT_DOUBLE_EQ(d.max, 9.12);
  EXPECT_NEAR(Median(a), 9.005, 1e-12);
  EXPECT_DOUBLE_EQ(Median({3, 1, 2}), 2);
}

TEST(SweepStats, SmallSamples) {
  EXPECT_EQ(DescribeSample({}).n, 0);
  EXPECT_TRUE(std::isnan(DescribeSample({}).mean));
  const Describe one = DescribeSample({0.5});
  EXPECT_EQ(one.mean, 0.5);
  EXPECT_TRUE(std::isnan(one.sd));  // a sample sd needs two values
  EXPECT_TRUE(std::isnan(MeanCi95HalfWidth({0.5})));
}

TEST(SweepStats, IncompleteBetaClosedForms) {
  // I_x(1, 1) = x; I_x(a, 1) = x^a; I_x(1, b) = 1 - (1 - x)^b; I_x(1/2, 1/2) = 2/pi asin(sqrt x).
  for (double x : {0.0, 0.01, 0.3, 0.5, 0.77, 0.999, 1.0}) {
    EXPECT_NEAR(RegularizedIncompleteBeta(1, 1, x), x, 1e-14) << x;
    EXPECT_NEAR(RegularizedIncompleteBeta(3.5, 1, x), std::pow(x, 3.5), 1e-13) << x;
    EXPECT_NEAR(RegularizedIncompleteBeta(1, 4, x), 1 - std::pow(1 - x, 4), 1e-13) << x;
    EXPECT_NEAR(RegularizedIncompleteBeta(0.5, 0.5, x),
                2 / std::acos(-1.0) * std::asin(std::sqrt(x)), 1e-13)
        << x;
  }
  // Integer a, b: the binomial tail. I_0.4(2, 3) = P(Bin(4, 0.4) >= 2) = 0.5248.
  EXPECT_NEAR(RegularizedIncompleteBeta(2, 3, 0.4), 0.5248, 1e-14);
  // Symmetry I_x(a, b) = 1 - I_{1-x}(b, a), and I_0.5(a, a) = 1/2.
  EXPECT_NEAR(RegularizedIncompleteBeta(7.3, 2.1, 0.6) + RegularizedIncompleteBeta(2.1, 7.3, 0.4),
              1, 1e-14);
  EXPECT_NEAR(RegularizedIncompleteBeta(40, 40, 0.5), 0.5, 1e-13);
  // scipy.special.betainc 1.10.1.
  EXPECT_NEAR(RegularizedIncompleteBeta(2.5, 3.5, 0.3), 0.2967529892956661, 1e-13);
  EXPECT_NEAR(RegularizedIncompleteBeta(10, 20, 0.4), 0.785318389762826, 1e-13);
  EXPECT_TRUE(std::isnan(RegularizedIncompleteBeta(0, 1, 0.5)));
  EXPECT_TRUE(std::isnan(RegularizedIncompleteBeta(1, 1, 1.5)));
}

TEST(SweepStats, FDistributionTail) {
  // scipy.stats.f.sf 1.10.1.
  EXPECT_NEAR(FDistributionSurvival(3.5, 2, 27), 0.04450875394640019, 1e-12);
  EXPECT_NEAR(FDistributionSurvival(0.25, 1, 8), 0.6305360755569764, 1e-12);
  EXPECT_EQ(FDistributionSurvival(0, 3, 9), 1);
  EXPECT_EQ(FDistributionSurvival(std::numeric_limits<double>::infinity(), 3, 9), 0);
}

TEST(SweepStats, StudentTQuantilesMatchTables) {
  // t_{0.975, df}: 12.706, 4.303, 2.776, 2.262, 2.045 in every table; scipy.stats.t.ppf digits.
  EXPECT_NEAR(StudentTQuantile(0.975, 1), 12.706204736174707, 1e-9);
  EXPECT_NEAR(StudentTQuantile(0.975, 2), 4.302652729749464, 1e-9);
  EXPECT_NEAR(StudentTQuantile(0.975, 4), 2.7764451051977934, 1e-9);
  EXPECT_NEAR(StudentTQuantile(0.975, 9), 2.2621571628540993, 1e-9);
  EXPECT_NEAR(StudentTQuantile(0.975, 29), 2.045229642132703, 1e-9);
  EXPECT_NEAR(StudentTQuantile(0.025, 9), -2.2621571628540993, 1e-9);
  EXPECT_EQ(StudentTQuantile(0.5, 3), 0);
}

TEST(SweepStats, MeanConfidenceInterval) {
  // n = 3, sd = 1: t_{0.975, 2} / sqrt(3).
  EXPECT_NEAR(MeanCi95HalfWidth({1, 2, 3}), 4.302652729749464 / std::sqrt(3.0), 1e-9);
}

// SciPy's documentation example for scipy.stats.levene (three groups of 10 measurements).
const std::vector<double> kA = {8.88, 9.12, 9.04, 8.98, 9.00, 9.08, 9.01, 8.85, 9.06, 8.99};
const std::vector<double> kB = {8.88, 8.95, 9.29, 9.44, 9.15, 9.58, 8.36, 9.18, 8.67, 9.05};
const std::vector<double> kC = {8.95, 9.12, 8.95, 8.85, 9.03, 8.84, 9.07, 8.98, 8.86, 8.98};

TEST(SweepStats, BrownForsytheMatchesScipy) {
  // scipy.stats.levene(a, b, c) (center='median' is its default), SciPy 1.10.1:
  // statistic=7.584952754501659, pvalue=0.002431505967249681.
  auto three = BrownForsytheTest({kA, kB, kC});
  ASSERT_TRUE(three.has_value());
  EXPECT_NEAR(three->f, 7.584952754501659, 1e-10);
  EXPECT_EQ(three->df1, 2);
  EXPECT_EQ(three->df2, 27);
  EXPECT_NEAR(three->p, 0.002431505967249681, 1e-12);
  // scipy.stats.levene(a, b): statistic=8.461374333228711, pvalue=0.009364737715584399.
  auto two = BrownForsytheTest({kA, kB});
  ASSERT_TRUE(two.has_value());
  EXPECT_NEAR(two->f, 8.461374333228711, 1e-10);
  EXPECT_NEAR(two->p, 0.009364737715584399, 1e-12);
  // Odd sizes (medians are middle values): scipy.stats.levene([1,2,3,4,5], [2,4,6,8,10.5]):
  // statistic=2.1392405063291138, pvalue=0.1817182659964505.
  auto odd = BrownForsytheTest({{1, 2, 3, 4, 5}, {2, 4, 6, 8, 10.5}});
  ASSERT_TRUE(odd.has_value());
  EXPECT_NEAR(odd->f, 2.1392405063291138, 1e-10);
  EXPECT_NEAR(odd->p, 0.1817182659964505, 1e-12);
}

TEST(SweepStats, BrownForsytheUndefined) {
  EXPECT_FALSE(BrownForsytheTest({kA}).has_value());
  EXPECT_FALSE(BrownForsytheTest({kA, {1.0}}).has_value());
  EXPECT_FALSE(BrownForsytheTest({{1, 1, 1}, {2, 2, 2}}).has_value());  // no spread at all
}

TEST(SweepStats, BootstrapIsDeterministicAndBracketsTheRatio) {
  auto first = BootstrapVarianceRatio(kB, kA);
  auto again = BootstrapVarianceRatio(kB, kA);
  ASSERT_TRUE(first.has_value());
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(first->ci_low, again->ci_low);  // same seed, same draws, bit for bit
  EXPECT_EQ(first->ci_high, again->ci_high);
  EXPECT_EQ(first->resamples, 2000);
  EXPECT_NEAR(first->ratio, SampleVariance(kB) / SampleVariance(kA), 1e-12);
  EXPECT_LT(first->ci_low, first->ratio);
  EXPECT_GT(first->ci_high, first->ratio);
  // b's spread is about 8x a's: the interval lies above 1.
  EXPECT_GT(first->ci_low, 1);
  auto other_seed = BootstrapVarianceRatio(kB, kA, {.resamples = 2000, .seed = 7});
  ASSERT_TRUE(other_seed.has_value());
  EXPECT_NE(other_seed->ci_low, first->ci_low);
  EXPECT_EQ(other_seed->ratio, first->ratio);
}

TEST(SweepStats, BootstrapOfEqualSpreadsContainsOne) {
  auto r = BootstrapVarianceRatio(kC, kA);
  ASSERT_TRUE(r.has_value());
  EXPECT_LT(r->ci_low, 1);
  EXPECT_GT(r->ci_high, 1);
}

TEST(SweepStats, BootstrapUndefined) {
  EXPECT_FALSE(BootstrapVarianceRatio({1.0}, kA).has_value());
  EXPECT_FALSE(BootstrapVarianceRatio(kA, {2, 2, 2}).has_value());
}

}  // namespace
}  // namespace strata::sweep
