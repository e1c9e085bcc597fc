// The worker's side of the parameter-server wire (proto/strata/v1/parameter_server.proto): the
// partition plan that says which tensors each server holds, one PartitionLink per server
// (partition_link.h: gRPC, the plain-TCP data plane with or without shared memory, or in memory
// for tests), and the three calls the synchronisers are made of: pull, push, and push-then-pull
// in one round trip. Calls to every partition run at once (the last on the calling thread), and
// the first error in partition order is returned, naming the server (partition index and
// address). Every call carries the deadline.
//
// Used by push_pull_sync.cc (a push/pull per step) and point_round_sync.cc (PDP and APDP: an
// update when the server asks for it).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <absl/status/statusor.h>

#include "services/common/ml/trainer.h"
#include "services/worker/partition_link.h"

namespace strata {

struct PartitionClientsOptions {
  std::vector<std::string> servers;  // host:port, one per partition, in partition order
  int rank = 0;
  std::chrono::milliseconds deadline{60000};
  size_t chunk_bytes = 1 << 20;
  // Push/pull and pull over each server's plain-TCP data plane (ParameterServer.DataPlane;
  // services/parameter_server/tcp_push_pull_server.h) instead of gRPC streams. A server that
  // offers none, or whose data plane cannot be reached, is served over gRPC (with a warning).
  bool tcp_data_plane = false;
  // With the data plane: ask each server for a shared region (services/common/wire/
  // shared_region.h) and, where the server runs on this host, move the tensors through it; the
  // socket then carries only the headers. Servers elsewhere are served over TCP as before.
  bool shared_memory = false;
  // strategy.ps_split: large tensors are split into pieces over the servers by the plan of
  // services/common/wire/partition_plan.h, which the servers compute too.
  bool split_tensors = true;
  // strategy.push_compression fp16: exchanges on the plain-TCP data plane (not through shared
  // memory, nor over gRPC) carry the gradients and the weights as 16-bit floats.
  bool half_precision = false;
  // Makes the link to each server instead of the two flags above: the in-memory link of the
  // tests (in_memory_partition_link.h). Empty: gRPC or the data plane, as the flags say.
  PartitionLinkFactory make_link;
};

// The link to one server over the network, as `options` asks (TcpPartitionLink or
// GrpcPartitionLink).
std::unique_ptr<PartitionLink> MakeNetworkPartitionLink(const PartitionClientsOptions& options,
                                                        PartitionLinkOptions link);

// One partition's server as the clients see it: its link and what its replies said.
struct ServerLink {
  int index = 0;
  std::string address;
  std::unique_ptr<PartitionLink> link;
  int64_t version = 0;                     // the model version last pulled from this partition
  int64_t installed_version = 0;           // the version of this partition the trainer computes on
  int64_t samples = 0, sample_budget = 0;  // as of the last reply (PullHeader)
  int64_t pushed_version = 0;  // the last push's reply: the version that will reflect it
  uint64_t bytes_pushed = 0, bytes_pulled = 0;  // the last exchange's tensors, as they travelled
  void Note(const PartitionReply& reply) {
    version = reply.version;
    samples = reply.samples;
    sample_budget = reply.sample_budget;
    bytes_pushed = reply.bytes_pushed;
    bytes_pulled = reply.bytes_pulled;
  }
};

class PartitionClients {
 public:
  // The partition plan is computed from the trainer's parameters() then buffers(), as the
  // servers compute it from a whole-model checkpoint.
  static absl::StatusOr<std::unique_ptr<PartitionClients>> Create(
      const PartitionClientsOptions& options, const Trainer& trainer);

  size_t parameter_floats() const { return parameter_floats_; }
  size_t buffer_floats() const { return buffer_floats_; }
  // The bytes of the last exchange with every server, each way (PartitionReply::bytes_pushed).
  std::pair<uint64_t, uint64_t> LastExchangeBytes() const {
    std::pair<uint64_t, uint64_t> bytes{0, 0};
    for (const ServerLink& s : servers_) {
      bytes.first += s.bytes_pushed;
      bytes.second += s.bytes_pulled;
    }
    return bytes;
  }
  std::vector<ServerLink>& servers() { return servers_; }
  const std::vector<ServerLink>& servers() const { return servers_; }
  const PartitionClientsOptions& options() const { return options_; }

  absl::Status ForEachServer(const std::function<absl::Status(ServerLink&)>& f);

  // A pull of one partition into `parameters` (the fused layout) and `buffers`.
  absl::Status PullInto(ServerLink& s, int64_t clock, float* parameters, float* buffers);
  // A push of one partition's gradients and buffer values; the reply's version goes to
  // s.pushed_version.
  absl::Status PushTo(ServerLink& s, const PushFields& fields, const float* gradients,
                      const float* buffers);
  // A push then a pull in one round trip. A server that is gone may be on its way back: the
  // orchestrator restarts a dead server from its last save (docs/user-guide.md, "When a process
  // dies"). The push is then lost, and once it answers again the worker takes the model it
  // resumed with (a push would name a version the restored server never reached).
  absl::Status Exchange(ServerLink& s, const PushFields& fields, const ExchangeBuffers& x);

  // Every partition's installed_version becomes its pulled version.
  void MarkInstalled();
  // How the tensors travel to each server (PartitionLink::Path), one line per server:
  // "parameter server 0 (host:port): tcp (...)". Safe while calls are in flight (each link
  // guards its own).
  std::vector<std::string> LinkPaths() const;
  // The newest of the links' path stamps: moves whenever LinkPaths() may have.
  uint64_t LinkPathStamp() const;
  // The job's sample budget as the last replies reported it: any partition that has reached it
  // ends the job. `has_budget`: some partition has one.
  void ReadBudget(bool* has_budget, bool* budget_spent) const;

 private:
  PartitionClients(PartitionClientsOptions options, std::vector<ServerLink> servers,
                   size_t parameter_floats, size_t buffer_floats)
      : options_(std::move(options)),
        servers_(std::move(servers)),
        parameter_floats_(parameter_floats),
        buffer_floats_(buffer_floats) {}

  PartitionCallOptions Call() const { return {options_.deadline}; }
  // `fields` with the version resolved: its own, or the partition's installed version.
  static PushFields For(const ServerLink& s, PushFields fields);

  const PartitionClientsOptions options_;
  std::vector<ServerLink> servers_;
  const size_t parameter_floats_, buffer_floats_;
};

}  // namespace strata
