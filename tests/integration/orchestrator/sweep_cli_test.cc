// `strata sweep` refuses a bad sweep file before anything runs: exit 2, every problem as
// FILE:LINE: key: message, including overrides that make an invalid job.
#include <filesystem>

#include <gtest/gtest.h>

#include "tests/integration/orchestrator/cli_test_util.h"

namespace strata::testing {
namespace {

constexpr const char* kJob = R"(name: sweep-cli
dataset: { name: fashion-mnist, path: /usr/share/datasets/fashion-mnist, max_train: 2000, max_test: 500 }
model: { arch: mlp }
training: { epochs: 2, batch_size: 32 }
cluster: { workers: 2, parameter_servers: 1 }
strategy: { kind: allreduce }
)";

TEST(SweepCli, RefusesABadSweepFileWithLinesAndRunsNothing) {
  const std::string dir = MakeTempDir("sweep-cli");
  WriteText(dir + "/job.yaml", kJob);
  WriteText(dir + "/bad.yaml", R"(base: job.yaml
grid:
  strategy.kind: [allreduce, ps]
seeds: []
parallel: 64
colour: blue
)");
  CommandResult r = RunCommand(Strata() + " sweep " + dir + "/bad.yaml --out " + dir + "/out");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  const std::string file = dir + "/bad.yaml";
  EXPECT_NE(r.output.find(file + ":4: seeds: empty"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(file + ":5: parallel: 64 is above this machine's limit"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find(file + ":6: colour: unknown key"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("nothing was run"), std::string::npos) << r.output;
  EXPECT_FALSE(Exists(dir + "/out"));
  RunCommand("rm -rf " + dir);
}

TEST(SweepCli, BlamesAnOverrideThatMakesAnInvalidJobOnItsLine) {
  const std::string dir = MakeTempDir("sweep-cli");
  WriteText(dir + "/job.yaml", kJob);
  WriteText(dir + "/bad.yaml", R"(base: job.yaml
cells:
  - name: ok
    set: { strategy.kind: ps }
  - name: broken
    set:
      cluster.workers: 0
      training.lrr: 0.1
seeds: {count: 2}
)");
  CommandResult r = RunCommand(Strata() + " sweep " + dir + "/bad.yaml --out " + dir + "/out");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  const std::string file = dir + "/bad.yaml";
  EXPECT_NE(r.output.find(file + ":7: cells[1].set.cluster.workers: cluster.workers:"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find(file + ":8: cells[1].set.training.lrr: training.lrr: unknown key"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("cells[0]"), std::string::npos) << r.output;
  EXPECT_FALSE(Exists(dir + "/out"));

  // A base job that does not exist is blamed on `base:`.
  WriteText(dir + "/missing.yaml", "base: nope.yaml\ngrid: {training.lr: [0.1]}\nseeds: [1]\n");
  r = RunCommand(Strata() + " sweep " + dir + "/missing.yaml");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(dir + "/missing.yaml:1: base: " + dir + "/nope.yaml cannot be read"),
            std::string::npos)
      << r.output;
  RunCommand("rm -rf " + dir);
}

// The example in configs/experiments is a valid sweep of the quickstart job; --check runs nothing.
TEST(SweepCli, TheExampleSweepChecksWithoutRunning) {
  const std::string dir = MakeTempDir("sweep-cli");
  CommandResult r = RunCommand(Strata() + " sweep " + STRATA_TEST_SOURCE_DIR +
                               "/configs/experiments/example-sweep.yaml --check --out " + dir +
                               "/out");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("ok: 3 cell(s) x 3 seed(s) = 9 run(s)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("  ps/seed-2: --set strategy.kind=ps --set training.seed=2"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("  switch/seed-3: --set training.seed=3"), std::string::npos)
      << r.output;
  EXPECT_FALSE(Exists(dir + "/out"));
  RunCommand("rm -rf " + dir);
}

// Every sweep the docs point to (each file of configs/experiments with a `base:`) checks as
// shipped: its base job and every cell's overrides pass `strata validate`.
TEST(SweepCli, EveryShippedSweepChecks) {
  const std::string experiments = std::string(STRATA_TEST_SOURCE_DIR) + "/configs/experiments";
  int sweeps = 0;
  for (const auto& entry : std::filesystem::directory_iterator(experiments)) {
    if (entry.path().extension() != ".yaml") continue;
    if (Slurp(entry.path().string()).find("\nbase: ") == std::string::npos) continue;
    ++sweeps;
    const std::string dir = MakeTempDir("sweep-shipped");
    CommandResult r = RunCommand(Strata() + " sweep " + entry.path().string() + " --check --out " +
                                 dir + "/out");
    EXPECT_EQ(r.exit_code, 0) << entry.path() << "\n" << r.output;
    EXPECT_NE(r.output.find("ok: "), std::string::npos) << entry.path() << "\n" << r.output;
    RunCommand("rm -rf " + dir);
  }
  EXPECT_GE(sweeps, 8);
}

}  // namespace
}  // namespace strata::testing
