// The supervisor's single loop over a FakeClusterClient and a fake host: how training ends, how a
// failure elsewhere ends a switch under way, and how workers that fail or fall silent are named.
// The loop's tick is a millisecond, so each run takes a few passes of real time and no sleeps.
#include "orchestrator/run/run_supervisor.h"

#include <stdlib.h>

#include <functional>

#include <gtest/gtest.h>

#include "services/common/base/metrics.h"
#include "services/common/base/run_directory.h"
#include "tests/support/temp_dir_test.h"
#include "tests/unit/orchestrator/fake_cluster_client.h"

namespace strata {
namespace {

using std::chrono::milliseconds;
using testing::FakeClusterClient;

class FakeHost final : public SupervisorHost {
 public:
  explicit FakeHost(RunFailure& failure) : failure_(failure) {}
  absl::StatusOr<std::vector<ServiceExit>> CheckProcesses() override {
    ++checks;
    if (on_check) on_check();
    if (exit_at_check > 0 && checks == exit_at_check) {
      return std::vector<ServiceExit>{{"worker-1", ServiceRole::kWorker, "killed by signal 9",
                                       absl::AbortedError("worker-1 (pid 9) killed by signal 9")}};
    }
    return std::vector<ServiceExit>{};
  }
  bool TakeSwitchRequest() override { return std::exchange(switch_requested, false); }
  void ShowProgress(const ClusterView&, Clock::time_point) override { ++progress_shown; }
  void RecordStatus(Clock::time_point, bool) override {
    ++statuses_recorded;
    if (on_record) on_record();
  }
  void StopAll() override { ++stops; }

  int checks = 0;
  int exit_at_check = 0;  // 0: nothing exits
  bool switch_requested = false;
  int progress_shown = 0;
  int stops = 0;
  int statuses_recorded = 0;
  std::function<void()> on_record;
  std::function<void()> on_check;  // on every pass

 private:
  RunFailure& failure_;
};

class NoSwitchEvents final : public SwitchEvents {
 public:
  void SwitchDecided(const SwitchDecidedEvent&) override { ++decided; }
  void SwitchSkipped(const SwitchSkippedEvent&) override {}
  void SwitchFailed(const SwitchFailedEvent& e) override { failed.push_back(e); }
  void SwitchDone(const SwitchDoneEvent&) override {}
  int decided = 0;
  std::vector<SwitchFailedEvent> failed;
};

class RunSupervisorTest : public testing::TempDirTest {
 protected:
  RunSupervisorTest()
      : testing::TempDirTest("run-supervisor"), client_(2, 1), console_(true), host_(failure_) {
    dir_ = temp_dir();
    record_ = *RunRecord::Open(dir_, Clock::now());
    view_.planned_steps_per_epoch = 100;
    view_.worker_batch = 32;
    view_.epochs = 4;
    phase_.name = "allreduce";
    for (auto& s : client_.statuses) {
      s.set_step(150);
      s.set_steps_per_epoch(100);
      s.set_samples_per_s(3200);
    }
    client_.answer_evaluations = true;
    EvalSchedulerOptions e;
    e.epochs = 4;
    e.worker_address = "127.0.0.1:1";
    eval_ = std::make_unique<EvalScheduler>(e, client_, *record_, console_, phase_);
    options_.worker_addresses = {"127.0.0.1:1", "127.0.0.1:2"};
    options_.tick = milliseconds(1);
  }

  void SwitchJob() {
    strategy_.set_kind(v1::STRATEGY_KIND_SWITCH);
    strategy_.set_rule(v1::SWITCH_RULE_EMPIRICAL);
    options_.switch_job = true;
    SwitchControllerOptions o;
    o.server_addresses = {"127.0.0.1:9"};
    o.checkpoint_dir = dir_;
    switcher_ = std::make_unique<SwitchController>(o, client_, switch_events_, failure_);
  }

  absl::Status Run() {
    policy_ = std::make_unique<SwitchPolicy>(strategy_, 4, record_.get());
    RunSupervisor supervisor(options_, {client_, *record_, failure_, host_, view_, phase_, *eval_,
                                        *policy_, switcher_.get()});
    return supervisor.Run();
  }

  std::vector<std::string> EventNames() {
    std::vector<std::string> names;
    auto lines = ReadJsonLines(RunPaths(dir_).events);
    EXPECT_TRUE(lines.ok()) << lines.status();
    if (!lines.ok()) return names;
    for (const auto& e : *lines) names.push_back(e["event"]);
    return names;
  }

