// Helpers for tests that run the real `strata` binary and the services it launches.
#pragma once

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "services/common/process/child_process.h"

namespace strata::testing {

inline std::string BinDir() { return STRATA_TEST_BIN_DIR; }
inline std::string Strata() { return BinDir() + "/strata"; }

inline bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

inline std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
}

// The directories MakeTempDir made in this test process. Removed when the process ends if every
// test passed; after a failure they are kept for a look at the run, and named on stderr.
// STRATA_KEEP_TEST_DIRS=1 keeps them always.
inline std::vector<std::string>& TempDirsOfThisProcess() {
  static auto* dirs = new std::vector<std::string>();  // never destroyed: read at exit
  return *dirs;
}

inline void RemoveTempDirsAtExit() {
  if (std::getenv("STRATA_KEEP_TEST_DIRS") != nullptr) return;
  const bool passed = ::testing::UnitTest::GetInstance()->Passed();
  for (const std::string& dir : TempDirsOfThisProcess()) {
    if (!passed) {
      // A fixture may have removed its own already (RunFixture does).
      std::error_code ignored;
      if (std::filesystem::exists(dir, ignored)) {
        std::fprintf(stderr, "kept %s (a test failed)\n", dir.c_str());
      }
      continue;
    }
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  }
}

inline std::string MakeTempDir(const std::string& tag) {
  static const bool registered = std::atexit(RemoveTempDirsAtExit) == 0;
  (void)registered;
  std::string tmpl =
      (std::getenv("TMPDIR") ? std::string(std::getenv("TMPDIR")) : std::string("/tmp")) +
      "/strata-" + tag + "-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  const char* dir = ::mkdtemp(buf.data());
  if (dir == nullptr) return std::string();
  TempDirsOfThisProcess().push_back(dir);
  return dir;
}

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// Runs a shell command to completion (the commands here are short: validate, status, report).
inline CommandResult RunCommand(const std::string& command) {
  CommandResult r;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) r.output.append(buf, n);
  const int status = ::pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

// A long-running `strata run` started in the background (a ChildProcess: its own process group,
// PR_SET_PDEATHSIG), with its output in a file. The destructor kills it (and, through
// PR_SET_PDEATHSIG, its services) if the test ends early.
class BackgroundRun {
 public:
  BackgroundRun(const std::vector<std::string>& args, const std::string& output_path)
      : output_(output_path) {
    SpawnOptions o;
    o.name = "strata";
    o.argv = {Strata()};
    o.argv.insert(o.argv.end(), args.begin(), args.end());
    o.log_path = output_path;
    std::remove(output_path.c_str());  // the log is appended to; each run starts it afresh
    auto child = ChildProcess::Spawn(o);
    if (child.ok()) child_ = std::move(*child);
  }
  pid_t pid() const { return child_ ? child_->pid() : -1; }
  // Waits up to `timeout` for the run to end; returns its exit code or -1 on timeout.
  int Wait(std::chrono::seconds timeout) {
    if (!child_ || !child_->WaitFor(timeout)) return -1;
    return child_->exit_code();
  }
  std::string Output() const { return Slurp(output_); }

 private:
  std::unique_ptr<ChildProcess> child_;  // its destructor kills and reaps a child still running
  std::string output_;
};

// Polls `predicate` until it holds or the deadline passes.
template <typename F>
bool Eventually(F predicate, std::chrono::seconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < until) {
    if (predicate()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return predicate();
}

inline nlohmann::json ReadJson(const std::string& path) {
  nlohmann::json j = nlohmann::json::parse(Slurp(path), nullptr, false);
  return j.is_discarded() ? nlohmann::json(nullptr) : j;
}

inline std::vector<nlohmann::json> ReadLines(const std::string& path) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded()) lines.push_back(j);
  }
  return lines;
}

