// `strata run` under failure: a killed worker, Ctrl-C, and a manual `strata switch`. Each test
// runs the real binaries on loopback and checks that every process it started has ended.
#include <gtest/gtest.h>

#include "tests/integration/orchestrator/cli_test_util.h"
#include "tests/integration/orchestrator/run_observer.h"

namespace strata::testing {
namespace {

// Small and long: thousands of fast steps, so the run is surely still going when the test acts.
std::string LongJob(const std::string& strategy) {
  return std::string(R"(name: long-job
dataset: { name: fashion-mnist, path: /usr/share/datasets/fashion-mnist, max_train: 2000, max_test: 200 }
model: { arch: mlp }
training: { epochs: 400, batch_size: 32, lr: 0.05, momentum: 0.9, seed: 1 }
cluster: { workers: 2, parameter_servers: 1 }
sharding: { method: stratified }
strategy: )") +
         strategy + "\n";
}

// With recovery off; with it on, the ring re-forms instead (recovery_test.cc).
TEST(StrataRun, KilledWorkerStopsTheRunNamingItAndEndsEveryProcess) {
  RunFixture f(LongJob("{ kind: allreduce }\nrecovery: { restarts: 0 }"));
  ASSERT_TRUE(f.WaitForTraining(5)) << f.run->Output();
  const std::vector<int> pids = f.AllPids();
  ASSERT_EQ(pids.size(), 3u);  // two workers and the evaluator
  const int victim = f.PidOf("worker-1");
  ASSERT_GT(victim, 0);
  ASSERT_EQ(::kill(victim, SIGKILL), 0);

  const int code = f.run->Wait(std::chrono::seconds(120));
  const std::string output = f.run->Output();
  EXPECT_EQ(code, 1) << output;
  EXPECT_NE(output.find("worker-1"), std::string::npos) << output;
  for (int pid : pids) EXPECT_TRUE(ProcessEnded(pid)) << "pid " << pid << " outlived the run";

  nlohmann::json summary = ReadJson(f.run_dir + "/summary.json");
  ASSERT_TRUE(summary.is_object()) << "no summary.json";
  EXPECT_EQ(summary["state"], "failed");
  EXPECT_EQ(summary["failed_process"], "worker-1");
  EXPECT_NE(summary["error"].get<std::string>().find("worker-1"), std::string::npos)
      << summary.dump(2);
  EXPECT_NE(summary["error"].get<std::string>().find("signal 9"), std::string::npos)
      << summary.dump(2);
  bool exit_event = false;
  for (const auto& e : ReadLines(f.run_dir + "/events.jsonl")) {
    exit_event = exit_event || (e["event"] == "process_exited" && e["process"] == "worker-1");
  }
  EXPECT_TRUE(exit_event);
}

TEST(StrataRun, InterruptEndsEveryProcessAndSaysSo) {
  RunFixture f(LongJob("{ kind: switch, rule: at_fraction, at_fraction: 0.9 }"));
  ASSERT_TRUE(f.WaitForTraining(5)) << f.run->Output();
  const std::vector<int> pids = f.AllPids();
  ASSERT_EQ(pids.size(), 4u);  // a parameter server, two workers and the evaluator
  ASSERT_EQ(::kill(f.run->pid(), SIGINT), 0);

  const int code = f.run->Wait(std::chrono::seconds(120));
  EXPECT_EQ(code, 130) << f.run->Output();
  for (int pid : pids) EXPECT_TRUE(ProcessEnded(pid)) << "pid " << pid << " outlived the run";
  nlohmann::json summary = ReadJson(f.run_dir + "/summary.json");
  ASSERT_TRUE(summary.is_object());
  EXPECT_EQ(summary["state"], "interrupted");
  EXPECT_TRUE(Exists(f.run_dir + "/report.html"));
}

// The servers' model is read by the test itself, as an observer, and compared with the switch
// checkpoint: the job's servers apply pushes at ps_lr_scale 1e-30, which leaves every weight as
// loaded, and the run (400 epochs) goes on until the test interrupts it. (Seen to fail with the
// comparison made against the checkpoint of step 1 instead: "bytes differ from byte 0".)
TEST(StrataRun, ManualSwitchHandsOverLiveAndServersHoldTheLastAllReduceModel) {
  // The empirical rule with a threshold it will not reach: only `strata switch` switches.
  RunFixture f(
      LongJob("{ kind: switch, rule: empirical, window: 5, threshold_percent: 0.000001, "
              "ps_lr_scale: 1e-30 }"));
  ASSERT_TRUE(f.WaitForTraining(40)) << f.run->Output();
  const std::vector<int> pids = f.AllPids();
  ASSERT_EQ(pids.size(), 4u);

  CommandResult sw = RunCommand(Strata() + " switch " + f.run_dir + " --wait-s 120");
  EXPECT_EQ(sw.exit_code, 0) << sw.output << f.run->Output();
  EXPECT_NE(sw.output.find("handover"), std::string::npos) << sw.output;

  nlohmann::json decided, done;
  for (const auto& e : ReadLines(f.run_dir + "/events.jsonl")) {
    if (e["event"] == "switch_decided") decided = e;
    if (e["event"] == "switch_done") done = e;
  }
  ASSERT_TRUE(decided.is_object());
  EXPECT_EQ(decided["trigger"], "manual");
  ASSERT_TRUE(done.is_object());
  EXPECT_GT(done["handover_s"].get<double>(), 0.0);
  EXPECT_EQ(done["verification"]["weights_equal"], true) << done.dump(2);
  EXPECT_TRUE(Exists(done["checkpoint"].get<std::string>()));
  ASSERT_TRUE(JoinRunAsObserver(f.run_dir).ok());
  const std::vector<std::string> differences =
      ServersAgainstCheckpoint(f.run_dir, 1, done["checkpoint"].get<std::string>());
  EXPECT_TRUE(differences.empty()) << ::testing::PrintToString(differences);

  // Training continues on the parameter servers: worker steps keep growing in push/pull mode.
  const int64_t at = done["at_step"].get<int64_t>();
  // The workers switch at the step asked for, or later if a request reached one of them late.
  EXPECT_GE(at, done["requested_at_step"].get<int64_t>()) << done.dump(2);
  EXPECT_TRUE(Eventually(
      [&] {
        nlohmann::json s = ReadJson(f.run_dir + "/status.json");
        for (const auto& w : s["workers"]) {
          if (w.value("mode", "") != "ps" || w.value("step", 0) <= at) return false;
        }
        return true;
      },
      std::chrono::seconds(60)));

  CommandResult status = RunCommand(Strata() + " status " + f.run_dir);
  EXPECT_EQ(status.exit_code, 0);
  EXPECT_NE(status.output.find("state:     running"), std::string::npos) << status.output;
  EXPECT_NE(status.output.find("done at step"), std::string::npos) << status.output;
  // The running orchestrator rewrites report.html (every kReportRefreshSeconds): the switch
  // appears in it while the run goes on, and the page reloads itself meanwhile. (Seen to fail:
  // with the rewrite in RunDriver::ShowProgress taken out, this waited its 60 s in vain.)
  EXPECT_TRUE(Eventually(
      [&] {
        const std::string html = Slurp(f.run_dir + "/report.html");
        return html.find("switch-marker") != std::string::npos &&
               html.find("http-equiv='refresh'") != std::string::npos;
      },
      std::chrono::seconds(60)));
  CommandResult again = RunCommand(Strata() + " switch " + f.run_dir + " --wait-s 0");
  EXPECT_NE(again.exit_code, 0) << again.output;  // already switched

  ASSERT_EQ(::kill(f.run->pid(), SIGINT), 0);
  EXPECT_EQ(f.run->Wait(std::chrono::seconds(120)), 130);
  for (int pid : pids) EXPECT_TRUE(ProcessEnded(pid)) << "pid " << pid << " outlived the run";
  // The report of the ended run no longer reloads.
  EXPECT_EQ(Slurp(f.run_dir + "/report.html").find("http-equiv='refresh'"), std::string::npos);
  CommandResult report = RunCommand(Strata() + " report " + f.run_dir);
  EXPECT_EQ(report.exit_code, 0) << report.output;
  EXPECT_NE(Slurp(f.run_dir + "/report.html").find("switch-marker"), std::string::npos);
}

TEST(StrataRun, ServicesDieWithAKilledOrchestrator) {
  // SIGKILL leaves the orchestrator no chance to clean up: PR_SET_PDEATHSIG must end the services.
  RunFixture f(LongJob("{ kind: ps, consistency: asp }"));
  ASSERT_TRUE(f.WaitForTraining(5)) << f.run->Output();
  const std::vector<int> pids = f.AllPids();
  ASSERT_EQ(pids.size(), 4u);
  ASSERT_EQ(::kill(f.run->pid(), SIGKILL), 0);
  EXPECT_EQ(f.run->Wait(std::chrono::seconds(60)), 128 + SIGKILL);
  for (int pid : pids) {
    EXPECT_TRUE(Eventually([&] { return ProcessEnded(pid); }, std::chrono::seconds(60)))
        << "pid " << pid << " outlived a killed orchestrator";
  }
  // The run directory still tells what happened.
  CommandResult status = RunCommand(Strata() + " status " + f.run_dir);
  EXPECT_NE(status.output.find("abandoned"), std::string::npos) << status.output;
}

TEST(StrataStatus, RefusesADirectoryThatIsNotARun) {
  const std::string dir = MakeTempDir("status");
  EXPECT_NE(RunCommand(Strata() + " status " + dir).exit_code, 0);
  EXPECT_NE(RunCommand(Strata() + " report " + dir).exit_code, 0);
  EXPECT_NE(RunCommand(Strata() + " switch " + dir + " --wait-s 0").exit_code, 0);
  RunCommand("rm -rf " + dir);
}

}  // namespace
}  // namespace strata::testing
