#include "orchestrator/launch/service_plan.h"

#include <absl/strings/str_cat.h>

#include "orchestrator/launch/run_tls.h"

namespace strata {
namespace {

ServiceSpec ParameterServer(const v1::ResolvedJob& job, const RunPaths& paths, int p,
                            const ServicePlanInputs& in) {
  ServiceSpec s;
  s.name = absl::StrCat("ps-", p);
  s.role = ServiceRole::kParameterServer;
  s.binary = "strata-ps";
  // The resolved job holds the servers, the workers, the consistency, the learning rates, the
  // sample budget's epochs and the checkpoint cadence; the run directory holds the training-set
  // size the sharder counted (shards/manifest.json). The flags are this server's place.
  s.args = {"--partition", std::to_string(p), "--job", paths.job_resolved, "--run-dir", paths.root};
  if (!in.init_checkpoint.empty()) {
    s.args.insert(s.args.end(), {"--init-checkpoint", in.init_checkpoint});
  }
  // A restarted server, or every server of a resumed run, starts from its last save
  // (docs/user-guide.md, "When a process dies"); a first start finds none and takes the model
  // it is given.
  s.args.push_back("--resume");
  if (job.cluster().cpu().parameter_server() > 0) {
    s.cpu_fractions.push_back(job.cluster().cpu().parameter_server());
  }
  return s;
}

ServiceSpec Worker(const v1::ResolvedJob& job, const RunPaths& paths, int r,
                   const ServicePlanInputs& in) {
  ServiceSpec s;
  s.name = absl::StrCat("worker-", r);
  s.role = ServiceRole::kWorker;
  s.binary = "strata-worker";
  // Rank 0 also saves the ring's model for `strata resume`, at the job's cadence.
  s.args = {"--job",        paths.job_resolved,  "--rank",    std::to_string(r),
            "--shard-file", paths.ShardIndex(r), "--run-dir", paths.root};
  if (job.launcher().ring_transport() == v1::RING_TRANSPORT_UNIX) {
    s.ring_address = absl::StrCat(in.ring_socket_prefix, r);
    s.args.insert(s.args.end(), {"--ring-listen", s.ring_address});
  }
  if (const double share = WorkerCpuShare(job.cluster(), r); share > 0) {
    s.cpu_fractions.push_back(share);
  }
  return s;
}

}  // namespace

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

std::vector<ServiceSpec> PlanServices(const v1::ResolvedJob& job, const RunPaths& paths,
                                      const ServicePlanInputs& inputs) {
  std::vector<ServiceSpec> services;
  if (UsesServers(job)) {
    for (int p = 0; p < job.cluster().parameter_servers(); ++p) {
      services.push_back(ParameterServer(job, paths, p, inputs));
    }
  }
  for (int r = 0; r < job.cluster().workers(); ++r)
    services.push_back(Worker(job, paths, r, inputs));
  ServiceSpec evaluator;
  evaluator.name = "evaluator";
  evaluator.role = ServiceRole::kEvaluator;
  evaluator.binary = "strata-evaluator";
  // The run directory: where it keeps the final model it scores (`strata export` reads it).
  evaluator.args = {"--job", paths.job_resolved, "--threads", "1", "--run-dir", paths.root};
  if (job.cluster().cpu().evaluator() > 0) {
    evaluator.cpu_fractions.push_back(job.cluster().cpu().evaluator());
  }
  services.push_back(evaluator);
  for (ServiceSpec& s : services) s.metrics = job.metrics().enabled();
  if (TlsOn(job)) {
    // Every service serves and calls with the run's certificates (docs/security.md).
    const std::vector<std::string> tls = TlsServiceArgs(job, inputs.tls_dir);
    for (ServiceSpec& s : services) s.args.insert(s.args.end(), tls.begin(), tls.end());
  }
  return services;
}

}  // namespace strata
