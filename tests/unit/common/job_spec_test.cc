#include "services/common/job_spec.h"

#include <gtest/gtest.h>

namespace strata {
namespace {

TEST(JobSpec, DefaultsAndValues) {
  auto spec = ParseJobSpec(R"(
name: t1
model: { arch: resnet20 }
training: { epochs: 3, lr: 0.05, lr_schedule: { milestones: [1, 2], gamma: 0.5 } }
cluster: { workers: 4, stragglers: [ { worker: 3, cpu_fraction: 0.3 } ] }
strategy: { kind: switch, at_fraction: 0.4 }
)", "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->name, "t1");
  EXPECT_EQ(spec->model.arch, "resnet20");
  EXPECT_EQ(spec->training.epochs, 3);
  EXPECT_EQ(spec->training.batch_size, 128);  // default
  EXPECT_EQ(spec->training.lr_schedule.milestones, (std::vector<int>{1, 2}));
  EXPECT_EQ(spec->cluster.stragglers.size(), 1u);
  EXPECT_DOUBLE_EQ(spec->cluster.stragglers[0].cpu_fraction, 0.3);
  EXPECT_EQ(spec->strategy.rule, "at_fraction");  // implied by at_fraction
  EXPECT_EQ(spec->dataset.name, "fashion-mnist");
}

struct BadSpec {
  const char* yaml;
  const char* expect;  // must appear in the message
};

class JobSpecErrors : public ::testing::TestWithParam<BadSpec> {};

TEST_P(JobSpecErrors, NamesKeyAndLine) {
  auto spec = ParseJobSpec(GetParam().yaml, "job.yaml");
  ASSERT_FALSE(spec.ok()) << GetParam().yaml;
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(spec.status().message().find(GetParam().expect), std::string::npos)
      << "message: " << spec.status().message();
}

INSTANTIATE_TEST_SUITE_P(
    Malformed, JobSpecErrors,
    ::testing::Values(
        BadSpec{"name: a\ntraining: { epochs: 0 }\n", "job.yaml:2: training.epochs: must be >= 1"},
        BadSpec{"name: a\ntraining:\n  lr: fast\n", "job.yaml:3: training.lr: expected a number, got 'fast'"},
        BadSpec{"name: a\ntrainig: { epochs: 2 }\n", "job.yaml:2: trainig: unknown key"},
        BadSpec{"model: { arch: resnet99 }\n", "model.arch: 'resnet99' is not one of"},
        BadSpec{"cluster: { workers: 0 }\n", "cluster.workers: must be >= 1"},
        BadSpec{"strategy: { kind: switch, at_fraction: 1.5 }\n", "strategy.at_fraction: must be in (0, 1)"},
        BadSpec{"cluster: { workers: 2, stragglers: [ { worker: 5 } ] }\n", "cluster.stragglers[0].worker: worker 5 does not exist"},
        BadSpec{"training: { lr_schedule: { milestones: [5, 3] } }\n", "must be strictly increasing"},
        BadSpec{"name: [1, 2]\n", "job.yaml:1: name: expected a string"},
        BadSpec{"training: { momentum: 1.0 }\n", "training.momentum: must be in [0, 1)"},
        BadSpec{"name: a\ntraining: { epochs: 2\n", "invalid YAML"},
        BadSpec{"- just\n- a list\n", "expected a mapping"},
        BadSpec{"name: 'bad name!'\n", "name: may hold letters"},
        BadSpec{"training: { batch_size: 2 }\ncluster: { workers: 4 }\n", "training.batch_size: global batch 2 is smaller"}));

TEST(JobSpec, ReportsEveryProblem) {
  auto spec = ParseJobSpec("training: { epochs: -1, lr: -2 }\ncluster: { workers: 0 }\n", "j.yaml");
  ASSERT_FALSE(spec.ok());
  const std::string m(spec.status().message());
  EXPECT_NE(m.find("training.epochs"), std::string::npos);
  EXPECT_NE(m.find("training.lr"), std::string::npos);
  EXPECT_NE(m.find("cluster.workers"), std::string::npos);
}

TEST(JobSpec, OverridesAreValidatedLikeTheFile) {
  auto spec = ParseJobSpec("name: a\n", "j.yaml", {"training.epochs=7", "cluster.workers=3"});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->training.epochs, 7);
  EXPECT_EQ(spec->cluster.workers, 3);
  EXPECT_FALSE(ParseJobSpec("name: a\n", "j.yaml", {"training.epochs=zero"}).ok());
  EXPECT_FALSE(ParseJobSpec("name: a\n", "j.yaml", {"training.epoch=3"}).ok());
  EXPECT_FALSE(ParseJobSpec("name: a\n", "j.yaml", {"no-equals-sign"}).ok());
}

TEST(JobSpec, ResolvedYamlParsesBackToTheSameSpec) {
  auto spec = ParseJobSpec("name: r\ntraining: { lr_schedule: { milestones: [3] } }\ncluster: { stragglers: [ { worker: 1, cpu_fraction: 0.5 } ] }\n", "j.yaml");
  ASSERT_TRUE(spec.ok());
  auto again = ParseJobSpec(JobSpecToYaml(*spec), "resolved.yaml");
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << JobSpecToYaml(*spec);
  EXPECT_EQ(JobSpecToYaml(*again), JobSpecToYaml(*spec));
  EXPECT_EQ(again->cluster.stragglers.size(), 1u);
}

}  // namespace
}  // namespace strata
