// The cluster arithmetic the supervisor and the switch rely on, from hand-made worker statuses.
#include "orchestrator/run/cluster_view.h"

#include <cmath>

#include <gtest/gtest.h>

namespace strata {
namespace {

v1::WorkerStatus Worker(int64_t step, double samples_per_s, bool finished = false) {
  v1::WorkerStatus s;
  s.set_step(step);
  s.set_steps_per_epoch(100);
  s.set_samples_per_s(samples_per_s);
  s.set_finished(finished);
  return s;
}

ClusterView TwoWorkers(int64_t step0, int64_t step1) {
  ClusterView v;
  v.planned_steps_per_epoch = 90;  // replaced by what the workers report
  v.worker_batch = 32;
  v.epochs = 5;
  v.workers = {Worker(step0, 3200), Worker(step1, 1600)};
  return v;
}

TEST(ClusterView, GlobalEpochCountsEveryWorkersStepsAndIsCappedAtThePlan) {
  ClusterView v = TwoWorkers(250, 150);  // 400 steps of 200 per global epoch
  EXPECT_EQ(v.StepsPerEpoch(), 100);
  EXPECT_EQ(v.TotalSteps(), 400);
  EXPECT_EQ(v.MaxStep(), 250);
  EXPECT_EQ(v.GlobalEpoch(), 2);
  EXPECT_DOUBLE_EQ(v.GlobalEpochFraction(), 2.0);
  EXPECT_EQ(v.LastStep(), 500);
  v.workers[0].set_step(900);
  v.workers[1].set_step(900);
  EXPECT_EQ(v.GlobalEpoch(), 5);
  EXPECT_DOUBLE_EQ(v.GlobalEpochFraction(), 9.0);
}

TEST(ClusterView, BeforeAnyReportThePlanDecides) {
  ClusterView v;
  v.planned_steps_per_epoch = 90;
  v.workers.resize(2);
  EXPECT_EQ(v.StepsPerEpoch(), 90);
  EXPECT_EQ(v.GlobalEpoch(), 0);
  EXPECT_FALSE(v.AllFinished());
  EXPECT_DOUBLE_EQ(v.StepSeconds(), 0.1);  // no rate yet
  EXPECT_EQ(v.SwitchMargin(), 5);          // half a second of 0.1 s steps
  EXPECT_FALSE(ClusterView().AllFinished());
}

TEST(ClusterView, StepSecondsFollowTheSlowestWorkerAndSetTheSwitchMargin) {
  ClusterView v = TwoWorkers(10, 10);
  EXPECT_DOUBLE_EQ(v.SamplesPerSecond(), 4800);
  EXPECT_DOUBLE_EQ(v.StepSeconds(), 32.0 / 1600);  // 0.02 s
  EXPECT_EQ(v.SwitchMargin(), 25);
  v.workers[1].set_samples_per_s(32);  // one step a second: the floor of 3 steps holds
  EXPECT_EQ(v.SwitchMargin(), 3);
}

TEST(ClusterView, RecordKeepsEachEpochsTrainingLossPerWorker) {
  ClusterView v;
  v.workers.resize(2);
  v1::WorkerStatus s = Worker(150, 1);
  s.set_train_loss(0.5);
  v.Record(0, s);  // step 150 lies in epoch 2
  s.set_train_loss(0.7);
  v.Record(1, s);
  EXPECT_DOUBLE_EQ(v.TrainLossOf(2), 0.6);
  EXPECT_TRUE(std::isnan(v.TrainLossOf(1)));
  v.Record(0, Worker(500, 1, true));
  v.Record(1, Worker(500, 1, true));
  EXPECT_TRUE(v.AllFinished());
}

TEST(ClusterView, EachWorkersSamplesPerSecondSinceAnEarlierLook) {
  const ClusterView v = TwoWorkers(250, 150);  // 32 examples per step
  // 2 s after steps 50 and 100: 200 and 50 steps made.
  std::vector<double> rates = WorkerSamplesPerSecondSince(v, {50, 100}, 2.0);
  ASSERT_EQ(rates.size(), 2u);
  EXPECT_DOUBLE_EQ(rates[0], 200 * 32 / 2.0);
  EXPECT_DOUBLE_EQ(rates[1], 50 * 32 / 2.0);
  // No earlier look: each worker's own rate (3200 and 1600 samples/s).
  rates = WorkerSamplesPerSecondSince(v, {}, 0);
  EXPECT_EQ(rates, (std::vector<double>{3200, 1600}));
  // A count that went back (a restarted worker with another first step): its own rate.
  rates = WorkerSamplesPerSecondSince(v, {50, 200}, 2.0);
  EXPECT_DOUBLE_EQ(rates[0], 3200);
  EXPECT_DOUBLE_EQ(rates[1], 1600);
}

}  // namespace
}  // namespace strata
