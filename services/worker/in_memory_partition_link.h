// Push/pull without a transport, for tests: each partition's link calls a PartitionStore of the
// same process (services/parameter_server/partition_store.h) as the server's data plane would,
// with the same checks (the layout's fingerprint, the push's header, every value finite) and the
// same waits, bounded by the call's deadline. Between the store-level tests, which drive a store
// by hand, and the process tests, which start strata-ps: the synchronisers and the clients' plan,
// fan-out and waits run against real stores and consistency policies, in milliseconds.
//
// A server can be stopped (its calls fail with UNAVAILABLE, as a dead process's do) and served
// again, by the same store or another one (a restarted server resumed from its save).
//
//   InMemoryPartitionServers servers({&store0, &store1});
//   PartitionClientsOptions o;
//   o.servers = {"ps-0", "ps-1"};  // names for the messages
//   o.make_link = servers.LinkFactory();
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "services/worker/partition_link.h"

namespace strata {

class PartitionStore;

class InMemoryPartitionServers {
 public:
  // Partition p is served by stores[p], borrowed: each must outlive the calls made to it.
  explicit InMemoryPartitionServers(std::vector<PartitionStore*> stores);

  // For PartitionClientsOptions::make_link: the link to the partition its options name. The
  // links may outlive this object.
  PartitionLinkFactory LinkFactory() const;

  // The server of `partition` is gone: calls to it fail with UNAVAILABLE.
  void Stop(int partition);
  // It answers again, as `store`.
  void Serve(int partition, PartitionStore* store);
  // Waits until `timeout` for a call to the stopped server `partition` to have been refused since
  // Stop (a test then knows that a worker is waiting for the server to come back).
  bool AwaitRefusedCall(int partition, std::chrono::milliseconds timeout);

  struct State;  // defined in the .cc; public so that its links can reach it

 private:
  std::shared_ptr<State> state_;
};

}  // namespace strata
