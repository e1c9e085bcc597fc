// The run supervisor: one loop with one clock that watches a started training job to its end.
// Each pass checks the processes (through the host), and on the loop's tick (100 ms) polls the
// workers into the ClusterView, steps the evaluation scheduler and shows progress; on every pass
// it feeds switch triggers (the rule's, `strata switch`'s) to the switch controller and steps it.
// It sleeps only between passes, as briefly as the busiest controller asks (the handover wants a
// pass every millisecond or two). After training it steps the final evaluation the same way.
//
// While the switch controller holds the cluster (the workers paused for the handover) the tick's
// work waits: no status polls or evaluations compete with the handover.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "orchestrator/record/run_record.h"
#include "orchestrator/run/cluster_client.h"
#include "orchestrator/run/controller.h"
#include "orchestrator/run/eval_scheduler.h"
#include "orchestrator/run/service_recovery.h"
#include "orchestrator/run/switch_controller.h"
#include "orchestrator/run/switch_policy.h"

namespace strata {

// What the loop needs from the run around it: the launcher's side of things and the screen.
class SupervisorHost {
 public:
  virtual ~SupervisorHost() = default;
  // Signals (an error ends the run) and the services that exited since the last call, which the
  // supervisor hands to the recovery or fails the run with.
  virtual absl::StatusOr<std::vector<ServiceExit>> CheckProcesses() = 0;
  // True once for each `strata switch` request; looked at only while no switch is under way.
  virtual bool TakeSwitchRequest() = 0;
  // The progress line and the report, from the latest view; called on every tick.
  virtual void ShowProgress(const ClusterView& view, Clock::time_point now) = 0;
  // status.json and the orchestrator's metrics, which a reader polls. `changed`: a service
  // exited or started again, written at once; otherwise at most about once a second. Called on
  // every pass, so that they stay current after training, through the final evaluation.
  virtual void RecordStatus(Clock::time_point now, bool changed) = 0;
  // Ends every service now: a switch failed half-way and nothing is left to finish cleanly.
  virtual void StopAll() = 0;
};

struct SupervisorOptions {
  bool switch_job = false;                    // strategy.kind is switch
  std::vector<std::string> worker_addresses;  // for messages
  std::chrono::milliseconds tick{100};
  std::chrono::milliseconds status_timeout{5000};
  // A worker that answers no GetStatus for this long is declared dead.
  std::chrono::milliseconds unresponsive_timeout{60000};
  // How long a worker's error waits for a peer's exit to show before the worker is blamed.
  std::chrono::milliseconds peer_exit_grace{2000};
};

// The controllers and state the loop steps; all borrowed. `switcher` is null unless the job is a
// switch job; `recovery` is null where dead processes are not restarted (every exit ends the run).
struct SupervisedRun {
  ClusterClient& client;
  RunRecord& record;
  RunFailure& failure;
  SupervisorHost& host;
  ClusterView& view;
  RunPhase& phase;
  EvalScheduler& eval;
  SwitchPolicy& policy;
  SwitchController* switcher;
  ServiceRecovery* recovery = nullptr;
};

class RunSupervisor {
 public:
  RunSupervisor(SupervisorOptions options, SupervisedRun run);

  // Until every worker finished and the final evaluation is in. An error names the process in
  // the RunFailure.
  absl::Status Run();
  std::optional<Clock::time_point> training_end() const { return training_end_; }

 private:
  // One pass; sets finished_ when the run's work is done.
  absl::Status Pass(Clock::time_point now);
  absl::Status PollWorkers(Clock::time_point now);
  // The servers' versions, for what a server's crash loses; only while recovery may need them.
  void PollServers();
  absl::Status TakeExit(const ServiceExit& exit, Clock::time_point now);
  // A worker died in the ring of a switch job whose recovery is on: the survivors fall back to
  // the servers, and the dead worker is restarted once they train there. False if the run cannot.
  bool FallBack(const ServiceExit& exit);
  // Restarts the workers whose death caused a fallback, once the run is asynchronous.
  absl::Status RestartAfterFallBack(Clock::time_point now);
  absl::Status StepSwitch(Clock::time_point now);
  void SleepUntilNextPass(Clock::time_point now) const;

  SupervisorOptions options_;
  SupervisedRun run_;
  std::vector<Clock::time_point> last_answer_;
  std::vector<std::optional<Clock::time_point>> error_since_;
  // Per rank: the server links last recorded (`server_links` events).
  std::vector<std::vector<std::string>> links_recorded_;
  std::vector<ServiceExit> awaiting_fallback_;  // dead workers, until the survivors hand over
  Clock::time_point next_tick_;
  std::optional<Clock::time_point> training_end_;
  bool finished_ = false;
};

}  // namespace strata
