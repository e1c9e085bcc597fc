// When a switch job asks for the switch, from hand-made views and losses.
#include "orchestrator/run/switch_policy.h"

#include <gtest/gtest.h>

namespace strata {
namespace {

ClusterView AllReduceAt(int64_t step) {
  ClusterView v;
  v.planned_steps_per_epoch = 100;
  v.worker_batch = 32;
  v.epochs = 10;
  for (int r = 0; r < 2; ++r) {
    v1::WorkerStatus s;
    s.set_step(step);
    s.set_steps_per_epoch(100);
    s.set_samples_per_s(3200);  // 0.01 s per step: margin 50, lead 50 + 30
    v.workers.push_back(s);
  }
  return v;
}

v1::ResolvedStrategy AtFraction(double fraction) {
  v1::ResolvedStrategy s;
  s.set_kind(v1::STRATEGY_KIND_SWITCH);
  s.set_rule(v1::SWITCH_RULE_AT_FRACTION);
  s.set_at_fraction(fraction);
  return s;
}

TEST(SwitchPolicy, AtFractionFiresALeadBeforeTheEpochBoundaryAndAimsAtIt) {
  SwitchPolicy policy(AtFraction(0.5), 10, nullptr);  // epoch 5: step 500
  EXPECT_FALSE(policy.Observe(AllReduceAt(419)).has_value());
  auto trigger = policy.Observe(AllReduceAt(420));
  ASSERT_TRUE(trigger.has_value());
  EXPECT_EQ(trigger->kind, TriggerKind::kAtFraction);
  EXPECT_EQ(trigger->target_step, 500);
  EXPECT_EQ(trigger->epoch, 4);
  ASSERT_TRUE(trigger->at_fraction.has_value());
  EXPECT_EQ(trigger->at_fraction->switch_epoch, 5);
}

TEST(SwitchPolicy, EmpiricalFiresOnAPlateauOfAllReduceLossesOnly) {
  v1::ResolvedStrategy s;
  s.set_kind(v1::STRATEGY_KIND_SWITCH);
  s.set_rule(v1::SWITCH_RULE_EMPIRICAL);
  s.set_window(2);
  s.set_threshold_percent(1.0);
  SwitchPolicy policy(s, 10, nullptr);
  EXPECT_FALSE(policy.OnEvaluation(1, "allreduce", 1.0, true).has_value());
  EXPECT_FALSE(policy.OnEvaluation(2, "allreduce", 0.5, true).has_value());
  // A ps-phase loss is not part of the rule's series.
  EXPECT_FALSE(policy.OnEvaluation(3, "ps", 0.5, true).has_value());
  EXPECT_FALSE(policy.OnEvaluation(3, "allreduce", 0.499, true).has_value());  // 0.5 -> 0.499
  auto trigger = policy.OnEvaluation(4, "allreduce", 0.4985, true);
  ASSERT_TRUE(trigger.has_value());
  EXPECT_EQ(trigger->kind, TriggerKind::kEmpirical);
  EXPECT_EQ(trigger->epoch, 4);
  EXPECT_FALSE(trigger->target_step.has_value());
  ASSERT_TRUE(trigger->empirical.has_value());
  EXPECT_EQ(trigger->empirical->val_losses.size(), 4u);
  // Once the switch settled the rule is closed.
  EXPECT_FALSE(policy.OnEvaluation(5, "allreduce", 0.4985, false).has_value());
}

TEST(SwitchPolicy, OtherStrategiesNeverTrigger) {
  v1::ResolvedStrategy s;
  s.set_kind(v1::STRATEGY_KIND_ALLREDUCE);
  SwitchPolicy policy(s, 10, nullptr);
  EXPECT_FALSE(policy.Observe(AllReduceAt(900)).has_value());
  EXPECT_FALSE(policy.OnEvaluation(1, "allreduce", 1.0, true).has_value());
  const SwitchTrigger manual = SwitchPolicy::Manual(AllReduceAt(250));
  EXPECT_EQ(manual.kind, TriggerKind::kManual);
  EXPECT_EQ(manual.epoch, 2);
  EXPECT_EQ(manual.reason, "strata switch");
}

}  // namespace
}  // namespace strata
