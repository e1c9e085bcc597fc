// The statistics `strata sweep` reports across seeds: descriptive numbers per cell, t-based 95%
// confidence intervals of means, and the comparison of a cell's run-to-run variance with the
// baseline's (variance ratio with a bootstrap confidence interval, Brown-Forsythe test).
//
// The distributions are computed here rather than taken from a library: the F and Student-t
// tails both reduce to the regularized incomplete beta function I_x(a, b), evaluated by its
// continued fraction (modified Lentz, as in Numerical Recipes, 3rd ed., section 6.4). Everything
// is a pure function of its arguments; the bootstrap draws from a seeded generator of its own so
// that the same runs always give the same interval.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace strata::sweep {

// Descriptive statistics of one sample; sd is the sample standard deviation (n - 1).
struct Describe {
  int n = 0;
  double mean = 0, sd = 0, min = 0, max = 0;  // sd is NaN for n < 2; all NaN for n == 0
};
Describe DescribeSample(const std::vector<double>& xs);

double Median(std::vector<double> xs);                 // NaN for an empty sample
double SampleVariance(const std::vector<double>& xs);  // NaN for n < 2

// I_x(a, b) for a, b > 0 and 0 <= x <= 1 (NaN outside).
double RegularizedIncompleteBeta(double a, double b, double x);

// P(F > f) for F ~ F(d1, d2): the p-value of an F statistic.
double FDistributionSurvival(double f, double d1, double d2);

// The p-quantile of Student's t with `df` degrees of freedom (0 < p < 1), by bisection on the
// distribution function.
double StudentTQuantile(double p, double df);

// Half-width of the two-sided t-based 95% confidence interval of the mean of `xs`
// (t_{0.975, n-1} * sd / sqrt(n)); NaN for n < 2.
double MeanCi95HalfWidth(const std::vector<double>& xs);

// The Brown-Forsythe test for equal variances (Levene's test with the group medians as centres):
// a one-way ANOVA on |x_ij - median_i|. Robust to non-normal data, which seeds' final accuracies
// often are (a bad seed is an outlier, not a tail).
struct BrownForsythe {
  double f = 0;    // the statistic
  double df1 = 0;  // k - 1
  double df2 = 0;  // N - k
  double p = 0;    // P(F(df1, df2) > f)
};
// nullopt when it is undefined: fewer than 2 groups, a group with fewer than 2 values, or no
// spread at all in the deviations.
std::optional<BrownForsythe> BrownForsytheTest(const std::vector<std::vector<double>>& groups);

// Var(sample) / Var(baseline) with a percentile bootstrap interval: each resample draws both
// samples again with replacement (independently, each at its own size). Resamples whose ratio is
// undefined (a baseline without spread) count as +infinity, so a baseline that often has none
// widens the interval rather than vanishing from it.
struct VarianceRatio {
  double ratio = 0;
  double ci_low = 0, ci_high = 0;  // the 2.5% and 97.5% percentiles
  int resamples = 0;
};
struct BootstrapOptions {
  int resamples = 2000;
  uint64_t seed = 20211215;
  double confidence = 0.95;
};
// nullopt when either sample has fewer than 2 values or the baseline has no spread.
std::optional<VarianceRatio> BootstrapVarianceRatio(const std::vector<double>& sample,
                                                    const std::vector<double>& baseline,
                                                    const BootstrapOptions& options = {});

}  // namespace strata::sweep
