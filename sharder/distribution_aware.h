// Distribution-aware sharding (Provatas et al.): examples are grouped into neighbourhoods
// (clusters from PCA + KMeans, see clustering.h); every neighbourhood with at least n examples is
// dealt round-robin over the n workers, every smaller ("sparse") one is given whole to every
// worker so that no worker misses a rare region of the input space.
#pragma once

#include <cstdint>
#include <vector>

#include "sharder/shard_plan.h"
#include "sharder/simple_methods.h"

namespace strata::sharder {

// `cluster_of[i]` in [0, clusters), `labels[i]` the class of example i. Inside a dense
// neighbourhood the examples are dealt class by class (shuffled within each class), so every
// shard also gets the neighbourhood's class mix. Fills per-cluster summaries; each shard comes
// back ascending.
Shards SplitNeighbourhoods(const std::vector<int32_t>& cluster_of, const std::vector<int32_t>& labels,
                           int clusters, int workers, uint64_t seed,
                           std::vector<ClusterSummary>* summaries);

}  // namespace strata::sharder
