// The seam between the ring all-reduce algorithm (ring_allreduce.cc) and the way its segments
// travel between neighbours. The algorithm knows buffers, steps and ranks; a RingLink knows
// streams, sockets and acknowledgements. Three links exist: GrpcRingLink (grpc_ring_link.h), what
// workers and benchmarks use by default, TcpRingLink (tcp_ring_link.h), segments over plain TCP
// with gRPC as the control plane, and InMemoryRing (in_memory_ring_link.h), which joins N ranks of
// one process and can make a rank die, fall silent or lag, for tests.
//
// A link carries one operation at a time per rank: Begin() opens it towards the next rank and
// starts taking the previous rank's segments for it; Finish() or Abandon() ends it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <absl/status/status.h>
#include <absl/types/span.h>

namespace grpc {
class Service;
}

namespace strata {

using RingClock = std::chrono::steady_clock;

// Where a segment belongs (the header fields of RingSegment in proto/strata/v1/collective.proto).
// An operation number is (generation << kRingGenerationShift) + its index in the generation. A
// ring starts in generation 0 and moves to a higher one each time it is re-formed after losing a
// member (RingAllReduce::Reform): a receiver then takes the first operations of a higher
// generation and drops whatever is left of the lower one.
constexpr int kRingGenerationShift = 32;

struct SegmentHeader {
  uint64_t operation = 0;  // the sender's operation number, in call order (generation above)
  uint32_t sender = 0;
  uint32_t world = 0;
  uint64_t count = 0;  // floats in the whole buffer
  uint32_t step = 0;
  uint64_t offset = 0;  // index of the segment's first float in the buffer
};

// A segment received from the previous rank. The payload is not copied out of what the link
// received: `pieces` point into it (a float may straddle two pieces) and stay valid until the next
// Receive on the same operation, or its end. The vector keeps its capacity between calls, so a
// caller that reuses one RingSegment allocates nothing per segment.
struct RingSegment {
  SegmentHeader header;
  std::string abort;  // set when the sender gave up on the operation: its reason
  bool has_data = false;
  size_t data_bytes = 0;
  std::vector<absl::Span<const uint8_t>> pieces;
  // The link has already applied the payload to the buffer named by Operation::ApplyInPlace
  // (pieces is then empty).
  bool in_place = false;
};

// How a link may apply an operation's segments in place (Operation::ApplyInPlace): `buffer` holds
// the operation's `count` floats; a segment of a step below `copy_from_step` is added into
// buffer[offset..) (the reduce-scatter), and when `divisor` is not 0 the sums of step
// copy_from_step - 1 are then divided by it (the average); a segment of step copy_from_step or
// later replaces the values there (the all-gather). This is the algorithm's own arithmetic, in the
// same order, so the result is the same to the bit. It is safe because the ring touches a range
// at no other time while a segment for it can arrive: a rank receives a partial chunk before it
// ever sends that chunk, and a final chunk only after its own contribution went round the ring.
struct InPlacePlan {
  float* buffer = nullptr;
  size_t count = 0;
  uint32_t copy_from_step = 0;
  float divisor = 0;
};

class RingLink {
 public:
  // One operation's traffic: a stream to the next rank and the segments from the previous one.
  class Operation {
   public:
    // Why Receive returned.
    enum class Received {
      kSegment,        // *out holds the next segment
      kPreviousEnded,  // the previous rank's stream ended before this segment (it failed or left)
      kTimedOut,       // nothing arrived before `until`
      kSendFailed,     // the stream to the next rank broke: SendError() says why
    };
    // How Finish ended.
    enum class Completion {
      kAcknowledged,     // the next rank received the whole stream
      kNotAcknowledged,  // it did not say so before `until`
      kSendFailed,       // the stream to it broke: SendError() says why
    };

    // Ends the operation like Abandon() if neither Finish() nor Abandon() was called.
    virtual ~Operation() = default;

    // Queues data[0..floats) for the next rank without copying it: the floats are lent to the
    // link until Finish() or Abandon() returns. The caller must not change them before they are
    // sent; the ring writes into a range again only after a causally later segment arrived.
    virtual void Send(const SegmentHeader& header, const float* data, size_t floats) = 0;
    // Sends the reason this rank gave up (copied), behind anything already queued.
    virtual void SendAbort(const SegmentHeader& header, const std::string& reason) = 0;
    // Forgets the segments not yet handed to the transport (after a failure, the next rank cannot
    // use them; an abort should overtake them).
    virtual void DropUnsent() = 0;

    // Lets the link apply this operation's segments itself, as they arrive, instead of handing
    // out their payload to apply; such a segment comes back with in_place set (see InPlacePlan).
    // The buffer must stay valid until Finish() or Abandon() returns. A link may ignore this.
    virtual void ApplyInPlace(const InPlacePlan& plan) {}
    // Every value this operation sends is a 16-bit float's (AllReduceOptions::half_precision): a
    // link may send them in 16 bits, losing nothing; one that ignores this sends the floats.
    virtual void SendInHalfPrecision() {}

    // Waits until `until` for the previous rank's next segment of this operation, in send order.
    virtual Received Receive(RingClock::time_point until, RingSegment* out) = 0;
    // After a failure: waits until `until` for the next abort from the previous rank, skipping its
    // data segments. False once the previous rank's stream has ended or `until` passed.
    virtual bool ReceiveAbort(RingClock::time_point until, std::string* reason) = 0;
    // Why the stream to the next rank broke, with the transport's code (waits briefly for the
    // transport to say, so the error can tell a refusal from a reset).
    virtual absl::Status SendError() = 0;

    // The operation succeeded on this rank: closes the stream and waits until `until` for the next
    // rank to acknowledge it. Returns once every lent segment is back.
    virtual Completion Finish(RingClock::time_point until) = 0;
    // The operation failed on this rank: closes the stream without waiting for the next rank.
    // Returns once every lent segment is back.
    virtual void Abandon() = 0;
  };

  virtual ~RingLink() = default;

  // The gRPC service this link's peers call (the caller registers it on the process's server), or
  // nullptr for a link that needs none.
  virtual grpc::Service* service() { return nullptr; }

  // Called before the first operation, and again when the ring is re-formed (the next rank may be
  // a new process at the same address). `peers` names every rank by rank, this one's own
  // included (for gRPC, host:port or unix-abstract:NAME); it has been checked to be non-empty,
  // to contain this rank and to have no empty name.
  virtual absl::Status Connect(int rank, const std::vector<std::string>& peers) = 0;

  // The ring has been re-formed into `generation` (RingAllReduce::Reform, on the orchestrator's
  // ReformRing or a replacement's Start): the link drops what is left of earlier generations and
  // takes this one's operations. A link takes segments of a generation no re-formation announced
  // (beyond the next one's first operations, queued until it is announced) from nobody.
  virtual void AnnounceGeneration(uint32_t /*generation*/) {}

  // Opens operation `operation` (0, 1, ... in call order; segments of earlier operations that
  // still arrive are dropped). The link keeps the stream open for `lifetime`, the operation's
  // deadline and the grace after it in which an abort may still travel; `grace` also bounds how
  // long Finish() and Abandon() wait for lent segments before cancelling the stream.
  virtual std::unique_ptr<Operation> Begin(uint64_t operation, std::chrono::milliseconds lifetime,
                                           std::chrono::milliseconds grace) = 0;
};

}  // namespace strata
