// The partition a parameter server runs: a PartitionStore (tensors, versions, SGD, checkpoints,
// waiting; partition_store.h) governed by the ConsistencyPolicy its configuration names
// (consistency_policy.h). The service, ps_main and the tests hold one of these; a test that
// wants a hand-made policy builds a PartitionStore directly.
#pragma once

#include "services/parameter_server/consistency_policy.h"
#include "services/parameter_server/partition_store.h"
#include "services/parameter_server/push_staging.h"

namespace strata {

class ParameterPartition : public PartitionStore {
 public:
  // The policy is MakeConsistencyPolicy(config.consistency, ...): ASP, BSP or SSP.
  explicit ParameterPartition(PartitionConfig config);
};

}  // namespace strata
