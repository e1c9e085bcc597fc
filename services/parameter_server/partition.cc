#include "services/parameter_server/partition.h"

namespace strata {

ParameterPartition::ParameterPartition(PartitionConfig config)
    : PartitionStore(config,
                     MakeConsistencyPolicy(config.consistency, ConsistencyConfigOf(config))) {}

}  // namespace strata
