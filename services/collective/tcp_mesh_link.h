// The stream replicas' gradient mesh on plain TCP (mesh_frame.h has the wire): what the ring's
// TCP link is to its gRPC link. gRPC stays the control plane: a replica's StreamReplica.DataPlane
// (which carries the run token) hands out its data-plane port and a random ticket for the rank
// that asks, and a connection that does not first present the ticket of the rank it names is
// closed. The gradients' values go from the
// sender's buffer to the socket (sendmsg, no serialisation) and from the socket straight into the
// message the receiver applies them from, without HTTP/2's framing and flow-control window: the
// socket buffers are what is in flight, and a receiver whose inbox is full stops reading, which
// holds the sender (TCP's own flow control).
//
// The connection is not encrypted, so with TLS on the mesh stays on gRPC (stream_replica.cc
// decides). Anyone who can reach the port can connect: connections wait for their hello in the
// HelloGate's pool, apart from the admitted ones, and at most one connection per peer rank is
// admitted.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <absl/status/statusor.h>

#include "services/collective/mesh_link.h"
#include "services/common/wire/tcp_socket.h"

namespace strata {

struct TcpMeshPlaneOptions {
  // Where the data plane listens: the host part of the replica's gRPC address.
  std::string listen_host = "127.0.0.1";
  int rank = 0;
  int world = 1;
  size_t parameter_floats = 0;  // every gradient's size; a frame announcing another is refused
};

// The receiving side: a listening socket, its hello gate, and a thread per admitted peer that
// reads frames into StreamGradient messages and hands each to `deliver`.
class TcpMeshPlane {
 public:
  // Takes a message the peer `from` (its hello's rank) sent; blocks while the inbox is full.
  // Returns an error to end the connection (the message broke the protocol, or the mesh closes).
  using Deliver =
      std::function<absl::Status(std::unique_ptr<v1::StreamGradient> message, uint32_t from)>;

  // Listens at once on an ephemeral port.
  static absl::StatusOr<std::unique_ptr<TcpMeshPlane>> Start(const TcpMeshPlaneOptions& options,
                                                             Deliver deliver);
  ~TcpMeshPlane();  // Stop()
  TcpMeshPlane(const TcpMeshPlane&) = delete;
  TcpMeshPlane& operator=(const TcpMeshPlane&) = delete;

  int port() const;
  // The ticket that admits peer rank `sender` and no other; null for this replica's own rank or
  // one outside the job.
  const tcp::Ticket* ticket(uint32_t sender) const;
  // Gradient messages whose values came as 16-bit floats.
  int64_t received_in_halves() const;
  // Closes the connection of replica `sender`, if one is admitted, and joins its reader; `deliver`
  // must return promptly for it by then. A new connection of that rank may follow.
  void Forget(uint32_t sender);
  // Closes the listening socket and every connection, and joins the threads. `deliver` must
  // return promptly by then (the mesh wakes the readers waiting for room).
  void Stop();

  struct Impl;  // defined in the .cc

 private:
  explicit TcpMeshPlane(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

struct TcpMeshSenderOptions {
  uint32_t rank = 0;  // the sending replica
  // Bounds the dial, each blocked send, and each wait for the peer's acks.
  std::chrono::milliseconds deadline{120000};
  // > 0: a Send waits while that many messages are sent and not yet taken by the peer
  // (acknowledged once in its inbox), a bound on what travels that gRPC's client stream does not
  // have. 0: no bound.
  uint32_t max_in_flight = 0;
  // Gradients' values as 16-bit floats (strategy.push_compression fp16) when every one converts
  // to a finite half; else that message goes in 32 bits.
  bool half_precision = false;
};

// The sending side of one connection to the data plane a peer offered at host:port.
absl::StatusOr<std::unique_ptr<GradientSender>> DialTcpMeshPeer(
    const std::string& host, int port, const tcp::Ticket& ticket,
    const TcpMeshSenderOptions& options);

}  // namespace strata
