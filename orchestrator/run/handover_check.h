// The check the live switch must pass: right after loading, the parameter servers hold exactly the
// model of the switch checkpoint (the last all-reduce model), and every worker pulled exactly the
// weights it had. Pure: it compares what the servers and the workers sent back with the
// checkpoint, so it is unit-tested without servers. A handover that fails it ends the run
// (SwitchController; docs/user-guide.md, "When the handover check fails").
#pragma once

#include <cstdint>
#include <vector>

#include "orchestrator/record/run_record.h"
#include "orchestrator/run/cluster_client.h"
#include "services/common/wire/checkpoint.h"

namespace strata {

// `reads[p]` is what server p sent, `loaded_versions[p]` the version its LoadCheckpoint answered.
// Every parameter and buffer of the checkpoint must come back from exactly one server, bit for
// bit. A header naming another version means a worker pushed before the read-back
// (raced_with_a_push): then the servers' copy proves nothing and weights_equal is false until the
// workers' own comparison is added (FinishHandoverVerification).
HandoverVerification CompareServersWithCheckpoint(const Checkpoint& checkpoint,
                                                  const std::vector<ServerModelRead>& reads,
                                                  const std::vector<int64_t>& loaded_versions);

// Whether the servers' copy, read before any push, already shows the handover failed (a differing
// or missing tensor). Never after a race: a copy a push has moved is the workers' to judge.
bool ServersDiffer(const HandoverVerification& verification);

// Adds the workers' comparison (the largest difference any worker saw between what it pulled and
// its last all-reduce weights; 0 in a fallback, where the survivors compare nothing). The workers'
// check cannot race: none pushes before all have pulled. Equal needs both checks: the servers'
// (unless it raced) and the workers'.
void FinishHandoverVerification(double workers_max_abs_diff, HandoverVerification& verification);

}  // namespace strata
