#include "orchestrator/run/switch_trigger.h"

namespace strata {

const char* TriggerKindName(TriggerKind kind) {
  switch (kind) {
    case TriggerKind::kEmpirical:
      return "empirical";
    case TriggerKind::kAtFraction:
      return "at_fraction";
    case TriggerKind::kManual:
      return "manual";
  }
  return "manual";
}

std::optional<TriggerKind> TriggerKindFromName(const std::string& name) {
  for (TriggerKind k : {TriggerKind::kEmpirical, TriggerKind::kAtFraction, TriggerKind::kManual}) {
    if (name == TriggerKindName(k)) return k;
  }
  return std::nullopt;
}

}  // namespace strata
