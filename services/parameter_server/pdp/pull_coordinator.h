// PDP's decision of when to update (docs/protocol.md, "Server-decided pulls"), hosted by partition
// 0's server. Workers subscribe (one notice stream each) and report how many points they have
// processed in the current round; from those reports the coordinator predicts the moment the
// workers together reach K* points, sends the pull request of the round at that moment, and
// waits for every worker's update report (sent after its push to every partition). Each round is
// written to the run record, and K* is searched while training (KStarSearch) unless fixed.
//
// Prediction: worker i last reported p_i points, processed at rate r_i (its own points/seconds),
// at time a_i; the round's global count at time t is predicted as sum_i p_i + r_i (t - a_i), and
// the pull goes out when that reaches K* less a lead: what recent rounds overshot by, as workers
// compute on while the request travels. A worker without a report in the round counts from its
// last update with its previous rate (0 before its first report), so a silent worker delays
// nothing; but no pull goes out before some worker has reported in the round (a PDP worker may
// still be waiting for the last round's model, whatever its rate says). The paper's T = 1 /
// sum(1/t_i) is this formula only if t_i is the time for all K* points; Strata uses rates, whose
// units cannot be mistaken.
//
// Bad reports (an unknown worker, a round that is neither this one nor the next, counts going
// backwards, negative or non-finite numbers) are refused and change nothing. A round whose
// updates do not all arrive within the round deadline is logged with the workers it waits for,
// once per deadline, until they arrive or the coordinator stops: the workers' own pulls fail at
// their deadlines with the same names, and the orchestrator handles a dead worker.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <absl/status/statusor.h>

#include "services/common/base/metrics.h"
#include "services/parameter_server/consistency_policy.h"
#include "services/parameter_server/pdp/k_star_search.h"

namespace strata {

struct PullCoordinatorOptions {
  v1::Consistency mode = v1::CONSISTENCY_PDP;
  int workers = 1;
  int64_t fixed_k_star = 0;   // > 0: no search
  KStarSearchOptions search;  // used when fixed_k_star == 0 (must be valid then)
  // The job's points, all workers together (epochs x training points): after the round that
  // reaches it the coordinator ends the job's rounds. 0: no end (a test ends it with Stop).
  int64_t sample_budget = 0;
  // How long a round may wait for its updates before the coordinator names who it waits for,
  // and how long it waits without any count report before pulling anyway.
  std::chrono::milliseconds round_deadline{120000};
  std::string rounds_file;  // one JSON line per round; empty: none
};

// What a worker's notice stream delivers next.
struct RoundNoticeView {
  int64_t round = 0;  // 0: the announcement on subscribing
  int64_t k_star = 0;
  bool end = false;
  int64_t current_round = 0;  // the announcement: the round the worker's points count toward
};

struct CountReportView {
  int worker = 0;
  int64_t round = 0;
  int64_t points = 0;
  double seconds = 0;
  bool update = false;
  double loss = 0;
  int64_t version_used = 0;
  int64_t version_gap = 0;
  int64_t dropped = 0;
};

// One closed round, as written to the rounds file.
struct RoundRecord {
  int64_t round = 0;
  int64_t k_star = 0;
  bool probing = false;
  double predicted = 0;               // the global count predicted when the pull went out
  int64_t count = 0;                  // the points the updates carried, all workers together
  std::vector<int64_t> points;        // per worker
  std::vector<int64_t> version_gaps;  // per worker
  std::vector<int64_t> dropped;       // per worker: points left out (too old a model)
  double loss = 0;                    // the round's training loss, weighted by points
  double closed_s = 0;                // when the last update arrived, since the coordinator started
  double round_s = 0;                 // from the previous round's close
  double pull_s = 0;                  // from the pull request to the last update
};

class PullCoordinator {
 public:
  // INVALID_ARGUMENT for bad options (workers < 1, a search that cannot start).
  static absl::StatusOr<std::unique_ptr<PullCoordinator>> Create(PullCoordinatorOptions options);
  ~PullCoordinator();  // Stop()s

  // Starts deciding once every worker has subscribed.
  void Start();
  // Ends every wait (Next returns an end notice) and the deciding thread.
  void Stop();

  // A worker's stream: Subscribe, then Next until it returns end. INVALID_ARGUMENT for an unknown
  // worker. Returns the last round this worker has nothing more to send for: a worker that
  // subscribes again (a replacement) gets the pull request its predecessor left unanswered.
  absl::StatusOr<int64_t> Subscribe(int worker);
  // Waits for the notice after round `after` (0 first gets the announcement with after = -1);
  // nullopt when `cancelled` says the stream is gone or `deadline` passes. Every worker is told
  // the same.
  std::optional<RoundNoticeView> Next(int64_t after, std::chrono::system_clock::time_point deadline,
                                      const std::function<bool()>& cancelled);
  void Unsubscribe(int worker);

  // Returns the K* in force for the next round the worker will accumulate.
  absl::StatusOr<int64_t> Report(const CountReportView& report);

  int workers() const { return options_.workers; }
  // For tests and status: the rounds closed so far, and the search.
  std::vector<RoundRecord> Rounds() const;
  int64_t KStar() const;
  std::string SearchText() const;

 private:
  explicit PullCoordinator(PullCoordinatorOptions options);

  struct WorkerState {
    int subscriptions = 0;
    // The latest count report of the round being accumulated (or of the next one, in APDP).
    int64_t report_round = 0, points = 0;
    // The last round this worker sent a count report for (an update report does not count: it
    // only starts the worker's next round at 0 points).
    int64_t counted_round = 0;
    double rate = 0;  // points per second; carried into later rounds until a new report
    std::chrono::steady_clock::time_point reported_at, round_started;
    bool updated = false;  // its update of the current round arrived
    int64_t update_points = 0, version_gap = 0, dropped = 0;
    double update_loss = 0;
  };

  void Run();
  // With mu_ held.
  bool AllSubscribed() const;
  double PredictedCount(std::chrono::steady_clock::time_point at) const;
  std::optional<std::chrono::steady_clock::time_point> PredictedCrossing() const;
  std::string MissingUpdates() const;
  void CloseRound(std::chrono::steady_clock::time_point pulled_at, double predicted, int64_t k,
                  bool probing);
  int64_t MeasuredFloor() const;
  void WriteRecord(const RoundRecord& record);

  const PullCoordinatorOptions options_;
  const std::chrono::steady_clock::time_point started_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<WorkerState> workers_;
  std::optional<KStarSearch> search_;
  int64_t k_star_ = 0;        // in force for round_ (the one being accumulated)
  int64_t round_ = 1;         // the round being accumulated or gathered
  int64_t pulled_round_ = 0;  // the last round whose pull request went out
  int64_t total_points_ = 0;  // over every closed round
  // How many points the updates carry beyond the count predicted when the pull went out (a
  // moving average): the pull goes out that much early.
  double lead_ = 0;
  bool ended_ = false, stopping_ = false;
  std::chrono::steady_clock::time_point round_started_, last_report_at_;
  std::vector<RoundRecord> rounds_;
  std::vector<ProbeRound> probe_rounds_;  // of the candidate being probed
  int64_t probe_points_ = 0;
  std::unique_ptr<JsonLinesWriter> rounds_writer_;
  std::thread thread_;
};

}  // namespace strata
