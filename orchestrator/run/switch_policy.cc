#include "orchestrator/run/switch_policy.h"

#include <cmath>

#include <absl/strings/str_cat.h>

#include "orchestrator/run/switch_rule.h"

namespace strata {

std::optional<SwitchTrigger> SwitchPolicy::OnEvaluation(int64_t epoch, const std::string& phase,
                                                        double val_loss, bool rule_open) {
  if (phase != "allreduce") return std::nullopt;
  allreduce_losses_.push_back(val_loss);
  if (strategy_.kind() != v1::STRATEGY_KIND_SWITCH ||
      strategy_.rule() != v1::SWITCH_RULE_EMPIRICAL || !rule_open) {
    return std::nullopt;
  }
  EmpiricalSwitchRule rule({strategy_.window(), strategy_.threshold_percent()});
  SwitchDecision d = rule.Decide(allreduce_losses_);
  if (record_ != nullptr) {
    record_->Event(RunEvent::kSwitchRule,
                   {{"epoch", epoch},
                    {"s_percent", d.s_percent ? nlohmann::json(*d.s_percent) : nullptr},
                    {"fire", d.fire}});
  }
  if (!d.fire) return std::nullopt;
  SwitchTrigger t;
  t.kind = TriggerKind::kEmpirical;
  t.epoch = epoch;
  t.reason = d.reason;
  t.empirical = EmpiricalTriggerDetails{*d.s_percent, strategy_.threshold_percent(),
                                        strategy_.window(), allreduce_losses_};
  return t;
}

std::optional<SwitchTrigger> SwitchPolicy::Observe(const ClusterView& view) const {
  if (strategy_.kind() != v1::STRATEGY_KIND_SWITCH ||
      strategy_.rule() != v1::SWITCH_RULE_AT_FRACTION) {
    return std::nullopt;
  }
  AtFractionSwitchRule rule(strategy_.at_fraction(), epochs_);
  const int64_t target = rule.SwitchEpoch() * view.StepsPerEpoch();
  // Decided ahead of the target, the request names the target step and the workers switch
  // exactly there. The lead stays short (0.3 s of steps past the margin): tests and users kill
  // processes "before the switch", and a 3 s lead once made the recovery tests see the decision
  // before their kill.
  const int64_t lead =
      view.SwitchMargin() + static_cast<int64_t>(std::ceil(0.3 / view.StepSeconds()));
  if (view.MaxStep() + lead < target) return std::nullopt;
  SwitchTrigger t;
  t.kind = TriggerKind::kAtFraction;
  t.epoch = view.GlobalEpoch();
  t.target_step = target;
  t.reason = rule.Decide(rule.SwitchEpoch()).reason;
  t.at_fraction = AtFractionTriggerDetails{strategy_.at_fraction(), rule.SwitchEpoch()};
  return t;
}

SwitchTrigger SwitchPolicy::Manual(const ClusterView& view) {
  SwitchTrigger t;
  t.kind = TriggerKind::kManual;
  t.epoch = view.GlobalEpoch();
  t.reason = "strata switch";
  return t;
}

SwitchTrigger SwitchPolicy::RingBroken(const ClusterView& view, int rank, const std::string& how) {
  SwitchTrigger t;
  t.kind = TriggerKind::kRingBroken;
  t.epoch = view.GlobalEpoch();
  t.reason = absl::StrCat("worker-", rank, " ", how, " in the ring all-reduce");
  t.lost_rank = rank;
  return t;
}

}  // namespace strata
