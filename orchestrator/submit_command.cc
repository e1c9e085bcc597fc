// `strata submit JOB.yaml [--set key=value ...] [--out DIR] [--image IMAGE] [--overlay NAME]
// [--namespace NS] [--kubectl PATH] [--timeout S] [--detach] ...`: the job on a Kubernetes
// cluster through kubectl, followed to its end (docs/deploy.md, "strata submit").
#include <chrono>

#include "orchestrator/commands.h"
#include "orchestrator/lib/kubernetes_submission.h"

namespace strata::cli {
namespace {

std::chrono::milliseconds Millis(double seconds) {
  return std::chrono::milliseconds(static_cast<long long>(seconds * 1000));
}

}  // namespace

void AddSubmitCommand(CLI::App& app, int* exit_code) {
  CLI::App* cmd = app.add_subcommand(
      "submit", "run a job on a Kubernetes cluster with kubectl and follow it to its end");
  auto o = std::make_shared<SubmitOptions>();
  struct Seconds {
    double timeout = 86400, start = 300, poll = 5, kubectl = 60, remove = 300;
  };
  auto s = std::make_shared<Seconds>();
  cmd->add_option("job", o->job_path, "job spec (YAML)")->required();
  cmd->add_option("--set", o->overrides,
                  "override a key, e.g. --set cluster.workers=4 (repeatable)");
  cmd->add_option("--out", o->out_dir,
                  "submission directory (default runs/<name>-<timestamp>/kubernetes)");
  cmd->add_option("--image", o->render.image,
                  "the image holding the strata binaries (default strata:latest)");
  cmd->add_option("--overlay", o->overlay, "small | large (default: the base)");
  cmd->add_option("--namespace", o->namespace_name,
                  "namespace (default: the one of kubectl's current context)");
  cmd->add_option("--kubectl", o->kubectl, "the kubectl to run (default: kubectl on PATH)");
  cmd->add_flag("--detach", o->detach, "return once the objects exist instead of following");
  cmd->add_option("--timeout", s->timeout,
                  "seconds the run may take; then it is deleted and submit exits 1 (default "
                  "86400)");
  cmd->add_option("--start-timeout", s->start,
                  "seconds a pod may stay unable to start (image pull, unschedulable) before the "
                  "run is deleted (default 300)");
  cmd->add_option("--poll-interval", s->poll,
                  "seconds between two looks at the Job and its pods (default 5)");
  cmd->add_option("--kubectl-timeout", s->kubectl,
                  "seconds one kubectl call may take before it is killed (default 60)");
  cmd->add_option("--delete-timeout", s->remove,
                  "seconds to wait for the run's objects to be deleted (default 300)");
  cmd->callback([o, s, exit_code] {
    o->timeout = Millis(s->timeout);
    o->start_timeout = Millis(s->start);
    o->poll_interval = Millis(s->poll);
    o->kubectl_timeout = Millis(s->kubectl);
    o->delete_timeout = Millis(s->remove);
    *exit_code = SubmitKubernetesJob(*o);
  });
}

}  // namespace strata::cli
