// The two rules `strata produce` replays a data set by: a token bucket that holds the event rate
// (and ramps it in steps, to look for the highest rate a consumer sustains), and the drift
// permutation that relabels every event from a given one on (a concept drift whose moment and
// mapping the consumer's test knows exactly).
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

namespace strata {

// Tokens accrue at `rate` a second up to `burst`; an event spends one. Rate 0: no limit.
class TokenBucket {
 public:
  using Clock = std::chrono::steady_clock;
  TokenBucket(double rate, double burst, Clock::time_point now);

  // A new rate from now on (the ramp's next step); the tokens accrued so far stay.
  void SetRate(double rate, Clock::time_point now);
  // Whole tokens available now, at most `max` (`max` when the rate is 0).
  int64_t Available(Clock::time_point now, int64_t max);
  void Spend(int64_t tokens) { tokens_ -= static_cast<double>(tokens); }
  // How long until one token is there (zero when one is, or the rate is 0).
  std::chrono::microseconds UntilNext() const;
  double rate() const { return rate_; }

 private:
  void Refill(Clock::time_point now);
  double rate_, burst_, tokens_;
  Clock::time_point last_;
};

// The rate after `elapsed` seconds of a ramp that starts at `start` and adds `step` every
// `every_seconds` (no ramp when step or every_seconds is 0).
double RampedRate(double start, double step, double every_seconds, double elapsed);

// A permutation p of [0, classes) with no fixed point (p(y) != y for every y when classes > 1),
// the same for the same seed on every machine: Sattolo's shuffle driven by a 64-bit LCG of our
// own, since std::uniform_int_distribution may differ between standard libraries.
std::vector<int32_t> DriftPermutation(int32_t classes, uint64_t seed);

}  // namespace strata
