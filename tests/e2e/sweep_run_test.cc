// End to end: `strata sweep` of 2 cells (all-reduce, parameter servers) x 2 seeds of a tiny job,
// interrupted with Ctrl-C after its first run, resumed to the end, then started once more to
// find nothing left to run (docs/user-guide.md, "Sweeps").
#include <signal.h>

#include <sstream>

#include <gtest/gtest.h>

#include "tests/integration/orchestrator/cli_test_util.h"

namespace strata::testing {
namespace {

std::vector<std::string> CsvLines(const std::string& path) {
  std::vector<std::string> lines;
  std::istringstream in(Slurp(path));
  std::string line;
  while (std::getline(in, line)) lines.push_back(line);
  return lines;
}

bool RecordComplete(const std::string& run_dir) {
  const nlohmann::json record = ReadJson(run_dir + "/sweep-run.json");
  return record.is_object() && record.value("complete", false);
}

TEST(EndToEnd, SweepRunsEveryCellAndSeedResumesAfterCtrlCAndSummarises) {
  const std::string dir = MakeTempDir("e2e-sweep");
  const std::string out = dir + "/out";
  WriteText(dir + "/job.yaml", R"(name: e2e-sweep
dataset: { name: fashion-mnist, path: /usr/share/datasets/fashion-mnist, max_train: 2000, max_test: 500 }
model: { arch: mlp }
training: { epochs: 2, batch_size: 32, lr: 0.05, momentum: 0.9 }
cluster: { workers: 2, parameter_servers: 1 }
sharding: { method: stratified }
strategy: { kind: allreduce }
launcher: { kind: local, ring_transport: tcp }
)");
  // (The ring's transport is not what this test is about; switch_run_test.cc runs the default.)
  WriteText(dir + "/sweep.yaml", R"(name: e2e
base: job.yaml
grid:
  strategy.kind: [allreduce, ps]
seeds: [1, 2]
target_accuracy: 0.5
)");
  const std::string first = out + "/runs/kind=allreduce/seed-1";
  const std::string second = out + "/runs/kind=ps/seed-1";  // runs go seed by seed

  // 1. Ctrl-C once the first run has finished and the second has started: the first is kept,
  //    the second is stopped through its own orchestrator and left marked incomplete.
  {
    BackgroundRun sweep({"sweep", dir + "/sweep.yaml", "--out", out}, dir + "/first.out");
    ASSERT_TRUE(
        Eventually([&] { return Exists(second + "/sweep-run.json"); }, std::chrono::seconds(300)))
        << sweep.Output();
    ASSERT_TRUE(RecordComplete(first)) << sweep.Output();
    ::kill(sweep.pid(), SIGINT);
    EXPECT_EQ(sweep.Wait(std::chrono::seconds(180)), 130) << sweep.Output();
    EXPECT_NE(sweep.Output().find("interrupted: stopping 1 running run(s)"), std::string::npos)
        << sweep.Output();
    EXPECT_FALSE(RecordComplete(second));
    EXPECT_TRUE(Exists(out + "/results.csv"));  // what finished is written down at once
    for (const auto& p : ReadJson(second + "/summary.json")["processes"]) {
      EXPECT_TRUE(ProcessEnded(p["pid"].get<int>())) << p.dump();
    }
  }

  // 2. Resumed: the first run is kept, the interrupted one runs again from scratch.
  CommandResult r =
      RunCommand(Strata() + " sweep " + dir + "/sweep.yaml --out " + out + " --report");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("4 run(s), 1 finished earlier, 3 to run"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("kind=ps/seed-1 was interrupted earlier"), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("start kind=allreduce/seed-1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("/4 done] running kind=ps/seed-2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("ETA"), std::string::npos) << r.output;

  const std::vector<std::string> results = CsvLines(out + "/results.csv");
  ASSERT_EQ(results.size(), 5u) << Slurp(out + "/results.csv");
  EXPECT_EQ(results[0],
            "cell,strategy.kind,seed,state,wall_s,time_to_target_s,final_val_acc,final_val_loss,"
            "switch_epoch,samples_per_s_allreduce,samples_per_s_ps");
  for (size_t i = 1; i < results.size(); ++i) {
    EXPECT_NE(results[i].find(",succeeded,"), std::string::npos) << results[i];
  }
  EXPECT_EQ(results[1].rfind("kind=allreduce,allreduce,1,succeeded,", 0), 0u) << results[1];
  EXPECT_EQ(results[4].rfind("kind=ps,ps,2,succeeded,", 0), 0u) << results[4];
  // Time to 50%: every run gets there within 2 epochs on 2000 examples (far above chance).
  for (size_t i = 1; i < results.size(); ++i) {
    EXPECT_EQ(results[i].find(",succeeded,,"), std::string::npos) << results[i];
  }

  const std::vector<std::string> summary = CsvLines(out + "/summary.csv");
  ASSERT_EQ(summary.size(), 1u + 2 * 7) << Slurp(out + "/summary.csv");
  bool saw_variance = false;
  for (const std::string& line : summary) {
    if (line.rfind("kind=ps,final_val_acc,2,", 0) == 0) {
      saw_variance = true;
      EXPECT_NE(line.find("not significant at 5%"), std::string::npos) << line;
      EXPECT_NE(line.find("warning"), std::string::npos) << line;
    }
  }
  EXPECT_TRUE(saw_variance) << Slurp(out + "/summary.csv");
  EXPECT_NE(r.output.find("final_val_acc"), std::string::npos) << r.output;

  const std::string report = Slurp(out + "/report.html");
  EXPECT_NE(report.find("<svg"), std::string::npos);
  size_t curves = 0;
  for (size_t at = report.find("run-curve"); at != std::string::npos;
       at = report.find("run-curve", at + 1)) {
    ++curves;
  }
  EXPECT_EQ(curves, 4u);
  EXPECT_NE(report.find("Final validation accuracy: mean and 95% interval"), std::string::npos);
  EXPECT_NE(report.find("Switch epoch: mean and 95% interval"), std::string::npos);

  // 3. Nothing left: a third invocation runs nothing and rewrites the same tables.
  CommandResult again = RunCommand(Strata() + " sweep " + dir + "/sweep.yaml --out " + out);
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("4 finished earlier, 0 to run"), std::string::npos) << again.output;
  EXPECT_EQ(again.output.find("start "), std::string::npos) << again.output;
  EXPECT_EQ(CsvLines(out + "/results.csv"), results);

  // The report alone, from the output directory.
  CommandResult report_only = RunCommand(Strata() + " sweep --report " + out);
  EXPECT_EQ(report_only.exit_code, 0) << report_only.output;
  EXPECT_EQ(CsvLines(out + "/results.csv"), results);
  RunCommand("rm -rf " + dir);
}

}  // namespace
}  // namespace strata::testing
