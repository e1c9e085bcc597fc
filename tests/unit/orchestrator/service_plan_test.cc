// What a job runs and with which flags, without launching anything.
#include "orchestrator/launch/service_plan.h"

#include <gtest/gtest.h>

#include <absl/strings/str_join.h>

#include "services/common/config/job_spec.h"

namespace strata {
namespace {

v1::ResolvedJob SwitchJob(const std::vector<std::string>& overrides = {}) {
  auto job = ParseJobSpec(
      "name: plan\n"
      "cluster: { workers: 2, parameter_servers: 1, stragglers: [ { worker: 1, cpu_fraction: 0.5 } "
      "] }\n"
      "strategy: { kind: switch, consistency: asp, staleness: 3 }\n"
      "launcher: { ring_transport: tcp }\n",
      "plan.yaml", overrides);
  EXPECT_TRUE(job.ok()) << job.status();
  return job.ok() ? *job : v1::ResolvedJob();
}

TEST(ServicePlan, ServersThenWorkersThenTheEvaluatorWithTheirFlags) {
  const RunPaths paths("/runs/r");
  const std::vector<ServiceSpec> services = PlanServices(SwitchJob(), paths, {});
  ASSERT_EQ(services.size(), 4u);
  EXPECT_EQ(services[0].name, "ps-0");
  EXPECT_EQ(services[0].role, ServiceRole::kParameterServer);
  // The resolved job holds the workers, the consistency, the budget's epochs and the checkpoint
  // cadence; the run directory the training-set size: the flags say only the server's place.
  EXPECT_EQ(absl::StrJoin(services[0].args, " "),
            "--partition 0 --job /runs/r/job.resolved.txtpb --run-dir /runs/r --resume");
  EXPECT_EQ(services[1].name, "worker-0");
  // The resolved job holds the world, the consistency, the staleness: no flag repeats them.
  EXPECT_EQ(absl::StrJoin(services[1].args, " "),
            "--job /runs/r/job.resolved.txtpb --rank 0 --shard-file /runs/r/shards/shard-0.idx "
            "--run-dir /runs/r");
  EXPECT_EQ(absl::StrJoin(services[2].args, " "),
            "--job /runs/r/job.resolved.txtpb --rank 1 --shard-file /runs/r/shards/shard-1.idx "
            "--run-dir /runs/r");
  EXPECT_TRUE(services[1].cpu_fractions.empty());
  EXPECT_EQ(services[2].cpu_fractions, std::vector<double>{0.5});  // worker 1 is the straggler
  EXPECT_EQ(services[3].name, "evaluator");
  EXPECT_EQ(services[3].binary, "strata-evaluator");
  EXPECT_TRUE(services[0].cpu_fractions.empty());
  EXPECT_TRUE(services[3].cpu_fractions.empty());
}

TEST(ServicePlan, EveryProcessGetsItsOwnCpuQuotaFromTheClusterSpec) {
  const v1::ResolvedJob spec =
      SwitchJob({"cluster.cpu={worker: 0.5, parameter_server: 0.3, evaluator: 0.2}",
                 "cluster.worker_speeds=[1, 0.5]", "cluster.stragglers=[]"});
  const std::vector<ServiceSpec> services = PlanServices(spec, RunPaths("/runs/r"), {});
  ASSERT_EQ(services.size(), 4u);
  EXPECT_EQ(services[0].cpu_fractions, std::vector<double>{0.3});   // ps-0
  EXPECT_EQ(services[1].cpu_fractions, std::vector<double>{0.5});   // worker-0, speed 1
  EXPECT_EQ(services[2].cpu_fractions, std::vector<double>{0.25});  // worker-1, speed 1/2
  EXPECT_EQ(services[3].cpu_fractions, std::vector<double>{0.2});   // evaluator
}

TEST(ServicePlan, AllReduceRunsNoServersAndAUnixRingListensOnItsOwnSocket) {
  const v1::ResolvedJob spec =
      SwitchJob({"strategy.kind=allreduce", "launcher.ring_transport=unix"});
  ServicePlanInputs in;
  in.ring_socket_prefix = "unix-abstract:strata-1-r-worker-";
  const std::vector<ServiceSpec> services = PlanServices(spec, RunPaths("/runs/r"), in);
  ASSERT_EQ(services.size(), 3u);
  EXPECT_EQ(services[0].role, ServiceRole::kWorker);
  EXPECT_EQ(services[1].ring_address, "unix-abstract:strata-1-r-worker-1");
  EXPECT_EQ(services[1].args.back(), "unix-abstract:strata-1-r-worker-1");
}

TEST(ServicePlan, APsJobsServersStartFromTheInitialModel) {
  const v1::ResolvedJob spec = SwitchJob({"strategy.kind=ps", "strategy.ps_lr_scale=0.25"});
  ServicePlanInputs in;
  in.init_checkpoint = "/runs/r/checkpoints/init.ckpt";
  const RunPaths paths("/runs/r");
  const std::vector<ServiceSpec> services = PlanServices(spec, paths, in);
  const std::string ps = absl::StrJoin(services[0].args, " ");
  EXPECT_NE(ps.find("--run-dir /runs/r --init-checkpoint /runs/r/checkpoints/init.ckpt"),
            std::string::npos)
      << ps;
  EXPECT_EQ(ps.find("--lr-scale"), std::string::npos) << ps;  // in the resolved job
  const TaskSpec init = InitCheckpointTask(paths, in.init_checkpoint);
  EXPECT_FALSE(init.record_launch);
  EXPECT_EQ(
      absl::StrJoin(init.args, " "),
      "--job /runs/r/job.resolved.txtpb --write-init-checkpoint /runs/r/checkpoints/init.ckpt");
  EXPECT_EQ(ShardTask(paths).args.back(), "/runs/r/shards");
}

TEST(ServicePlan, WithTlsEveryServiceGetsTheRunsCertificatesAndNoTaskDoes) {
  v1::ResolvedJob spec =
      SwitchJob({"security.tls=mutual", "security.tls_server_name=trainer.example"});
  ServicePlanInputs in;
  in.tls_dir = "/runs/r/tls";
  const RunPaths paths("/runs/r");
  const std::vector<ServiceSpec> services = PlanServices(spec, paths, in);
  ASSERT_EQ(services.size(), 4u);
  for (const ServiceSpec& s : services) {
    const std::string args = absl::StrJoin(s.args, " ");
    EXPECT_NE(args.find("--tls mutual --tls-dir /runs/r/tls --tls-server-name trainer.example"),
              std::string::npos)
        << s.name << ": " << args;
  }
  // The sharder and the initial model serve nothing.
  EXPECT_EQ(absl::StrJoin(ShardTask(paths).args, " ").find("--tls"), std::string::npos);
  EXPECT_EQ(absl::StrJoin(InitCheckpointTask(paths, "/x").args, " ").find("--tls"),
            std::string::npos);
  spec.mutable_security()->set_tls(v1::TLS_MODE_OFF);
  for (const ServiceSpec& s : PlanServices(spec, paths, in)) {
    EXPECT_EQ(absl::StrJoin(s.args, " ").find("--tls"), std::string::npos) << s.name;
  }
}

}  // namespace
}  // namespace strata
