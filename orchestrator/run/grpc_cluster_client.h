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
  // An evaluation waits for its evaluator up to its deadline (gRPC's wait_for_ready) instead of
  // failing after gRPC's 20 s connect timeout. Only where the launcher sees a dead evaluator's
  // exit (local processes): attached services (containers) die unseen, and an evaluation would
  // then wait its whole deadline.
  bool wait_for_evaluator = false;
};

std::unique_ptr<ClusterClient> MakeGrpcClusterClient(const ClusterAddresses& addresses);

}  // namespace strata
