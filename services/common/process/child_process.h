// Child processes that Strata launches (the services of `strata run`, test and benchmark
// launchers): each runs in its own process group (so Ctrl-C on the terminal reaches only the
// launcher, which then shuts the services down in order) with PR_SET_PDEATHSIG, so that no service
// outlives its launcher even when that is killed -9. Output goes to a log file; services report
// the port they bound through a port file (WaitForPortFile). Each child gets the launcher's run
// token in its environment (ChildEnvironment), never on its command line.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <absl/status/statusor.h>

namespace strata {

struct SpawnOptions {
  std::string name;               // "worker-1", for messages
  std::vector<std::string> argv;  // argv[0] is the executable path
  std::string log_path;           // stdout and stderr go here (appended)
  // When set, stdout goes to this file instead (truncated) and only stderr to `log_path`: for a
  // tool whose output is read back (kubectl's JSON) apart from its warnings.
  std::string stdout_path;
  // The child writes to this process's stdout and stderr instead (a tool run in the foreground,
  // as `strata shard` runs strata-sharder); log_path and stdout_path are then unused.
  bool inherit_output = false;
  // The child's whole environment ("NAME=value" entries); unset: ChildEnvironment(). For a test
  // that starts a program without the run token, or with settings of its own.
  std::optional<std::vector<std::string>> env;
  // Where the child runs, when not where this process runs: a network namespace (a path such as
  // /run/netns/strata-h1) and a cgroup-v1 directory whose cgroup.procs it joins, both entered
  // after fork and before exec (an emulated host, orchestrator/launch/host_placement.h). Both
  // are opened before fork, so that a wrong path is an error here, not a child that exits.
  std::string network_namespace;
  std::string cpu_group;
};

class ChildProcess {
 public:
  // Must be called from a thread that lives as long as the child: PR_SET_PDEATHSIG fires when
  // the forking *thread* ends. `strata run` spawns from its main thread.
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Spawn(const SpawnOptions& options);
  ~ChildProcess();  // kills and reaps the child if it still runs
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  const std::string& name() const { return name_; }
  const std::string& log_path() const { return log_path_; }
  pid_t pid() const { return pid_; }

  // Reaps without blocking; true once the child has exited.
  bool Poll();
  bool exited() const { return exited_; }
  // "exited with code 1" / "killed by signal 9 (Killed)"; meaningful once exited().
  std::string ExitDescription() const;
  bool succeeded() const;
  // Ended by a signal (killed, or a crash) rather than by exiting; meaningful once exited().
  bool killed_by_signal() const;
  // The exit code, or 128 + signal when killed by one; meaningful once exited().
  int exit_code() const;

  // Signals the child's whole process group.
  void Signal(int signal);
  // Polls until the child exits or the timeout passes; true if it exited.
  bool WaitFor(std::chrono::milliseconds timeout);

 private:
  ChildProcess(std::string name, std::string log_path, pid_t pid)
      : name_(std::move(name)), log_path_(std::move(log_path)), pid_(pid) {}
  std::string name_, log_path_;
  pid_t pid_;
  bool exited_ = false;
  int wait_status_ = 0;
};

// The environment a child of this process starts with: ours, with STRATA_RUN_TOKEN set to this
// process's run token (rpc_auth.h), or removed when this process runs without authentication.
// Spawn uses it unless SpawnOptions::env says otherwise, so that the child's calls and servers
// share the run's token. Every process Strata and its tests start goes through Spawn.
std::vector<std::string> ChildEnvironment();

// The last `max_bytes` of a log file, for error messages ("(no log)" if unreadable).
std::string LogTail(const std::string& log_path, size_t max_bytes = 2000);
// The end of a tool's captured output, whitespace trimmed, "..." where it was cut: what an error
// message quotes.
std::string OutputTail(const std::string& text, size_t max_bytes = 1500);
// The first executable file called `name` in a directory of PATH, as a shell would find it.
std::optional<std::string> FindOnPath(const std::string& name);

// The port a service wrote into `port_file` (a decimal number and a newline, written atomically),
// or nullopt if it has not written it yet.
std::optional<int> ReadPortFile(const std::string& port_file);

// Polls `port_file` until the child has written its port. Fails, naming the child and quoting the
// end of its log, if it exits first or the deadline passes.
absl::StatusOr<int> WaitForPortFile(ChildProcess& child, const std::string& port_file,
                                    std::chrono::milliseconds deadline);

// Ends every child: SIGTERM to each group, up to `grace` to exit, then SIGKILL, then reaps.
void TerminateAll(const std::vector<ChildProcess*>& children, std::chrono::milliseconds grace);

}  // namespace strata
