// Launches a strata-ps process on loopback and owns it: the small launcher that integration
// tests and benchmarks use to start servers (and workers) one by one, without the orchestrator's
// launcher (orchestrator/launch/local_launcher.h), which needs a whole job and run directory. The
// process dies with its owner (the destructor kills it; PR_SET_PDEATHSIG covers a crash of the
// launching thread).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <absl/status/statusor.h>

#include "services/common/process/child_process.h"

namespace strata {

struct PsProcessOptions {
  std::string binary;    // path to strata-ps
  std::string work_dir;  // receives the port file and the log (must exist)
  // The resolved job (--job), as `strata` starts a server; when set, `config`, `partitions`,
  // `workers`, `consistency`, `staleness` and `lr_scale` are not passed.
  std::string job;
  std::string config;  // job spec (--config), resolved by the server itself
  int partition = 0, partitions = 1, workers = 1;
  int64_t train_examples = 1;
  // Samples the servers apply before they tell the workers to stop; 0: none (a test decides when
  // its workers stop).
  int64_t sample_budget = 0;
  std::string consistency;  // empty: the job spec's
  int staleness = -1;       // < 0: the job spec's
  double lr_scale = 0;      // 0: default
  std::string init_checkpoint;
  std::vector<std::string> extra_args;
  std::chrono::milliseconds start_deadline{60000};
};

class PsProcess {
 public:
  static absl::StatusOr<std::unique_ptr<PsProcess>> Launch(const PsProcessOptions& options);
  // Any Strata service that takes --listen and --port-file (strata-worker too): appends
  // "--listen 127.0.0.1:0 --port-file <work_dir>/<name>.port", logs to <work_dir>/<name>.log.
  static absl::StatusOr<std::unique_ptr<PsProcess>> LaunchService(
      std::vector<std::string> argv, const std::string& work_dir, const std::string& name,
      std::chrono::milliseconds start_deadline);
  ~PsProcess();
  PsProcess(const PsProcess&) = delete;
  PsProcess& operator=(const PsProcess&) = delete;

  std::string address() const;  // 127.0.0.1:port
  int port() const { return port_; }
  pid_t pid() const { return child_->pid(); }
  const std::string& log_path() const { return child_->log_path(); }
  // Waits for the process to exit on its own; returns its exit code (128+signal if killed).
  absl::StatusOr<int> WaitForExit(std::chrono::milliseconds deadline);
  void Kill();

 private:
  PsProcess(std::unique_ptr<ChildProcess> child, int port)
      : child_(std::move(child)), port_(port) {}
  std::unique_ptr<ChildProcess> child_;
  int port_ = 0;
};

}  // namespace strata
