// `strata validate` and `strata run` refuse malformed job specs: the message names the key and
// the line, the exit code is non-zero, and `run` launches nothing (no run directory appears).
#include <gtest/gtest.h>

#include "orchestrator/plan/job_checks.h"
#include "services/common/config/resolved_job.h"
#include "tests/integration/orchestrator/cli_test_util.h"

namespace strata::testing {
namespace {

// A valid job; each case below breaks one thing in it.
constexpr char kValid[] = R"(name: valid-job
dataset: { name: fashion-mnist, path: /usr/share/datasets/fashion-mnist }
model: { arch: mlp }
training:
  epochs: 8
  batch_size: 128
  lr: 0.05
  momentum: 0.9
cluster:
  workers: 2
  parameter_servers: 1
strategy:
  kind: switch
  rule: empirical
  window: 5
  threshold_percent: 1.0
)";

struct BadSpec {
  const char* label;
  std::string yaml;
  const char* key;  // must appear in the message
  int line;         // must appear as ":<line>:" (0: the key is not in the file)
};

std::string Replace(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  if (at == std::string::npos)
    ADD_FAILURE() << "test setup: '" << from << "' not in the valid spec";
  else
    text.replace(at, from.size(), to);
  return text;
}

std::vector<BadSpec> BadSpecs() {
  const std::string v = kValid;
  return {
      {"unknown top-level key", v + "trainer: { epochs: 3 }\n", "trainer", 17},
      {"unknown nested key", Replace(v, "model: { arch: mlp }", "model: { arch: mlp, depth: 3 }"),
       "model.depth", 3},
      {"wrong type", Replace(v, "epochs: 8", "epochs: eight"), "training.epochs", 5},
      {"zero workers", Replace(v, "workers: 2", "workers: 0"), "cluster.workers", 10},
      {"negative learning rate", Replace(v, "lr: 0.05", "lr: -0.05"), "training.lr", 7},
      {"momentum of 1", Replace(v, "momentum: 0.9", "momentum: 1.0"), "training.momentum", 8},
      {"unknown model", Replace(v, "arch: mlp", "arch: resnet99"), "model.arch", 3},
      {"unknown data set", Replace(v, "name: fashion-mnist", "name: imagenet"), "dataset.name", 2},
      {"missing data files",
       Replace(v, "/usr/share/datasets/fashion-mnist", "/nonexistent/fashion-mnist"),
       "dataset.path", 2},
      {"more parameter servers than whole tensors",
       Replace(Replace(v, "parameter_servers: 1", "parameter_servers: 7"), "kind: switch",
               "kind: switch\n  ps_split: false"),
       "cluster.parameter_servers", 11},
      {"at_fraction above 1",
       Replace(v, "rule: empirical", "rule: at_fraction\n  at_fraction: 1.5"),
       "strategy.at_fraction", 15},
      {"at_fraction of 0", Replace(v, "rule: empirical", "rule: at_fraction\n  at_fraction: 0"),
       "strategy.at_fraction", 15},
      {"unknown strategy", Replace(v, "kind: switch", "kind: magic"), "strategy.kind", 13},
      {"unknown consistency", Replace(v, "kind: switch", "kind: ps\n  consistency: xsp"),
       "strategy.consistency", 14},
      {"milestones not increasing",
       Replace(v, "momentum: 0.9", "momentum: 0.9\n  lr_schedule: { milestones: [5, 3] }"),
       "training.lr_schedule.milestones", 9},
      {"straggler that does not exist",
       Replace(v, "parameter_servers: 1",
               "parameter_servers: 1\n  stragglers: [ { worker: 5, cpu_fraction: 0.5 } ]"),
       "cluster.stragglers[0].worker", 12},
      {"batch smaller than the workers", Replace(v, "batch_size: 128", "batch_size: 1"),
       "training.batch_size", 6},
      {"invalid YAML", Replace(v, "model: { arch: mlp }", "model: { arch: mlp"), "invalid YAML", 0},
      {"name with a space", Replace(v, "name: valid-job", "name: my job"), "name", 1},
      {"zero threshold", Replace(v, "threshold_percent: 1.0", "threshold_percent: 0"),
       "strategy.threshold_percent", 16},
      {"unknown ring transport", v + "launcher: { ring_transport: rdma }\n",
       "launcher.ring_transport", 17},
      {"window the run cannot fill", Replace(v, "window: 5", "window: 9"), "strategy.window", 15},
      {"schedule gamma above 1",
       Replace(v, "momentum: 0.9", "momentum: 0.9\n  lr_schedule: { gamma: 2 }"),
       "training.lr_schedule.gamma", 9},
      {"unknown TLS mode", v + "security: { tls: maybe }\n", "security.tls", 17},
      {"TLS directory with TLS off", v + "security: { tls: off, tls_dir: /etc/strata/tls }\n",
       "security.tls_dir", 17},
      {"TLS certificates that are not there",
       v + "security: { tls: mutual, tls_dir: /nonexistent/tls }\n", "security.tls_dir", 17},
      {"a TLS directory on Kubernetes",
       v + "launcher: { kind: kubernetes }\nsecurity: { tls: on, tls_dir: /etc/strata/tls }\n",
       "security.tls_dir", 18},
      {"a metrics port on the containers' gRPC port",
       v + "launcher: { kind: compose }\nmetrics: { port: 50051 }\n", "metrics.port", 18},
  };
}

class MalformedSpec : public ::testing::TestWithParam<size_t> {};

TEST_P(MalformedSpec, RefusedByValidateAndRunNamingKeyAndLine) {
  const BadSpec bad = BadSpecs()[GetParam()];
  const std::string dir = MakeTempDir("validate");
  ASSERT_FALSE(dir.empty());
  const std::string path = dir + "/job.yaml";
  WriteText(path, bad.yaml);
  SCOPED_TRACE(std::string(bad.label) + "\n" + bad.yaml);

  CommandResult validate = RunCommand(Strata() + " validate " + path);
  EXPECT_NE(validate.exit_code, 0) << validate.output;
  EXPECT_NE(validate.output.find(bad.key), std::string::npos) << validate.output;
  if (bad.line > 0) {
    EXPECT_NE(validate.output.find(path + ":" + std::to_string(bad.line) + ":"), std::string::npos)
        << validate.output;
  }

  const std::string run_dir = dir + "/run";
  CommandResult run = RunCommand(Strata() + " run " + path + " --quiet --out " + run_dir);
  EXPECT_NE(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find(bad.key), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("nothing was launched"), std::string::npos) << run.output;
  EXPECT_FALSE(Exists(run_dir)) << "strata run created " << run_dir << " for an invalid spec";
  RunCommand("rm -rf " + dir);
}

INSTANTIATE_TEST_SUITE_P(Cases, MalformedSpec, ::testing::Range<size_t>(0, BadSpecs().size()),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           std::string name = BadSpecs()[info.param].label;
                           for (char& c : name) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return name;
                         });

