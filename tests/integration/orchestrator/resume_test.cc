// `strata resume` with the real binaries: the orchestrator of a run is killed with SIGKILL (its
// services die with it), and `strata resume RUN_DIR` takes the run up from its checkpoints in
// the same directory. In all-reduce the run ends with the undisturbed run's model to the bit
// (worker 0's ring checkpoint holds weights, buffers and momentum; the data order depends only
// on the seed and the epoch); after the switch it goes on against the servers' own saves. Also
// the runs it refuses: one still running, one finished, a directory that holds no run.
#include <gtest/gtest.h>

#include "tests/integration/orchestrator/cli_test_util.h"

namespace strata::testing {
namespace {

// 60 passes over 2000 examples: long enough to be killed mid-run, with checkpoints every 0.5 s.
std::string ResumeJob(const std::string& strategy, const std::string& more = "") {
  return SmallLongJob("resume", strategy,
                      "recovery: { ring_checkpoint_s: 0.5, server_checkpoint_s: 0.5 }\n" + more);
}

// Kills the orchestrator and waits until every service it started has died with it.
void KillTheOrchestrator(RunFixture& f) {
  const std::vector<int> pids = f.AllPids();
  ASSERT_FALSE(pids.empty());
  ASSERT_EQ(::kill(f.run->pid(), SIGKILL), 0);
  ASSERT_EQ(f.run->Wait(std::chrono::seconds(60)), 128 + SIGKILL);
  for (int p : pids) {
    EXPECT_TRUE(Eventually([&] { return ProcessEnded(p); }, std::chrono::seconds(60)))
        << "pid " << p << " outlived its orchestrator";
  }
}

// Resumes the run and checks what every resumption must leave: success, the count, the record
// going on (one `resumed` event, wall_s never running back) and no process left behind.
nlohmann::json ResumeAndExpectSuccess(RunFixture& f) {
  BackgroundRun resumed({"resume", f.run_dir}, f.dir + "/resume.txt");
  const int code = resumed.Wait(std::chrono::seconds(600));
  const std::string output = resumed.Output();
  EXPECT_EQ(code, 0) << output;
  nlohmann::json summary = ReadJson(f.run_dir + "/summary.json");
  EXPECT_TRUE(summary.is_object()) << output;
  if (!summary.is_object()) return summary;
  EXPECT_EQ(summary["state"], "succeeded") << summary.dump(2);
  EXPECT_EQ(summary["resumes"], 1) << summary.dump(2);
  EXPECT_EQ(f.Events("resumed").size(), 1u);
  double last_wall = 0;
  for (const auto& e : ReadLines(f.run_dir + "/events.jsonl")) {
    if (!e.contains("wall_s") || !e["wall_s"].is_number()) continue;
    EXPECT_GE(e["wall_s"].get<double>(), last_wall) << e.dump();
    last_wall = e["wall_s"].get<double>();
  }
  for (const auto& p : summary["processes"]) {
    EXPECT_TRUE(ProcessEnded(p.value("pid", 0))) << p.dump() << " outlived the run";
  }
  return summary;
}

TEST(StrataResume, AnAllReduceRunWhoseOrchestratorWasKilledEndsWithTheUndisturbedModel) {
  const std::string job = ResumeJob("{ kind: allreduce }");
  std::string why;
  const std::optional<double> undisturbed_loss = UndisturbedFinalLoss(job, &why);
  ASSERT_TRUE(undisturbed_loss.has_value()) << why;
  RunFixture f(job);
  ASSERT_TRUE(f.WaitForTraining(100)) << f.run->Output();
  ASSERT_TRUE(Eventually([&] { return Exists(f.run_dir + "/checkpoints/ring.ckpt"); },
                         std::chrono::seconds(120)));
  // While the orchestrator lives, the run is its own.
  CommandResult early = RunCommand(Strata() + " resume " + f.run_dir);
  EXPECT_EQ(early.exit_code, 2) << early.output;
  EXPECT_NE(early.output.find("still running"), std::string::npos) << early.output;
  KillTheOrchestrator(f);

  nlohmann::json summary = ResumeAndExpectSuccess(f);
  auto resumed = f.Events("resumed");
  ASSERT_EQ(resumed.size(), 1u);
  EXPECT_EQ(resumed[0]["phase"], "allreduce");
  const int64_t step = resumed[0]["steps"][0].get<int64_t>();
  EXPECT_GE(step, 1) << resumed[0].dump();
  EXPECT_NE(Slurp(f.run_dir + "/logs/worker-1.log").find("resuming from"), std::string::npos);
  CommandResult status = RunCommand(Strata() + " status " + f.run_dir);
  EXPECT_EQ(status.exit_code, 0) << status.output;
  EXPECT_NE(status.output.find("resumed:   by strata resume, in allreduce at step " +
                               std::to_string(step) + " from "),
            std::string::npos)
      << status.output;
  // Evaluation goes on after the last epoch the killed run evaluated: no epoch twice.
  int64_t last_epoch = 0;
  for (const auto& m : ReadLines(f.run_dir + "/metrics.jsonl")) {
    EXPECT_GT(m["epoch"].get<int64_t>(), last_epoch) << m.dump();
    last_epoch = m["epoch"].get<int64_t>();
  }
  EXPECT_EQ(last_epoch, 60);
  EXPECT_EQ(summary["final_val_loss"].get<double>(), *undisturbed_loss) << summary.dump(2);
  for (const auto& w : summary["per_worker"]) EXPECT_EQ(w["steps"], 60 * 32) << w.dump();

  // Once finished, there is nothing to resume, and the record is left as it is.
  const std::string before = Slurp(f.run_dir + "/summary.json");
  CommandResult again = RunCommand(Strata() + " resume " + f.run_dir);
  EXPECT_EQ(again.exit_code, 2) << again.output;
  EXPECT_NE(again.output.find("the run finished"), std::string::npos) << again.output;
  EXPECT_EQ(Slurp(f.run_dir + "/summary.json"), before);
}

// With TLS on: the killed run's own certificates are still in its directory, and the resumed run
// makes new ones.
TEST(StrataResume, ASwitchJobKilledAfterItsSwitchGoesOnAgainstTheServersSaves) {
  RunFixture f(ResumeJob("{ kind: switch, rule: at_fraction, at_fraction: 0.1 }",
                         "security: { tls: on }\n"));
  ASSERT_TRUE(
      Eventually([&] { return !f.Events("switch_done").empty(); }, std::chrono::seconds(300)))
      << f.run->Output();
  ASSERT_TRUE(Eventually([&] { return Exists(f.run_dir + "/checkpoints/ps-0.ckpt"); },
                         std::chrono::seconds(120)));
  const int64_t switch_step = f.Events("switch_done")[0]["at_step"].get<int64_t>();
  KillTheOrchestrator(f);

  nlohmann::json summary = ResumeAndExpectSuccess(f);
  auto resumed = f.Events("resumed");
  ASSERT_EQ(resumed.size(), 1u);
  EXPECT_EQ(resumed[0]["phase"], "ps");
  // The switch stays where it was made, and is not made again.
  EXPECT_EQ(summary["switch_step"], switch_step) << summary.dump(2);
  EXPECT_EQ(f.Events("switch_done").size(), 1u);
  EXPECT_GT(summary["final_val_acc"].get<double>(), 0.5) << summary.dump(2);
  EXPECT_NE(Slurp(f.run_dir + "/logs/ps-0.log").find("resumed from this partition's last"),
            std::string::npos);
  EXPECT_FALSE(Exists(f.run_dir + "/tls")) << "the run's certificates outlived it";
}

TEST(StrataResume, ADirectoryThatHoldsNoRunIsRefusedWithExitCode2) {
  const std::string dir = MakeTempDir("resume-none");
  CommandResult r = RunCommand(Strata() + " resume " + dir);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("not a run directory"), std::string::npos) << r.output;
  RunCommand("rm -rf " + dir);
}

}  // namespace
}  // namespace strata::testing
