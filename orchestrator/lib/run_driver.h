// The driver of one orchestrated run, behind the three entry points of local_run.h (`strata
// run`, `strata resume`, `strata supervise`): the run's steps from the run directory to the last
// service stopped, and the host the run supervisor calls back (run/run_supervisor.h). Not for use
// elsewhere: the entry points check the command line and the job first.
#pragma once

#include <sys/stat.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <absl/status/statusor.h>

#include "orchestrator/launch/launcher.h"
#include "orchestrator/launch/run_tls.h"
#include "orchestrator/lib/local_run.h"
#include "orchestrator/plan/job_checks.h"
#include "orchestrator/record/run_console.h"
#include "orchestrator/record/run_metrics.h"
#include "orchestrator/record/run_record.h"
#include "orchestrator/run/control_server.h"
#include "orchestrator/run/resume_point.h"
#include "orchestrator/run/run_supervisor.h"
#include "services/common/base/files.h"
#include "services/common/base/run_directory.h"
#include "services/common/config/resolved_job.h"
#include "services/common/wire/tls.h"
#include "strata/v1/evaluator.pb.h"

namespace strata {

inline double SecondsBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// One run: prepares the run directory, shards the data and launches the services as children
// (or, attached, finds the sharder's output and the services' addresses; or, resumed, the shards
// and checkpoints the run left), starts training, and hands the rest to the RunSupervisor, whose
// host it is (processes, signals, the screen). It writes the record's end (summary, report) and
// ends every service. run_driver.cc holds the steps of the run, run_driver_record.cc what it
// writes about itself (status.json, summary.json, the progress line).
class RunDriver final : public SupervisorHost, public SwitchEvents {
 public:
  RunDriver(const LocalRunOptions& options, v1::ResolvedJob job, std::string run_dir,
            std::optional<ResumePoint> resume = std::nullopt)
      : options_(options),
        job_(std::move(job)),
        paths_(std::move(run_dir)),
        console_(options.quiet),
        resume_(std::move(resume)) {}

  int Run();

  // SupervisorHost
  absl::StatusOr<std::vector<ServiceExit>> CheckProcesses() override;
  bool TakeSwitchRequest() override;
  void ShowProgress(const ClusterView& view, Clock::time_point now) override;
  void RecordStatus(Clock::time_point now, bool changed) override;
  void StopAll() override { Shutdown(false); }

  // SwitchEvents
  void SwitchDecided(const SwitchDecidedEvent& e) override;
  void SwitchSkipped(const SwitchSkippedEvent& e) override { record_->SwitchSkipped(e); }
  void SwitchFailed(const SwitchFailedEvent& e) override;
  void SwitchDone(const SwitchDoneEvent& e) override;

 private:
  absl::Status Execute();
  absl::Status Prepare();
  absl::Status KeepTheModel();
  absl::Status ShardData();
  absl::Status LaunchServices();
  absl::Status WaitForPorts();
  std::vector<std::string> Addresses(ServiceRole role) const;
  absl::Status StartTraining();
  absl::Status Supervise();
  void Shutdown(bool clean);
  void Finish(const std::string& state);
  void WriteStatus();
  void WriteSummary(const std::string& state);
  // Serves the control channel; a run without it still works through the files.
  void StartControlServer();
  // Serves the orchestrator's own /metrics (metrics.enabled, local runs); a run without it goes on.
  void StartRunMetrics();
  v1::RunInfo RunInfoNow() const;
  // RunControl.Predict (`strata predict` while the run trains): the evaluator answers from the
  // model where the run keeps it now (worker 0, or the servers after the switch). On a gRPC thread.
  grpc::Status PredictNow(const v1::RunPredictRequest& request, v1::PredictReply* reply) const;
  bool attached() const { return options_.attached.has_value(); }
  const char* command() const {
    return attached() ? "strata supervise" : resume_ ? "strata resume" : "strata run";
  }
  bool switched() const { return switcher_ && switcher_->outcome().has_value(); }
  bool switched_before_resume() const { return resume_ && resume_->switch_done.has_value(); }
  // Steps every worker had completed when this process took the run up (0 on a first start).
  int64_t StepsBeforeResume() const;
  void PrepareResume();

  const LocalRunOptions& options_;
  // The job as the services read it (written to the run directory in Prepare); the
  // orchestrator's own per-worker figures come from it too, so that they cannot differ from the
  // services'.
  v1::ResolvedJob job_;
  RunPaths paths_;
  RunConsole console_;
  std::optional<ResumePoint> resume_;  // `strata resume`: where the run goes on
  RunFailure failure_;
  std::unique_ptr<RunRecord> record_;
  std::unique_ptr<Launcher> launcher_;
  std::vector<Endpoint> endpoints_;  // every service, in start order, once all listen

  // start_ is the zero of the record's wall_s (earlier than began_ in a resumed run: its clock
  // goes on); began_ is when this process started.
  Clock::time_point start_, began_, train_start_, finish_, last_status_write_, last_report_write_;
  std::optional<Clock::time_point> training_end_;
  // The handover check of this run's switch, done or failed, for summary.json (null: none).
  nlohmann::json handover_check_ = nullptr;
  std::vector<int64_t> shard_sizes_;
  int64_t train_examples_ = 0;
  std::string state_ = "running";
  bool shut_down_ = false;
  RunTls tls_;  // security.tls on or mutual: the certificates the services use

  ClusterView view_;
  RunPhase phase_;
  // Declared after the client they call through, so that they (and their calls) end first.
  std::unique_ptr<ClusterClient> client_;
  std::unique_ptr<SwitchPolicy> policy_;
  std::unique_ptr<SwitchController> switcher_;
  std::unique_ptr<EvalScheduler> eval_;
  std::unique_ptr<ServiceRecovery> recovery_;
  v1::StartRequest start_request_;  // what the workers were started with
  // What the control channel answers, refreshed with status.json: it is read on gRPC's threads.
  mutable std::mutex run_info_mu_;
  v1::RunInfo run_info_;
  // Under run_info_mu_ too, refreshed with status.json: where the evaluator is and where the model
  // is now, for PredictNow.
  std::string evaluator_address_;
  v1::EvaluateModelRequest model_source_;
  std::unique_ptr<RunControlServer> control_;
  std::unique_ptr<RunMetrics> run_metrics_;  // fed where status.json is written
};

}  // namespace strata
