// `strata delete DIR`: ends a Kubernetes submission (docs/deploy.md, "strata submit"): its
// orchestrator Job, deleted in the foreground, takes everything it owns with it; the run
// volume's claim, which holds the record, stays.
#include <cstdio>

#include "orchestrator/commands.h"
#include "orchestrator/lib/kubernetes_submission.h"
#include "services/common/base/files.h"
#include "services/common/base/run_directory.h"

namespace strata::cli {
namespace {

struct DeleteArgs {
  std::string dir, kubectl;
  double kubectl_timeout = 60, delete_timeout = 300;
};

int Delete(const DeleteArgs& a) {
  if (!FindSubmissionDir(a.dir) && ReadFile(RunPaths(a.dir).job_yaml).ok()) {
    std::fprintf(stderr,
                 "strata delete: %s is a local run directory, not a Kubernetes submission: a "
                 "local run ends with Ctrl-C in its terminal (or `kill` of the orchestrator_pid "
                 "in its status.json) and leaves nothing running; its directory is yours to "
                 "remove\n",
                 a.dir.c_str());
    return 2;
  }
  SubmissionCommandOptions options;
  options.kubectl = a.kubectl;
  options.kubectl_timeout =
      std::chrono::milliseconds(static_cast<long long>(a.kubectl_timeout * 1000));
  options.delete_timeout =
      std::chrono::milliseconds(static_cast<long long>(a.delete_timeout * 1000));
  return DeleteSubmission(a.dir, options);
}

}  // namespace

void AddDeleteCommand(CLI::App& app, int* exit_code) {
  CLI::App* cmd = app.add_subcommand(
      "delete", "delete a Kubernetes submission's objects (the run volume's claim stays)");
  auto args = std::make_shared<DeleteArgs>();
  cmd->add_option("dir", args->dir, "submission directory (strata submit --out)")->required();
  cmd->add_option("--kubectl", args->kubectl,
                  "the kubectl to run (default: the one the submission used, else PATH)");
  cmd->add_option("--kubectl-timeout", args->kubectl_timeout,
                  "seconds one kubectl call may take before it is killed (default 60)");
  cmd->add_option("--delete-timeout", args->delete_timeout,
                  "seconds to wait for the objects to be gone (default 300)");
  cmd->callback([args, exit_code] { *exit_code = Delete(*args); });
}

}  // namespace strata::cli
