#include "orchestrator/sweep/sweep_stats.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

namespace strata::sweep {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// The continued fraction of I_x(a, b) (Numerical Recipes, 3rd ed., eq. 6.4.5), by the modified
// Lentz method; it converges fast for x < (a + 1) / (a + b + 2), where the caller uses it.
double BetaContinuedFraction(double a, double b, double x) {
  constexpr int kMaxIterations = 10000;
  constexpr double kEpsilon = 1e-15;
  constexpr double kTiny = 1e-300;
  const double qab = a + b, qap = a + 1, qam = a - 1;
  double c = 1, d = 1 - qab * x / qap;
  if (std::fabs(d) < kTiny) d = kTiny;
  d = 1 / d;
  double h = d;
  for (int m = 1; m <= kMaxIterations; ++m) {
    const int m2 = 2 * m;
    double aa = m * (b - m) * x / ((qam + m2) * (a + m2));
    d = 1 + aa * d;
    if (std::fabs(d) < kTiny) d = kTiny;
    c = 1 + aa / c;
    if (std::fabs(c) < kTiny) c = kTiny;
    d = 1 / d;
    h *= d * c;
    aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2));
    d = 1 + aa * d;
    if (std::fabs(d) < kTiny) d = kTiny;
    c = 1 + aa / c;
    if (std::fabs(c) < kTiny) c = kTiny;
    d = 1 / d;
    const double del = d * c;
    h *= del;
    if (std::fabs(del - 1) < kEpsilon) break;
  }
  return h;
}

double StudentTCdf(double t, double df) {
  const double tail = 0.5 * RegularizedIncompleteBeta(df / 2, 0.5, df / (df + t * t));
  return t > 0 ? 1 - tail : tail;
}

// The `q` quantile of a sorted sample, linear between order statistics (Hyndman-Fan type 7,
// the default of R and NumPy).
double SortedQuantile(const std::vector<double>& sorted, double q) {
  const double pos = q * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  if (std::isinf(sorted[lo]) || std::isinf(sorted[hi])) return sorted[pos - lo < 0.5 ? lo : hi];
  return sorted[lo] + (pos - static_cast<double>(lo)) * (sorted[hi] - sorted[lo]);
}

}  // namespace

Describe DescribeSample(const std::vector<double>& xs) {
  Describe d;
  d.n = static_cast<int>(xs.size());
  if (xs.empty()) {
    d.mean = d.sd = d.min = d.max = kNaN;
    return d;
  }
  d.mean = std::accumulate(xs.begin(), xs.end(), 0.0) / d.n;
  d.sd = std::sqrt(SampleVariance(xs));
  d.min = *std::min_element(xs.begin(), xs.end());
  d.max = *std::max_element(xs.begin(), xs.end());
  return d;
}

double Median(std::vector<double> xs) {
  if (xs.empty()) return kNaN;
  std::sort(xs.begin(), xs.end());
  const size_t n = xs.size();
  return n % 2 == 1 ? xs[n / 2] : 0.5 * (xs[n / 2 - 1] + xs[n / 2]);
}

double SampleVariance(const std::vector<double>& xs) {
  if (xs.size() < 2) return kNaN;
  const double mean = std::accumulate(xs.begin(), xs.end(), 0.0) / static_cast<double>(xs.size());
  double ss = 0;
  for (double x : xs) ss += (x - mean) * (x - mean);
  return ss / static_cast<double>(xs.size() - 1);
}

double RegularizedIncompleteBeta(double a, double b, double x) {
  if (!(a > 0) || !(b > 0) || !(x >= 0) || !(x <= 1)) return kNaN;
  if (x == 0) return 0;
  if (x == 1) return 1;
  const double front = std::exp(std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) +
                                a * std::log(x) + b * std::log1p(-x));
  if (x < (a + 1) / (a + b + 2)) return front * BetaContinuedFraction(a, b, x) / a;
  return 1 - front * BetaContinuedFraction(b, a, 1 - x) / b;
}

double FDistributionSurvival(double f, double d1, double d2) {
  if (std::isnan(f) || !(d1 > 0) || !(d2 > 0)) return kNaN;
  if (f <= 0) return 1;
  if (std::isinf(f)) return 0;
  return RegularizedIncompleteBeta(d2 / 2, d1 / 2, d2 / (d2 + d1 * f));
}

