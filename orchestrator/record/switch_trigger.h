// Why the run switches from all-reduce to the parameter servers, as the switch controller and the
// run record see it: the rule (or the user) that asked, at which global epoch, the step it aims at
// if the rule knows it in advance, and the rule's own figures for the record.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace strata {

enum class TriggerKind { kEmpirical, kAtFraction, kManual, kRingBroken };

// "empirical", "at_fraction", "manual", "ring_broken": the names events.jsonl uses.
const char* TriggerKindName(TriggerKind kind);
std::optional<TriggerKind> TriggerKindFromName(const std::string& name);

// The empirical rule's figures when it fired (the loss plateau it saw).
struct EmpiricalTriggerDetails {
  double s_percent = 0;
  double threshold_percent = 0;
  int window = 0;
  std::vector<double> val_losses;  // every all-reduce validation loss so far, in epoch order
};

// The at_fraction rule's figures: the fraction of the planned epochs and the epoch it names.
struct AtFractionTriggerDetails {
  double at_fraction = 0;
  int64_t switch_epoch = 0;
};

struct SwitchTrigger {
  TriggerKind kind = TriggerKind::kManual;
  int64_t epoch = 0;                   // completed global epochs when it fired
  std::optional<int64_t> target_step;  // a step the rule aims at; otherwise as soon as possible
  std::string reason;                  // one line for events.jsonl and the console
  std::optional<EmpiricalTriggerDetails> empirical;
  std::optional<AtFractionTriggerDetails> at_fraction;
  // kRingBroken: the worker that died in the ring. The survivors hand over without it, at once,
  // from the model each holds (docs/user-guide.md, "When a process dies").
  std::optional<int> lost_rank;
};

}  // namespace strata
