// End to end: short `switch` jobs through `strata run`, then the run directory
// (docs/user-guide.md, "The run directory"), with each switch rule the user can pick.
#include <cmath>
#include <map>
#include <sstream>
#include <utility>
#include <vector>

#include <absl/strings/str_cat.h>
#include <gtest/gtest.h>

#include "tests/integration/orchestrator/cli_test_util.h"
#include "tests/integration/orchestrator/run_observer.h"

namespace strata::testing {
namespace {

// The run's switch_decided and switch_done events (null where there is none).
std::pair<nlohmann::json, nlohmann::json> SwitchEvents(const std::string& run_dir) {
  nlohmann::json decided, done;
  for (const auto& e : ReadLines(run_dir + "/events.jsonl")) {
    if (e["event"] == "switch_decided") decided = e;
    if (e["event"] == "switch_done") done = e;
  }
  return {decided, done};
}

// The handover is graded by a witness, not by the run's own verdict: the test pulls the server's
// tensors itself (worker -1, as the evaluator does) and compares them, in its own loop, with the
// checkpoint worker 0 wrote at the switch step. Two things make that comparison exact at any time
// after the switch: the servers apply pushes at ps_lr_scale 1e-30 (a change far below half a
// float's spacing, so every weight keeps its loaded bits), and the evaluator is held still
// (SIGSTOP) from the start, so the run cannot end, and its servers go, before the test has looked.
// Seen to fail: with PartitionStore::Load made to add 1e-3 to the first weight it installs, the
// observer reported "ps-0 fc1.weight: bytes differ from byte 0" (and the run itself failed its
// handover check: switch_failed, exit 1).
// It also checks "live, without restarting anything": the same processes, by pid, before and after
// the switch, and no restart in events.jsonl.
TEST(EndToEnd, ShortSwitchJobWritesTheWholeRunDirectory) {
  RunFixture f(R"(name: e2e-switch
dataset: { name: fashion-mnist, path: /usr/share/datasets/fashion-mnist, max_train: 6000, max_test: 1000 }
model: { arch: mlp }
training: { epochs: 4, batch_size: 32, lr: 0.05, momentum: 0.9, seed: 1 }
cluster: { workers: 2, parameter_servers: 1 }
sharding: { method: stratified }
strategy: { kind: switch, rule: at_fraction, at_fraction: 0.5, ps_lr_scale: 1e-30 }
)");
  const std::string& run_dir = f.run_dir;
  ASSERT_TRUE(AwaitEvent(run_dir, *f.run, "training_started").is_object()) << f.run->Output();
  std::vector<RunProcess> before;
  ASSERT_TRUE(Eventually(
      [&] {
        before = RunProcesses(run_dir);
        return before.size() == 4u;
      },
      std::chrono::seconds(60)));
  std::optional<RunProcess> evaluator = RunProcessNamed(run_dir, "evaluator");
  ASSERT_TRUE(evaluator.has_value());
  HeldProcess held(evaluator->pid);
  ASSERT_TRUE(held.held());

  const nlohmann::json switched = AwaitEvent(run_dir, *f.run, "switch_done");
  ASSERT_TRUE(switched.is_object()) << f.run->Output() << Slurp(run_dir + "/events.jsonl");
  ASSERT_TRUE(JoinRunAsObserver(run_dir).ok());
  const std::vector<std::string> differences =
      ServersAgainstCheckpoint(run_dir, 1, switched["checkpoint"].get<std::string>());
  EXPECT_TRUE(differences.empty()) << ::testing::PrintToString(differences);
  const std::vector<RunProcess> after = RunProcesses(run_dir);
  ASSERT_EQ(after.size(), before.size());
  for (size_t i = 0; i < before.size(); ++i) {
    EXPECT_EQ(after[i].name, before[i].name);
    EXPECT_EQ(after[i].pid, before[i].pid) << before[i].name << " was restarted by the switch";
    EXPECT_FALSE(ProcessEnded(after[i].pid)) << after[i].name;
  }
  held.Release();

  ASSERT_EQ(f.run->Wait(std::chrono::seconds(600)), 0) << f.run->Output();
  const std::string output = f.run->Output();
  EXPECT_NE(output.find("switched to parameter servers"), std::string::npos) << output;
  EXPECT_TRUE(f.Events("restart").empty()) << Slurp(run_dir + "/events.jsonl");

  // The resolved spec, the shard plan, the logs, the handover checkpoint.
  EXPECT_NE(Slurp(run_dir + "/job.yaml").find("name: e2e-switch"), std::string::npos);
  EXPECT_TRUE(Exists(run_dir + "/shards/manifest.json"));
  EXPECT_TRUE(Exists(run_dir + "/shards/shard-0.idx"));
  EXPECT_TRUE(Exists(run_dir + "/shards/shard-1.idx"));
  for (const char* log : {"sharder", "ps-0", "worker-0", "worker-1", "evaluator"}) {
    EXPECT_TRUE(Exists(run_dir + "/logs/" + log + ".log")) << log;
  }
  // Local processes share a host: after the switch the tensors go through shared memory.
  for (const char* log : {"worker-0", "worker-1"}) {
    EXPECT_NE(Slurp(run_dir + "/logs/" + log + ".log").find("tensors move through shared memory"),
              std::string::npos)
        << log;
  }

  // events.jsonl: the switch decided by the rule and done, with the servers holding the last
  // all-reduce model (compared tensor by tensor before any worker pushed).
  auto [decided, done] = SwitchEvents(run_dir);
  ASSERT_TRUE(decided.is_object()) << Slurp(run_dir + "/events.jsonl");
  EXPECT_EQ(decided["trigger"], "at_fraction");
  EXPECT_EQ(decided["switch_epoch"], 2);
  ASSERT_TRUE(done.is_object()) << Slurp(run_dir + "/events.jsonl");
  // The switch is requested at the end of epoch 2 or, when the orchestrator saw the workers'
  // steps late (a loaded machine), where they are by then: never earlier. The workers switch at
  // the requested step, or a few steps on where the request reached one of them late (they
  // agree on the step by a vote). (An upper bound on the epoch was a timing threshold: a full
  // suite once switched this job of 5 ms steps a whole epoch late.)
  const double switch_epoch = done["epoch"].get<double>();
  EXPECT_GE(switch_epoch, 2.0) << done.dump(2);
  EXPECT_GE(done["at_step"].get<int64_t>(), done["requested_at_step"].get<int64_t>());
  EXPECT_LE(done["at_step"].get<int64_t>(), done["requested_at_step"].get<int64_t>() + 5)
      << done.dump(2);
  EXPECT_GT(done["handover_s"].get<double>(), 0.0);
  EXPECT_EQ(done["verification"]["weights_equal"], true) << done.dump(2);
  EXPECT_GT(done["verification"]["tensors_compared"].get<int>(), 0);
  EXPECT_EQ(ReadJson(run_dir + "/summary.json")["handover_check"], done["verification"]);
  EXPECT_TRUE(Exists(done["checkpoint"].get<std::string>()));

  // metrics.jsonl: one line per evaluation, ending with the last epoch trained on the servers.
  std::vector<nlohmann::json> metrics = ReadLines(run_dir + "/metrics.jsonl");
  ASSERT_GE(metrics.size(), 2u);
  EXPECT_EQ(metrics.back()["epoch"], 4);
  EXPECT_EQ(metrics.back()["phase"], "ps");
  for (const auto& m : metrics) {
    for (const char* key : {"epoch", "phase", "val_loss", "val_acc", "train_loss", "wall_s"}) {
      EXPECT_TRUE(m.contains(key)) << key << " missing in " << m.dump();
    }
    if (m["epoch"].get<int>() <= 2) {
      EXPECT_EQ(m["phase"], "allreduce") << m.dump();
    }
  }

  nlohmann::json summary = ReadJson(run_dir + "/summary.json");
  ASSERT_TRUE(summary.is_object());
  EXPECT_EQ(summary["state"], "succeeded");
  EXPECT_EQ(summary["epochs"], 4);
  EXPECT_GT(summary["final_val_acc"].get<double>(), 0.5);  // far above chance (0.1) after 4 epochs
  EXPECT_TRUE(summary["final_val_loss"].is_number());
  EXPECT_TRUE(summary["wall_s"].is_number());
  EXPECT_EQ(summary["switch_epoch"].get<double>(), switch_epoch);
  EXPECT_TRUE(summary["switch_handover_s"].is_number());
  EXPECT_TRUE(summary["samples_per_s"]["allreduce"].is_number());
  EXPECT_TRUE(summary["samples_per_s"]["ps"].is_number());
  ASSERT_EQ(summary["processes"].size(), 4u) << summary.dump(2);
  for (const auto& p : summary["processes"]) {
    EXPECT_TRUE(ProcessEnded(p["pid"].get<int>())) << p.dump();
  }

  const std::string report = Slurp(run_dir + "/report.html");
  EXPECT_NE(report.find("<svg"), std::string::npos);
  EXPECT_NE(report.find("switch-marker"), std::string::npos);
  EXPECT_NE(report.find("Validation accuracy against wall time"), std::string::npos);
  EXPECT_NE(report.find("Switched to parameter servers at epoch"), std::string::npos);

  CommandResult status = RunCommand(Strata() + " status " + run_dir);
  EXPECT_EQ(status.exit_code, 0);
  EXPECT_NE(status.output.find("state:     succeeded"), std::string::npos) << status.output;
}

// The empirical rule recomputed from the run's own record: the validation losses of the
// all-reduce phase as metrics.jsonl holds them, and s after each (the mean of the last `window`
// relative changes, in percent). `fired` is the epoch of the first s below the threshold (0: none).
struct RuleReplay {
  std::vector<double> losses;
  std::vector<int> epochs;
  int window = 0;
  double s_after(size_t k) const {
    double sum = 0;
    for (size_t j = 0; j < static_cast<size_t>(window); ++j) {
      sum += std::fabs(losses[k - 1 - j] - losses[k - 2 - j]) / losses[k - 2 - j];
    }
    return 100.0 * sum / window;
  }
  size_t k_fired = 0;  // how many losses the rule had seen when it fired
  int fired = 0;
};

RuleReplay ReplayEmpiricalRule(const std::string& run_dir, int window, double threshold_percent) {
  RuleReplay r;
  r.window = window;
  // On a loaded machine an evaluation may cover two epochs: the rule then sees the losses there
  // are.
  for (const auto& m : ReadLines(run_dir + "/metrics.jsonl")) {
    if (m["phase"] != "allreduce") break;
    r.losses.push_back(m["val_loss"].get<double>());
    r.epochs.push_back(m["epoch"].get<int>());
  }
  for (size_t k = window + 1; k <= r.losses.size() && r.k_fired == 0; ++k) {
    if (r.s_after(k) < threshold_percent) r.k_fired = k;
  }
  if (r.k_fired > 0) r.fired = r.epochs[r.k_fired - 1];
  return r;
}

// The quickstart's own rule, end to end: the orchestrator must switch after the first epoch at
// which the thesis's s, recomputed here from the validation losses the run recorded, falls below
// the threshold, and not before.
TEST(EndToEnd, EmpiricalRuleSwitchesAtTheFirstEpochWhoseLossesHavePlateaued) {
  constexpr int kWindow = 2;
  // A learning rate small enough that the validation loss falls smoothly: at 0.05 it jumped by
  // 20-30% between epochs on one CI machine, the rule first fired at epoch 7 of 8 and the switch
  // was (rightly) skipped as too late. With ten epochs the decision has room to take effect.
  constexpr double kThresholdPercent = 15.0;
  const std::string dir = MakeTempDir("e2e-empirical");
  const std::string run_dir = dir + "/run";
  std::ostringstream strategy;
  strategy << "strategy: { kind: switch, rule: empirical, window: " << kWindow
           << ", threshold_percent: " << kThresholdPercent << " }\n";
  WriteText(dir + "/job.yaml", R"(name: e2e-empirical
dataset: { name: fashion-mnist, path: /usr/share/datasets/fashion-mnist, max_train: 6000, max_test: 1000 }
model: { arch: mlp }
training: { epochs: 10, batch_size: 32, lr: 0.01, momentum: 0.9, seed: 1 }
cluster: { workers: 2, parameter_servers: 1 }
sharding: { method: stratified }
)" + strategy.str());
  CommandResult r = RunCommand(Strata() + " run " + dir + "/job.yaml --out " + run_dir);
  ASSERT_EQ(r.exit_code, 0) << r.output;

  const RuleReplay rule = ReplayEmpiricalRule(run_dir, kWindow, kThresholdPercent);
  ASSERT_GT(rule.k_fired, 0u) << "the losses never plateaued below the threshold: "
                              << Slurp(run_dir + "/metrics.jsonl") << r.output;

  auto [decided, done] = SwitchEvents(run_dir);
  ASSERT_TRUE(decided.is_object()) << Slurp(run_dir + "/events.jsonl");
  EXPECT_EQ(decided["trigger"], "empirical");
  EXPECT_EQ(decided["epoch"].get<int>(), rule.fired) << decided.dump(2);
  EXPECT_NEAR(decided["s_percent"].get<double>(), rule.s_after(rule.k_fired), 1e-9);
  ASSERT_TRUE(done.is_object()) << Slurp(run_dir + "/events.jsonl");
  EXPECT_GE(done["epoch"].get<double>(), static_cast<double>(rule.fired)) << done.dump(2);
  EXPECT_NE(r.output.find("switched to parameter servers"), std::string::npos) << r.output;
  nlohmann::json summary = ReadJson(run_dir + "/summary.json");
  EXPECT_EQ(summary["state"], "succeeded");
  RunCommand("rm -rf " + dir);
}

// configs/quickstart.yaml as shipped, the README's first command, without Docker: 30,000
// Fashion-MNIST examples, the empirical rule with window 5 and threshold 1 %. The switch must come
// from that rule at the epoch the test finds by replaying it on the recorded losses, the accuracy
// must be what the README promises, and no process may outlive the run.
TEST(EndToEnd, TheQuickstartJobAsShippedSwitchesByItsRuleAndEndsEveryProcess) {
  const std::string dir = MakeTempDir("e2e-quickstart");
  const std::string run_dir = dir + "/run";
  const std::string config = std::string(STRATA_TEST_SOURCE_DIR) + "/configs/quickstart.yaml";
  const std::string shipped = Slurp(config);
  ASSERT_NE(shipped.find("rule: empirical"), std::string::npos) << shipped;
  CommandResult r = RunCommand(Strata() + " run " + config + " --out " + run_dir);
  ASSERT_EQ(r.exit_code, 0) << r.output;

  auto [decided, done] = SwitchEvents(run_dir);
  ASSERT_TRUE(decided.is_object()) << Slurp(run_dir + "/events.jsonl");
  EXPECT_EQ(decided["trigger"], "empirical") << decided.dump(2);
  EXPECT_EQ(decided["window"], 5) << decided.dump(2);
  EXPECT_EQ(decided["threshold_percent"], 1.0) << decided.dump(2);
  const RuleReplay rule = ReplayEmpiricalRule(run_dir, 5, 1.0);
  ASSERT_GT(rule.k_fired, 0u) << Slurp(run_dir + "/metrics.jsonl");
  EXPECT_EQ(decided["epoch"].get<int>(), rule.fired) << decided.dump(2);
  EXPECT_NEAR(decided["s_percent"].get<double>(), rule.s_after(rule.k_fired), 1e-9);
  ASSERT_TRUE(done.is_object()) << Slurp(run_dir + "/events.jsonl");
  EXPECT_EQ(done["verification"]["weights_equal"], true) << done.dump(2);

  nlohmann::json summary = ReadJson(run_dir + "/summary.json");
  ASSERT_TRUE(summary.is_object()) << r.output;
  EXPECT_EQ(summary["state"], "succeeded");
  EXPECT_EQ(summary["epochs"], 20);
  // The README's run ended at 0.8847; the compose test of the same job asks for 0.85 too.
  EXPECT_GE(summary["final_val_acc"].get<double>(), 0.85) << summary.dump(2);
  ASSERT_EQ(summary["processes"].size(), 4u) << summary.dump(2);
  for (const auto& p : summary["processes"]) {
    EXPECT_TRUE(ProcessEnded(p["pid"].get<int>())) << p.dump() << " outlived the run";
  }
  RunCommand("rm -rf " + dir);
}

// An all-reduce epoch is scored on the model of that epoch's last step, which the worker keeps
// (ModelRequest.epoch), not on wherever training has got to when the evaluator's request
// arrives: so the validation losses, which the switch rule reads, do not depend on timing. The
// witness is a second run of the same job: its processes start, step and get asked at other
// moments, yet every epoch both runs evaluated has the same loss to the bit. Seen to fail: with
// the evaluator asking for the live model (epoch 0), the two runs' losses differed from epoch 1
// on. (On CI's faster machine the quickstart job's losses, scored on a model some steps into
// the next epoch, once kept the rule from firing at all.)
TEST(EndToEnd, AnAllReduceEpochIsScoredOnItsOwnModelWhateverTheTiming) {
  const std::string dir = MakeTempDir("e2e-epoch-model");
  WriteText(dir + "/job.yaml", R"(name: e2e-epoch-model
dataset: { name: fashion-mnist, path: /usr/share/datasets/fashion-mnist, max_train: 6000, max_test: 1000 }
model: { arch: mlp }
training: { epochs: 4, batch_size: 32, lr: 0.05, momentum: 0.9, seed: 1 }
cluster: { workers: 2 }
strategy: { kind: allreduce }
)");
  std::vector<std::map<int, double>> losses(2);
  for (int run = 0; run < 2; ++run) {
    const std::string run_dir = absl::StrCat(dir, "/run", run);
    CommandResult r = RunCommand(Strata() + " run " + dir + "/job.yaml --out " + run_dir);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    for (const auto& m : ReadLines(run_dir + "/metrics.jsonl")) {
      if (!m.contains("val_loss")) continue;
      EXPECT_EQ(m["source"].get<std::string>().find("live model"), std::string::npos) << m.dump();
      losses[run][m["epoch"].get<int>()] = m["val_loss"].get<double>();
    }
  }
  // An epoch may go unscored when its evaluation starts late (the scheduler takes the newest);
  // the last is always scored.
  int common = 0;
  for (const auto& [epoch, loss] : losses[0]) {
    if (losses[1].count(epoch) == 0) continue;
    ++common;
    EXPECT_EQ(loss, losses[1][epoch]) << "epoch " << epoch;
  }
  EXPECT_GE(common, 2);
  EXPECT_EQ(losses[0].count(4), 1u);
  RunCommand("rm -rf " + dir);
}

}  // namespace
}  // namespace strata::testing
