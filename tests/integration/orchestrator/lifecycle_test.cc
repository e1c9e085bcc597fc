// Every way a run can be stopped, with the real binaries: SIGTERM and SIGHUP to `strata run`, and
// SIGINT to its process group (a terminal's Ctrl-C); SIGKILL of `strata` while the sharder runs
// and in the middle of a switch, each then taken up by `strata resume`; the evaluator killed
// mid-run; a parameter server killed with recovery.restarts 0. The test reaches "while sharding"
// and "mid-switch" through the run's own record (events.jsonl), polled, never through a sleep.
// Every "no process outlived the run" check first asserts that there were processes to look at.
#include <signal.h>

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/integration/orchestrator/cli_test_util.h"

namespace strata::testing {
namespace {

using std::chrono::seconds;

// 60 passes over 2000 examples with the ring's and the servers' checkpoints every 0.5 s.
std::string LifecycleJob(const std::string& strategy, const std::string& more = "") {
  return SmallLongJob("lifecycle", strategy,
                      "recovery: { ring_checkpoint_s: 0.5, server_checkpoint_s: 0.5 }\n" + more);
}

// Polls events.jsonl every 5 ms (the phases it waits for last a second or more) until `until`
// holds for the events so far; false if the run ended first or the deadline passed.
template <typename F>
bool AwaitEvents(RunFixture& f, F until, seconds timeout = seconds(300)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (until(ReadLines(f.run_dir + "/events.jsonl"))) return true;
    if (f.run->Wait(seconds(0)) >= 0) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // polling, not waiting for it
  }
  return false;
}

bool Has(const std::vector<nlohmann::json>& events, const std::string& name) {
  for (const auto& e : events) {
    if (e.value("event", "") == name) return true;
  }
  return false;
}

void ExpectAllEnded(const std::vector<int>& pids) {
  ASSERT_FALSE(pids.empty()) << "no process to check";
  for (int p : pids) {
    EXPECT_TRUE(Eventually([&] { return ProcessEnded(p); }, seconds(60)))
        << "pid " << p << " outlived the run";
  }
}

// `strata resume` of the run: it must succeed, once, and leave no process.
nlohmann::json ResumeToTheEnd(RunFixture& f) {
  BackgroundRun resumed({"resume", f.run_dir}, f.dir + "/resume.txt");
  EXPECT_EQ(resumed.Wait(seconds(600)), 0) << resumed.Output();
  nlohmann::json summary = ReadJson(f.run_dir + "/summary.json");
  EXPECT_TRUE(summary.is_object()) << resumed.Output();
  if (!summary.is_object()) return summary;
  EXPECT_EQ(summary["state"], "succeeded") << summary.dump(2);
  EXPECT_EQ(summary["resumes"], 1) << summary.dump(2);
  std::vector<int> pids;
  for (const auto& p : summary["processes"]) pids.push_back(p.value("pid", 0));
  ExpectAllEnded(pids);
  return summary;
}

struct Interruption {
  const char* name;
  int signal;
  bool to_group;      // the whole process group, as a terminal's Ctrl-C
  const char* words;  // how the run names it
};

class InterruptedRun : public ::testing::TestWithParam<Interruption> {};

// Seen to fail: with SIGHUP left out of the orchestrator's interrupt handlers, the SIGHUP case
// ended with exit 129 (killed by the signal), summary.json missing and the services left to
// PR_SET_PDEATHSIG.
TEST_P(InterruptedRun, EndsEveryProcessIsRecordedAsInterruptedAndResumeTakesItUp) {
  const Interruption how = GetParam();
  RunFixture f(LifecycleJob("{ kind: allreduce }"));
  ASSERT_TRUE(f.WaitForTraining(40)) << f.run->Output();
  const std::vector<int> pids = f.AllPids();
  ASSERT_EQ(pids.size(), 3u);  // two workers and the evaluator
  ASSERT_EQ(::kill(how.to_group ? -f.run->pid() : f.run->pid(), how.signal), 0);

  EXPECT_EQ(f.run->Wait(seconds(120)), 130) << f.run->Output();
  ExpectAllEnded(pids);
  nlohmann::json summary = ReadJson(f.run_dir + "/summary.json");
  ASSERT_TRUE(summary.is_object()) << f.run->Output();
  EXPECT_EQ(summary["state"], "interrupted");
  EXPECT_NE(summary["error"].get<std::string>().find(how.words), std::string::npos)
      << summary.dump(2);
  auto failed = f.Events("run_failed");
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_EQ(failed[0]["state"], "interrupted");

  ResumeToTheEnd(f);
  EXPECT_EQ(f.Events("resumed").size(), 1u);
}

INSTANTIATE_TEST_SUITE_P(Signals, InterruptedRun,
                         ::testing::Values(Interruption{"SIGTERM", SIGTERM, false, "Terminated"},
                                           Interruption{"CtrlC", SIGINT, true, "SIGINT (Ctrl-C)"},
                                           Interruption{"SIGHUP", SIGHUP, false, "Hangup"}),
                         [](const ::testing::TestParamInfo<Interruption>& info) {
                           return info.param.name;
                         });

// The orchestrator dies while the sharder writes the plan: the sharder dies with it and leaves no
// plan, and `strata resume` shards again before it starts anything. (Seen to fail before
// RunDriver::ShardData took this case: the resumed run stopped at once, "strata resume: failed:
// cannot open .../shards/shard-0.idx: No such file or directory".)
// The at_fraction switch lands on its target step however late the orchestrator decides: with
// `strata run` stopped (SIGSTOP) from the start of training, both workers hold before the step
// the rule switches after (epoch 2 of 4, 63 steps an epoch: step 126) instead of training on;
// released, the orchestrator asks for that step and the run switches there. Broken on purpose:
// without the hold the workers trained all 252 steps while the orchestrator was stopped, no
// worker logged the hold, and the released orchestrator asked for step 846: the switch was
// skipped and every check below failed. (Seen in a suite run before the
// hold: a decision one 100 ms tick late asked for step 195 of a 189-step run, and the switch was
// skipped.)
TEST(Lifecycle, AnAtFractionSwitchLandsOnItsTargetHoweverLateTheOrchestrator) {
  RunFixture f(R"(name: at-fraction-hold
dataset: { name: fashion-mnist, path: /usr/share/datasets/fashion-mnist, max_train: 2000, max_test: 200 }
model: { arch: mlp }
training: { epochs: 4, batch_size: 32, lr: 0.02, momentum: 0.9, seed: 1 }
cluster: { workers: 2, parameter_servers: 1 }
sharding: { method: stratified }
strategy: { kind: switch, rule: at_fraction, at_fraction: 0.5 }
)");
  ASSERT_TRUE(AwaitEvents(f, [](const auto& e) { return Has(e, "training_started"); }))
      << f.run->Output();
  ASSERT_EQ(::kill(f.run->pid(), SIGSTOP), 0);
  struct Resume {
    int pid;
    ~Resume() { ::kill(pid, SIGCONT); }
  } resume{f.run->pid()};
  const bool held = Eventually(
      [&] {
        for (const char* w : {"worker-0", "worker-1"}) {
          const std::string log = Slurp(f.run_dir + "/logs/" + w + ".log");
          if (log.find("holding before step 126") == std::string::npos) return false;
        }
        return true;
      },
      seconds(120));
  ::kill(f.run->pid(), SIGCONT);
  EXPECT_TRUE(held) << Slurp(f.run_dir + "/logs/worker-0.log");
  ASSERT_EQ(f.run->Wait(seconds(600)), 0) << f.run->Output();
  const nlohmann::json summary = ReadJson(f.run_dir + "/summary.json");
  EXPECT_EQ(summary["switch_step"], 126) << summary.dump(2);
  EXPECT_EQ(summary["switch_epoch"], 2) << summary.dump(2);
  for (const auto& e : ReadLines(f.run_dir + "/events.jsonl")) {
    if (e.value("event", "") == "switch_decided") {
      EXPECT_EQ(e["at_step"], 126) << e.dump();
    }
    EXPECT_NE(e.value("event", ""), "switch_skipped") << e.dump();
  }
}

TEST(Lifecycle, KilledWhileShardingThenResumedShardsAgainAndTrains) {
  // The whole training set, split by k-means: the sharder runs for a second or more.
  RunFixture f(R"(name: lifecycle-sharding
dataset: { name: fashion-mnist, path: /usr/share/datasets/fashion-mnist }
model: { arch: mlp }
training: { epochs: 1, batch_size: 128, lr: 0.05, momentum: 0.9, seed: 1 }
cluster: { workers: 2 }
sharding: { method: distribution-aware }
strategy: { kind: allreduce }
)");
  int sharder = 0;
  ASSERT_TRUE(AwaitEvents(f, [&](const std::vector<nlohmann::json>& events) {
    for (const auto& e : events) {
      if (e.value("event", "") == "launched" && e.value("process", "") == "sharder") {
        sharder = e.value("pid", 0);
      }
    }
    return sharder > 0;
  })) << f.run->Output();
  ASSERT_EQ(::kill(f.run->pid(), SIGKILL), 0);
  EXPECT_EQ(f.run->Wait(seconds(60)), 128 + SIGKILL);
  ExpectAllEnded({sharder});
  // It was mid-sharding: no plan was published, no service started.
  ASSERT_FALSE(Exists(f.run_dir + "/shards/manifest.json")) << "the sharder had finished";
  EXPECT_FALSE(Has(ReadLines(f.run_dir + "/events.jsonl"), "shards_written"));

  ResumeToTheEnd(f);
  EXPECT_TRUE(Exists(f.run_dir + "/shards/manifest.json"));
  EXPECT_EQ(f.Events("shards_written").size(), 1u);
}

// The orchestrator dies between the switch's decision and its end: the resumed run goes on in
// all-reduce (the servers' half-made saves are removed) and switches again, once.
TEST(Lifecycle, KilledMidSwitchThenResumedSwitchesAgainOnce) {
  RunFixture f(LifecycleJob("{ kind: switch, rule: at_fraction, at_fraction: 0.5 }"));
  ASSERT_TRUE(AwaitEvents(f, [](const std::vector<nlohmann::json>& events) {
    return Has(events, "switch_decided");
  })) << f.run->Output();
  const std::vector<int> pids = f.AllPids();
  ASSERT_EQ(::kill(f.run->pid(), SIGKILL), 0);
  EXPECT_EQ(f.run->Wait(seconds(60)), 128 + SIGKILL);
  ExpectAllEnded(pids);
  // The decision came at least 0.3 s of steps before the switch step (SwitchPolicy's lead).
  ASSERT_FALSE(Has(ReadLines(f.run_dir + "/events.jsonl"), "switch_done"))
      << "the switch was over before the kill";

  nlohmann::json summary = ResumeToTheEnd(f);
  auto resumed = f.Events("resumed");
  ASSERT_EQ(resumed.size(), 1u);
  EXPECT_EQ(resumed[0]["phase"], "allreduce");
  EXPECT_EQ(f.Events("switch_decided").size(), 2u);
  ASSERT_EQ(f.Events("switch_done").size(), 1u);
  EXPECT_EQ(f.Events("switch_done")[0]["verification"]["weights_equal"], true);
  EXPECT_TRUE(summary["switch_step"].is_number()) << summary.dump(2);
}

// The evaluator is not restarted: the run ends at once, naming it.
TEST(Lifecycle, TheEvaluatorKilledMidRunEndsTheRunNamingIt) {
  RunFixture f(LifecycleJob("{ kind: allreduce }"));
  ASSERT_TRUE(f.WaitForTraining(40)) << f.run->Output();
  const std::vector<int> pids = f.AllPids();
  ASSERT_EQ(pids.size(), 3u);
  ASSERT_EQ(::kill(f.PidOf("evaluator"), SIGKILL), 0);
  EXPECT_EQ(f.run->Wait(seconds(120)), 1) << f.run->Output();
  ExpectAllEnded(pids);
  nlohmann::json summary = ReadJson(f.run_dir + "/summary.json");
  ASSERT_TRUE(summary.is_object());
  EXPECT_EQ(summary["state"], "failed");
  EXPECT_EQ(summary["failed_process"], "evaluator") << summary.dump(2);
  EXPECT_NE(summary["error"].get<std::string>().find("signal 9"), std::string::npos)
      << summary.dump(2);
  EXPECT_TRUE(f.Events("restart").empty());
}

TEST(Lifecycle, AParameterServerKilledWithoutRestartsEndsTheRunNamingIt) {
  RunFixture f(SmallLongJob("lifecycle", "{ kind: ps }", "recovery: { restarts: 0 }\n"));
  ASSERT_TRUE(f.WaitForTraining(40)) << f.run->Output();
  const std::vector<int> pids = f.AllPids();
  ASSERT_EQ(pids.size(), 4u);
  ASSERT_EQ(::kill(f.PidOf("ps-0"), SIGKILL), 0);
  EXPECT_EQ(f.run->Wait(seconds(120)), 1) << f.run->Output();
  ExpectAllEnded(pids);
  nlohmann::json summary = ReadJson(f.run_dir + "/summary.json");
  ASSERT_TRUE(summary.is_object());
  EXPECT_EQ(summary["state"], "failed");
  EXPECT_EQ(summary["failed_process"], "ps-0") << summary.dump(2);
  EXPECT_NE(summary["error"].get<std::string>().find("signal 9"), std::string::npos)
      << summary.dump(2);
  EXPECT_TRUE(f.Events("restart").empty());
}

}  // namespace
}  // namespace strata::testing
