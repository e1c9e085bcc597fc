#include "services/common/config/job_spec.h"

#include "services/common/config/resolved_job.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace strata {
namespace {

using ::testing::HasSubstr;

TEST(JobSpec, DefaultsAndValues) {
  auto spec = ParseJobSpec(R"(
name: t1
model: { arch: resnet20 }
training: { epochs: 3, lr: 0.05, lr_schedule: { milestones: [1, 2], gamma: 0.5 } }
cluster: { workers: 4, stragglers: [ { worker: 3, cpu_fraction: 0.3 } ] }
strategy: { kind: switch, at_fraction: 0.4 }
)",
                           "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->name(), "t1");
  EXPECT_EQ(spec->arch(), v1::MODEL_ARCH_RESNET20);
  EXPECT_EQ(spec->training().epochs(), 3);
  EXPECT_EQ(spec->training().global_batch(), 128);  // default
  EXPECT_EQ(std::vector<int>(spec->training().lr_milestones().begin(),
                             spec->training().lr_milestones().end()),
            (std::vector<int>{1, 2}));
  EXPECT_EQ(spec->cluster().stragglers_size(), 1);
  EXPECT_DOUBLE_EQ(spec->cluster().stragglers(0).cpu_fraction(), 0.3);
  EXPECT_EQ(spec->strategy().rule(), v1::SWITCH_RULE_AT_FRACTION);  // implied by at_fraction
  EXPECT_EQ(spec->dataset().name(), v1::DATASET_FASHION_MNIST);
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
        BadSpec{"name: a\ntraining:\n  lr: fast\n",
                "job.yaml:3: training.lr: expected a number, got 'fast'"},
        BadSpec{"name: a\ntrainig: { epochs: 2 }\n", "job.yaml:2: trainig: unknown key"},
        BadSpec{"model: { arch: resnet99 }\n", "model.arch: 'resnet99' is not one of"},
        BadSpec{"cluster: { workers: 0 }\n", "cluster.workers: must be >= 1"},
        BadSpec{"strategy: { kind: switch, at_fraction: 1.5 }\n",
                "strategy.at_fraction: must be in (0, 1)"},
        BadSpec{"cluster: { workers: 2, stragglers: [ { worker: 5 } ] }\n",
                "cluster.stragglers[0].worker: worker 5 does not exist"},
        BadSpec{"training: { lr_schedule: { milestones: [5, 3] } }\n",
                "must be strictly increasing"},
        BadSpec{"name: [1, 2]\n", "job.yaml:1: name: expected a string"},
        BadSpec{"training: { momentum: 1.0 }\n", "training.momentum: must be in [0, 1)"},
        BadSpec{"name: a\ntraining: { epochs: 2\n", "invalid YAML"},
        BadSpec{"- just\n- a list\n", "expected a mapping"},
        BadSpec{"name: 'bad name!'\n", "name: may hold letters"},
        BadSpec{"training: { batch_size: 2 }\ncluster: { workers: 4 }\n",
                "training.batch_size: global batch 2 is smaller"},
        BadSpec{"name: a\nsecurity: { tls: true }\n",
                "job.yaml:2: security.tls: 'true' is not one of off, on, mutual"},
        BadSpec{"name: a\nsecurity: { tls: on, tls_dir: '' }\n",
                "job.yaml:2: security.tls_dir: is empty"},
        BadSpec{"name: a\nsecurity: { tls: on, tls_server_name: 'a..b' }\n",
                "security.tls_server_name: 'a..b' is not a host name"},
        BadSpec{"name: a\nsecurity: { tls: on, tls_server_name: '-x' }\n",
                "security.tls_server_name: '-x' is not a host name"},
        BadSpec{"name: a\nsecurity: { tls_dir: /etc/strata/tls }\n",
                "job.yaml:2: security.tls_dir: has no effect while security.tls is off"},
        BadSpec{"name: a\nsecurity:\n  tls: off\n  tls_server_name: trainer\n",
                "job.yaml:4: security.tls_server_name: has no effect while security.tls is off"},
        BadSpec{"name: a\nsecurity: { mtls: on }\n",
                "job.yaml:2: security.mtls: unknown key (allowed: tls, tls_dir, tls_server_name)"},
        BadSpec{"name: a\nstrategy:\n  kind: ps\n  k_star: 500\n",
                "job.yaml:4: strategy.k_star: applies to strategy.consistency pdp and apdp only "
                "(it is asp)"},
        BadSpec{
            "name: a\nstrategy: { kind: ps, consistency: pdp, k_star: 500, k_star_start: 100 }\n",
            "job.yaml:2: strategy.k_star_start: starts the K* search, which a fixed "
            "strategy.k_star turns off"},
        BadSpec{"name: a\nstrategy: { kind: ps, consistency: apdp, probe_ratio: 0 }\n",
                "strategy.probe_ratio: must be in (0, 1], got 0"},
        BadSpec{"name: a\nstrategy: { kind: ps, consistency: pdp, k_star: -3 }\n",
                "strategy.k_star: must be >= 0"},
        BadSpec{"name: a\nstrategy:\n  kind: ps\n  bucket_mb: 4\n",
                "job.yaml:4: strategy.bucket_mb: applies to the all-reduce phase, which "
                "strategy.kind ps does not have"},
        BadSpec{"name: a\nstrategy: { kind: allreduce, bucket_mb: -1 }\n",
                "job.yaml:2: strategy.bucket_mb: must be in [0, 1024], got -1"},
        BadSpec{"name: a\nstrategy:\n  kind: ps\n  ring_link: tcp\n",
                "job.yaml:4: strategy.ring_link: applies to the all-reduce phase, which "
                "strategy.kind ps does not have"},
        BadSpec{"name: a\nstrategy: { kind: allreduce, ring_link: udp }\n",
                "job.yaml:2: strategy.ring_link: 'udp' is not one of grpc, tcp"},
        BadSpec{"name: a\nstrategy:\n  kind: allreduce\n  ps_link: tcp\n",
                "job.yaml:4: strategy.ps_link: applies to push/pull with parameter servers, which "
                "strategy.kind allreduce does not have"},
        BadSpec{"name: a\nstrategy: { kind: ps, ps_link: rdma }\n",
                "job.yaml:2: strategy.ps_link: 'rdma' is not one of grpc, tcp"}));

