// The launcher of `strata supervise`: the services were started by someone else (docker-compose,
// Kubernetes) and listen at addresses given on the command line. "Starting" a planned service
// looks its address up by name; WaitReady polls each one's standard health check until it
// answers SERVING; tasks (the sharder, the initial model) ran as one-shot steps before the
// orchestrator started, so RunTask only records that. There are no processes to watch or signal:
// a service that dies is noticed by the run supervisor when it stops answering, and the Stop RPCs
// end them at the run's end, after which their containers exit.
#pragma once

#include <string>
#include <vector>

#include "orchestrator/launch/launcher.h"
#include "orchestrator/record/run_record.h"

namespace strata {

// Where the services of a run listen, in rank and partition order.
struct AttachedServices {
  std::vector<std::string> parameter_servers;
  std::vector<std::string> workers;
  std::string evaluator;
};

class AttachedLauncher final : public Launcher {
 public:
  AttachedLauncher(AttachedServices services, RunRecord& record);

  absl::Status RunTask(const TaskSpec& task, std::chrono::milliseconds timeout,
                       const std::function<absl::Status()>& keep_going) override;
  // NOT_FOUND when the plan names a service the command line gave no address for.
  absl::Status Start(const ServiceSpec& service) override;
  absl::StatusOr<std::vector<Endpoint>> WaitReady(
      std::chrono::milliseconds timeout, const std::function<absl::Status()>& keep_going) override;
  absl::Status CheckExits() override { return absl::OkStatus(); }
  // The platform runs the containers; this process sees none of their exits (a service that dies
  // fails its peers and so the run: nothing restarts it).
  std::vector<ServiceExit> TakeExits() override { return {}; }
  absl::Status Restart(const std::string& service) override {
    return absl::UnimplementedError("strata does not restart " + service +
                                    " in containers: a dead service fails the run");
  }
  bool Listening(const std::string& /*service*/) override { return true; }
  bool Running(const std::string& /*service*/) override { return true; }
  void StopAll(std::chrono::milliseconds /*wait*/) override {}
  std::vector<ProcessSnapshot> Snapshot() override { return {}; }

 private:
  AttachedServices services_;
  RunRecord& record_;
  std::vector<Endpoint> endpoints_;  // in start order
};

// "ps-<p>" / "worker-<r>" / "evaluator" -> the address given for it; NOT_FOUND otherwise.
absl::StatusOr<std::string> AttachedAddress(const AttachedServices& services,
                                            const std::string& name);

}  // namespace strata
