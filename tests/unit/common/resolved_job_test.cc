// The resolved job: every derived number computed from the spec, the text round trip the services
// read, and the refusals of a file nobody should run.
#include "services/common/config/resolved_job.h"

#include <gtest/gtest.h>

#include <absl/strings/str_replace.h>

#include "services/common/config/job_spec.h"

namespace strata {
namespace {

v1::ResolvedJob Resolve(const std::string& yaml) {
  auto job = ParseJobSpec(yaml, "job.yaml");
  EXPECT_TRUE(job.ok()) << job.status();
  return job.ok() ? *job : v1::ResolvedJob();
}

TEST(ResolvedJob, ComputesEveryDerivedNumberFromTheSpec) {
  const v1::ResolvedJob job = Resolve(R"(
name: derived
dataset: { name: cifar100, label_set: coarse, max_train: 500 }
model: { arch: resnet20 }
training: { epochs: 3, batch_size: 100, lr: 0.05, lr_schedule: { milestones: [1, 2], gamma: 0.5 } }
cluster: { workers: 3, parameter_servers: 2, threads_per_worker: 2 }
strategy: { kind: switch, consistency: ssp, staleness: 4, bucket_mb: 0.5, ps_link: grpc }
sharding: { method: distribution-aware, clusters: 12 }
)");
  EXPECT_EQ(job.format(), kResolvedJobFormat);
  EXPECT_EQ(job.name(), "derived");
  EXPECT_EQ(job.dataset().name(), v1::DATASET_CIFAR100);
  EXPECT_EQ(job.dataset().label_set(), v1::LABEL_SET_COARSE);
  EXPECT_EQ(job.dataset().max_train(), 500);
  EXPECT_EQ(job.arch(), v1::MODEL_ARCH_RESNET20);
  EXPECT_EQ(job.training().global_batch(), 100);
  EXPECT_EQ(job.training().worker_batch(), 33);  // 100 / 3, rounded down
  EXPECT_EQ(job.training().lr_milestones_size(), 2);
  EXPECT_DOUBLE_EQ(job.training().lr_gamma(), 0.5);
  EXPECT_EQ(job.training().threads_per_worker(), 2);
  EXPECT_EQ(job.cluster().workers(), 3);
  EXPECT_EQ(job.cluster().parameter_servers(), 2);
  EXPECT_EQ(job.strategy().kind(), v1::STRATEGY_KIND_SWITCH);
  EXPECT_EQ(job.strategy().consistency(), v1::CONSISTENCY_SSP);
  EXPECT_EQ(job.strategy().staleness(), 4);
  EXPECT_DOUBLE_EQ(job.strategy().server_lr_scale(), 1.0 / 3);  // ps_lr_scale 0: 1 / workers
  EXPECT_EQ(job.strategy().round_points(), 99);                 // 3 workers x 33
  EXPECT_EQ(job.strategy().bucket_bytes(), 512 * 1024);
  EXPECT_EQ(job.strategy().ring_link(), v1::DATA_LINK_TCP);  // the default
  EXPECT_EQ(job.strategy().ps_link(), v1::DATA_LINK_GRPC);
  EXPECT_EQ(job.recovery().restarts(), 3);
  EXPECT_EQ(job.sharding().method(), v1::SHARD_METHOD_DISTRIBUTION_AWARE);
  EXPECT_EQ(Spelled(job.sharding().method()), "distribution-aware");
  EXPECT_EQ(job.sharding().clusters(), 12);
  EXPECT_EQ(job.sharding().pca_components(), 50);  // the default
}

TEST(ResolvedJob, AGivenScaleAndABatchThatDoesNotDivide) {
  const v1::ResolvedJob job = Resolve(R"(
name: small
training: { batch_size: 10 }
cluster: { workers: 4 }
strategy: { kind: ps, ps_lr_scale: 0.5 }
)");
  EXPECT_EQ(job.training().worker_batch(), 2);
  EXPECT_EQ(job.strategy().round_points(), 8);  // the points one round really covers, not 10
  EXPECT_DOUBLE_EQ(job.strategy().server_lr_scale(), 0.5);
}

TEST(ResolvedJob, TextRoundTripsAndNamesSpellAsInTheSpec) {
  const v1::ResolvedJob job = Resolve("name: text\nstrategy: { kind: ps, consistency: apdp }\n");
  const std::string text = ResolvedJobText(job);
  auto back = ParseResolvedJob(text, "job.resolved.txtpb");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->SerializeAsString(), job.SerializeAsString());
  EXPECT_NE(text.find("consistency: CONSISTENCY_APDP"), std::string::npos) << text;
  EXPECT_EQ(Spelled(back->strategy().consistency()), "apdp");
  EXPECT_EQ(Spelled(back->strategy().kind()), "ps");
  EXPECT_EQ(Spelled(back->arch()), "mlp");
  EXPECT_EQ(Spelled(back->dataset().name()), "fashion-mnist");
  EXPECT_EQ(Spelled(back->strategy().ring_link()), "tcp");
}

TEST(ResolvedJob, AJobBuiltInCodeWithAnUnknownValueHasProblems) {
  v1::ResolvedJob job = DefaultJob();
  EXPECT_TRUE(ResolvedJobProblems(job).empty());
  job.set_arch(static_cast<v1::ModelArch>(42));
  job.mutable_strategy()->set_ring_link(v1::DATA_LINK_SHARED_MEMORY);
  const std::vector<std::string> p = ResolvedJobProblems(job);
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0], "model.arch is not a known value (42)");
  EXPECT_EQ(p[1], "strategy.ring_link is 'shm', not one of grpc, tcp");
}

