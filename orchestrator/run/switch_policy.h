// When a `switch` job asks for the switch: the job's rule (orchestrator/run/switch_rule.h) applied
// to what the run observes. The empirical rule looks at the validation losses of the all-reduce
// phase as evaluations complete; the at_fraction rule knows its step in advance and fires a little
// before it, so that the handover lands on the epoch boundary. The manual trigger (`strata
// switch`) is built here too, so every trigger comes from one place.
#pragma once

#include <optional>
#include <vector>

#include "orchestrator/record/run_record.h"
#include "orchestrator/record/switch_trigger.h"
#include "orchestrator/run/cluster_view.h"
#include "strata/v1/job.pb.h"

namespace strata {

class SwitchPolicy {
 public:
  // `record` receives the empirical rule's verdict after each all-reduce evaluation.
  SwitchPolicy(const v1::ResolvedStrategy& strategy, int epochs, RunRecord* record)
      : strategy_(strategy), epochs_(epochs), record_(record) {}

  // A finished evaluation. `rule_open`: the run may still switch (a settled switch ends the rule).
  std::optional<SwitchTrigger> OnEvaluation(int64_t epoch, const std::string& phase,
                                            double val_loss, bool rule_open);
  // The at_fraction rule, looked at on every supervisor tick while no switch is under way.
  std::optional<SwitchTrigger> Observe(const ClusterView& view) const;
  // `strata switch` asked.
  static SwitchTrigger Manual(const ClusterView& view);
  // Worker `rank` died in the ring (`how`): the survivors fall back to the servers.
  static SwitchTrigger RingBroken(const ClusterView& view, int rank, const std::string& how);

 private:
  v1::ResolvedStrategy strategy_;
  int epochs_;
  RunRecord* record_;
  std::vector<double> allreduce_losses_;
};

}  // namespace strata
