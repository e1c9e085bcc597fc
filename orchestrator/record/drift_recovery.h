// How a stream run came back from the drift its producer made (stream.produce.drift.at_event),
// read from each replica's accuracy curve (its accuracy before training over its latest
// stream.accuracy_window events, a point every that many events, with the producer's number of
// the latest event): the replica's level before the drift is the mean of its last 5 points
// before the drift; it has recovered at the first point after the drift that is back within 1
// point of that level once it had fallen more than 1 point below it; the events to recover are
// that point's event number minus the drift's (events of the whole stream, all replicas
// together), 0 for a replica that never fell that far. The run's figures are medians over its
// replicas, "never" ranking after every number: its events to recover are "never" when half of
// the replicas or more never came back. summary.json's `drift_recovery`; the same
// reading docs/results.md and `strata sweep` use.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

namespace strata {

struct ReplicaDriftRecovery {
  double level_before = 0;
  std::optional<int64_t> events_to_recover;  // nullopt: never came back; 0: never fell
  double final_accuracy = 0;                 // the curve's last point
};

struct DriftRecovery {
  int64_t at_event = 0;
  std::vector<ReplicaDriftRecovery> replicas;  // those with a point before the drift
  double level_before = 0;                     // medians over `replicas`
  std::optional<double> events_to_recover;     // nullopt: "never"
  double final_accuracy = 0;
};

// `results`: the replicas' result files (stream/replica-<rank>.json), each with its
// `accuracy_curve` of [seq, scored, accuracy] points. nullopt when no replica has a point before
// `at_event` (no level to come back to) or `at_event` is not positive.
std::optional<DriftRecovery> ReadDriftRecovery(const std::vector<nlohmann::json>& results,
                                               int64_t at_event);

// {"at_event", "level_before", "events_to_recover" (null: never), "recovered", "final_accuracy",
//  "per_replica": [{"level_before", "events_to_recover", "final_accuracy"}, ...]}
nlohmann::json DriftRecoveryJson(const DriftRecovery& recovery);

}  // namespace strata
