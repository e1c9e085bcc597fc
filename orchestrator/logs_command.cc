// `strata logs DIR [--service NAME] [--tail N]`: a service's log. For a Kubernetes submission
// (docs/deploy.md) from its pod through kubectl, or from the logs saved when the run ended; for a
// local run directory from its logs/ folder.
#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "orchestrator/commands.h"
#include "orchestrator/lib/kubernetes_submission.h"
#include "services/common/base/files.h"
#include "services/common/base/run_directory.h"

namespace strata::cli {
namespace {

struct LogsArgs {
  std::string dir, service, kubectl;
  int tail = -1;
  double kubectl_timeout = 60;
};

// A local run: logs/<service>.log, or every log under a header when no service is named.
int LocalLogs(const LogsArgs& a) {
  const RunPaths paths(a.dir);
  std::vector<std::string> services;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(paths.logs, ec)) {
    if (entry.path().extension() == ".log") services.push_back(entry.path().stem().string());
  }
  std::sort(services.begin(), services.end());
  if (!a.service.empty()) {
    if (std::find(services.begin(), services.end(), a.service) == services.end()) {
      std::string known;
      for (const std::string& s : services) known += (known.empty() ? "" : ", ") + s;
      std::fprintf(stderr, "strata logs: %s has no log of '%s' (it has: %s)\n", a.dir.c_str(),
                   a.service.c_str(), known.empty() ? "none" : known.c_str());
      return 1;
    }
    services = {a.service};
  }
  for (const std::string& s : services) {
    const std::string text =
        LastLines(ReadFile(paths.logs + "/" + s + ".log").value_or(""), a.tail);
    if (services.size() > 1) std::printf("==> %s <==\n", s.c_str());
    std::fwrite(text.data(), 1, text.size(), stdout);
  }
  return 0;
}

int Logs(const LogsArgs& a) {
  if (FindSubmissionDir(a.dir)) {
    SubmissionCommandOptions options;
    options.kubectl = a.kubectl;
    options.kubectl_timeout =
        std::chrono::milliseconds(static_cast<long long>(a.kubectl_timeout * 1000));
    return ShowSubmissionLogs(a.dir, a.service.empty() ? "orchestrator" : a.service, a.tail,
                              options);
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
  cmd->add_option("--service", args->service,
                  "ps-0, worker-1, evaluator, sharder (local), orchestrator (Kubernetes; the "
                  "default there, with the sharder's output first); local default: every log");
  cmd->add_option("--tail", args->tail, "only the last N lines");
  cmd->add_option("--kubectl", args->kubectl,
                  "the kubectl to run (default: the one the submission used, else PATH)");
  cmd->add_option("--kubectl-timeout", args->kubectl_timeout,
                  "seconds one kubectl call may take before it is killed (default 60)");
  cmd->callback([args, exit_code] { *exit_code = Logs(*args); });
}

}  // namespace strata::cli