TEST(JobSpec, BucketMbTravelsThroughTheResolvedSpecOnlyWhenOn) {
  auto on = ParseJobSpec("name: b\nstrategy: { kind: switch, bucket_mb: 2.5 }\n", "j.yaml");
  ASSERT_TRUE(on.ok()) << on.status();
  auto again = ParseJobSpec(JobSpecYaml(*on), "resolved.yaml");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->strategy().bucket_mb(), 2.5);
  auto off = ParseJobSpec("name: b\n", "j.yaml");
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_EQ(JobSpecYaml(*off).find("bucket_mb"), std::string::npos);
}

TEST(JobSpec, RingLinkTravelsThroughTheResolvedSpecOnlyWhenNotTheDefault) {
  auto grpc = ParseJobSpec("name: b\nstrategy: { kind: switch, ring_link: grpc }\n", "j.yaml");
  ASSERT_TRUE(grpc.ok()) << grpc.status();
  auto again = ParseJobSpec(JobSpecYaml(*grpc), "resolved.yaml");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->strategy().ring_link(), v1::DATA_LINK_GRPC);
  auto tcp = ParseJobSpec("name: b\n", "j.yaml");
  ASSERT_TRUE(tcp.ok()) << tcp.status();
  EXPECT_EQ(tcp->strategy().ring_link(), v1::DATA_LINK_TCP);
  EXPECT_EQ(JobSpecYaml(*tcp).find("ring_link"), std::string::npos);
}

