// Hostile input to `strata validate` and `strata run`: every refusal exits 2 and prints exactly the
// expected problems, one line each, each starting with its exact place ("FILE:LINE: key: " or
// "(from --set KEY=VALUE): key: "); and every command-line mistake exits 2 with a message.
#include <gtest/gtest.h>

#include "tests/integration/orchestrator/cli_test_util.h"

namespace strata::testing {
namespace {

// A valid job (the line numbers below count from here); each case breaks it.
constexpr char kValid[] = R"(name: refusal-job
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

struct Refusal {
  const char* label;
  std::string yaml;
  std::string args;  // after the job path, e.g. "--set training.lr="
  // Each output line in order starts with one of these; "{f}" stands for the job's path.
  std::vector<std::string> prefixes;
};

std::string Replace(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  if (at == std::string::npos)
    ADD_FAILURE() << "test setup: '" << from << "' not in the valid spec";
  else
    text.replace(at, from.size(), to);
  return text;
}

std::string AtFraction(const std::string& epochs, const std::string& fraction) {
  return Replace(Replace(kValid, "epochs: 8", "epochs: " + epochs), "rule: empirical",
                 "rule: at_fraction\n  at_fraction: " + fraction);
}

std::vector<Refusal> Refusals() {
  const std::string v = kValid;
  return {
      {"empty file", "", "", {"{f}:1: (top level): empty job spec"}},
      {"only comments", "# name: x\n#\n# training: { epochs: 3 }\n", "",
       {"{f}:1: (top level): empty job spec"}},
      {"duplicate key", Replace(v, "momentum: 0.9", "momentum: 0.9\n  lr: 0.5"), "",
       {"{f}:9: training.lr: duplicate key: first on line 7, again on line 9"}},
      {"duplicate section", v + "training: { epochs: 2 }\n", "",
       {"{f}:17: training: duplicate key: first on line 4, again on line 17"}},
      {"lr without a value", Replace(v, "lr: 0.05", "lr:"), "",
       {"{f}:7: training.lr: has no value"}},
      {"infinite lr", Replace(v, "lr: 0.05", "lr: .inf"), "",
       {"{f}:7: training.lr: must be a finite number, got '.inf'"}},
      {"nan momentum", Replace(v, "momentum: 0.9", "momentum: .nan"), "",
       {"{f}:8: training.momentum: must be a finite number, got '.nan'"}},
      {"plain nan", Replace(v, "lr: 0.05", "lr: nan"), "",
       {"{f}:7: training.lr: expected a number, got 'nan'"}},
      {"--set with an empty value", v, "--set training.lr=",
       {"(from --set training.lr=): training.lr: has no value"}},
      {"--set infinite", v, "--set training.lr=.inf",
       {"(from --set training.lr=.inf): training.lr: must be a finite number"}},
      {"--set of a key on line 10", v, "--set cluster.workers=0",
       {"(from --set cluster.workers=0): cluster.workers: must be >= 1, got 0"}},
      {"--set of an unknown key", v, "--set training.lrr=1",
       {"(from --set training.lrr=1): training.lrr: unknown key"}},
      {"--set of missing data", v, "--set dataset.path=/nonexistent/fmnist",
       {"(from --set dataset.path=/nonexistent/fmnist): dataset.path: data set 'fashion-mnist' "
        "not usable"}},
      {"--set without '='", v, "--set training.lr",
       {"(from --set training.lr): --set: expected KEY=VALUE"}},
      {"--set of TLS without its certificates", v,
       "--set security.tls=mutual --set security.tls_dir=/nonexistent/tls",
       {"(from --set security.tls_dir=/nonexistent/tls): security.tls_dir: cannot open "
        "/nonexistent/tls/ca.pem"}},
      {"schema and semantic errors together",
       Replace(Replace(Replace(Replace(v, "epochs: 8", "epochs: eight"), "/usr/share/datasets/",
                               "/nonexistent/"),
                       "parameter_servers: 1", "parameter_servers: 7"),
               "kind: switch", "kind: switch\n  ps_split: false"),
       "",
       {"{f}:5: training.epochs: expected an integer, got 'eight'",
        "{f}:2: dataset.path: data set 'fashion-mnist' not usable",
        "{f}:11: cluster.parameter_servers: 7 parameter servers but model 'mlp' has only 6"}},
      {"file, --set and semantic errors together", Replace(v, "lr: 0.05", "lr: -1"),
       "--set cluster.parameter_servers=9 --set strategy.ps_split=false --set strategy.window=",
       {"{f}:7: training.lr: must be > 0, got -1",
        "(from --set strategy.window=): strategy.window: has no value",
        "(from --set cluster.parameter_servers=9): cluster.parameter_servers: 9 parameter "
        "servers"}},
      {"at_fraction on the last epoch", AtFraction("4", "0.9"), "",
       {"{f}:15: strategy.at_fraction: ceil(0.9 x 4 epochs) puts the switch after epoch 4, "
        "where training ends: it would never happen (use at most 3/4)"}},
      {"at_fraction just past the last boundary", AtFraction("4", "0.76"), "",
       {"{f}:15: strategy.at_fraction: ceil(0.76 x 4 epochs) puts the switch after epoch 4"}},
      {"at_fraction with one epoch", AtFraction("1", "0.5"), "",
       {"{f}:15: strategy.at_fraction: a switch needs an epoch boundary before the end"}},
      {"at_fraction from --set", AtFraction("10", "0.5"), "--set strategy.at_fraction=0.95",
       {"(from --set strategy.at_fraction=0.95): strategy.at_fraction: ceil(0.95 x 10 epochs)"}},
      {"epochs from --set make at_fraction late", AtFraction("10", "0.5"),
       "--set training.epochs=1",
       {"{f}:15: strategy.at_fraction: a switch needs an epoch boundary"}},
      {"at_fraction by default with one epoch",
       Replace(Replace(v, "epochs: 8", "epochs: 1"), "rule: empirical", "rule: at_fraction"), "",
       {"{f}:12: strategy.at_fraction: a switch needs an epoch boundary before the end of "
        "training, and training.epochs is 1 (not set: the default)"}},
  };
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    if (end > start) lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

std::string WithPath(std::string prefix, const std::string& path) {
  if (size_t at = prefix.find("{f}"); at != std::string::npos) prefix.replace(at, 3, path);
  return prefix;
}

class RefusedJobSpec : public ::testing::TestWithParam<size_t> {};

TEST_P(RefusedJobSpec, ValidateExits2WithExactPlaces) {
  const Refusal r = Refusals()[GetParam()];
  const std::string dir = MakeTempDir("refusal");
  ASSERT_FALSE(dir.empty());
  const std::string path = dir + "/job.yaml";
  WriteText(path, r.yaml);
  SCOPED_TRACE(std::string(r.label) + "\n" + r.yaml);

  // The arguments are single words or key=value without spaces: the shell splits them as meant.
  CommandResult validate = RunCommand(Strata() + " validate " + path + " " + r.args);
  EXPECT_EQ(validate.exit_code, 2) << validate.output;
  const std::vector<std::string> lines = Lines(validate.output);
  ASSERT_EQ(lines.size(), r.prefixes.size()) << validate.output;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string want = WithPath(r.prefixes[i], path);
    EXPECT_EQ(lines[i].rfind(want, 0), 0u) << "line " << i << ":\n  " << lines[i]
                                           << "\nshould start with\n  " << want;
  }
  RunCommand("rm -rf " + dir);
}

INSTANTIATE_TEST_SUITE_P(Matrix, RefusedJobSpec, ::testing::Range<size_t>(0, Refusals().size()),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           std::string name = Refusals()[info.param].label;
                           for (char& c : name) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return name;
                         });

// The two defects that used to reach the launcher: an empty file ran a job of defaults, and a
// late at_fraction switch was skipped at run time. `run` now refuses both before launching.
TEST(RefusedJobSpec, RunLaunchesNothing) {
  for (const std::string& yaml : {std::string(), AtFraction("4", "0.9")}) {
    const std::string dir = MakeTempDir("refusal");
    WriteText(dir + "/job.yaml", yaml);
    CommandResult run =
        RunCommand(Strata() + " run " + dir + "/job.yaml --quiet --out " + dir + "/run");
    EXPECT_EQ(run.exit_code, 2) << run.output;
    EXPECT_NE(run.output.find("nothing was launched"), std::string::npos) << run.output;
    EXPECT_FALSE(Exists(dir + "/run"));
    RunCommand("rm -rf " + dir);
  }
}

TEST(RefusedJobSpec, AtFractionBeforeTheLastBoundaryValidates) {
  // ceil(0.75 x 4) = 3 and ceil(0.9 x 10) = 9: the switch lands one epoch before the end.
  for (const auto& [epochs, fraction] :
       std::vector<std::pair<std::string, std::string>>{{"4", "0.75"}, {"10", "0.9"}, {"2", "0.5"}}) {
    const std::string dir = MakeTempDir("refusal");
    WriteText(dir + "/job.yaml", AtFraction(epochs, fraction));
    CommandResult r = RunCommand(Strata() + " validate " + dir + "/job.yaml");
    EXPECT_EQ(r.exit_code, 0) << epochs << " epochs, at_fraction " << fraction << ": " << r.output;
    RunCommand("rm -rf " + dir);
  }
}

TEST(StrataCommandLine, EveryUsageErrorExits2WithAMessage) {
  const std::string dir = MakeTempDir("usage");
  const std::string job = dir + "/job.yaml";
  WriteText(job, kValid);
  const std::vector<std::string> usage_errors = {
      "",         "frobnicate",
      "--bogus",  "validate",
      "validate " + job + " --bogus",  "validate " + job + " --set",
      "validate " + job + " extra-argument",  "run",
      "run " + job + " --out",  "status",
      "report",   "switch",
      "switch " + dir + " --wait-s soon",  "shard --stats"};
  for (const std::string& args : usage_errors) {
    CommandResult r = RunCommand(Strata() + " " + args);
    EXPECT_EQ(r.exit_code, 2) << "strata " << args << "\n" << r.output;
    EXPECT_FALSE(r.output.empty()) << "strata " << args << " printed nothing";
  }
  CommandResult help = RunCommand(Strata() + " --help");
  EXPECT_EQ(help.exit_code, 0) << help.output;
  CommandResult sub_help = RunCommand(Strata() + " validate --help");
  EXPECT_EQ(sub_help.exit_code, 0) << sub_help.output;
  RunCommand("rm -rf " + dir);
}

}  // namespace
}  // namespace strata::testing
