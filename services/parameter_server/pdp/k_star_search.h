// How PDP's coordinator picks K*, the global mini-batch (points summed over all workers between
// two pulls), while the job trains: the multiplicative search of the PDP paper. The first
// candidate is probed, then half of it; if the half did better the search keeps halving, else it
// doubles from the first, in both directions until a candidate does worse than the one before it
// or the next would leave [floor, ceiling]. K* is the best candidate probed. Progress made while
// probing is kept: probing is training.
//
// Where Strata departs from the paper's text (docs/protocol.md, "Choosing K*"):
// - gain is an improvement, not a change: the paper's Q(after) - Q(before) is negative when a
//   minimised loss falls, so its argmax would pick the worst k;
// - gain counts per second of wall time, relative to the loss level, not per point: per point,
//   the smallest k always wins and what a pull costs never shows; per second it does, and the
//   relative form keeps a later probe (which starts from a lower loss) comparable;
// - each candidate is probed over max(probe_points, 4k) points, so that a probe holds at least
//   four pulls (the paper's first candidate, 0.1 M, is ten times its probe window 0.01 M).
//
// No clock and no threads: the coordinator feeds it measured gains, tests feed it a curve.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <absl/status/status.h>

namespace strata {

struct KStarSearchOptions {
  int64_t start = 0;         // the first candidate
  int64_t floor = 1;         // no candidate below (at least one batch per worker)
  int64_t ceiling = 0;       // no candidate above
  int64_t probe_points = 0;  // N = probe ratio x training points
};

// INVALID_ARGUMENT naming the option unless 1 <= floor <= start <= ceiling and probe_points > 0.
absl::Status ValidateKStarSearch(const KStarSearchOptions& options);

struct KStarProbe {
  int64_t k = 0;
  double gain = 0;
};

class KStarSearch {
 public:
  explicit KStarSearch(const KStarSearchOptions& options);  // options must be valid

  bool done() const { return phase_ == Phase::kDone; }
  // The candidate to probe now; once done, K*.
  int64_t k() const { return k_; }
  // Points (all workers together) the current candidate is probed over: max(probe_points, 4k).
  int64_t WindowPoints() const;
  // The current candidate showed `gain`. `measured_floor` is the smallest k whose work outlasts
  // a pull as the coordinator measured it (0: unknown); the search never goes below it.
  void Record(double gain, int64_t measured_floor = 0);
  const std::vector<KStarProbe>& probes() const { return probes_; }
  // "750 (0.012) -> 375 (0.019) -> 187 (0.015): K* 375"
  std::string Describe() const;

 private:
  enum class Phase { kFirst, kHalf, kHalving, kDoubling, kDone };
  void Finish();

  const KStarSearchOptions options_;
  Phase phase_ = Phase::kFirst;
  int64_t k_ = 0;
  double previous_gain_ = 0;  // of the candidate before this one on the current path
  std::vector<KStarProbe> probes_;
};

// The gain of one probe from its rounds: minus the least-squares slope of the round losses over
// time, divided by their mean (relative improvement per second). 0 with fewer than two rounds, a
// non-finite loss or no time passing.
struct ProbeRound {
  double seconds = 0;  // when the round closed, from any fixed origin
  double loss = 0;     // the round's training loss (mean over its points)
};
double ProbeGain(const std::vector<ProbeRound>& rounds);

}  // namespace strata