TEST(JobSpec, PsLinkTravelsThroughTheResolvedSpecOnlyWhenNotTheDefault) {
  auto grpc = ParseJobSpec("name: b\nstrategy: { kind: switch, ps_link: grpc }\n", "j.yaml");
  ASSERT_TRUE(grpc.ok()) << grpc.status();
  auto again = ParseJobSpec(JobSpecYaml(*grpc), "resolved.yaml");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->strategy().ps_link(), v1::DATA_LINK_GRPC);
  auto tcp = ParseJobSpec("name: b\nstrategy: { kind: switch, ps_link: tcp }\n", "j.yaml");
  ASSERT_TRUE(tcp.ok()) << tcp.status();
  again = ParseJobSpec(JobSpecYaml(*tcp), "resolved.yaml");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->strategy().ps_link(), v1::DATA_LINK_TCP);
  auto shm = ParseJobSpec("name: b\n", "j.yaml");
  ASSERT_TRUE(shm.ok()) << shm.status();
  EXPECT_EQ(shm->strategy().ps_link(), v1::DATA_LINK_SHARED_MEMORY);
  EXPECT_EQ(JobSpecYaml(*shm).find("ps_link"), std::string::npos);
  auto ring = ParseJobSpec("name: b\nstrategy: { kind: switch, ring_link: shm }\n", "j.yaml");
  EXPECT_THAT(std::string(ring.status().message()), HasSubstr("strategy.ring_link"));
}

TEST(JobSpec, PdpAndApdpCarryTheirKStarKeysThroughTheResolvedSpec) {
  for (const std::string text :
       {"name: p\nstrategy: { kind: ps, consistency: pdp, k_star: 640 }\n",
        "name: p\nstrategy: { kind: switch, consistency: apdp, k_star_start: 300, probe_ratio: "
        "0.1 }\n"}) {
    auto spec = ParseJobSpec(text, "j.yaml");
    ASSERT_TRUE(spec.ok()) << spec.status();
    auto again = ParseJobSpec(JobSpecYaml(*spec), "resolved.yaml");
    ASSERT_TRUE(again.ok()) << again.status() << "\n" << JobSpecYaml(*spec);
    EXPECT_EQ(again->strategy().k_star(), spec->strategy().k_star());
    EXPECT_EQ(again->strategy().k_star_start(), spec->strategy().k_star_start());
    EXPECT_EQ(again->strategy().probe_ratio(), spec->strategy().probe_ratio());
  }
}

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
  EXPECT_EQ(spec->training().epochs(), 7);
  EXPECT_EQ(spec->cluster().workers(), 3);
  EXPECT_FALSE(ParseJobSpec("name: a\n", "j.yaml", {"training.epochs=zero"}).ok());
  EXPECT_FALSE(ParseJobSpec("name: a\n", "j.yaml", {"training.epoch=3"}).ok());
  EXPECT_FALSE(ParseJobSpec("name: a\n", "j.yaml", {"no-equals-sign"}).ok());
}

TEST(JobSpec, ResolvedYamlParsesBackToTheSameSpec) {
  auto spec = ParseJobSpec(
      "name: r\ntraining: { lr_schedule: { milestones: [3] } }\ncluster: { stragglers: [ { worker: "
      "1, cpu_fraction: 0.5 } ] }\n",
      "j.yaml");
  ASSERT_TRUE(spec.ok());
  auto again = ParseJobSpec(JobSpecYaml(*spec), "resolved.yaml");
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << JobSpecYaml(*spec);
  EXPECT_EQ(JobSpecYaml(*again), JobSpecYaml(*spec));
  EXPECT_EQ(again->cluster().stragglers_size(), 1);
}

// Hostile input: each case is refused with exactly one message whose place and key are exact.
struct RefusedSpec {
  const char* label;
  const char* yaml;
  std::vector<std::string> overrides;
  const char* prefix;  // the whole message starts with this ("job.yaml:LINE: key: what...")
};

class JobSpecRefusals : public ::testing::TestWithParam<RefusedSpec> {};

