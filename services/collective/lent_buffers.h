// How the two network links (grpc_ring_link.cc, tcp_ring_link.cc) end an operation, in one order
// for both (NetworkOperation), and how they wait while their transport may still hold memory the
// caller lent it (AwaitLentBuffers): the send buffers of RingLink::Operation::
// Send, or (the TCP link) the buffer a reader applies segments to in place. Finish() and Abandon()
// may return only once the transport has let go, or the caller would free memory it still reads
// or writes. A healthy transport lets go at once; one stuck on a peer that reads nothing lets go
// once cancelled (its stream cancelled, its connection shut). One that does not even then is a
// bug, and the process stops, loudly, rather than risk a use after free.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "services/collective/ring_link.h"

namespace strata {

// How long a cancelled transport may take to let go before the process aborts. Not seen in
// practice: gRPC releases a cancelled call's messages at once, and a shut socket fails the
// writer's and the readers' calls at once.
inline constexpr std::chrono::seconds kLentBuffersLimit{30};

// Who keeps the buffers and what cancelling them meant, for the message before the abort:
// "ring all-reduce operation <operation> on rank <rank>: <kept> 30 s after <cancelled>; aborting".
struct LentBuffers {
  uint64_t operation = 0;
  int rank = 0;
  const char* kept = "";       // "gRPC kept the send buffers"
  const char* cancelled = "";  // "cancelling"
};

// `returned(until)` waits until `until` for the transport to let go and says whether it did;
// `cancel()` makes it let go. Waits `grace`, cancels, waits kLentBuffersLimit, and aborts.
template <typename Returned, typename Cancel>
void AwaitLentBuffers(const LentBuffers& lent, std::chrono::milliseconds grace, Returned&& returned,
                      Cancel&& cancel) {
  if (returned(RingClock::now() + grace)) return;
  cancel();
  if (returned(RingClock::now() + kLentBuffersLimit)) return;
  std::fprintf(stderr, "ring all-reduce operation %llu on rank %d: %s %lld s after %s; aborting\n",
               static_cast<unsigned long long>(lent.operation), lent.rank, lent.kept,
               static_cast<long long>(kLentBuffersLimit.count()), lent.cancelled);
  std::abort();
}

// An operation of a network link, ended in one order whichever way it ends: the stream to the
// next rank is closed; Finish waits for the next rank's acknowledgement; then every lent buffer
// comes back (the link's AwaitLentSegments, built on AwaitLentBuffers) and what is left of the
// operation is dropped (Retire). A link implements the steps; its destructor calls
// AbandonIfOpen() (the base's destructor cannot: the steps are gone by then).
class NetworkOperation : public RingLink::Operation {
 public:
  Completion Finish(RingClock::time_point until) final {
    ended_ = true;
    CloseStream(/*finishing=*/true);
    const Completion completion = AwaitAcknowledgement(until);
    AwaitLentSegments();
    Retire();
    return completion;
  }
  void Abandon() final {
    ended_ = true;
    CloseStream(/*finishing=*/false);
    AwaitLentSegments();
    Retire();
  }

 protected:
  void AbandonIfOpen() {
    if (!ended_) Abandon();
  }
  // Ends the stream to the next rank behind what is queued; `finishing`: Finish will wait for its
  // acknowledgement next, else nobody waits for the stream.
  virtual void CloseStream(bool finishing) = 0;
  virtual Completion AwaitAcknowledgement(RingClock::time_point until) = 0;
  // Returns once the transport holds none of the caller's memory (AwaitLentBuffers).
  virtual void AwaitLentSegments() = 0;
  // Drops what is left of this operation (and earlier ones) on this rank.
  virtual void Retire() = 0;

 private:
  bool ended_ = false;
};

}  // namespace strata
