// Ring all-reduce of a float buffer between the workers of a job. No LibTorch: it works on raw
// float buffers, such as the trainer's fused gradient buffer. The algorithm talks to its
// neighbours only through a RingLink (ring_link.h): over gRPC by default (grpc_ring_link.h), or
// over any other link, such as the in-memory one the tests use to inject faults.
//
// Each operation is a reduce-scatter (world-1 steps) followed by an all-gather (world-1 steps)
// over the buffer cut into `world` chunks; each chunk travels in segments so that sending,
// receiving and adding overlap. Every rank sends 2(world-1)/world of the buffer per operation.
// docs/algorithms.md has the details and the measured figures.
//
// Usage: create it before the peers are known, register service() on the process's gRPC server,
// Connect() once every rank's address is known, then call AllReduceAverage() on every rank with
// the same size. Operations are numbered on each rank in call order, so every rank must issue the
// same sequence of operations. One operation at a time per instance. A process that runs the ring
// over gRPC should call TuneAllocatorForRing() (grpc_ring_link.h) once at start.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <absl/status/status.h>

#include "services/collective/ring_link.h"

namespace grpc {
class Service;
}

namespace strata {

struct AllReduceOptions {
  // The whole operation must finish within this time; otherwise it fails with an error naming
  // the rank that did not answer.
  std::chrono::milliseconds deadline{60000};
  // Payload per message; 0 picks it from the buffer's size (AutoSegmentBytes). Smaller segments
  // overlap sending, receiving and adding better but cost per-message overhead.
  size_t segment_bytes = 0;
  // Every value a rank sends is first rounded, in its own buffer, to the nearest 16-bit float, so
  // that a link may send it in 16 bits (TcpRingLink does) and every rank still ends with the same
  // values; the result is the average of the ranks' values with the rounding of each partial sum
  // on the way (strategy.ring_compression: fp16).
  bool half_precision = false;
};

// The segment size of an operation on `floats` floats over `world` ranks when the options leave
// it at 0: half a chunk (a chunk is floats / world), at least 1 MiB and at most 8 MiB. Measured on
// loopback: 1 MiB beat 64 and 256 KiB everywhere, and for 25 MiB with 4 ranks half-chunk segments
// (3.2 MiB) beat 1 MiB by 5-13% (docs/algorithms.md).
size_t AutoSegmentBytes(size_t floats, int world);

// The operation failed because a value was beyond a 16-bit float's range (half_precision), on
// this rank or a peer: the ring is whole, and re-forming it would change nothing.
bool BeyondHalfRange(const absl::Status& status);

class RingAllReduce {
 public:
  // Over gRPC (GrpcRingLink).
  explicit RingAllReduce(int rank);
  // Over `link`.
  RingAllReduce(int rank, std::unique_ptr<RingLink> link);
  ~RingAllReduce();
  RingAllReduce(const RingAllReduce&) = delete;
  RingAllReduce& operator=(const RingAllReduce&) = delete;

  // The link's gRPC service (RingLink::service(): the Collective service receiving the previous
  // rank's segments over gRPC, or handing out the data plane over TCP; nullptr in memory). Register
  // it on the process's gRPC server before any peer starts an operation; the server must be shut
  // down before this object is destroyed.
  grpc::Service* service();

  // `peers` holds the host:port of every rank, by rank (this rank's own entry included), or over
  // another link whatever names it gives them. Only the next rank is dialled; the previous rank's
  // name is used in error messages.
  absl::Status Connect(const std::vector<std::string>& peers);

  // Replaces data[0..n) on every rank with the element-wise average over the ranks. Every rank
  // ends with the same bits. A world of one returns at once.
  absl::Status AllReduceAverage(float* data, size_t n, const AllReduceOptions& options);
  // The same with the sum. With zeros on every rank but one, this is a broadcast from that rank
  // (adding zeros is exact).
  absl::Status AllReduceSum(float* data, size_t n, const AllReduceOptions& options);

  // Connects again after the ring broke (a peer died and was replaced at the same address):
  // clears an Interrupt and numbers the operations from here on in `generation` (operation
  // generation << 32, + 1, ...), so that every member of the new ring, a fresh replacement
  // included, agrees on the numbers, and what is left of the broken generation's operations is
  // dropped wherever it arrives. `generation` must be above every one this ring was in. Called
  // between operations, on the thread that runs them.
  absl::Status Reform(const std::vector<std::string>& peers, uint32_t generation);

  int rank() const;
  int world() const;  // 0 before Connect
  uint32_t generation() const;

  // From any thread: the ring cannot complete any more (the orchestrator reports a peer dead).
  // The operation waiting for data now, and every later one, fails at once with UNAVAILABLE and
  // `reason` instead of waiting out its deadline for a peer that will not send.
  void Interrupt(const std::string& reason);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata
