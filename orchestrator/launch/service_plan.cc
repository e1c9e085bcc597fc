#include "orchestrator/launch/service_plan.h"

#include <absl/strings/str_cat.h>

namespace strata {
namespace {

ServiceSpec ParameterServer(const JobSpec& spec, const RunPaths& paths, int p,
                            const ServicePlanInputs& in) {
  ServiceSpec s;
  s.name = absl::StrCat("ps-", p);
  s.role = ServiceRole::kParameterServer;
  s.binary = "strata-ps";
  // The resolved job holds the servers, the workers, the consistency and the learning rates; the
  // flags are this server's place and what the sharder found.
  s.args = {"--partition", std::to_string(p), "--job", paths.job_resolved, "--train-examples",
            std::to_string(in.train_examples),
            // The asynchronous phase's budget is global: workers keep cycling their shards until
            // the servers have applied the job's samples (docs/protocol.md, "Sample budget").
            "--sample-budget", std::to_string(spec.training.epochs * in.train_examples),
            "--run-dir", paths.root};
  if (!in.init_checkpoint.empty()) {
    s.args.insert(s.args.end(), {"--init-checkpoint", in.init_checkpoint});
  }
  // Saves that a restarted server, or every server of a resumed run, starts from
  // (docs/user-guide.md, "When a process dies"); a first start finds none and takes the model
  // it is given.
  s.args.insert(s.args.end(), {"--checkpoint-every-s",
                               absl::StrCat(spec.recovery.server_checkpoint_s), "--resume"});
  if (spec.cluster.cpu.parameter_server > 0) {
    s.cpu_fractions.push_back(spec.cluster.cpu.parameter_server);
  }
  return s;
}

ServiceSpec Worker(const JobSpec& spec, const RunPaths& paths, int r, const ServicePlanInputs& in) {
  ServiceSpec s;
  s.name = absl::StrCat("worker-", r);
  s.role = ServiceRole::kWorker;
  s.binary = "strata-worker";
  s.args = {"--job",        paths.job_resolved,  "--rank",    std::to_string(r),
            "--shard-file", ShardFile(paths, r), "--run-dir", paths.root};
  if (r == 0 && spec.strategy.kind != "ps" && spec.recovery.ring_checkpoint_s > 0) {
    // The ring's model, for `strata resume` (the replicas are identical, one copy is the state).
    s.args.insert(s.args.end(),
                  {"--checkpoint-every-s", absl::StrCat(spec.recovery.ring_checkpoint_s)});
  }
  if (spec.launcher.ring_transport == "unix") {
    s.ring_address = absl::StrCat(in.ring_socket_prefix, r);
    s.args.insert(s.args.end(), {"--ring-listen", s.ring_address});
  }
  if (const double share = WorkerCpuShare(spec.cluster, r); share > 0) {
    s.cpu_fractions.push_back(share);
  }
  return s;
}

}  // namespace

std::string ShardFile(const RunPaths& paths, int rank) {
  return absl::StrCat(paths.shards, "/shard-", rank, ".idx");
}

TaskSpec ShardTask(const RunPaths& paths) {
  TaskSpec t;
  t.name = "sharder";
  t.binary = "strata-sharder";
  t.args = {"--job", paths.job_resolved, "--out", paths.shards};
  t.description = "the sharder";
  return t;
}

TaskSpec InitCheckpointTask(const RunPaths& paths, const std::string& checkpoint) {
  TaskSpec t;
  t.name = "init-checkpoint";
  t.binary = "strata-evaluator";
  t.args = {"--job", paths.job_resolved, "--write-init-checkpoint", checkpoint};
  t.description = "writing the initial model";
  t.record_launch = false;
  return t;
}

std::vector<ServiceSpec> PlanServices(const JobSpec& spec, const RunPaths& paths,
                                      const ServicePlanInputs& inputs) {
  std::vector<ServiceSpec> services;
  if (spec.strategy.kind != "allreduce") {
    for (int p = 0; p < spec.cluster.parameter_servers; ++p) {
      services.push_back(ParameterServer(spec, paths, p, inputs));
    }
  }
  for (int r = 0; r < spec.cluster.workers; ++r) services.push_back(Worker(spec, paths, r, inputs));
  ServiceSpec evaluator;
  evaluator.name = "evaluator";
  evaluator.role = ServiceRole::kEvaluator;
  evaluator.binary = "strata-evaluator";
  evaluator.args = {"--job", paths.job_resolved, "--threads", "1"};
  if (spec.cluster.cpu.evaluator > 0) evaluator.cpu_fractions.push_back(spec.cluster.cpu.evaluator);
  services.push_back(evaluator);
  if (spec.security.tls != "off") {
    // Every service serves and calls with the run's certificates (docs/security.md).
    for (ServiceSpec& s : services) {
      s.args.insert(s.args.end(), {"--tls", spec.security.tls, "--tls-dir", inputs.tls_dir,
                                   "--tls-server-name", spec.security.tls_server_name});
    }
  }
  return services;
}

}  // namespace strata