TEST_P(JobSpecRefusals, ExactPlaceAndKey) {
  const RefusedSpec& c = GetParam();
  auto spec = ParseJobSpec(c.yaml, "job.yaml", c.overrides);
  ASSERT_FALSE(spec.ok()) << c.label;
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string m(spec.status().message());
  EXPECT_EQ(m.rfind(c.prefix, 0), 0u) << c.label << "\nmessage: " << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << c.label << ": one problem, one line\n" << m;
}

INSTANTIATE_TEST_SUITE_P(
    Hostile, JobSpecRefusals,
    ::testing::Values(
        RefusedSpec{"empty file", "", {}, "job.yaml:1: (top level): empty job spec"},
        RefusedSpec{"speeds for the wrong number of workers",
                    "name: a\ncluster:\n  workers: 3\n  cpu: { worker: 0.5 }\n"
                    "  worker_speeds: [1, 0.5]\n",
                    {},
                    "job.yaml:5: cluster.worker_speeds: 2 speeds for 3 workers"},
        RefusedSpec{"compute speeds for the wrong number of workers",
                    "name: a\ncluster:\n  workers: 3\n  compute_speeds: [1, 0.5]\n",
                    {},
                    "job.yaml:4: cluster.compute_speeds: 2 speeds for 3 workers"},
        RefusedSpec{"a compute speed above 1",
                    "name: a\ncluster:\n  workers: 2\n  compute_speeds: [1, 2]\n",
                    {},
                    "job.yaml:4: cluster.compute_speeds[1]: must be in [0.01, 1], got 2"},
        RefusedSpec{"speeds without a worker share",
                    "name: a\ncluster:\n  workers: 2\n  worker_speeds: [1, 0.5]\n",
                    {},
                    "job.yaml:4: cluster.worker_speeds: needs cluster.cpu.worker"},
        RefusedSpec{"a speed of zero",
                    "name: a\ncluster:\n  cpu: { worker: 0.5 }\n  worker_speeds: [1, 0]\n",
                    {},
                    "job.yaml:4: cluster.worker_speeds[1]: must be in (0, 64], got 0"},
        RefusedSpec{"a negative server share",
                    "name: a\ncluster: { cpu: { parameter_server: -1 } }\n",
                    {},
                    "job.yaml:2: cluster.cpu.parameter_server: must be in [0, 64] cores"},
        RefusedSpec{"an unknown cpu role",
                    "name: a\ncluster: { cpu: { sharder: 1 } }\n",
                    {},
                    "job.yaml:2: cluster.cpu.sharder: unknown key"},
        RefusedSpec{"only comments",
                    "# name: a\n\n# training: {}\n",
                    {},
                    "job.yaml:1: (top level): empty job spec"},
        RefusedSpec{"empty mapping", "{}\n", {}, "job.yaml:1: (top level): empty job spec"},
        RefusedSpec{"null document", "~\n", {}, "job.yaml:1: (top level): empty job spec"},
        RefusedSpec{
            "empty file with --set", "", {"name=a"}, "job.yaml:1: (top level): empty job spec"},
        RefusedSpec{"duplicate top-level key",
                    "name: a\nname: b\n",
                    {},
                    "job.yaml:2: name: duplicate key: first on line 1, again on line 2"},
        RefusedSpec{"duplicate nested key",
                    "training:\n  lr: 0.1\n  epochs: 2\n  lr: 0.2\n",
                    {},
                    "job.yaml:4: training.lr: duplicate key: first on line 2, again on line 4"},
        RefusedSpec{"duplicate key in a flow map",
                    "name: a\ntraining: { lr: 0.1, lr: 0.2 }\n",
                    {},
                    "job.yaml:2: training.lr: duplicate key: first on line 2, again on line 2"},
        RefusedSpec{"duplicate section",
                    "training: { lr: 0.1 }\nname: a\ntraining: { epochs: 2 }\n",
                    {},
                    "job.yaml:3: training: duplicate key: first on line 1, again on line 3"},
        RefusedSpec{"key without a value",
                    "name: a\ntraining:\n  lr:\n  epochs: 2\n",
                    {},
                    "job.yaml:3: training.lr: has no value"},
        RefusedSpec{"explicit null",
                    "name: a\ntraining: { lr: null }\n",
                    {},
                    "job.yaml:2: training.lr: has no value"},
        RefusedSpec{"string without a value", "name:\n", {}, "job.yaml:1: name: has no value"},
        RefusedSpec{"list without a value",
                    "name: a\ntraining: { lr_schedule: { milestones: } }\n",
                    {},
                    "job.yaml:2: training.lr_schedule.milestones: has no value"},
        RefusedSpec{"stragglers without a value",
                    "name: a\ncluster:\n  stragglers:\n",
                    {},
                    "job.yaml:3: cluster.stragglers: has no value"},
        // Found with the job-spec fuzz target: the resolved job.yaml read back "data".
        RefusedSpec{"carriage return in a path",
                    "name: a\ndataset: { path: \"data\\r\" }\n",
                    {},
                    "job.yaml:2: dataset.path: may not hold control characters"},
        RefusedSpec{"--set escape in a path",
                    "name: a\n",
                    {"dataset.path=\"a\\eb\""},
                    "(from --set dataset.path=\"a\\eb\"): dataset.path: may not hold control"},
        // Found with the job-spec fuzz target: a value or key quoted raw split the message.
        RefusedSpec{"line break in a quoted value",
                    "name: a\ntraining: { epochs: \"1\\n2\" }\n",
                    {},
                    "job.yaml:2: training.epochs: expected an integer, got '1\\n2'"},
        RefusedSpec{"escape in an unknown key",
                    "name: a\n\"ke\\ey\": 1\n",
                    {},
                    "job.yaml:2: ke\\x1by: unknown key"},
        RefusedSpec{"infinite lr",
                    "name: a\ntraining: { lr: .inf }\n",
                    {},
                    "job.yaml:2: training.lr: must be a finite number, got '.inf'"},
        RefusedSpec{"negative infinite decay",
                    "name: a\ntraining: { weight_decay: -.inf }\n",
                    {},
                    "job.yaml:2: training.weight_decay: must be a finite number, got '-.inf'"},
        RefusedSpec{"nan momentum",
                    "name: a\ntraining: { momentum: .nan }\n",
                    {},
                    "job.yaml:2: training.momentum: must be a finite number, got '.nan'"},
        RefusedSpec{"infinite threshold",
                    "name: a\nstrategy: { threshold_percent: .Inf }\n",
                    {},
                    "job.yaml:2: strategy.threshold_percent: must be a finite number, got '.Inf'"},
        RefusedSpec{"infinite ps_lr_scale",
                    "name: a\nstrategy: { ps_lr_scale: .inf }\n",
                    {},
                    "job.yaml:2: strategy.ps_lr_scale: must be a finite number"},
        RefusedSpec{"plain nan",
                    "name: a\ntraining: { lr: nan }\n",
                    {},
                    "job.yaml:2: training.lr: expected a number, got 'nan'"},
        RefusedSpec{"top level a list",
                    "- a\n- b\n",
                    {},
                    "job.yaml:1: (top level): expected a mapping of keys"},
        RefusedSpec{"invalid YAML",
                    "name: a\ntraining: { epochs: 2\n",
                    {},
                    "job.yaml:3: (syntax): invalid YAML"},
        RefusedSpec{"--set with an empty value",
                    "name: a\ntraining:\n  lr: 0.1\n",
                    {"training.lr="},
                    "(from --set training.lr=): training.lr: has no value"},
        RefusedSpec{"--set infinite",
                    "name: a\ntraining:\n  lr: 0.1\n",
                    {"training.lr=.inf"},
                    "(from --set training.lr=.inf): training.lr: must be a finite number"},
        RefusedSpec{"--set of a key the file has",
                    "name: a\ncluster:\n  workers: 2\n",
                    {"cluster.workers=0"},
                    "(from --set cluster.workers=0): cluster.workers: must be >= 1, got 0"},
        RefusedSpec{"--set of a key the file lacks",
                    "name: a\n",
                    {"training.epochs=zero"},
                    "(from --set training.epochs=zero): training.epochs: expected an integer"},
        RefusedSpec{"--set of an unknown section",
                    "name: a\n",
                    {"trainig.lr=1"},
                    "(from --set trainig.lr=1): trainig: unknown key"},
        RefusedSpec{"--set of an unknown key",
                    "name: a\ntraining: { lr: 0.1 }\n",
                    {"training.lrr=1"},
                    "(from --set training.lrr=1): training.lrr: unknown key"},
        RefusedSpec{"--set without '='",
                    "name: a\n",
                    {"no-equals-sign"},
                    "(from --set no-equals-sign): --set: expected KEY=VALUE"},
        RefusedSpec{"--set into a scalar",
                    "name: a\n",
                    {"name.x=1"},
                    "(from --set name.x=1): name.x: cannot set: 'name' is not a section"},
        RefusedSpec{"--set of invalid YAML",
                    "name: a\n",
                    {"training.lr=[1"},
                    "(from --set training.lr=[1): training.lr: the value is not valid YAML"},
        RefusedSpec{"--set list element",
                    "name: a\n",
                    {"training.lr_schedule.milestones=[5, x]"},
                    "(from --set training.lr_schedule.milestones=[5, x]): "
                    "training.lr_schedule.milestones[1]: expected an integer"},
        RefusedSpec{"--set list order",
                    "name: a\n",
                    {"training.lr_schedule.milestones=[5, 3]"},
                    "(from --set training.lr_schedule.milestones=[5, 3]): "
                    "training.lr_schedule.milestones: must be strictly increasing"},
        RefusedSpec{"the later --set of a key counts",
                    "name: a\n",
                    {"training.epochs=0", "training.epochs=-1"},
                    "(from --set training.epochs=-1): training.epochs: must be >= 1, got -1"},
        RefusedSpec{
            "cross-field check against a --set",
            "name: a\ntraining: { batch_size: 4 }\n",
            {"cluster.workers=8"},
            "job.yaml:2: training.batch_size: global batch 4 is smaller than the 8 workers"},
        RefusedSpec{"cross-field check with a default batch",
                    "name: a\n",
                    {"cluster.workers=200"},
                    "(from --set cluster.workers=200): cluster.workers: global batch 128 is "
                    "smaller than the 200 workers"}),
    [](const ::testing::TestParamInfo<RefusedSpec>& info) {
      std::string name = info.param.label;
      for (char& c : name) {
        if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
      }
      return name;
    });

