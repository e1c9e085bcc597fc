// One orchestrated run, in two forms. `strata run` with the local launcher: every service is a
// child process on 127.0.0.1, the run directory is a local directory; RunLocalJob checks the job,
// shards the data, launches the services (launch/local_launcher.h) and starts training.
// `strata supervise` (SuperviseJob): the services were started by docker-compose or Kubernetes
// and listen at given addresses (launch/attached_launcher.h); the sharder ran before. From there
// both are the same: the run supervisor (run/run_supervisor.h) watches the run to the end in one
// loop, stepping the evaluation scheduler and the switch controller (run/switch_controller.h),
// and every service is stopped on success, failure and Ctrl-C (SIGTERM in a container).
// `strata resume` (ResumeLocalJob) is the local form again, starting where a run left off. The
// driver behind all three is lib/run_driver.h.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "orchestrator/launch/attached_launcher.h"
#include "orchestrator/launch/host_placement.h"

namespace strata {

struct LocalRunOptions {
  std::string job_path;
  std::vector<std::string> overrides;  // --set key=value
  std::string out_dir;                 // empty: runs/<name>-<timestamp>
  bool quiet = false;
  std::string bin_dir;  // where strata-sharder, strata-ps, strata-worker, strata-evaluator live
  // Deadlines. Start-up includes loading the data set in every process.
  std::chrono::milliseconds startup_timeout{180000};
  std::chrono::milliseconds rpc_timeout{10000};
  // A worker that answers no GetStatus for this long is declared dead.
  std::chrono::milliseconds unresponsive_timeout{60000};
  std::chrono::milliseconds switch_timeout{300000};
  // Set by SuperviseJob: the services already run at these addresses; nothing is launched, and
  // the run token is the one in this process's environment (the services were given the same).
  std::optional<AttachedServices> attached;
  // `strata run --hosts`: the services run on these emulated hosts (launch/host_placement.h);
  // unset, every process runs in this machine's own network namespace, on 127.0.0.1.
  std::optional<HostPlacement> hosts;
};

// Returns the process exit code: 0 success, 1 the run failed, 2 the job spec or the command line
// is wrong (nothing was launched), 130 interrupted.
int RunLocalJob(const LocalRunOptions& options);

// `strata resume RUN_DIR` (`options.out_dir`): takes up a local run that did not finish where its
// checkpoints left it (run/resume_point.h), in the same run directory, its record going on. The
// same exit codes; 2 also when the directory holds no run, a finished one or one still running.
int ResumeLocalJob(const LocalRunOptions& options);

// `strata supervise`: the same exit codes. `options.attached` must be set; `options.out_dir` is the
// run directory the services share (it holds the sharder's output already).
int SuperviseJob(const LocalRunOptions& options);

// runs/<job name>-<local time, YYYYmmdd-HHMMSS>: where a run goes when no --out is given (the
// local and compose runs, and Kubernetes submissions under it).
std::string DefaultRunDir(const std::string& job_name);

// The directory holding the running executable (where the service binaries are installed).
std::string ExecutableDir();

}  // namespace strata
