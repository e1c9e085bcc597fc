// Joins the ranks of one process into a ring without any transport, for tests: a segment is copied
// into the next rank's inbox when it is sent, and handed out in a few unaligned pieces (as gRPC's
// slices may be) so that the algorithm's reassembly of straddling floats is exercised too.
//
// Faults can be injected at any time, from any thread: a rank can die (at once, or as it sends a
// given segment, which is a peer killed in the middle of an operation), fall silent (it runs, but
// nothing it sends arrives: a hung connection), or lag (everything it sends arrives later).
//
//   InMemoryRing ring(3);
//   RingAllReduce rank0(0, ring.Link(0));  // ... one per rank, then Connect({"a", "b", "c"})
//   ring.Kill(2);
#pragma once

#include <chrono>
#include <memory>

#include "services/collective/ring_link.h"

namespace strata {

class InMemoryRing {
 public:
  explicit InMemoryRing(int world);
  ~InMemoryRing();
  InMemoryRing(const InMemoryRing&) = delete;
  InMemoryRing& operator=(const InMemoryRing&) = delete;

  // The link of `rank`, to give to its RingAllReduce. It may outlive this object.
  std::unique_ptr<RingLink> Link(int rank);

  // The rank's process is gone: sending to it fails at once, its open streams end, and whatever
  // it sends is lost.
  void Kill(int rank);
  // A new process in the place of `rank` (which died): it starts with nothing received, and its
  // neighbours reach it again once they connect anew (RingAllReduce::Reform). Its link.
  std::unique_ptr<RingLink> Replace(int rank);
  // The rank dies as it tries to send its (segments + 1)-th message, counted from now over every
  // operation (aborts included).
  void KillAfterSending(int rank, int segments);
  // Nothing the rank sends arrives, and its streams never end or get acknowledged.
  void Silence(int rank);
  // Everything the rank sends from now on arrives `delay` later.
  void Delay(int rank, std::chrono::milliseconds delay);

  struct State;  // defined in the .cc; public so that its links can reach it

 private:
  std::shared_ptr<State> state_;
};

}  // namespace strata
