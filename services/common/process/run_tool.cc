#include "services/common/process/run_tool.h"

#include <signal.h>

#include <cstdio>

#include "services/common/base/files.h"
#include "services/common/process/child_process.h"

namespace strata {

absl::StatusOr<ToolRun> RunTool(const ToolRunOptions& options) {
  SpawnOptions spawn;
  spawn.name = options.name;
  spawn.argv = options.argv;
  if (options.errors_path.empty()) {
    spawn.log_path = options.output_path;
  } else {
    spawn.stdout_path = options.output_path;  // truncated by Spawn
    spawn.log_path = options.errors_path;
  }
  std::remove(spawn.log_path.c_str());  // Spawn appends to the log
  auto child = ChildProcess::Spawn(spawn);
  if (!child.ok()) return child.status();
  ToolRun run;
  run.finished = (*child)->WaitFor(options.timeout);
  if (run.finished) {
    run.exit_code = (*child)->exit_code();
    run.exit_description = (*child)->ExitDescription();
  } else {
    (*child)->Signal(SIGKILL);
    (*child)->WaitFor(std::chrono::seconds(5));  // else ~ChildProcess reaps it
    run.exit_description = "killed at its deadline";
  }
  run.output = ReadFile(options.output_path).value_or("");
  if (!options.errors_path.empty()) run.errors = ReadFile(options.errors_path).value_or("");
  return run;
}

}  // namespace strata