double StudentTQuantile(double p, double df) {
  if (!(p > 0) || !(p < 1) || !(df > 0)) return kNaN;
  if (p == 0.5) return 0;
  if (p < 0.5) return -StudentTQuantile(1 - p, df);
  double lo = 0, hi = 1;
  while (StudentTCdf(hi, df) < p && hi < 1e300) hi *= 2;
  for (int i = 0; i < 400 && hi - lo > 1e-13 * std::max(1.0, hi); ++i) {
    const double mid = 0.5 * (lo + hi);
    (StudentTCdf(mid, df) < p ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

double MeanCi95HalfWidth(const std::vector<double>& xs) {
  if (xs.size() < 2) return kNaN;
  const double n = static_cast<double>(xs.size());
  return StudentTQuantile(0.975, n - 1) * std::sqrt(SampleVariance(xs) / n);
}

std::optional<BrownForsythe> BrownForsytheTest(const std::vector<std::vector<double>>& groups) {
  const size_t k = groups.size();
  if (k < 2) return std::nullopt;
  std::vector<std::vector<double>> z(k);
  size_t total = 0;
  for (size_t i = 0; i < k; ++i) {
    if (groups[i].size() < 2) return std::nullopt;
    const double median = Median(groups[i]);
    for (double x : groups[i]) z[i].push_back(std::fabs(x - median));
    total += groups[i].size();
  }
  double grand = 0;
  std::vector<double> means(k);
  for (size_t i = 0; i < k; ++i) {
    means[i] = std::accumulate(z[i].begin(), z[i].end(), 0.0) / static_cast<double>(z[i].size());
    grand += std::accumulate(z[i].begin(), z[i].end(), 0.0);
  }
  grand /= static_cast<double>(total);
  double between = 0, within = 0, scale = 0;
  for (size_t i = 0; i < k; ++i) {
    between += static_cast<double>(z[i].size()) * (means[i] - grand) * (means[i] - grand);
    for (double v : z[i]) within += (v - means[i]) * (v - means[i]), scale += v * v;
  }
  // Two runs in every arm give equal deviations within each arm: no within-arm spread, only
  // rounding (|0.70 - 0.74| and |0.78 - 0.74| differ in the last bits), which must not pass for
  // a statistic.
  if (!(within > 1e-12 * scale)) return std::nullopt;
  BrownForsythe out;
  out.df1 = static_cast<double>(k - 1);
  out.df2 = static_cast<double>(total - k);
  out.f = (between / out.df1) / (within / out.df2);
  out.p = FDistributionSurvival(out.f, out.df1, out.df2);
  return out;
}

std::optional<VarianceRatio> BootstrapVarianceRatio(const std::vector<double>& sample,
                                                    const std::vector<double>& baseline,
                                                    const BootstrapOptions& options) {
  if (sample.size() < 2 || baseline.size() < 2 || options.resamples < 1) return std::nullopt;
  const double base_var = SampleVariance(baseline);
  if (!(base_var > 0)) return std::nullopt;
  VarianceRatio out;
  out.ratio = SampleVariance(sample) / base_var;
  out.resamples = options.resamples;
  // mt19937_64's output sequence is fixed by the standard; the index is drawn by modulo rather
  // than std::uniform_int_distribution, whose algorithm differs between standard libraries.
  // (The modulo bias is below 1e-17 for samples this small.)
  std::mt19937_64 rng(options.seed);
  std::vector<double> ratios, a(sample.size()), b(baseline.size());
  ratios.reserve(static_cast<size_t>(options.resamples));
  for (int r = 0; r < options.resamples; ++r) {
    for (double& v : a) v = sample[rng() % sample.size()];
    for (double& v : b) v = baseline[rng() % baseline.size()];
    const double vb = SampleVariance(b);
    ratios.push_back(vb > 0 ? SampleVariance(a) / vb : kInf);
  }
  std::sort(ratios.begin(), ratios.end());
  const double alpha = 1 - options.confidence;
  out.ci_low = SortedQuantile(ratios, alpha / 2);
  out.ci_high = SortedQuantile(ratios, 1 - alpha / 2);
  return out;
}

}  // namespace strata::sweep
