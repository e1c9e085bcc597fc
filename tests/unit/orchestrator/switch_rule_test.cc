#include "orchestrator/run/switch_rule.h"

#include <cmath>

#include <gtest/gtest.h>

namespace strata {
namespace {

EmpiricalSwitchRule ThesisRule() {
  return EmpiricalSwitchRule({.window = 5, .threshold_percent = 1.0});
}

TEST(EmpiricalSwitchRule, ThesisWorkedExampleDoesNotSwitch) {
  // Still improving: 10%, 6.67%, 1.19%, 0.48%, 0.24% relative changes, mean 3.7162%.
  const std::vector<double> losses = {0.500, 0.450, 0.420, 0.415, 0.413, 0.412};
  SwitchDecision d = ThesisRule().Decide(losses);
  ASSERT_TRUE(d.s_percent.has_value());
  EXPECT_NEAR(*d.s_percent, 3.7162, 5e-5);
  EXPECT_FALSE(d.fire);
}

TEST(EmpiricalSwitchRule, ThesisPlateauSwitches) {
  const std::vector<double> losses = {0.4000, 0.3999, 0.3998, 0.3997, 0.3996, 0.3995, 0.3994};
  SwitchDecision d = ThesisRule().Decide(losses);
  ASSERT_TRUE(d.s_percent.has_value());
  EXPECT_NEAR(*d.s_percent, 0.025, 5e-5);
  EXPECT_TRUE(d.fire);
}

TEST(EmpiricalSwitchRule, OnlyTheLastWindowCounts) {
  // A steep start followed by a plateau: the early drop is outside the window of 5 changes.
  const std::vector<double> losses = {2.0, 1.0, 0.4000, 0.3999, 0.3998, 0.3997, 0.3996, 0.3995};
  SwitchDecision d = ThesisRule().Decide(losses);
  ASSERT_TRUE(d.s_percent.has_value());
  EXPECT_NEAR(*d.s_percent, 0.025, 5e-5);
  EXPECT_TRUE(d.fire);
}

TEST(EmpiricalSwitchRule, FewerThanSixEpochsNeverFires) {
  for (size_t n = 0; n <= 5; ++n) {
    std::vector<double> losses(n, 0.5);  // equal losses would fire if the window were full
    SwitchDecision d = ThesisRule().Decide(losses);
    EXPECT_FALSE(d.fire) << n << " losses";
    EXPECT_FALSE(d.s_percent.has_value()) << n << " losses";
  }
  EXPECT_TRUE(ThesisRule().Decide(std::vector<double>(6, 0.5)).fire);
}

TEST(EmpiricalSwitchRule, EqualLossesGiveZero) {
  SwitchDecision d = ThesisRule().Decide({0.3, 0.3, 0.3, 0.3, 0.3, 0.3});
  ASSERT_TRUE(d.s_percent.has_value());
  EXPECT_EQ(*d.s_percent, 0.0);
  EXPECT_TRUE(d.fire);
}

TEST(EmpiricalSwitchRule, ZeroLosses) {
  // Zero throughout: nothing changes, a plateau.
  SwitchDecision flat = ThesisRule().Decide({0, 0, 0, 0, 0, 0});
  ASSERT_TRUE(flat.s_percent.has_value());
  EXPECT_EQ(*flat.s_percent, 0.0);
  EXPECT_TRUE(flat.fire);
  // Leaving a zero loss is an unbounded relative change, not a division by zero.
  SwitchDecision jump = ThesisRule().Decide({0.1, 0.1, 0.1, 0.1, 0.0, 0.2});
  ASSERT_TRUE(jump.s_percent.has_value());
  EXPECT_TRUE(std::isinf(*jump.s_percent));
  EXPECT_FALSE(jump.fire);
  // Reaching zero is a finite (100%) change of that step.
  SwitchDecision reach = ThesisRule().Decide({0.1, 0.1, 0.1, 0.1, 0.1, 0.0});
  ASSERT_TRUE(reach.s_percent.has_value());
  EXPECT_NEAR(*reach.s_percent, 20.0, 1e-9);
  EXPECT_FALSE(reach.fire);
}

TEST(EmpiricalSwitchRule, NonFiniteLossNeverFires) {
  SwitchDecision d = ThesisRule().Decide({0.3, 0.3, 0.3, 0.3, 0.3, std::nan("")});
  ASSERT_TRUE(d.s_percent.has_value());
  EXPECT_FALSE(d.fire);
}

TEST(EmpiricalSwitchRule, ThresholdIsStrict) {
  // s equals the threshold exactly: not below it, no switch.
  const std::vector<double> losses = {1.0, 0.9, 0.81, 0.729, 0.6561, 0.59049};  // 10% each step
  EmpiricalSwitchRule at10({.window = 5, .threshold_percent = 10.0});
  EmpiricalSwitchRule above({.window = 5, .threshold_percent = 10.001});
  ASSERT_NEAR(*at10.MeanRelativeChangePercent(losses), 10.0, 1e-9);
  EXPECT_FALSE(EmpiricalSwitchRule({.window = 5, .threshold_percent = 9.999}).Decide(losses).fire);
  EXPECT_TRUE(above.Decide(losses).fire);
}

TEST(EmpiricalSwitchRule, WindowIsConfigurable) {
  // Window 2 looks at 3 losses only: 0.4 -> 0.4 -> 0.4 is a plateau even after a steep start.
  EmpiricalSwitchRule short_window({.window = 2, .threshold_percent = 1.0});
  EXPECT_FALSE(short_window.Decide({1.0, 0.4}).s_percent.has_value());
  EXPECT_TRUE(short_window.Decide({1.0, 0.5, 0.4, 0.4, 0.4}).fire);
  EXPECT_FALSE(ThesisRule().Decide({1.0, 0.5, 0.4, 0.4, 0.4, 0.4}).fire);
}

TEST(EmpiricalSwitchRule, RisingLossCountsAsChange) {
  // |v(k) - v(k-1)|: an increase is a change as much as a decrease.
  SwitchDecision d = ThesisRule().Decide({0.40, 0.44, 0.40, 0.44, 0.40, 0.44});
  EXPECT_GT(*d.s_percent, 9.0);
  EXPECT_FALSE(d.fire);
}

TEST(AtFractionSwitchRule, FiresAtCeilOfFraction) {
  AtFractionSwitchRule rule(0.3, 10);
  EXPECT_EQ(rule.SwitchEpoch(), 3);
  EXPECT_FALSE(rule.Decide(2).fire);
  EXPECT_TRUE(rule.Decide(3).fire);
  EXPECT_TRUE(rule.Decide(4).fire);
  EXPECT_EQ(AtFractionSwitchRule(0.25, 10).SwitchEpoch(), 3);  // 2.5 epochs -> after epoch 3
  EXPECT_EQ(AtFractionSwitchRule(0.01, 10).SwitchEpoch(), 1);  // never before the first epoch
  EXPECT_EQ(AtFractionSwitchRule(0.99, 4).SwitchEpoch(), 4);
}

}  // namespace
}  // namespace strata
