// A child process that Strata launched: a service binary started by `strata run`, a test or a
// benchmark. It writes its output to a log file, reports its port through a port file (services
// bind port 0 and write the port they got), dies with its parent (PR_SET_PDEATHSIG) and is killed
// when this object goes away, so nothing is ever left behind.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <absl/status/statusor.h>

namespace strata {

struct ChildOptions {
  std::string binary;
  std::vector<std::string> args;
  std::string name;       // for messages ("worker-1"); defaults to the binary's name
  std::string log_file;   // stdout and stderr go here (appended); empty: inherit
  std::string port_file;  // if set, Spawn waits until the child writes its port there
  std::chrono::milliseconds start_deadline{120000};
};

class ChildProcess {
 public:
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Spawn(const ChildOptions& options);
  ~ChildProcess();  // kills the child if it still runs
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  int port() const { return port_; }
  std::string address() const;  // 127.0.0.1:<port>
  const std::string& name() const { return name_; }
  const std::string& log_file() const { return log_file_; }

  // Non-blocking: has the child exited? Records the exit code.
  bool Exited();
  // Exit code (128 + signal when killed by one); kDeadlineExceeded if it is still running.
  absl::StatusOr<int> WaitForExit(std::chrono::milliseconds deadline);
  // SIGTERM, then SIGKILL after `grace` if it has not exited.
  void Terminate(std::chrono::milliseconds grace = std::chrono::milliseconds(3000));
  void Kill();
  // The last lines of the log, for error messages.
  std::string LogTail(size_t max_bytes = 2000) const;

 private:
  ChildProcess() = default;
  absl::Status WaitForPort(const std::string& port_file, std::chrono::milliseconds deadline);

  pid_t pid_ = -1;
  int port_ = 0;
  bool exited_ = false;
  int exit_code_ = 0;
  std::string name_, log_file_;
};

}  // namespace strata