TEST(Validate, AcceptsTheValidSpecAndTheShippedConfigs) {
  const std::string dir = MakeTempDir("validate");
  WriteText(dir + "/job.yaml", kValid);
  CommandResult r = RunCommand(Strata() + " validate " + dir + "/job.yaml");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("ok"), std::string::npos) << r.output;
  for (const char* config : {"quickstart.yaml", "fmnist-mlp.yaml", "fmnist-resnet20.yaml"}) {
    CommandResult c =
        RunCommand(Strata() + " validate " + STRATA_TEST_SOURCE_DIR + "/configs/" + config);
    EXPECT_EQ(c.exit_code, 0) << config << ": " << c.output;
  }
  RunCommand("rm -rf " + dir);
}

TEST(Validate, SetOverridesAreCheckedLikeTheFile) {
  const std::string dir = MakeTempDir("validate");
  WriteText(dir + "/job.yaml", kValid);
  CommandResult r = RunCommand(Strata() + " validate " + dir + "/job.yaml --set cluster.workers=0");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("cluster.workers"), std::string::npos) << r.output;
  CommandResult ok =
      RunCommand(Strata() + " validate " + dir + "/job.yaml --set training.epochs=12");
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  RunCommand("rm -rf " + dir);
}

TEST(Validate, RunRefusesALauncherItCannotDrive) {
  const std::string dir = MakeTempDir("validate");
  WriteText(dir + "/job.yaml", std::string(kValid) + "launcher: { kind: kubernetes }\n");
  EXPECT_EQ(RunCommand(Strata() + " validate " + dir + "/job.yaml").exit_code, 0);
  CommandResult run =
      RunCommand(Strata() + " run " + dir + "/job.yaml --quiet --out " + dir + "/run");
  EXPECT_NE(run.exit_code, 0);
  EXPECT_NE(run.output.find("launcher.kind"), std::string::npos) << run.output;
  EXPECT_FALSE(Exists(dir + "/run"));
  RunCommand("rm -rf " + dir);
}

