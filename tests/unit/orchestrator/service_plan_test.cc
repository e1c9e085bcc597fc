// What a job runs and with which flags, without launching anything.
#include "orchestrator/launch/service_plan.h"

#include <gtest/gtest.h>

#include <absl/strings/str_join.h>

namespace strata {
namespace {

JobSpec SwitchJob() {
  JobSpec spec;
  spec.cluster.workers = 2;
  spec.cluster.parameter_servers = 1;
  spec.strategy.kind = "switch";
  spec.strategy.consistency = "asp";
  spec.strategy.staleness = 3;
  spec.training.epochs = 10;  // the servers' sample budget: 10 x the training set
  spec.launcher.ring_transport = "tcp";
  spec.cluster.stragglers.push_back({1, 0.5});
  return spec;
}

TEST(ServicePlan, ServersThenWorkersThenTheEvaluatorWithTheirFlags) {
  const RunPaths paths("/runs/r");
  ServicePlanInputs in;
  in.train_examples = 6000;
  const std::vector<ServiceSpec> services = PlanServices(SwitchJob(), paths, in);
  ASSERT_EQ(services.size(), 4u);
  EXPECT_EQ(services[0].name, "ps-0");
  EXPECT_EQ(services[0].role, ServiceRole::kParameterServer);
  EXPECT_EQ(absl::StrJoin(services[0].args, " "),
            "--partition 0 --job /runs/r/job.resolved.txtpb --train-examples 6000 "
            "--sample-budget 60000 --run-dir /runs/r --checkpoint-every-s 10 --resume");
  EXPECT_EQ(services[1].name, "worker-0");
  // The resolved job holds the world, the consistency, the staleness: no flag repeats them.
  EXPECT_EQ(absl::StrJoin(services[1].args, " "),
            "--job /runs/r/job.resolved.txtpb --rank 0 --shard-file /runs/r/shards/shard-0.idx "
            "--run-dir /runs/r --checkpoint-every-s 10");
  // Only rank 0 saves the ring's model: the replicas are identical.
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
  JobSpec spec = SwitchJob();
  spec.cluster.cpu = {0.5, 0.3, 0.2};
  spec.cluster.worker_speeds = {1, 0.5};
  spec.cluster.stragglers.clear();
  const std::vector<ServiceSpec> services = PlanServices(spec, RunPaths("/runs/r"), {});
  ASSERT_EQ(services.size(), 4u);
  EXPECT_EQ(services[0].cpu_fractions, std::vector<double>{0.3});   // ps-0
  EXPECT_EQ(services[1].cpu_fractions, std::vector<double>{0.5});   // worker-0, speed 1
  EXPECT_EQ(services[2].cpu_fractions, std::vector<double>{0.25});  // worker-1, speed 1/2
  EXPECT_EQ(services[3].cpu_fractions, std::vector<double>{0.2});   // evaluator
}

TEST(ServicePlan, AllReduceRunsNoServersAndAUnixRingListensOnItsOwnSocket) {
  JobSpec spec = SwitchJob();
  spec.strategy.kind = "allreduce";
  spec.launcher.ring_transport = "unix";
  ServicePlanInputs in;
  in.ring_socket_prefix = "unix-abstract:strata-1-r-worker-";
  const std::vector<ServiceSpec> services = PlanServices(spec, RunPaths("/runs/r"), in);
  ASSERT_EQ(services.size(), 3u);
  EXPECT_EQ(services[0].role, ServiceRole::kWorker);
  EXPECT_EQ(services[1].ring_address, "unix-abstract:strata-1-r-worker-1");
  EXPECT_EQ(services[1].args.back(), "unix-abstract:strata-1-r-worker-1");
}

TEST(ServicePlan, APsJobsServersStartFromTheInitialModel) {
  JobSpec spec = SwitchJob();
  spec.strategy.kind = "ps";
  spec.strategy.ps_lr_scale = 0.25;
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
  JobSpec spec = SwitchJob();
  spec.security.tls = "mutual";
  spec.security.tls_server_name = "trainer.example";
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
  spec.security.tls = "off";
  for (const ServiceSpec& s : PlanServices(spec, paths, in)) {
    EXPECT_EQ(absl::StrJoin(s.args, " ").find("--tls"), std::string::npos) << s.name;
  }
}

}  // namespace
}  // namespace strata