TEST(JobSpec, ReportsEveryProblemWithItsPlace) {
  auto reading = ReadJobSpec("name: a\ntraining: { epochs: 0, lr: .nan }\ntraining: {}\n", "j.yaml",
                             {"cluster.workers=0"});
  EXPECT_EQ(reading.errors,
            (std::vector<std::string>{
                "j.yaml:3: training: duplicate key: first on line 2, again on line 3 (only one "
                "could count; keep one)",
                "j.yaml:2: training.epochs: must be >= 1, got 0",
                "j.yaml:2: training.lr: must be a finite number, got '.nan'",
                "(from --set cluster.workers=0): cluster.workers: must be >= 1, got 0"}));
  EXPECT_TRUE(reading.mapping_read);
  EXPECT_TRUE(reading.Refused("training.lr"));
  EXPECT_TRUE(reading.Refused("training"));  // a section around a refused key
  EXPECT_FALSE(reading.Refused("dataset.path"));
  EXPECT_EQ(reading.Where("training.epochs"), "j.yaml:2");
  EXPECT_EQ(reading.Where("cluster.workers"), "(from --set cluster.workers=0)");
  EXPECT_EQ(reading.Where("training.momentum"), "j.yaml:2");  // absent: its section
  EXPECT_EQ(reading.Where("dataset.path"), "j.yaml");         // absent, and so is its section
}

