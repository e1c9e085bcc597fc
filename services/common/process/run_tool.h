// A tool run to its end with a deadline (docker, docker-compose, kubectl): one ChildProcess (its
// own process group, PR_SET_PDEATHSIG, no shell), its output captured in files and read back, and
// the whole process group killed if it is still running at the deadline.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include <absl/status/statusor.h>

namespace strata {

struct ToolRunOptions {
  std::string name;               // for messages
  std::vector<std::string> argv;  // argv[0] is the executable path
  // Where the tool's output goes while it runs (emptied first): stdout, and stderr too unless
  // `errors_path` is set. Read back into ToolRun::output.
  std::string output_path;
  // When set, stderr goes here instead (emptied first; ToolRun::errors): for a tool whose stdout
  // is parsed (kubectl's JSON) apart from its warnings.
  std::string errors_path;
  // Longest the tool may run; it is then killed with its process group.
  std::chrono::milliseconds timeout{60000};
};

struct ToolRun {
  bool finished = false;         // false: killed at the deadline
  int exit_code = -1;            // ChildProcess::exit_code() once finished; -1 when killed
  std::string exit_description;  // "exited with code 1", "killed by signal 9 (Killed)"
  std::string output;            // what it wrote to `output_path`, as far as it got
  std::string errors;            // what it wrote to `errors_path`, when that was set
  bool ok() const { return finished && exit_code == 0; }
};

// Runs the tool and waits for it. Fails only when it cannot be started; a tool that fails or is
// killed is a ToolRun that says so.
absl::StatusOr<ToolRun> RunTool(const ToolRunOptions& options);

}  // namespace strata
