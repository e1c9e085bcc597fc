// Evaluation scheduling against a FakeClusterClient: once per global epoch, one at a time, the
// phase an epoch was trained in, and the final evaluation.
#include "orchestrator/run/eval_scheduler.h"

#include <stdlib.h>

#include <gtest/gtest.h>

#include "services/common/base/metrics.h"

#include "tests/support/temp_dir_test.h"
#include "tests/unit/orchestrator/fake_cluster_client.h"

namespace strata {
namespace {

using testing::FakeClusterClient;

class EvalSchedulerTest : public testing::TempDirTest {
 protected:
  EvalSchedulerTest()
      : testing::TempDirTest("eval-scheduler"), client_(2, 1), console_(/*quiet=*/true) {
    dir_ = temp_dir();
    record_ = *RunRecord::Open(dir_, now_);
    view_.planned_steps_per_epoch = 100;
    view_.epochs = 4;
    view_.worker_batch = 10;
    view_.workers.resize(2);
    view_.loss_by_epoch.resize(2);
    EvalSchedulerOptions o;
    o.epochs = 4;
    o.worker_address = "127.0.0.1:1";
    o.server_addresses = {"127.0.0.1:9"};
    o.run_start = now_;
    o.on_result = [this](const v1::EvalMetrics& m) { results_.push_back(m.epoch()); };
    phase_.name = "allreduce";
    eval_ = std::make_unique<EvalScheduler>(o, client_, *record_, console_, phase_);
  }

  void AtStep(int64_t step) {
    for (auto& w : view_.workers) w.set_step(step), w.set_steps_per_epoch(100);
  }
  void Answer(size_t call, int64_t epoch, const std::string& phase) {
    v1::EvalMetrics m;
    m.set_epoch(epoch);
    m.set_phase(phase);
    client_.eval_calls.at(call)->Answer(m);
  }

  std::string dir_;
  Clock::time_point now_ = Clock::now();
  FakeClusterClient client_;
  RunConsole console_;
  std::unique_ptr<RunRecord> record_;
  ClusterView view_;
  RunPhase phase_;
  std::unique_ptr<EvalScheduler> eval_;
  std::vector<int64_t> results_;
};

TEST_F(EvalSchedulerTest, OneEvaluationPerGlobalEpochOneAtATime) {
  AtStep(50);
  ASSERT_TRUE(eval_->Step(view_, now_).ok());
  EXPECT_TRUE(client_.eval_requests.empty());
  AtStep(250);  // epoch 2 is complete; epoch 1 was skipped while nothing ran
  ASSERT_TRUE(eval_->Step(view_, now_).ok());
  ASSERT_EQ(client_.eval_requests.size(), 1u);
  EXPECT_EQ(client_.eval_requests[0].epoch(), 2);
  EXPECT_EQ(client_.eval_requests[0].worker(), "127.0.0.1:1");
  AtStep(350);
  ASSERT_TRUE(eval_->Step(view_, now_).ok());
  EXPECT_EQ(client_.eval_requests.size(), 1u);  // still in flight
  Answer(0, 2, "allreduce");
  ASSERT_TRUE(eval_->Step(view_, now_).ok());
  EXPECT_EQ(results_, std::vector<int64_t>{2});
  ASSERT_EQ(client_.eval_requests.size(), 2u);
  EXPECT_EQ(client_.eval_requests[1].epoch(), 3);
}

TEST_F(EvalSchedulerTest, AfterTheSwitchAnEarlierEpochKeepsItsPhaseButComesFromTheServers) {
  phase_.name = "ps";
  phase_.switched_at_step = 260;
  AtStep(280);  // global epoch 2 ended at step 200, before the switch
  ASSERT_TRUE(eval_->Step(view_, now_).ok());
  ASSERT_EQ(client_.eval_requests.size(), 1u);
  EXPECT_EQ(client_.eval_requests[0].phase(), "allreduce");
  EXPECT_EQ(client_.eval_requests[0].parameter_servers_size(), 1);
  EXPECT_TRUE(client_.eval_requests[0].worker().empty());
}

TEST_F(EvalSchedulerTest, FinalEvaluationRunsOnceAndSettles) {
  AtStep(400);
  ASSERT_TRUE(eval_->StepFinal(view_, now_).ok());
  ASSERT_EQ(client_.eval_requests.size(), 1u);
  EXPECT_EQ(client_.eval_requests[0].epoch(), 4);
  EXPECT_FALSE(eval_->final_settled());
  EXPECT_TRUE(eval_->StepWithin().has_value());
  Answer(0, 4, "allreduce");
  ASSERT_TRUE(eval_->StepFinal(view_, now_).ok());
  EXPECT_TRUE(eval_->final_settled());
  EXPECT_TRUE(eval_->have_final());
  ASSERT_TRUE(eval_->StepFinal(view_, now_).ok());
  EXPECT_EQ(client_.eval_requests.size(), 1u);
}

TEST_F(EvalSchedulerTest, AFailedFinalEvaluationSettlesWithoutAFinalResult) {
  AtStep(400);
  ASSERT_TRUE(eval_->StepFinal(view_, now_).ok());
  client_.eval_calls.at(0)->Refuse(absl::UnavailableError("evaluation of epoch 4: gone"));
  ASSERT_TRUE(eval_->StepFinal(view_, now_).ok());
  EXPECT_TRUE(eval_->final_settled());
  EXPECT_FALSE(eval_->have_final());
  EXPECT_TRUE(results_.empty());
}

TEST_F(EvalSchedulerTest, EachMetricsLineCarriesEveryWorkersSamplesPerSecond) {
  // The first evaluation: each worker's own rate; the next: its steps since over the time since.
  AtStep(100);
  view_.workers[0].set_samples_per_s(400);
  view_.workers[1].set_samples_per_s(300);
  ASSERT_TRUE(eval_->Step(view_, now_).ok());
  Answer(0, 1, "allreduce");
  view_.workers[0].set_step(250);  // 150 steps of 10 examples in 5 s: 300 samples/s
  view_.workers[1].set_step(200);  // 100 steps: 200 samples/s
  ASSERT_TRUE(eval_->Step(view_, now_ + std::chrono::seconds(5)).ok());
  Answer(1, 2, "allreduce");
  ASSERT_TRUE(eval_->Step(view_, now_ + std::chrono::seconds(5)).ok());
  auto lines = ReadJsonLines(dir_ + "/metrics.jsonl");
  ASSERT_TRUE(lines.ok()) << lines.status();
  ASSERT_EQ(lines->size(), 2u);
  EXPECT_EQ((*lines)[0]["worker_samples_per_s"], nlohmann::json({400.0, 300.0}));
  EXPECT_EQ((*lines)[1]["worker_samples_per_s"], nlohmann::json({300.0, 200.0}));
}

}  // namespace
}  // namespace strata