// True if `pid` is gone (the kernel says there is no such process) or a zombie (ended, waiting to
// be reaped). Anything else counts as alive, an unreadable /proc entry included: a check that no
// process outlived a run must not pass because it could not look. A pid of 0 or less names no
// process of the run and is not "ended" either.
inline bool ProcessEnded(int pid) {
  if (pid <= 0) return false;
  if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return ::kill(pid, 0) != 0 && errno == ESRCH;  // it may have gone in between
  std::string content((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t close = content.rfind(')');
  return close != std::string::npos && close + 2 < content.size() && content[close + 2] == 'Z';
}

// `strata run` of a job text in the background, in a temporary directory it removes.
struct RunFixture {
  std::string dir, run_dir;
  std::unique_ptr<BackgroundRun> run;

  explicit RunFixture(const std::string& job) {
    dir = MakeTempDir("run");
    run_dir = dir + "/run";
    WriteText(dir + "/job.yaml", job);
    run = std::make_unique<BackgroundRun>(
        std::vector<std::string>{"run", dir + "/job.yaml", "--out", run_dir}, dir + "/output.txt");
  }
  ~RunFixture() {
    run.reset();
    RunCommand("rm -rf " + dir);
  }
  // Waits until every worker has trained at least `steps` steps (status.json, rewritten each
  // second).
  bool WaitForTraining(int steps) {
    return Eventually(
        [&] {
          nlohmann::json s = ReadJson(run_dir + "/status.json");
          if (!s.is_object() || !s.contains("workers") || s["workers"].size() < 2) return false;
          for (const auto& w : s["workers"]) {
            if (w.value("step", 0) < steps) return false;
          }
          return true;
        },
        std::chrono::seconds(180));
  }
  int PidOf(const std::string& name) {
    nlohmann::json s = ReadJson(run_dir + "/status.json");
    for (const auto& p : s["processes"]) {
      if (p.value("name", "") == name) return p.value("pid", 0);
    }
    return 0;
  }
  std::vector<int> AllPids() {
    std::vector<int> pids;
    nlohmann::json s = ReadJson(run_dir + "/status.json");
    for (const auto& p : s["processes"]) pids.push_back(p.value("pid", 0));
    return pids;
  }
  // The events of events.jsonl named `name`, in order.
  std::vector<nlohmann::json> Events(const std::string& name) {
    std::vector<nlohmann::json> out;
    for (const auto& e : ReadLines(run_dir + "/events.jsonl")) {
      if (e.value("event", "") == name) out.push_back(e);
    }
    return out;
  }
};

// The suite's small training job, long enough to be disturbed mid-run: 60 passes over 2,000
// Fashion-MNIST examples, 2 workers, 1 server. `more` is further top-level YAML (recovery: ...).
inline std::string SmallLongJob(const std::string& name, const std::string& strategy,
                                const std::string& more) {
  return "name: " + name + R"(
dataset: { name: fashion-mnist, path: /usr/share/datasets/fashion-mnist, max_train: 2000, max_test: 200 }
model: { arch: mlp }
training: { epochs: 60, batch_size: 64, lr: 0.02, momentum: 0.9, seed: 1 }
cluster: { workers: 2, parameter_servers: 1 }
sharding: { method: stratified }
strategy: )" +
         strategy + "\n" + more;
}

// The final validation loss of an undisturbed run of `job`: what a recovered all-reduce run must
// equal to the bit. nullopt, with the reason in *why, when that run did not succeed.
inline std::optional<double> UndisturbedFinalLoss(const std::string& job, std::string* why) {
  RunFixture undisturbed(job);
  if (const int code = undisturbed.run->Wait(std::chrono::seconds(600)); code != 0) {
    *why = "the undisturbed run exited " + std::to_string(code) + ": " + undisturbed.run->Output();
    return std::nullopt;
  }
  nlohmann::json summary = ReadJson(undisturbed.run_dir + "/summary.json");
  if (!summary.is_object() || !summary["final_val_loss"].is_number()) {
    *why = "the undisturbed run's summary has no final_val_loss: " + summary.dump(2);
    return std::nullopt;
  }
  return summary["final_val_loss"].get<double>();
}

}  // namespace strata::testing