  std::string dir_;
  FakeClusterClient client_;
  RunConsole console_;
  RunFailure failure_;
  FakeHost host_;
  NoSwitchEvents switch_events_;
  std::unique_ptr<RunRecord> record_;
  ClusterView view_;
  RunPhase phase_;
  v1::ResolvedStrategy strategy_;
  SupervisorOptions options_;
  std::unique_ptr<EvalScheduler> eval_;
  std::unique_ptr<SwitchPolicy> policy_;
  std::unique_ptr<SwitchController> switcher_;
};

TEST_F(RunSupervisorTest, FinishedWorkersEndTrainingThenTheFinalEvaluationEndsTheRun) {
  for (auto& s : client_.statuses) s.set_step(400), s.set_finished(true);
  ASSERT_TRUE(Run().ok()) << failure_.status();
  ASSERT_EQ(client_.eval_requests.size(), 1u);
  EXPECT_EQ(client_.eval_requests[0].epoch(), 4);
  EXPECT_TRUE(eval_->have_final());
  EXPECT_GT(host_.progress_shown, 0);
  EXPECT_EQ(EventNames(), std::vector<std::string>{"training_finished"});
}

// A final evaluation can take minutes; status.json and the metrics must not stand still for them
// (seen in CI: a restart just before training ended never reached Prometheus). Broken on purpose
// once: RecordStatus called only before training ended left the count during the evaluation at 0.
TEST_F(RunSupervisorTest, StatusIsRecordedWhileTheFinalEvaluationRuns) {
  client_.answer_evaluations = false;
  for (auto& s : client_.statuses) s.set_step(400), s.set_finished(true);
  int during_evaluation = 0;
  host_.on_record = [&] {
    if (client_.eval_calls.empty()) return;
    if (++during_evaluation == 5) {
      v1::EvalMetrics m;
      m.set_epoch(4);
      client_.eval_calls.back()->Answer(m);
    }
  };
  // A bound for when no status comes: the evaluation is answered after 2,000 passes anyway.
  host_.on_check = [&] {
    if (host_.checks == 2000 && !client_.eval_calls.empty()) {
      v1::EvalMetrics m;
      m.set_epoch(4);
      client_.eval_calls.back()->Answer(m);
    }
  };
  ASSERT_TRUE(Run().ok()) << failure_.status();
  EXPECT_TRUE(eval_->have_final());
  EXPECT_GE(during_evaluation, 5);
}

TEST_F(RunSupervisorTest, ASwitchRequestInARunWithoutServersIsIgnoredAndSaysWhy) {
  strategy_.set_kind(v1::STRATEGY_KIND_ALLREDUCE);
  host_.switch_requested = true;
  for (auto& s : client_.statuses) s.set_step(400), s.set_finished(true);
  ASSERT_TRUE(Run().ok());
  const std::vector<std::string> names = EventNames();
  ASSERT_FALSE(names.empty());
  EXPECT_EQ(names.front(), "switch_request_ignored");
}

TEST_F(RunSupervisorTest, AProcessExitDuringTheSwitchFailsItWithdrawsItAndStopsEverything) {
  SwitchJob();
  host_.switch_requested = true;
  host_.exit_at_check = 5;  // worker 0 never reports the pause: the switch is still waiting
  absl::Status s = Run();
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(switch_events_.decided, 1);
  ASSERT_EQ(switch_events_.failed.size(), 1u);
  EXPECT_EQ(switch_events_.failed[0].process, "worker-1");
  EXPECT_EQ(switcher_->state(), SwitchState::kFailed);
  EXPECT_TRUE(client_.switch_calls.at(0)->cancelled);
  EXPECT_EQ(host_.stops, 1);
  EXPECT_EQ(failure_.process(), "worker-1");
}

TEST_F(RunSupervisorTest, AWorkersErrorNamesItOnceThePeerExitGraceHasPassed) {
  options_.peer_exit_grace = milliseconds(0);
  client_.statuses[1].set_error("ring: the peer closed the stream");
  absl::Status s = Run();
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(s.message(), "worker 1 stopped: ring: the peer closed the stream");
  EXPECT_EQ(failure_.process(), "worker-1");
  EXPECT_EQ(host_.stops, 0);  // no switch was under way
}

// Seen on a run whose ring never formed: both workers stopped with an error (finished, as far as
// their training thread goes) in the same poll, and the run was reported as succeeded with an
// untrained model, because "all finished" came before the grace for a peer's exit had passed.
TEST_F(RunSupervisorTest, WorkersThatAllStoppedOnAnErrorFailTheRunInsteadOfFinishingIt) {
  options_.peer_exit_grace = milliseconds(20);
  for (auto& s : client_.statuses) {
    s.set_finished(true);
    s.set_error("all-reduce start: no data from the peer");
  }
  absl::Status s = Run();
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(s.message(), "worker 0 stopped: all-reduce start: no data from the peer");
  for (const std::string& name : EventNames()) EXPECT_NE(name, "training_finished");
}

TEST_F(RunSupervisorTest, AWorkerSilentPastTheTimeoutIsDeclaredDead) {
  options_.unresponsive_timeout = milliseconds(0);
  client_.unreachable = {true, false};
  absl::Status s = Run();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), "worker 0 at 127.0.0.1:1 has not answered for 0 s: connection refused");
  EXPECT_EQ(failure_.process(), "worker-0");
}

}  // namespace
}  // namespace strata