// `strata resolve`: what a container plan's one-shot step runs with the deployed replica counts.
TEST(Resolve, PrintsOrWritesTheJobAsServicesReadItWithTheCountsGiven) {
  const std::string dir = MakeTempDir("resolve");
  WriteText(dir + "/job.yaml", kValid);
  CommandResult printed =
      RunCommand(Strata() + " resolve " + dir + "/job.yaml --set cluster.workers=4");
  ASSERT_EQ(printed.exit_code, 0) << printed.output;
  EXPECT_NE(printed.output.find("worker_batch: 32"), std::string::npos) << printed.output;
  EXPECT_NE(printed.output.find("kind: STRATEGY_KIND_SWITCH"), std::string::npos) << printed.output;
  CommandResult written =
      RunCommand(Strata() + " resolve " + dir + "/job.yaml --out " + dir + "/job.resolved.txtpb");
  ASSERT_EQ(written.exit_code, 0) << written.output;
  auto job = LoadResolvedJob(dir + "/job.resolved.txtpb");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->training().worker_batch(), 64);
  EXPECT_DOUBLE_EQ(job->strategy().server_lr_scale(), 0.5);
  // A bad value is refused with its key and where it came from; nothing is written.
  CommandResult bad =
      RunCommand(Strata() + " resolve " + dir + "/job.yaml --set cluster.workers=0" + " --out " +
                 dir + "/bad.txtpb");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("(from --set cluster.workers=0): cluster.workers"), std::string::npos)
      << bad.output;
  EXPECT_FALSE(Exists(dir + "/bad.txtpb"));
  RunCommand("rm -rf " + dir);
}

// The orchestrator's torch-free tensor counts (job.proto's model_tensors, for "more parameter
// servers than tensors") must match the real models.
TEST(BuiltinModelTensors, MatchTheRealModels) {
  for (const char* arch : {"mlp", "mlp_wide", "cnn", "resnet20", "resnet32", "resnet56"}) {
    CommandResult r =
        RunCommand(BinDir() + "/strata-evaluator --config " + STRATA_TEST_SOURCE_DIR +
                   "/configs/fmnist-mlp.yaml --set model.arch=" + arch +
                   " --set dataset.max_train=64 --set dataset.max_test=64 --describe 2>/dev/null");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    nlohmann::json d = nlohmann::json::parse(r.output, nullptr, false);
    ASSERT_FALSE(d.is_discarded()) << r.output;
    EXPECT_EQ(d["tensor_count"].get<int>(),
              BuiltinModelTensors(*EnumFromSpelling<v1::ModelArch>(arch)).value_or(-1))
        << arch;
  }
}

}  // namespace
}  // namespace strata::testing
