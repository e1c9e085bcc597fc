// `strata run` with the local launcher: every service is a child process on 127.0.0.1, the run
// directory is a local directory. RunLocalJob checks the job, shards the data, launches the
// services (launch/local_launcher.h) and starts training; the run supervisor
// (run/run_supervisor.h) then watches it to the end in one loop, stepping the evaluation
// scheduler and the switch controller (run/switch_controller.h); every child ends on success,
// failure and Ctrl-C.
#pragma once

#include <chrono>
#include <string>
#include <vector>

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
};

// Returns the process exit code: 0 success, 1 the run failed, 2 the job spec or the command line
// is wrong (nothing was launched), 130 interrupted.
int RunLocalJob(const LocalRunOptions& options);

// The directory holding the running executable (where the service binaries are installed).
std::string ExecutableDir();

}  // namespace strata
