// ADWIN, the adaptive windowing change detector of Bifet and Gavalda ("Learning from
// Time-Changing Data with Adaptive Windowing", SDM 2007), in its exponential-histogram form
// (ADWIN2): it keeps a window of the latest values of a bounded stream (for Strata, a stream
// replica's prequential error per window of events) in buckets of 1, 2, 4, ... values, at most
// `max_buckets` of each size, and drops the oldest part of the window whenever some split of it
// into an older and a newer part has means further apart than the Hoeffding-style bound
//
//   eps = sqrt(2 / m * var * ln(2 / delta')) + 2 / (3 m) * ln(2 / delta'),
//   m = 1 / (1 / n0 + 1 / n1) (n0, n1 the parts' lengths), delta' = delta / ln(n),
//
// var being the variance of the whole window. Such a drop is a detected change. Memory and time
// per value are O(max_buckets * log n); the splits are tested every `clock` values.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

namespace strata {

struct AdwinOptions {
  double delta = 0.002;  // the confidence: lower, fewer false alarms and later detections
  int clock = 32;        // test the splits every this many values
  int max_buckets = 5;   // buckets of each size before two are merged
  int min_part = 5;      // neither part of a split may be shorter
};

class Adwin {
 public:
  explicit Adwin(const AdwinOptions& options = {});

  // Adds `x` (the stream's next value); true when the window shrank because of a change.
  bool Update(double x);

  int64_t width() const { return width_; }
  double mean() const { return width_ > 0 ? total_ / static_cast<double>(width_) : 0.0; }
  int64_t detections() const { return detections_; }

 private:
  struct Bucket {
    double total = 0;
    double variance = 0;  // the sum of squared deviations from the bucket's mean
    int64_t count = 0;
  };
  void Compress();
  bool Cut();
  void DropOldest();

  AdwinOptions options_;
  std::vector<std::deque<Bucket>> rows_;  // rows_[i]: buckets of 2^i values, newest first
  double total_ = 0, variance_ = 0;
  int64_t width_ = 0, ticks_ = 0, detections_ = 0;
};

}  // namespace strata
