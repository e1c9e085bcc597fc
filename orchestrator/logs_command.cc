// `strata logs DIR [SERVICE] [--tail N] [--follow]`: a service's log. For a Kubernetes
// submission (docs/deploy.md) from its pod through kubectl, or from the logs saved when the run
// ended; for a local run directory from its logs/ folder. --follow keeps printing what the
// services write until the run ends (locally: the orchestrator says so in status.json, or is
// gone), as `tail -f` would but without having to be stopped by hand.
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include <nlohmann/json.hpp>

#include "orchestrator/commands.h"
#include "orchestrator/lib/kubernetes_submission.h"
#include "orchestrator/run/control_server.h"
#include "services/common/base/files.h"
#include "services/common/base/run_directory.h"

namespace strata::cli {
namespace {

struct LogsArgs {
  std::string dir, service, kubectl;
  int tail = -1;
  bool follow = false;
  double kubectl_timeout = 60;
};

// How often a followed log is looked at again: a person watching does not notice a quarter of a
// second, and a stat of a few files that often costs nothing.
constexpr std::chrono::milliseconds kFollowPoll{250};

// Whether a local run is still going: status.json says "running" and its orchestrator answers.
// A directory without status.json is not a run that is going (the orchestrator writes it before
// it launches anything).
bool LocalRunGoing(const RunPaths& paths) {
  const auto text = ReadFile(paths.status);
  if (!text.ok()) return false;
  const nlohmann::json status = nlohmann::json::parse(*text, nullptr, false);
  // Rewritten in place by rename, so a parse failure is a file being damaged, not written: the
  // next look decides.
  if (!status.is_object()) return true;
  if (status.value("state", "") != "running") return false;
  return ProbeOrchestrator(status.value("control_socket", ""), status.value("updated", 0.0)) !=
         OrchestratorLiveness::kGone;
}

// Every service's log under logs/, by name.
std::vector<std::string> LocalServices(const RunPaths& paths) {
  std::vector<std::string> services;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(paths.logs, ec)) {
    if (entry.path().extension() == ".log") services.push_back(entry.path().stem().string());
  }
  std::sort(services.begin(), services.end());
  return services;
}

// Prints what each followed log gained since the last look, under a `==> name <==` line whenever
// the log printed from changes (as tail does). A log that shrank was started afresh: read from 0.
class LogFollower {
 public:
  LogFollower(std::string run_dir, bool with_headers)
      : run_dir_(std::move(run_dir)), with_headers_(with_headers) {}

  void Start(const std::string& service, int64_t offset) { offsets_[service] = offset; }

  void PrintNew(const std::vector<std::string>& services) {
    for (const std::string& s : services) {
      const std::string path = RunPaths(run_dir_).ServiceLog(s);
      struct stat st;
      if (::stat(path.c_str(), &st) != 0) continue;
      int64_t& offset = offsets_[s];
      if (st.st_size < offset) offset = 0;
      if (st.st_size == offset) continue;
      std::ifstream in(path, std::ios::binary);
      in.seekg(offset);
      std::string chunk(static_cast<size_t>(st.st_size - offset), '\0');
      in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
      chunk.resize(static_cast<size_t>(in.gcount()));
      if (chunk.empty()) continue;
      if (with_headers_ && s != last_printed_) std::printf("\n==> %s <==\n", s.c_str());
      last_printed_ = s;
      std::fwrite(chunk.data(), 1, chunk.size(), stdout);
      std::fflush(stdout);
      offset += static_cast<int64_t>(chunk.size());
    }
  }

 private:
  std::string run_dir_;
  bool with_headers_;
  std::map<std::string, int64_t> offsets_;
  std::string last_printed_;
};

// A local run: logs/<service>.log, or every log under a header when no service is named.
int LocalLogs(const LogsArgs& a) {
  const RunPaths paths(a.dir);
  std::vector<std::string> services = LocalServices(paths);
  // A service not started yet is waited for when following a run that is going.
  const bool wait_for_service = a.follow && LocalRunGoing(paths);
  if (!a.service.empty() && !wait_for_service) {
    if (std::find(services.begin(), services.end(), a.service) == services.end()) {
      std::string known;
      for (const std::string& s : services) known += (known.empty() ? "" : ", ") + s;
      std::fprintf(stderr, "strata logs: %s has no log of '%s' (it has: %s)\n", a.dir.c_str(),
                   a.service.c_str(), known.empty() ? "none" : known.c_str());
      return 1;
    }
  }
  if (!a.service.empty()) services = {a.service};
  LogFollower follower(paths.root, a.service.empty());
  for (const std::string& s : services) {
    const std::string whole = ReadFile(paths.ServiceLog(s)).value_or("");
    const std::string text = LastLines(whole, a.tail);
    if (services.size() > 1) std::printf("==> %s <==\n", s.c_str());
    std::fwrite(text.data(), 1, text.size(), stdout);
    follower.Start(s, static_cast<int64_t>(whole.size()));
  }
  std::fflush(stdout);
  if (!a.follow) return 0;
  // The end is seen before the last read, so nothing written before the run ended is missed.
  for (;;) {
    const bool going = LocalRunGoing(paths);
    follower.PrintNew(a.service.empty() ? LocalServices(paths) : services);
    if (!going) return 0;
    std::this_thread::sleep_for(kFollowPoll);
  }
}

int Logs(const LogsArgs& a) {
  if (FindSubmissionDir(a.dir)) {
    SubmissionCommandOptions options;
    options.kubectl = a.kubectl;
    options.kubectl_timeout =
        std::chrono::milliseconds(static_cast<long long>(a.kubectl_timeout * 1000));
    return ShowSubmissionLogs(a.dir, a.service.empty() ? "orchestrator" : a.service, a.tail,
                              a.follow, options);
  }
  if (ReadFile(RunPaths(a.dir).job_yaml).ok()) return LocalLogs(a);
  std::fprintf(stderr,
               "strata logs: %s is neither a run directory (no job.yaml) nor a Kubernetes "
               "submission (no submission.json)\n",
               a.dir.c_str());
  return 2;
}

}  // namespace

void AddLogsCommand(CLI::App& app, int* exit_code) {
  CLI::App* cmd = app.add_subcommand("logs", "print a service's log (local run or Kubernetes)");
  auto args = std::make_shared<LogsArgs>();
  cmd->add_option("dir", args->dir, "run directory or Kubernetes submission directory")->required();
  const std::string service_help =
      "ps-0, worker-1, evaluator, sharder (local), orchestrator (Kubernetes; the default there, "
      "with the sharder's output first); local default: every log";
  CLI::Option* positional = cmd->add_option("service", args->service, service_help);
  cmd->add_option("--service", args->service, service_help)->excludes(positional);
  cmd->add_option("--tail", args->tail, "only the last N lines");
  cmd->add_flag("-f,--follow", args->follow,
                "keep printing what is written until the run ends (Kubernetes: kubectl logs -f)");
  cmd->add_option("--kubectl", args->kubectl,
                  "the kubectl to run (default: the one the submission used, else PATH)");
  cmd->add_option("--kubectl-timeout", args->kubectl_timeout,
                  "seconds one kubectl call may take before it is killed (default 60)");
  cmd->callback([args, exit_code] { *exit_code = Logs(*args); });
}

}  // namespace strata::cli
