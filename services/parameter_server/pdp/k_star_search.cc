#include "services/parameter_server/pdp/k_star_search.h"

#include <algorithm>
#include <cmath>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>

namespace strata {

absl::Status ValidateKStarSearch(const KStarSearchOptions& o) {
  if (o.floor < 1) return absl::InvalidArgumentError(absl::StrCat("K* floor ", o.floor, " < 1"));
  if (o.start < o.floor || o.start > o.ceiling) {
    return absl::InvalidArgumentError(absl::StrCat("K* start ", o.start, " is outside [", o.floor,
                                                   ", ", o.ceiling, "] (floor, ceiling)"));
  }
  if (o.probe_points <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("K* probe window ", o.probe_points, " points: must be > 0"));
  }
  return absl::OkStatus();
}

KStarSearch::KStarSearch(const KStarSearchOptions& options)
    : options_(options), k_(options.start) {}

int64_t KStarSearch::WindowPoints() const { return std::max(options_.probe_points, 4 * k_); }

void KStarSearch::Record(double gain, int64_t measured_floor) {
  if (done()) return;
  if (!std::isfinite(gain)) gain = -HUGE_VAL;  // a probe that diverged is the worst
  probes_.push_back({k_, gain});
  const int64_t floor = std::max(options_.floor, measured_floor);
  const int64_t first = options_.start;
  switch (phase_) {
    case Phase::kFirst:
      previous_gain_ = gain;
      if (first / 2 >= floor) {
        k_ = first / 2;
        phase_ = Phase::kHalf;
        return;
      }
      break;  // no room below: try doubling
    case Phase::kHalf:
      if (gain > previous_gain_) {
        previous_gain_ = gain;
        if (k_ / 2 >= floor) {
          k_ /= 2;
          phase_ = Phase::kHalving;
          return;
        }
        return Finish();
      }
      previous_gain_ = probes_.front().gain;  // doubling goes on from the first candidate
      k_ = first;
      break;
    case Phase::kHalving:
      if (gain < previous_gain_ || k_ / 2 < floor) return Finish();
      previous_gain_ = gain;
      k_ /= 2;
      return;
    case Phase::kDoubling:
      if (gain < previous_gain_) return Finish();
      previous_gain_ = gain;
      break;
    case Phase::kDone:
      return;
  }
  // Double from k_ (the first candidate, or the last doubled one).
  if (2 * k_ > options_.ceiling) return Finish();
  k_ *= 2;
  phase_ = Phase::kDoubling;
}

void KStarSearch::Finish() {
  phase_ = Phase::kDone;
  const auto best =
      std::max_element(probes_.begin(), probes_.end(),
                       [](const KStarProbe& a, const KStarProbe& b) { return a.gain < b.gain; });
  k_ = best == probes_.end() ? options_.start : best->k;
}

std::string KStarSearch::Describe() const {
  std::string out;
  for (const KStarProbe& p : probes_) {
    absl::StrAppend(&out, out.empty() ? "" : " -> ", p.k, absl::StrFormat(" (%.4g)", p.gain));
  }
  if (out.empty()) out = "no probe yet";
  absl::StrAppend(&out, done() ? ": K* " : ": probing ", k_);
  return out;
}

double ProbeGain(const std::vector<ProbeRound>& rounds) {
  if (rounds.size() < 2) return 0;
  double mean_t = 0, mean_l = 0;
  for (const ProbeRound& r : rounds) {
    if (!std::isfinite(r.loss)) return 0;
    mean_t += r.seconds;
    mean_l += r.loss;
  }
  mean_t /= static_cast<double>(rounds.size());
  mean_l /= static_cast<double>(rounds.size());
  double stt = 0, stl = 0;
  for (const ProbeRound& r : rounds) {
    stt += (r.seconds - mean_t) * (r.seconds - mean_t);
    stl += (r.seconds - mean_t) * (r.loss - mean_l);
  }
  if (stt <= 0 || mean_l <= 0) return 0;
  return -(stl / stt) / mean_l;
}

}  // namespace strata