TEST(JobSpec, AcceptsWhatIsMerelyUnusual) {
  // Sections with every key commented out, integers for numbers, and a --set that fills an
  // otherwise absent section are all fine.
  auto spec = ParseJobSpec(
      "name: a\ntraining:\n  # lr: 0.1\ncluster: {}\nstrategy: { at_fraction: 1e-1 }\n", "j.yaml",
      {"training.lr=1", "sharding.method=mod"});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_DOUBLE_EQ(spec->training().lr(), 1.0);
  EXPECT_DOUBLE_EQ(spec->strategy().at_fraction(), 0.1);
  EXPECT_EQ(spec->sharding().method(), v1::SHARD_METHOD_MOD);
}

// Each process's CPU quota: a worker's straggler entry wins, else cpu.worker times its speed.
TEST(JobSpec, EveryProcessGetsTheCpuShareTheClusterSpecGivesIt) {
  auto spec = ParseJobSpec(
      "name: h\ncluster:\n  workers: 4\n  cpu: { worker: 0.4, parameter_server: 0.3, "
      "evaluator: 0.2 }\n  worker_speeds: [1, 1, 0.5, 0.25]\n"
      "  stragglers: [ { worker: 1, cpu_fraction: 0.1 } ]\n",
      "j.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_DOUBLE_EQ(WorkerCpuShare(spec->cluster(), 0), 0.4);
  EXPECT_DOUBLE_EQ(WorkerCpuShare(spec->cluster(), 1), 0.1);
  EXPECT_DOUBLE_EQ(WorkerCpuShare(spec->cluster(), 2), 0.2);
  EXPECT_DOUBLE_EQ(WorkerCpuShare(spec->cluster(), 3), 0.1);
  EXPECT_DOUBLE_EQ(spec->cluster().cpu().parameter_server(), 0.3);
  EXPECT_DOUBLE_EQ(spec->cluster().cpu().evaluator(), 0.2);
  auto again = ParseJobSpec(JobSpecYaml(*spec), "resolved.yaml");
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << JobSpecYaml(*spec);
  EXPECT_EQ(JobSpecYaml(*again), JobSpecYaml(*spec));

  auto plain = ParseJobSpec("name: p\n", "j.yaml");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(WorkerCpuShare(plain->cluster(), 0), 0.0);  // no quota unless the spec asks
}

TEST(JobSpec, TransportSecurityIsOffUnlessAskedForAndParsesBack) {
  auto plain = ParseJobSpec("name: s\n", "j.yaml");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->security().tls(), v1::TLS_MODE_OFF);
  EXPECT_EQ(plain->security().tls_server_name(), "strata");
  auto spec = ParseJobSpec(
      "name: s\nsecurity: { tls: mutual, tls_dir: /etc/strata/tls, tls_server_name: "
      "trainer.example }\n",
      "j.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->security().tls(), v1::TLS_MODE_MUTUAL);
  EXPECT_EQ(spec->security().tls_dir(), "/etc/strata/tls");
  EXPECT_EQ(spec->security().tls_server_name(), "trainer.example");
  for (const v1::ResolvedJob& s : {*plain, *spec}) {
    auto again = ParseJobSpec(JobSpecYaml(s), "resolved.yaml");
    ASSERT_TRUE(again.ok()) << again.status() << "\n" << JobSpecYaml(s);
    EXPECT_EQ(JobSpecYaml(*again), JobSpecYaml(s));
  }
  // Turned on from the command line, over a file that says off.
  auto set = ParseJobSpec("name: s\nsecurity: { tls: off }\n", "j.yaml", {"security.tls=on"});
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->security().tls(), v1::TLS_MODE_ON);
}

TEST(JobSpec, ResolvedDefaultsParseBack) {
  // The run directory's job.yaml is read again by every service: empty lists must stay lists.
  auto spec = ParseJobSpec("name: d\n", "j.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto again = ParseJobSpec(JobSpecYaml(*spec), "resolved.yaml");
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << JobSpecYaml(*spec);
  EXPECT_EQ(JobSpecYaml(*again), JobSpecYaml(*spec));
}

}  // namespace
}  // namespace strata
