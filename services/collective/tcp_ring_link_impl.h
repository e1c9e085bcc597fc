// The inside of the plain-TCP ring link (tcp_ring_link.h), shared by its three files and by no
// one else: the state every thread works on under one mutex (TcpRingLink::Impl), and what travels
// between the threads. tcp_ring_link.cc holds the link and the operations (the ledger of what is
// queued, lent and acknowledged); tcp_ring_link_receive.cc the accepting thread and one reading
// thread per connection from the previous rank; tcp_ring_link_send.cc the writer thread and the
// thread that reads the next rank's acks.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <absl/status/status.h>
#include <grpcpp/grpcpp.h>

#include "services/collective/ring_link.h"
#include "services/collective/tcp_frame.h"
#include "services/collective/tcp_ring_link.h"
#include "services/collective/tsan_handoff.h"
#include "services/common/wire/tcp_hello_gate.h"
#include "services/common/wire/tcp_socket.h"
#include "strata/v1/collective.grpc.pb.h"

namespace strata {
namespace tcp_ring {

// What a receiver keeps before its operation thread takes it, as on the gRPC link: a ring peer
// is never more than an operation or two ahead, so the bounds stop only a sender that is not one.
inline constexpr uint64_t kOperationWindow = 16;
inline constexpr size_t kMaxQueuedSegments = size_t{1} << 14;   // per operation
inline constexpr uint64_t kMaxQueuedBytes = uint64_t{2} << 30;  // over all operations
// Admitted connections held at once: the previous rank's, a replacement's after a re-formation,
// and one or two that have not noticed yet; a newer one ends the oldest. Connections that have
// not said hello yet wait apart, at the HelloGate, and take none of these.
inline constexpr size_t kMaxConnections = 4;
inline constexpr size_t kMaxPendingConnections = 64;
inline constexpr std::chrono::seconds kHelloTimeout{10};  // the whole hello, from accept
inline constexpr size_t kSpareBuffers = 8;                // receive buffers kept for reuse
inline constexpr std::chrono::seconds kDrainLimit{5};

// A receive buffer, allocated without zeroing and reused from one segment to the next.
struct Buffer {
  std::unique_ptr<uint8_t[]> bytes;
  size_t capacity = 0;
  size_t size = 0;
};

struct QueuedSegment {
  SegmentHeader header;
  std::string abort;
  Buffer payload;
  bool has_data = false;
  bool in_place = false;  // applied straight to the operation's buffer (ApplyInPlace)
  size_t in_place_bytes = 0;
};

// Segments received for one operation, in send order.
struct Inbox {
  std::deque<QueuedSegment> segments;
  bool ended = false;  // the sender ended the operation, or its connection closed during it
};

// A frame waiting for the writer thread.
struct OutFrame {
  uint8_t header[kFrameHeaderBytes];
  const uint8_t* lent = nullptr;  // a data frame's floats, the caller's until written
  size_t lent_bytes = 0;
  bool half = false;  // the floats go out as 16-bit floats (a kHalfData frame)
  std::string owned;  // an abort's reason
  uint64_t operation = 0;
  uint64_t epoch = 0;           // the connection it must go on (TcpRingLink::Impl::epoch)
  RingClock::time_point until;  // the operation's lifetime: how long dialling may take
};

inline OutFrame MakeFrame(FrameKind kind, const SegmentHeader& header, uint64_t payload_bytes) {
  OutFrame out;
  EncodeFrame(Frame{kind, header, payload_bytes}, out.header);
  out.operation = header.operation;
  return out;
}

class DataPlaneService final : public v1::Collective::CallbackService {
 public:
  DataPlaneService(int port, const tcp::Ticket& ticket)
      : port_(port), ticket_(ticket.begin(), ticket.end()) {
    TsanRelease(this);  // gRPC's threads call DataPlane() once the server that holds it started
  }
  grpc::ServerUnaryReactor* DataPlane(grpc::CallbackServerContext* context,
                                      const v1::DataPlaneRequest* /*request*/,
                                      v1::DataPlaneOffer* offer) override {
    TsanAcquire(this);
    offer->set_port(static_cast<uint32_t>(port_));
    offer->set_ticket(ticket_);
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

 private:
  const int port_;
  const std::string ticket_;
};

}  // namespace tcp_ring

struct TcpRingLink::Impl {
  using Buffer = tcp_ring::Buffer;
  using Clock = RingClock;
  using Frame = tcp_ring::Frame;
  using FrameKind = tcp_ring::FrameKind;
  static constexpr size_t kFrameHeaderBytes = tcp_ring::kFrameHeaderBytes;
  using Inbox = tcp_ring::Inbox;
  using OutFrame = tcp_ring::OutFrame;
  using QueuedSegment = tcp_ring::QueuedSegment;
  using Ticket = tcp::Ticket;

