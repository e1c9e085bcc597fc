// A child process for tests: output captured in files, waited for with a deadline, and always
// killed when the object goes away (a failing assertion must not leave a server running).
#pragma once

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "services/common/child_process.h"

namespace strata::testing {

class Subprocess {
 public:
  // Starts `argv[0]` with `argv`; stdout and stderr go to files in `log_dir`.
  Subprocess(const std::vector<std::string>& argv, const std::filesystem::path& log_dir) {
    static int counter = 0;
    const std::string stem = "proc-" + std::to_string(++counter);
    stdout_path_ = log_dir / (stem + ".out");
    stderr_path_ = log_dir / (stem + ".err");
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    // The test's run token (strata-sharder serve refuses to start without one).
    const std::vector<std::string> env_strings = ChildEnvironment();
    std::vector<char*> env;
    for (const std::string& e : env_strings) env.push_back(const_cast<char*>(e.c_str()));
    env.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // the test binary dying takes its children along
      if (!std::freopen(stdout_path_.c_str(), "w", stdout) || !std::freopen(stderr_path_.c_str(), "w", stderr)) {
        ::_exit(126);
      }
      ::execve(args[0], args.data(), env.data());
      ::_exit(127);
    }
  }
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;
  ~Subprocess() { Kill(); }

  // The exit code (128 + signal if killed), or nullopt if still running at the deadline.
  std::optional<int> Wait(std::chrono::milliseconds timeout) {
    if (exit_code_) return exit_code_;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      int status = 0;
      const pid_t r = ::waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        return exit_code_;
      }
      if (r < 0 || std::chrono::steady_clock::now() >= deadline) return std::nullopt;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling, not synchronising
    }
  }

  void Kill() {
    if (pid_ > 0 && !exit_code_) {
      ::kill(pid_, SIGKILL);
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

  pid_t pid_ = -1;
  std::optional<int> exit_code_;
  std::filesystem::path stdout_path_, stderr_path_;
};

}  // namespace strata::testing
