// The ring's link over plain TCP, with gRPC as its control plane only: what gloo and NCCL do
// between machines. Each rank keeps one long-lived TCP connection to the next rank and accepts one
// from the previous rank; segments travel on it as small fixed headers followed by the floats,
// written straight from the caller's buffer (sendmsg) and applied straight to it on arrival
// (ApplyInPlace: the all-gather read into place, the reduce-scatter added in cache-sized pieces),
// or else read into receive buffers reused from one segment to the next. There is no
// per-operation stream to open, no HTTP/2 framing or flow control, and no message parsing.
//
// Finding and trusting the peer: the next rank's gRPC service (Collective.DataPlane, which carries
// the run token like every call) hands out its data-plane port and a random ticket; the
// connection presents the ticket first and is closed if it does not match. The connection itself
// is not encrypted, so a process with TLS on keeps the ring on gRPC (MakeWorkerRing in
// services/worker/worker.cc decides). A broken connection is dialled again at the next operation,
// so the ring re-forms over it like over gRPC (RingAllReduce::Reform).
//
// Deadlines and failures keep the gRPC link's meaning: a next rank that cannot be reached fails
// the operation by the deadline, naming it; a previous rank whose connection closes mid-operation
// ends that operation's stream at once; an acknowledgement is the receiver having read the
// operation's end. tcp_frame.h has the wire format.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <absl/status/statusor.h>

#include "services/collective/ring_link.h"

namespace strata {

struct TcpRingLinkOptions {
  // Where the data plane listens: the host part of the worker's gRPC address ("0.0.0.0" in a
  // container, "127.0.0.1" for local processes).
  std::string listen_host = "127.0.0.1";
  // SO_SNDBUF of the connection to the next rank (the kernel doubles it); 0 leaves the kernel's
  // autotuning. A small buffer keeps the bytes in cache between the sender's copy into the socket
  // and the receiver's copy out: on loopback, 256 KiB gave 5-15% more busbw than autotuning (which
  // grows to megabytes) and than 1-16 MiB (docs/benchmarks.md). Between machines whose
  // bandwidth-delay product is above ~0.5 MB, raise it.
  int send_buffer_bytes = 256 << 10;
};

class TcpRingLink final : public RingLink {
 public:
  // Listens at once (on an ephemeral port); fails if it cannot.
  static absl::StatusOr<std::unique_ptr<TcpRingLink>> Create(const TcpRingLinkOptions& options);
  // Closes every connection and waits for the link's threads.
  ~TcpRingLink() override;
  TcpRingLink(const TcpRingLink&) = delete;
  TcpRingLink& operator=(const TcpRingLink&) = delete;

  // Answers Collective.DataPlane. Register it on the process's gRPC server before any peer starts
  // an operation; the server must be shut down before this link is destroyed.
  grpc::Service* service() override;
  int data_port() const;

  absl::Status Connect(int rank, const std::vector<std::string>& peers) override;
  void AnnounceGeneration(uint32_t generation) override;
  std::unique_ptr<Operation> Begin(uint64_t operation, std::chrono::milliseconds lifetime,
                                   std::chrono::milliseconds grace) override;

  struct Impl;  // defined in the .cc

 private:
  explicit TcpRingLink(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata
