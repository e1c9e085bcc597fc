// The makers of the consistency policies, one per file in this folder. Only the factory
// (MakeConsistencyPolicy in consistency_policy.cc) calls them; everything else picks a policy by
// its ConsistencyMode.
#pragma once

#include <memory>

#include "services/parameter_server/consistency_policy.h"

namespace strata {

std::unique_ptr<ConsistencyPolicy> MakeAspPolicy(const ConsistencyConfig& config);
std::unique_ptr<ConsistencyPolicy> MakeBspPolicy(const ConsistencyConfig& config);
std::unique_ptr<ConsistencyPolicy> MakeSspPolicy(const ConsistencyConfig& config);
// PDP and APDP share it: the partitions' side of the two differs only in the worker.
std::unique_ptr<ConsistencyPolicy> MakePointWeightedRoundPolicy(ConsistencyMode mode,
                                                                const ConsistencyConfig& config);

}  // namespace strata
