#include "orchestrator/record/switch_trigger.h"

namespace strata {

const char* TriggerKindName(TriggerKind kind) {
  switch (kind) {
    case TriggerKind::kEmpirical:
      return "empirical";
    case TriggerKind::kAtFraction:
      return "at_fraction";
    case TriggerKind::kManual:
      return "manual";
    case TriggerKind::kRingBroken:
      return "ring_broken";
  }
  return "manual";
}

std::optional<TriggerKind> TriggerKindFromName(const std::string& name) {
  for (TriggerKind k : {TriggerKind::kEmpirical, TriggerKind::kAtFraction, TriggerKind::kManual,
                        TriggerKind::kRingBroken}) {
    if (name == TriggerKindName(k)) return k;
  }
  return std::nullopt;
}

}  // namespace strata
