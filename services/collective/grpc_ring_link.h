// The ring's link over gRPC (the Collective service of proto/strata/v1/collective.proto): every
// operation opens one client stream to the next rank, writes its segments in order, half-closes
// and waits for the acknowledgement the next rank sends once it has read the whole stream. The
// previous rank's streams arrive at service(), which queues their segments by operation.
//
// Tuned against gloo on loopback (docs/algorithms.md): payloads are lent to gRPC from the caller's
// buffer and read where gRPC received them (no copies), gRPC's retries are off (they would hold
// lent segments until the call is destroyed), and a next rank at unix-abstract:NAME is dialled by
// our own socket with a large send buffer.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "services/collective/ring_link.h"

namespace grpc {
class Service;
}

namespace strata {

class GrpcRingLink final : public RingLink {
 public:
  GrpcRingLink();
  // Cancels the streams of failed operations that may still be open and waits for gRPC to finish
  // with them, so that no callback runs after the process starts tearing gRPC down.
  ~GrpcRingLink() override;
  GrpcRingLink(const GrpcRingLink&) = delete;
  GrpcRingLink& operator=(const GrpcRingLink&) = delete;

  // Receives the previous rank's segments. Register it on the process's gRPC server before any
  // peer starts an operation; the server must be shut down before this link is destroyed.
  grpc::Service* service() override;

  // Dials only the next rank; the other names are for error messages.
  absl::Status Connect(int rank, const std::vector<std::string>& peers) override;
  void AnnounceGeneration(uint32_t generation) override;
  std::unique_ptr<Operation> Begin(uint64_t operation, std::chrono::milliseconds lifetime,
                                   std::chrono::milliseconds grace) override;

  struct Impl;  // defined in the .cc; public so that its operations can reach it

 private:
  std::unique_ptr<Impl> impl_;
};

// Keeps gRPC's receive buffers of a few hundred KiB on the heap (glibc's mallopt). Above glibc's
// default 128 KiB threshold each one is a fresh mmap whose pages fault in one by one (zeroed), and
// freed heap tops are trimmed back to the kernel: measured (when segments were still copied into
// fresh buffers too) as ~10% of the CPU time of an operation and up to 30% lower bandwidth.
// Process-wide, so a process that runs the ring calls it once at start, before its threads.
void TuneAllocatorForRing();

}  // namespace strata
