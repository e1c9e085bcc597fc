// The check the live switch must pass: right after loading, the parameter servers hold exactly the
// model of the switch checkpoint (the last all-reduce model). Pure: it compares what the servers
// sent back with the checkpoint, so it is unit-tested without servers.
#pragma once

#include <cstdint>
#include <vector>

#include "orchestrator/record/run_record.h"
#include "orchestrator/run/cluster_client.h"
#include "services/common/wire/checkpoint.h"

namespace strata {

// `reads[p]` is what server p sent, `loaded_versions[p]` the version its LoadCheckpoint answered.
// A header naming another version means a worker pushed before the read-back (raced_with_a_push):
// then the servers' copy proves nothing and weights_equal is false until the workers' own
// comparison is added (FinishHandoverVerification).
HandoverVerification CompareServersWithCheckpoint(const Checkpoint& checkpoint,
                                                  const std::vector<ServerModelRead>& reads,
                                                  const std::vector<int64_t>& loaded_versions);

// Adds the workers' comparison (the largest difference any worker saw between what it pulled and
// its last all-reduce weights). The workers' check cannot race: none pushes before all have
// pulled. It decides when the servers' read-back raced with a push.
void FinishHandoverVerification(double workers_max_abs_diff, HandoverVerification& verification);

}  // namespace strata