  Impl(const TcpRingLinkOptions& options, int port, const Ticket& ticket)
      : options(options), port(port), ticket(ticket), service(port, ticket) {}

  const TcpRingLinkOptions options;

  std::mutex mu;
  std::condition_variable cv;         // operation threads wait here
  std::condition_variable writer_cv;  // the writer waits here for frames
  bool stopping = false;

  // ---- receiving: the previous rank's connection ----
  const int port;
  const Ticket ticket;
  std::map<uint64_t, Inbox> inboxes;  // by operation
  uint64_t next_operation = 0;        // lower operations are over: their frames are dropped
  uint64_t queued_bytes = 0;
  // Operations whose frames arrived but whose end (and our ack) has not: the destructor waits for
  // those this rank has finished, so that a rank leaving after its last operation does not reset
  // the previous rank's connection before acknowledging it.
  std::set<uint64_t> unended;
  std::vector<Buffer> spare;
  // Operation::ApplyInPlace: data frames of `place_operation` are applied to `place.buffer` as
  // they are read; place_writers counts the frames under way (on place_fd).
  InPlacePlan place;
  uint64_t place_operation = 0;
  int place_writers = 0;
  int place_fd = -1;
  struct Connection {
    int fd = -1;
    uint32_t sender = 0;  // the rank its hello named: every frame on it must be from that rank
    std::thread thread;
    bool done = false;
  };
  std::list<Connection> connections;
  std::unique_ptr<tcp::HelloGate> gate;

  // The ring's highest generation the orchestrator announced (AnnounceGeneration).
  uint32_t announced_generation = 0;

  // ---- sending: the connection to the next rank, owned by the writer thread ----
  int rank = 0;
  int world = 0;  // 0 until Connect
  std::string next_host;
  std::shared_ptr<v1::Collective::Stub> next_stub;
  // Operations send on connection `epoch`. Begin moves to a new one after a failure (and Connect
  // always), so that a broken connection is dialled again instead of failing every operation.
  uint64_t epoch = 0;
  bool broken = false;  // connection `epoch` failed; send_error says why
  absl::Status send_error;
  int out_fd = -1;
  uint64_t connected_epoch = 0;
  std::thread acker;  // reads the next rank's acks on out_fd
  grpc::ClientContext* dialling = nullptr;
  std::deque<OutFrame> queue;
  std::vector<uint16_t> half_out;  // the writer thread's: a kHalfData frame's values
  std::map<uint64_t, int> lent;    // per operation: data frames queued or being written
  std::set<uint64_t> acked;
  std::thread writer;

  tcp_ring::DataPlaneService service;

  // Everything below is called with `mu` held unless it takes the lock itself
  // (tcp_ring_link.cc).
  Buffer TakeBuffer(size_t bytes);
  void GiveBack(Buffer b);
  // Only the last of an operation's lent frames wakes anyone (AwaitLentSegments waits for it);
  // waking the operation's thread for every frame written would cost a context switch each.
  void ReturnFrame(const OutFrame& f);
  // Connection `at` failed: every operation on it fails, and its unsent frames are given back.
  void MarkBroken(uint64_t at, absl::Status why);
  // Drops what is left of `operation` and earlier ones.
  void Retire(uint64_t operation);

  // The threads' loops: accepting and receiving (tcp_ring_link_receive.cc), writing to the next
  // rank and reading its acks (tcp_ring_link_send.cc).
  // The gate's callback: a hello with this rank's ticket starts a receiving thread.
  bool Admit(int fd, const uint8_t* hello);
  void ReceiveLoop(int fd, uint32_t sender);
  // What one accepted connection's thread keeps between frames.
  struct Incoming {
    bool carrying = false;  // an operation has begun on this connection and not ended
    uint64_t operation = 0;
    bool ended = false;
    std::vector<float> scratch;    // a data frame applied in place is read through it, in pieces
    std::vector<uint16_t> halves;  // a kHalfData frame's values, read in pieces
  };
  absl::Status Receive(int fd, uint32_t sender, Incoming* in);
  // Whether frames of `rank` may be taken now (with `mu` held): the previous rank of the ring as
  // Connect last set it. Before the first Connect nothing is known, and any rank is taken.
  absl::Status CheckSender(uint32_t rank) const;
  absl::Status ReceiveData(int fd, const Frame& frame, Incoming* in, QueuedSegment* out);
  void WriterLoop();
  absl::Status Dial(std::unique_lock<std::mutex>& lock, const OutFrame& first);
  void CloseConnection(std::unique_lock<std::mutex>& lock);
  void AckLoop(int fd, uint64_t at);
};

}  // namespace strata
