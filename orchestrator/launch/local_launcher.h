// The launcher of `strata run` on one machine: every service is a child process on 127.0.0.1 (or,
// with emulated hosts, on its host's address inside its host's network namespace:
// launch/host_placement.h) that listens on a port the launcher holds for it until the run ends
// (launch/port_reservation.h, so that a restart gets it back) and reports it in a port file under
// ports/ (and,
// with metrics.enabled, its Prometheus endpoint's free port in ports/<name>.metrics.port); output
// goes to logs/<name>.log; services with a CPU share get a cgroup quota, and the run is refused
// where the machine does not allow it. Children die with the orchestrator (ChildProcess), and
// StopAll signals whatever a Stop RPC left running. Each child gets the run's token (rpc_auth.h) in
// its environment through ChildProcess; the command line recorded in the `launched` event never
// holds it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <optional>

#include "orchestrator/launch/cpu_limit.h"
#include "orchestrator/launch/host_placement.h"
#include "orchestrator/launch/launcher.h"
#include "orchestrator/launch/port_reservation.h"
#include "orchestrator/record/run_console.h"
#include "orchestrator/record/run_failure.h"
#include "orchestrator/record/run_record.h"
#include "services/common/base/run_directory.h"
#include "services/common/process/child_process.h"

namespace strata {

class LocalLauncher final : public Launcher {
 public:
  // `bin_dir` holds the service binaries; events go to `record`, straggler notes to `console`,
  // the first failure to `failure`.
  LocalLauncher(std::string bin_dir, std::string run_dir, RunRecord& record, RunConsole& console,
                RunFailure& failure, std::optional<HostPlacement> hosts = std::nullopt);
  ~LocalLauncher() override;

  absl::Status RunTask(const TaskSpec& task, std::chrono::milliseconds timeout,
                       const std::function<absl::Status()>& keep_going) override;
  absl::Status Start(const ServiceSpec& service) override;
  absl::StatusOr<std::vector<Endpoint>> WaitReady(
      std::chrono::milliseconds timeout, const std::function<absl::Status()>& keep_going) override;
  absl::Status CheckExits() override;
  std::vector<ServiceExit> TakeExits() override;
  absl::Status Restart(const std::string& service) override;
  bool Listening(const std::string& service) override;
  bool Running(const std::string& service) override;
  void StopAll(std::chrono::milliseconds wait) override;
  std::vector<ProcessSnapshot> Snapshot() override;

 private:
  struct Child {
    ServiceSpec spec;
    std::string port_file;
    const EmulatedHost* host = nullptr;  // null: this machine's own namespace, on 127.0.0.1
    std::optional<PortReservation> reserved_port;  // the port `address` will have
    std::string address;                           // <listen host>:port once known
    std::string metrics_port_file;                 // empty: the service serves no metrics
    std::string metrics_url;                       // http://<listen host>:port/metrics once known
    std::unique_ptr<ChildProcess> process;
    bool exit_reported = false;
    int restarts = 0;
    bool listening_again = false;  // since the last restart
  };

  absl::StatusOr<std::unique_ptr<ChildProcess>> Spawn(const std::string& name,
                                                      std::vector<std::string> argv,
                                                      const EmulatedHost* host = nullptr);
  // Where a child's servers listen: its host's address, or loopback.
  static std::string ListenHost(const Child& c);
  // FAILED_PRECONDITION where the quota cannot be applied: an experiment whose speeds were asked
  // for must not run at other speeds unnoticed.
  absl::Status SlowDown(const Child& c, double fraction);
  // Spawns `c`'s service listening on `listen`, recording the launch, under its CPU quota.
  absl::Status Launch(Child& c, const std::string& listen);
  // Reads the port files that have appeared; true once every service has its address.
  bool ReadPorts();
  static std::string LastLogLine(const ChildProcess& process);

  std::string bin_dir_;
  RunPaths paths_;
  RunRecord& record_;
  RunConsole& console_;
  RunFailure& failure_;
  std::optional<HostPlacement> hosts_;
  int placed_ = 0;               // services given a host after the head so far
  std::vector<Child> children_;  // in start order
  std::vector<std::unique_ptr<CpuLimit>> cpu_limits_;
};

}  // namespace strata
