// The worker's side of the parameter-server wire (proto/strata/v1/parameter_server.proto): one
// client per partition, the partition plan that says which tensors each one holds, and the three
// calls the synchronisers are made of: pull, push, and push-then-pull in one round trip. Calls
// to every partition run at once (the last on the calling thread), and the first error in
// partition order is returned, naming the server (partition index and address). Every call
// carries the deadline.
//
// Used by push_pull_sync.cc (a push/pull per step) and point_round_sync.cc (PDP and APDP: an
// update when the server asks for it).
#pragma once

#include <sys/uio.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <absl/status/statusor.h>

#include "services/common/ml/trainer.h"
#include "services/common/wire/push_pull_frame.h"
#include "services/common/wire/shared_region.h"
#include "services/common/wire/tensor.h"
#include "strata/v1/parameter_server.grpc.pb.h"

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
};

// One model tensor as the worker holds it: trainable parameters live in the trainer's fused
// buffers (parameters, gradients), float buffers in a copy the synchroniser keeps.
struct ModelTensor {
  TensorSpec spec;
  bool is_buffer = false;
  size_t offset = 0;  // floats, into the fused parameter buffer or the buffer copy
};

struct ServerLink {
  int index = 0;
  std::string address;
  std::unique_ptr<v1::ParameterServer::Stub> stub;
  std::vector<size_t> tensors;             // indices into the model tensor list, in model order
  int64_t version = 0;                     // the model version last pulled from this partition
  int64_t installed_version = 0;           // the version of this partition the trainer computes on
  int64_t samples = 0, sample_budget = 0;  // as of the last reply (PullHeader)
  int64_t pushed_version = 0;  // the last push's reply: the version that will reflect it
  bool reply_ended = false;    // the last reply's stream was read to its end (or broke)
  // The plain-TCP data plane: the connection (-1: none yet, or closed after an error), whether
  // this server is served over gRPC instead, the partition's tensors as runs of consecutive
  // floats in the worker's buffers, and the layout's fingerprint the server checks.
  struct Run {
    bool is_buffer = false;
    size_t offset = 0, floats = 0;
  };
  int data_fd = -1;
  bool data_plane_declined = false;
  std::unique_ptr<SharedRegion> region;  // set while the connection moves tensors through it
  bool share_asked = false;              // this connection has asked for a region
  std::vector<Run> runs;
  size_t floats = 0;
  uint64_t fingerprint = 0;
  // The iovecs of one request (header, then the runs), kept so a step allocates none.
  std::vector<iovec> send_parts;
  std::string context(const char* what) const;
};

// What one exchange reads (the step's gradients and buffer values) and where it writes the reply
// (weights in the trainer's fused layout, buffer values).
struct ExchangeBuffers {
  const float* gradients = nullptr;
  const float* buffers_out = nullptr;
  float* parameters_in = nullptr;
  float* buffers_in = nullptr;
};

// What a push says about itself (PushHeader), apart from the worker.
struct PushFields {
  int64_t clock = 0;
  int64_t samples = 0;
  double lr = 0;
  // The version the gradients were computed on; < 0: each partition's installed_version.
  int64_t version = -1;
};

class PartitionClients {
 public:
  ~PartitionClients();  // closes the data-plane connections

  // The partition plan is computed from the trainer's parameters() then buffers(), as the
  // servers compute it from a whole-model checkpoint.
  static absl::StatusOr<std::unique_ptr<PartitionClients>> Create(
      const PartitionClientsOptions& options, const Trainer& trainer);

  size_t parameter_floats() const { return parameter_floats_; }
  size_t buffer_floats() const { return buffer_floats_; }
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
  // The job's sample budget as the last replies reported it: any partition that has reached it
  // ends the job. `has_budget`: some partition has one.
  void ReadBudget(bool* has_budget, bool* budget_spent) const;

 private:
  PartitionClients(PartitionClientsOptions options, std::vector<ModelTensor> model,
                   std::vector<ServerLink> servers, size_t parameter_floats, size_t buffer_floats)
      : options_(std::move(options)),
        model_(std::move(model)),
        servers_(std::move(servers)),
        parameter_floats_(parameter_floats),
        buffer_floats_(buffer_floats) {}

  std::unique_ptr<grpc::ClientContext> NewContext() const;
  template <typename Stream>
  absl::Status Receive(ServerLink& s, float* parameters, float* buffers, Stream* stream);
  template <typename Stream>
  absl::Status WritePush(ServerLink& s, const PushFields& fields, const float* gradients,
                         const float* buffers, Stream* stream);
  absl::Status PushPullWith(ServerLink& s, const PushFields& fields, const ExchangeBuffers& x);
  // The plain-TCP data plane: connects (once; false in *usable when the server is to be served
  // over gRPC), then one request and its reply. An exchange sends x.gradients and
  // x.buffers_out; a pull (fields == nullptr) sends nothing. Any failure closes the connection.
  absl::Status OpenDataPlane(ServerLink& s, bool* usable);
  // Before a connection's first exchange: asks for a shared region and attaches it if the server
  // is on this host (s.region); a server elsewhere leaves s.region empty. Errors are the
  // connection's.
  absl::Status AttachSharedRegion(ServerLink& s);
  // A data-plane request of `kind` from this worker to `s`: its layout, its deadline.
  push_pull_wire::Request RequestTo(const ServerLink& s, push_pull_wire::RequestKind kind) const;
  absl::Status CallDataPlane(ServerLink& s, const PushFields* fields, const ExchangeBuffers& x);

  const PartitionClientsOptions options_;
  const std::vector<ModelTensor> model_;
  std::vector<ServerLink> servers_;
  const size_t parameter_floats_, buffer_floats_;
};

}  // namespace strata
