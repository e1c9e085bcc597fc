#include "services/common/ml/adwin.h"

#include <cmath>

namespace strata {
namespace {

// The sum of squared deviations of two groups together, from theirs and their means.
double MergedVariance(double v0, int64_t n0, double mean0, double v1, int64_t n1, double mean1) {
  const double n = static_cast<double>(n0 + n1);
  const double d = mean0 - mean1;
  return v0 + v1 + static_cast<double>(n0) * static_cast<double>(n1) / n * d * d;
}

}  // namespace

Adwin::Adwin(const AdwinOptions& options) : options_(options) {}

bool Adwin::Update(double x) {
  if (rows_.empty()) rows_.emplace_back();
  rows_[0].push_front({x, 0.0, 1});
  if (width_ > 0) {
    const double old_mean = mean();
    variance_ += static_cast<double>(width_) / static_cast<double>(width_ + 1) * (x - old_mean) *
                 (x - old_mean);
  }
  total_ += x;
  ++width_;
  Compress();
  if (++ticks_ % options_.clock != 0) return false;
  bool changed = false;
  while (Cut()) changed = true;
  if (changed) ++detections_;
  return changed;
}

void Adwin::Compress() {
  for (size_t i = 0; i < rows_.size(); ++i) {
    if (static_cast<int>(rows_[i].size()) <= options_.max_buckets) break;
    // Merge the two oldest buckets of this size into one of the next.
    Bucket older = rows_[i].back();
    rows_[i].pop_back();
    Bucket old = rows_[i].back();
    rows_[i].pop_back();
    Bucket merged;
    merged.count = older.count + old.count;
    merged.total = older.total + old.total;
    merged.variance = MergedVariance(older.variance, older.count, older.total / older.count,
                                     old.variance, old.count, old.total / old.count);
    if (i + 1 == rows_.size()) rows_.emplace_back();
    rows_[i + 1].push_front(merged);
  }
}

// Tests every split from the oldest end; drops the oldest bucket at the first one that differs.
bool Adwin::Cut() {
  if (width_ < 2 * options_.min_part) return false;
  const double n = static_cast<double>(width_);
  const double var = variance_ / n;
  const double delta_prime = options_.delta / std::log(n);
  const double log_term = std::log(2.0 / delta_prime);
  int64_t n0 = 0;
  double total0 = 0;
  for (size_t i = rows_.size(); i-- > 0;) {
    const std::deque<Bucket>& row = rows_[i];
    for (size_t b = row.size(); b-- > 0;) {
      n0 += row[b].count;
      total0 += row[b].total;
      const int64_t n1 = width_ - n0;
      if (n1 < options_.min_part) return false;
      if (n0 < options_.min_part) continue;
      const double mean0 = total0 / static_cast<double>(n0);
      const double mean1 = (total_ - total0) / static_cast<double>(n1);
      const double m = 1.0 / (1.0 / static_cast<double>(n0) + 1.0 / static_cast<double>(n1));
      const double eps = std::sqrt(2.0 / m * var * log_term) + 2.0 / (3.0 * m) * log_term;
      if (std::abs(mean0 - mean1) > eps) {
        DropOldest();
        return true;
      }
    }
  }
  return false;
}

void Adwin::DropOldest() {
  for (size_t i = rows_.size(); i-- > 0;) {
    if (rows_[i].empty()) continue;
    const Bucket b = rows_[i].back();
    rows_[i].pop_back();
    const int64_t rest = width_ - b.count;
    if (rest > 0) {
      const double mean_b = b.total / static_cast<double>(b.count);
      const double mean_rest = (total_ - b.total) / static_cast<double>(rest);
      variance_ -= b.variance + static_cast<double>(b.count) * static_cast<double>(rest) /
                                    static_cast<double>(width_) * (mean_b - mean_rest) *
                                    (mean_b - mean_rest);
      if (variance_ < 0) variance_ = 0;
    } else {
      variance_ = 0;
    }
    total_ -= b.total;
    width_ = rest;
    while (!rows_.empty() && rows_.back().empty()) rows_.pop_back();
    return;
  }
}

}  // namespace strata
