// Evaluation once per global epoch while training runs, and the final one after it: the
// evaluator fetches the model from where it lives (worker 0 during all-reduce, the parameter
// servers after the switch) on its own call, so the supervisor loop never waits for it. At most
// one evaluation is in flight; a result is written to metrics.jsonl and printed.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "orchestrator/record/run_console.h"
#include "orchestrator/record/run_record.h"
#include "orchestrator/run/cluster_client.h"
#include "orchestrator/run/controller.h"

namespace strata {

// Where training stands, as the supervisor keeps it.
struct RunPhase {
  std::string name = "starting";            // starting | allreduce | ps
  std::optional<int64_t> switched_at_step;  // once the live switch is done
};

struct EvalSchedulerOptions {
  int epochs = 0;
  // Epochs already evaluated (a resumed run's metrics.jsonl holds them): evaluation goes on after.
  int64_t evaluated_epochs = 0;
  std::string worker_address;                 // worker 0, whose model is the all-reduce model
  std::vector<std::string> server_addresses;  // by partition
  Clock::time_point run_start;
  std::chrono::milliseconds timeout{600000};
  // training.loss mse: the evaluator's RMSE is recorded and shown (accuracy means nothing there).
  bool regression = false;
  // Each evaluation that succeeded, after it was recorded (the empirical switch rule's input).
  std::function<void(const v1::EvalMetrics&)> on_result;
};

class EvalScheduler final : public Controller {
 public:
  EvalScheduler(EvalSchedulerOptions options, ClusterClient& client, RunRecord& record,
                RunConsole& console, const RunPhase& phase);

  // Records a finished evaluation; starts the next global epoch's when none is in flight.
  absl::Status Step(const ClusterView& view, Clock::time_point now) override;
  // After training: records what is in flight, then evaluates the final model once unless the
  // last evaluation already was of the final epoch. Settled once nothing more will come.
  absl::Status StepFinal(const ClusterView& view, Clock::time_point now);
  bool final_settled() const { return final_started_ && !pending_; }
  std::optional<Clock::duration> StepWithin() const override;

  bool have_final() const { return have_final_; }
  const v1::EvalMetrics& final_metrics() const { return final_; }
  const std::optional<v1::EvalMetrics>& last_metrics() const { return last_metrics_; }
  // Gives up on an evaluation in flight (the evaluator is being stopped).
  void Cancel() { pending_.reset(); }

 private:
  void Start(int64_t epoch, const ClusterView& view, Clock::time_point now);
  absl::Status Collect(const ClusterView& view);

  EvalSchedulerOptions options_;
  ClusterClient& client_;
  RunRecord& record_;
  RunConsole& console_;
  const RunPhase& phase_;

  std::unique_ptr<PendingReply<v1::EvalMetrics>> pending_;
  int64_t pending_epoch_ = 0;
  // Each worker's samples/s between the start of the previous evaluation and that of the one in
  // flight (metrics.jsonl's worker_samples_per_s), and the steps and time it was measured at.
  std::vector<double> pending_worker_rates_;
  std::vector<int64_t> rate_steps_;
  std::optional<Clock::time_point> rate_time_;
  int64_t last_evaluated_epoch_ = 0;
  bool final_started_ = false;
  std::optional<v1::EvalMetrics> last_metrics_;
  v1::EvalMetrics final_;
  bool have_final_ = false;
};

}  // namespace strata
