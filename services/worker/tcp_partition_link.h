// Push/pull over the parameter server's plain-TCP data plane (services/parameter_server/
// tcp_push_pull_server.h, wire format in services/common/wire/push_pull_frame.h), with gRPC as
// its control plane: ParameterServer.DataPlane hands out the port and a ticket, and the link opens
// one connection, presents the ticket in its hello, and then sends a request and reads its reply
// at a time. The push goes straight from the trainer's memory (one iovec per run of consecutive
// floats) and the reply is read straight into it.
//
// With shared memory (strategy.ps_link: shm) the link asks the server for a region before the
// connection's first exchange and, where the server runs on this host, moves the tensors through
// it: the socket then carries only the headers (services/common/wire/shared_region.h). A server
// elsewhere keeps them on the socket.
//
// With strategy.push_compression fp16 an exchange on the socket carries the gradients and the
// reply the weights as 16-bit floats (the buffer values stay 32-bit); through shared memory,
// where bytes cost no network, and over gRPC they stay 32-bit.
//
// A server that offers no data plane (its job says ps_link: grpc, or TLS is on), or whose data
// plane cannot be reached, is served over gRPC by the same link, with a warning; a server that is
// down (UNAVAILABLE, DEADLINE_EXCEEDED when asked) is the caller's to wait for. Any failure of
// the connection closes it; the next call opens a new one.
#pragma once

#include <sys/uio.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include <grpcpp/channel.h>

#include "services/common/wire/push_pull_frame.h"
#include "services/common/wire/shared_region.h"
#include "services/worker/grpc_partition_link.h"
#include "services/worker/partition_block.h"
#include "services/worker/partition_link.h"
#include "strata/v1/parameter_server.grpc.pb.h"

namespace strata {

class TcpPartitionLink final : public PartitionLink {
 public:
  // `channel` reaches the server's gRPC service: DataPlane, and the fallback.
  TcpPartitionLink(PartitionLinkOptions options, bool shared_memory,
                   std::shared_ptr<grpc::Channel> channel);
  ~TcpPartitionLink() override;  // closes the connection
  TcpPartitionLink(const TcpPartitionLink&) = delete;
  TcpPartitionLink& operator=(const TcpPartitionLink&) = delete;

  absl::StatusOr<PartitionReply> Exchange(const PushFields& fields, const ExchangeBuffers& x,
                                          const PartitionCallOptions& call) override;
  absl::StatusOr<PartitionReply> Pull(int64_t clock, float* parameters, float* buffers,
                                      const PartitionCallOptions& call) override;
  // Always over gRPC: PDP's round update is rare, and the data plane has no push alone.
  absl::StatusOr<int64_t> Push(const PushFields& fields, const float* gradients,
                               const float* buffers, const PartitionCallOptions& call) override;
  std::string Path() const override;

 private:
  // Connects (once; false when the server is to be served over gRPC instead).
  absl::StatusOr<bool> Open(const PartitionCallOptions& call);
  // Before a connection's first exchange: asks for a shared region and attaches it if the server
  // is on this host (region_); a server elsewhere leaves region_ empty. Errors are the
  // connection's.
  absl::Status AttachSharedRegion(const PartitionCallOptions& call);
  // A request of `kind` from this worker: its layout, its deadline.
  push_pull_wire::Request RequestOf(push_pull_wire::RequestKind kind,
                                    const PartitionCallOptions& call) const;
  // One request and its reply. An exchange (fields set) sends x.gradients and x.buffers_out; a
  // pull (fields == nullptr) sends nothing. Any failure closes the connection.
  absl::StatusOr<PartitionReply> Call(const PushFields* fields, const ExchangeBuffers& x,
                                      const PartitionCallOptions& call);
  // The socket's timeouts follow the call's deadline (set again only when it changes).
  void SetSocketDeadline(std::chrono::milliseconds deadline);
  void SetPath(std::string path);
  // Path() while the tensors go on the socket: "tcp", or "tcp, 16-bit" for 16-bit exchanges.
  std::string SocketPath() const;

  const PartitionLinkOptions options_;
  const bool shared_memory_;
  const std::unique_ptr<v1::ParameterServer::Stub> control_;
  GrpcPartitionLink fallback_;
  const PartitionBlock block_;  // the partition's floats, and the layout the server checks

  int data_fd_ = -1;       // -1: none yet, or closed after an error
  bool declined_ = false;  // served over gRPC from now on
  std::chrono::milliseconds socket_deadline_{0};
  std::unique_ptr<SharedRegion> region_;  // set while the connection moves tensors through it
  bool share_asked_ = false;              // this connection has asked for a region
  // Path(): what the last connection decided. Its own lock: a pipelined push/pull reads it on the
  // training thread while the partition's thread may be connecting.
  mutable std::mutex path_mu_;
  std::string path_ = "not connected yet";
  // The iovecs of one request (header, then the runs), kept so a step allocates none.
  std::vector<iovec> send_parts_;
  // 16-bit exchanges: the gradients as sent, the weights as received.
  std::vector<uint16_t> push_halves_, pull_halves_;
  bool warned_full_precision_ = false;
};

}  // namespace strata
