// When to leave all-reduce for the parameter servers (Strategy-Switch; docs/architecture.md,
// "Why Strata switches").
//
// Two rules from the thesis (Provatas 2025, ch. 4):
//  - EmpiricalSwitchRule: with v(i) the validation loss after epoch i and k the last epoch,
//      s = sum_{j=0..W-1} |v(k-j) - v(k-j-1)| / (W * v(k-j-1)) * 100%
//    (W = window, 5 in the thesis: 6 losses, 5 relative changes); switch when s < threshold.
//  - AtFractionSwitchRule: switch once alpha of the planned epochs are done.
// Both are pure functions of what they are shown, so they are unit-tested without a cluster.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace strata {

struct SwitchDecision {
  bool fire = false;
  // Empirical rule: the mean relative change in percent (nullopt until the window is full).
  std::optional<double> s_percent;
  std::string reason;  // one line for events.jsonl and the console
};

struct EmpiricalRuleOptions {
  int window = 5;                  // relative changes averaged; needs window + 1 losses
  double threshold_percent = 1.0;  // fire when s < threshold
};

class EmpiricalSwitchRule {
 public:
  explicit EmpiricalSwitchRule(EmpiricalRuleOptions options) : options_(options) {}

  // s over the last window + 1 losses, in percent. nullopt when there are fewer losses. A zero
  // previous loss makes its relative change 0 if the loss stayed 0, and infinite otherwise
  // (a change from a perfect fit is not a plateau). A non-finite loss gives an infinite s.
  std::optional<double> MeanRelativeChangePercent(const std::vector<double>& val_losses) const;

  // `val_losses[i]` is the validation loss after epoch i + 1, in epoch order.
  SwitchDecision Decide(const std::vector<double>& val_losses) const;

  const EmpiricalRuleOptions& options() const { return options_; }

 private:
  EmpiricalRuleOptions options_;
};

class AtFractionSwitchRule {
 public:
  AtFractionSwitchRule(double fraction, int total_epochs)
      : fraction_(fraction), total_epochs_(total_epochs) {}

  // The first completed epoch count at which the rule fires: ceil(fraction * epochs), at least 1.
  int64_t SwitchEpoch() const;
  SwitchDecision Decide(int64_t completed_epochs) const;

 private:
  double fraction_;
  int total_epochs_;
};

}  // namespace strata