struct BadText {
  const char* name;
  std::string from, to;  // replaced in a good file's text
  const char* expect;
};

class ResolvedJobRefusals : public ::testing::TestWithParam<BadText> {};

TEST_P(ResolvedJobRefusals, NameTheFieldOrTheLine) {
  const std::string good = ResolvedJobText(Resolve("name: good\ncluster: { workers: 2 }\n"));
  ASSERT_NE(good.find(GetParam().from), std::string::npos) << good;
  const std::string bad = absl::StrReplaceAll(good, {{GetParam().from, GetParam().to}});
  auto job = ParseResolvedJob(bad, "job.resolved.txtpb");
  ASSERT_FALSE(job.ok()) << bad;
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(job.status().message().find(GetParam().expect), std::string::npos) << job.status();
  EXPECT_NE(job.status().message().find("job.resolved.txtpb"), std::string::npos) << job.status();
}

INSTANTIATE_TEST_SUITE_P(
    Text, ResolvedJobRefusals,
    ::testing::Values(
        BadText{"OtherFormat", "format: 2", "format: 3", "format must be 2, got 3"},
        BadText{"UnknownField", "name: \"good\"", "name: \"good\"\nlearning_rate: 3",
                "job.resolved.txtpb:3:14: Message type \"strata.v1.ResolvedJob\" has no field "
                "named \"learning_rate\""},
        BadText{"UnknownEnum", "arch: MODEL_ARCH_MLP", "arch: MODEL_ARCH_GPT", "MODEL_ARCH_GPT"},
        BadText{"EnumByNumber", "arch: MODEL_ARCH_MLP", "arch: 42",
                "model.arch is not a known value (42)"},
        BadText{"ZeroWorkers", "workers: 2", "workers: 0", "cluster.workers must be >= 1, got 0"},
        BadText{"BatchAboveGlobal", "worker_batch: 64", "worker_batch: 4096",
                "training.worker_batch must lie in [1, global_batch]"},
        BadText{"NanLr", "lr: 0.1", "lr: nan", "training.lr must be finite"},
        BadText{"NegativeLr", "lr: 0.1", "lr: -0.1", "training.lr must be > 0, got -0.1"},
        BadText{"NoKind", "kind: STRATEGY_KIND_ALLREDUCE", "kind: STRATEGY_KIND_UNSPECIFIED",
                "strategy.kind is not a known value (0)"},
        BadText{"SharedMemoryRing", "ring_link: DATA_LINK_TCP",
                "ring_link: DATA_LINK_SHARED_MEMORY",
                "strategy.ring_link is 'shm', not one of grpc, tcp"},
        BadText{"BadName", "name: \"good\"", "name: \"a b\"", "name may hold letters"},
        BadText{"StragglerOutOfRange", "cluster {",
                "cluster {\n  stragglers { worker: 1 cpu_fraction: 2 }",
                "cluster.stragglers[0].cpu_fraction must be in (0, 1], got 2"},
        BadText{"Truncated", "recovery {", "recovery {{", "job.resolved.txtpb:"}),
    [](const auto& info) { return info.param.name; });

TEST(ResolvedJob, AServiceTakesExactlyOneSourceAndNoOverridesOnAResolvedJob) {
  ServiceJobSource neither;
  EXPECT_FALSE(LoadServiceJob(neither).ok());
  ServiceJobSource both{"a.txtpb", "b.yaml", {}};
  EXPECT_FALSE(LoadServiceJob(both).ok());
  ServiceJobSource overridden{"a.txtpb", "", {"training.lr=1"}};
  auto job = LoadServiceJob(overridden);
  ASSERT_FALSE(job.ok());
  EXPECT_NE(job.status().message().find("takes no --set"), std::string::npos) << job.status();
}

}  // namespace
}  // namespace strata
