// ClusterClient over gRPC: one channel and stub per service, built from the addresses the services
// reported once they listened. Every call carries a deadline; long calls run on a thread of their
// own whose ClientContext a Cancel (or the PendingReply's destruction) cancels.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "orchestrator/run/cluster_client.h"

namespace strata {

struct ClusterAddresses {
  std::vector<std::string> workers;  // host:port by rank
  std::vector<std::string> servers;  // host:port by partition
  std::string evaluator;
};

std::unique_ptr<ClusterClient> MakeGrpcClusterClient(const ClusterAddresses& addresses);

}  // namespace strata
