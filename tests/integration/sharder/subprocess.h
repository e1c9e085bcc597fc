// A child process for tests (a ChildProcess: its own process group, PR_SET_PDEATHSIG, the test's
// run token in its environment): stdout and stderr captured in files, waited for with a
// deadline, and always killed when the object goes away (a failing assertion must not leave a
// server running).
#pragma once

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "services/common/process/child_process.h"

namespace strata::testing {

class Subprocess {
 public:
  // Starts `argv[0]` with `argv`; stdout and stderr go to files in `log_dir`.
  Subprocess(const std::vector<std::string>& argv, const std::filesystem::path& log_dir) {
    static int counter = 0;
    const std::string stem = "proc-" + std::to_string(++counter);
    stdout_path_ = log_dir / (stem + ".out");
    stderr_path_ = log_dir / (stem + ".err");
    std::filesystem::remove(stderr_path_);  // the log is appended to
    SpawnOptions o;
    o.name = stem;
    o.argv = argv;
    o.stdout_path = stdout_path_.string();
    o.log_path = stderr_path_.string();
    auto child = ChildProcess::Spawn(o);
    if (child.ok()) child_ = std::move(*child);
  }
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  // The exit code (128 + signal if killed), or nullopt if still running at the deadline (or if
  // it never started).
  std::optional<int> Wait(std::chrono::milliseconds timeout) {
    if (!child_ || !child_->WaitFor(timeout)) return std::nullopt;
    return child_->exit_code();
  }

  void Kill() {
    if (child_ && !child_->exited()) {
      child_->Signal(SIGKILL);
      Wait(std::chrono::seconds(30));
    }
  }

  std::string Stdout() const { return Slurp(stdout_path_); }
  std::string Stderr() const { return Slurp(stderr_path_); }

 private:
  static std::string Slurp(const std::filesystem::path& p) {
    std::ifstream in(p);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

  std::unique_ptr<ChildProcess> child_;  // its destructor kills and reaps a child still running
  std::filesystem::path stdout_path_, stderr_path_;
};

}  // namespace strata::testing
