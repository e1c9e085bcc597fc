#include "orchestrator/record/drift_recovery.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

namespace strata {
namespace {

constexpr size_t kLevelPoints = 5;  // the level before the drift: the mean of this many points
constexpr double kMargin = 0.01;    // fallen or back: 1 point of accuracy

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

// [seq, scored, accuracy] as (seq, accuracy); false for anything else.
bool Point(const nlohmann::json& p, int64_t* seq, double* accuracy) {
  if (!p.is_array() || p.size() != 3 || !p[0].is_number() || !p[2].is_number()) return false;
  *seq = p[0].get<int64_t>();
  *accuracy = p[2].get<double>();
  return true;
}

std::optional<ReplicaDriftRecovery> OfReplica(const nlohmann::json& result, int64_t at_event) {
  if (!result.is_object() || !result.contains("accuracy_curve") ||
      !result["accuracy_curve"].is_array()) {
    return std::nullopt;
  }
  std::vector<std::pair<int64_t, double>> curve;
  for (const nlohmann::json& p : result["accuracy_curve"]) {
    int64_t seq = 0;
    double accuracy = 0;
    if (Point(p, &seq, &accuracy)) curve.emplace_back(seq, accuracy);
  }
  std::vector<double> before;
  for (const auto& [seq, accuracy] : curve) {
    if (seq < at_event) before.push_back(accuracy);
  }
  if (before.empty()) return std::nullopt;
  ReplicaDriftRecovery r;
  const size_t from = before.size() > kLevelPoints ? before.size() - kLevelPoints : 0;
  for (size_t i = from; i < before.size(); ++i) r.level_before += before[i];
  r.level_before /= static_cast<double>(before.size() - from);
  r.final_accuracy = curve.back().second;
  bool fell = false, after = false;
  for (const auto& [seq, accuracy] : curve) {
    if (seq < at_event) continue;
    after = true;
    if (!fell) {
      fell = accuracy < r.level_before - kMargin;
    } else if (accuracy >= r.level_before - kMargin) {
      r.events_to_recover = seq - at_event;
      break;
    }
  }
  // Never more than a point below its level after the drift: it cost nothing to come back from.
  if (after && !fell) r.events_to_recover = 0;
  return r;
}

}  // namespace

std::optional<DriftRecovery> ReadDriftRecovery(const std::vector<nlohmann::json>& results,
                                               int64_t at_event) {
  if (at_event <= 0) return std::nullopt;
  DriftRecovery out;
  out.at_event = at_event;
  for (const nlohmann::json& result : results) {
    if (auto r = OfReplica(result, at_event)) out.replicas.push_back(*r);
  }
  if (out.replicas.empty()) return std::nullopt;
  std::vector<double> levels, finals, recoveries;
  for (const ReplicaDriftRecovery& r : out.replicas) {
    levels.push_back(r.level_before);
    finals.push_back(r.final_accuracy);
    // "Never" ranks after every number: the median is never when half or more never came back.
    recoveries.push_back(r.events_to_recover ? static_cast<double>(*r.events_to_recover)
                                             : std::numeric_limits<double>::infinity());
  }
  out.level_before = Median(levels);
  out.final_accuracy = Median(finals);
  if (const double m = Median(recoveries); std::isfinite(m)) out.events_to_recover = m;
  return out;
}

nlohmann::json DriftRecoveryJson(const DriftRecovery& recovery) {
  nlohmann::json per_replica = nlohmann::json::array();
  for (const ReplicaDriftRecovery& r : recovery.replicas) {
    per_replica.push_back(
        {{"level_before", r.level_before},
         {"events_to_recover",
          r.events_to_recover ? nlohmann::json(*r.events_to_recover) : nlohmann::json(nullptr)},
         {"final_accuracy", r.final_accuracy}});
  }
  return {{"at_event", recovery.at_event},
          {"level_before", recovery.level_before},
          {"events_to_recover", recovery.events_to_recover
                                    ? nlohmann::json(*recovery.events_to_recover)
                                    : nlohmann::json(nullptr)},
          {"recovered", recovery.events_to_recover.has_value()},
          {"final_accuracy", recovery.final_accuracy},
          {"per_replica", per_replica}};
}

}  // namespace strata
