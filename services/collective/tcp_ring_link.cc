#include "services/collective/tcp_ring_link.h"

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <list>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <absl/strings/str_cat.h>
#include <grpcpp/grpcpp.h>

#include "services/collective/ring_inbox.h"
#include "services/collective/segment_codec.h"
#include "services/collective/tcp_frame.h"
#include "services/collective/tsan_handoff.h"
#include "services/common/base/status.h"
#include "services/common/wire/rpc.h"
#include "strata/v1/collective.grpc.pb.h"

namespace strata {
namespace {

using Clock = RingClock;
using tcp::Ticket;
using tcp_ring::Frame;
using tcp_ring::FrameKind;
using tcp_ring::kFrameHeaderBytes;

// What a receiver keeps before its operation thread takes it, as on the gRPC link: a ring peer
// is never more than an operation or two ahead, so the bounds stop only a sender that is not one.
constexpr uint64_t kOperationWindow = 16;
constexpr size_t kMaxQueuedSegments = size_t{1} << 14;   // per operation
constexpr uint64_t kMaxQueuedBytes = uint64_t{2} << 30;  // over all operations
// Connections accepted at once: the previous rank's, a replacement's, and a few that have not
// said hello yet (each has kHelloTimeout to do so).
constexpr size_t kMaxConnections = 8;
constexpr int kHelloTimeoutSeconds = 10;
constexpr size_t kSpareBuffers = 8;  // receive buffers kept for reuse
constexpr std::chrono::seconds kDrainLimit{5};
constexpr size_t kScratchFloats = 16 << 10;  // 64 KiB: a piece read, then added while in cache

// The ring's own arithmetic (ring_allreduce.cc's ApplySegment), so that the sums are the same to
// the bit: dst + v, then (dst + v) / divisor on the last reduce-scatter step of an average.
void AddInto(float* __restrict dst, const float* __restrict src, size_t n, float divisor) {
  if (divisor == 0.0f) {
    for (size_t i = 0; i < n; ++i) dst[i] += src[i];
  } else {
    for (size_t i = 0; i < n; ++i) dst[i] = (dst[i] + src[i]) / divisor;
  }
}

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
  std::string owned;  // an abort's reason
  uint64_t operation = 0;
  uint64_t epoch = 0;       // the connection it must go on (TcpRingLink::Impl::epoch)
  Clock::time_point until;  // the operation's lifetime: how long dialling may take
};

OutFrame MakeFrame(FrameKind kind, const SegmentHeader& header, uint64_t payload_bytes) {
  OutFrame out;
  tcp_ring::EncodeFrame(Frame{kind, header, payload_bytes}, out.header);
  out.operation = header.operation;
  return out;
}

class DataPlaneService final : public v1::Collective::CallbackService {
 public:
  DataPlaneService(int port, const Ticket& ticket)
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

}  // namespace

struct TcpRingLink::Impl {
  Impl(const TcpRingLinkOptions& options, int listen_fd, int port, const Ticket& ticket)
      : options(options), listen_fd(listen_fd), port(port), ticket(ticket), service(port, ticket) {}

  const TcpRingLinkOptions options;

  std::mutex mu;
  std::condition_variable cv;         // operation threads wait here
  std::condition_variable writer_cv;  // the writer waits here for frames
  bool stopping = false;

  // ---- receiving: the previous rank's connection ----
  const int listen_fd;
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
    std::thread thread;
    bool done = false;
  };
  std::list<Connection> connections;
  std::thread acceptor;

  // ---- sending: the connection to the next rank, owned by the writer thread ----
  int rank = 0;
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
  std::map<uint64_t, int> lent;  // per operation: data frames queued or being written
  std::set<uint64_t> acked;
  std::thread writer;

  DataPlaneService service;

  // Everything below is called with `mu` held unless it takes the lock itself.
  Buffer TakeBuffer(size_t bytes) {
    for (auto it = spare.begin(); it != spare.end(); ++it) {
      if (it->capacity < bytes) continue;
      Buffer b = std::move(*it);
      spare.erase(it);
      b.size = bytes;
      return b;
    }
    Buffer b;
    b.bytes.reset(new uint8_t[bytes]);  // no zeroing: the socket overwrites it
    b.capacity = b.size = bytes;
    return b;
  }
  void GiveBack(Buffer b) {
    if (b.bytes && spare.size() < kSpareBuffers) spare.push_back(std::move(b));
  }
  // Only the last of an operation's lent frames wakes anyone (AwaitLentSegments waits for it);
  // waking the operation's thread for every frame written would cost a context switch each.
  void ReturnFrame(const OutFrame& f) {
    if (f.lent == nullptr) return;
    auto it = lent.find(f.operation);
    if (it == lent.end() || --it->second > 0) return;
    lent.erase(it);
    cv.notify_all();
  }
  // Connection `at` failed: every operation on it fails, and its unsent frames are given back.
  void MarkBroken(uint64_t at, absl::Status why) {
    if (at != epoch || broken) return;
    broken = true;
    send_error = std::move(why);  // the ring names the next rank
    for (auto it = queue.begin(); it != queue.end();) {
      if (it->epoch != at) {
        ++it;
        continue;
      }
      ReturnFrame(*it);
      it = queue.erase(it);
    }
    cv.notify_all();
  }
  void Retire(uint64_t operation) {
    auto end = inboxes.upper_bound(operation);
    for (auto it = inboxes.begin(); it != end; ++it) {
      for (QueuedSegment& r : it->second.segments) {
        queued_bytes -= r.payload.size;
        GiveBack(std::move(r.payload));
      }
    }
    inboxes.erase(inboxes.begin(), end);
    next_operation = std::max(next_operation, operation + 1);
    if (next_operation > kOperationWindow) {
      unended.erase(unended.begin(), unended.lower_bound(next_operation - kOperationWindow));
    }
    acked.erase(acked.begin(), acked.upper_bound(operation));
  }

  void AcceptLoop();
  void ReceiveLoop(int fd);
  // What one accepted connection's thread keeps between frames.
  struct Incoming {
    bool carrying = false;  // an operation has begun on this connection and not ended
    uint64_t operation = 0;
    bool ended = false;
    std::vector<float> scratch;  // a data frame applied in place is read through it, in pieces
  };
  absl::Status Receive(int fd, Incoming* in);
  absl::Status ReceiveData(int fd, const Frame& frame, Incoming* in, QueuedSegment* out);
  void WriterLoop();
  absl::Status Dial(std::unique_lock<std::mutex>& lock, const OutFrame& first);
  void CloseConnection(std::unique_lock<std::mutex>& lock);
  void AckLoop(int fd, uint64_t at);
};

// ---- receiving ----------------------------------------------------------------------------------

void TcpRingLink::Impl::AcceptLoop() {
  while (true) {
    const int fd = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    std::list<Connection> finished;
    std::unique_lock<std::mutex> lock(mu);
    if (stopping) {
      if (fd >= 0) close(fd);
      return;
    }
    for (auto it = connections.begin(); it != connections.end();) {
      auto here = it++;
      if (here->done) finished.splice(finished.end(), connections, here);
    }
    if (fd < 0) {
      // Interrupted, or a connection reset before it was taken: go on. Anything else (out of
      // descriptors, say) would repeat at once, so stop accepting.
      if (errno == EINTR || errno == ECONNABORTED) continue;
      std::fprintf(stderr, "ring data plane: accept failed: %s; accepting no more connections\n",
                   std::strerror(errno));
      return;
    }
    if (connections.size() >= kMaxConnections) {
      close(fd);
    } else {
      connections.emplace_back();
      Connection* c = &connections.back();
      c->fd = fd;
      c->thread = std::thread([this, c] {
        ReceiveLoop(c->fd);
        // Tells the peer now; the descriptor is closed when the thread is joined, so that its
        // number cannot be reused while the destructor may still shut it down.
        shutdown(c->fd, SHUT_RDWR);
        std::lock_guard<std::mutex> done(mu);
        c->done = true;
      });
    }
    lock.unlock();
    for (Connection& c : finished) {
      c.thread.join();
      close(c.fd);
    }
  }
}

void TcpRingLink::Impl::ReceiveLoop(int fd) {
  // A peer has kHelloTimeout to present the ticket; after that a ring peer may stay quiet for as
  // long as it likes (between operations).
  timeval limit{kHelloTimeoutSeconds, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
  uint8_t hello[tcp::kHelloBytes];
  Ticket presented;
  uint32_t sender = 0;
  if (!tcp::ReceiveExact(fd, hello, sizeof(hello)).ok() ||
      !tcp_ring::DecodeHello(hello, &presented, &sender).ok() ||
      !tcp::SameTicket(presented, ticket)) {
    return;  // closed by the acceptor
  }
  limit = timeval{0, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
  Incoming in;
  while (Receive(fd, &in).ok()) {
  }
  // The connection is over: so is the operation it was carrying.
  std::lock_guard<std::mutex> lock(mu);
  if (in.carrying && !in.ended) unended.erase(in.operation);
  if (in.carrying && !in.ended && in.operation >= next_operation &&
      in.operation < next_operation + kOperationWindow) {
    inboxes[in.operation].ended = true;
  }
  cv.notify_all();
}

// Reads a data frame's payload: applied in place when the operation allows it (ApplyInPlace),
// else into a reused buffer for the operation's thread.
absl::Status TcpRingLink::Impl::ReceiveData(int fd, const Frame& frame, Incoming* in,
                                            QueuedSegment* out) {
  const SegmentHeader& h = frame.header;
  const size_t floats = frame.payload_bytes / sizeof(float);
  InPlacePlan plan;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (place.buffer != nullptr && h.operation == place_operation && h.world >= 2 &&
        h.step < 2 * (h.world - 1) && h.count == place.count && h.offset + floats <= place.count) {
      plan = place;
      ++place_writers;
      place_fd = fd;
    } else {
      out->payload = TakeBuffer(frame.payload_bytes);
    }
  }
  out->has_data = true;
  if (plan.buffer == nullptr) {
    absl::Status read = tcp::ReceiveExact(fd, out->payload.bytes.get(), out->payload.size);
    if (!read.ok()) {
      std::lock_guard<std::mutex> lock(mu);
      GiveBack(std::move(out->payload));
    }
    return read;
  }
  out->in_place = true;
  out->in_place_bytes = frame.payload_bytes;
  float* dst = plan.buffer + h.offset;
  absl::Status read;
  if (h.step >= plan.copy_from_step) {
    read = tcp::ReceiveExact(fd, dst, frame.payload_bytes);
  } else {
    // Through a small buffer that stays in cache between the read and the addition.
    const float divisor = h.step + 1 == plan.copy_from_step ? plan.divisor : 0.0f;
    in->scratch.resize(kScratchFloats);
    for (size_t done = 0; done < floats && read.ok();) {
      const size_t n = std::min(kScratchFloats, floats - done);
      read = tcp::ReceiveExact(fd, in->scratch.data(), n * sizeof(float));
      if (read.ok()) AddInto(dst + done, in->scratch.data(), n, divisor);
      done += n;
    }
  }
  std::lock_guard<std::mutex> lock(mu);
  if (--place_writers == 0) place_fd = -1;
  cv.notify_all();
  return read;
}

// Reads one frame and files it; an error ends the connection.
absl::Status TcpRingLink::Impl::Receive(int fd, Incoming* in) {
  uint8_t raw[kFrameHeaderBytes];
  Frame frame;
  STRATA_RETURN_IF_ERROR(tcp::ReceiveExact(fd, raw, sizeof(raw)));
  STRATA_RETURN_IF_ERROR(tcp_ring::DecodeFrame(raw, &frame));
  if (frame.kind == FrameKind::kAck) return absl::InvalidArgumentError("ack from the sender");
  QueuedSegment r;
  r.header = frame.header;
  if (frame.kind == FrameKind::kData) {
    STRATA_RETURN_IF_ERROR(ReceiveData(fd, frame, in, &r));
  } else if (frame.kind == FrameKind::kAbort) {
    r.abort.resize(frame.payload_bytes);
    STRATA_RETURN_IF_ERROR(tcp::ReceiveExact(fd, r.abort.data(), r.abort.size()));
    if (!IsValidUtf8(r.abort)) return absl::InvalidArgumentError("abort reason not UTF-8");
    if (r.abort.empty()) r.abort = "the previous rank gave up (no reason given)";
  }
  const uint64_t op = frame.header.operation;
  in->carrying = frame.kind != FrameKind::kEnd;
  in->operation = op;
  in->ended = frame.kind == FrameKind::kEnd;
  {
    std::lock_guard<std::mutex> lock(mu);
    // The first operations of a re-formed ring (RingAllReduce::Reform): what is left of the
    // broken generation is dropped, as its frames will be on arrival from now on.
    const uint64_t generation_start = op >> kRingGenerationShift << kRingGenerationShift;
    if (generation_start > next_operation && op < generation_start + kOperationWindow) {
      Retire(generation_start - 1);
    }
    if (op >= next_operation + kOperationWindow) {
      GiveBack(std::move(r.payload));
      return absl::InvalidArgumentError("frame for an operation beyond the window");
    }
    if (frame.kind != FrameKind::kEnd && op + kOperationWindow >= next_operation) {
      unended.insert(op);
    }
    if (op < next_operation) {
      GiveBack(std::move(r.payload));  // an operation that is over here
    } else if (frame.kind == FrameKind::kEnd) {
      inboxes[op].ended = true;
    } else {
      Inbox& inbox = inboxes[op];
      if (inbox.segments.size() >= kMaxQueuedSegments ||
          queued_bytes + r.payload.size > kMaxQueuedBytes) {
        GiveBack(std::move(r.payload));
        return absl::ResourceExhaustedError("too much queued and not consumed");
      }
      queued_bytes += r.payload.size;
      inbox.segments.push_back(std::move(r));
    }
  }
  cv.notify_all();
  if (frame.kind != FrameKind::kEnd) return absl::OkStatus();
  // The whole operation is read: acknowledge it (this thread is the only writer on `fd`).
  uint8_t ack[kFrameHeaderBytes];
  tcp_ring::EncodeFrame(Frame{FrameKind::kAck, frame.header, 0}, ack);
  absl::Status sent = tcp::SendAll(fd, ack, sizeof(ack), nullptr, 0);
  {
    std::lock_guard<std::mutex> lock(mu);
    unended.erase(op);
  }
  cv.notify_all();
  return sent;
}

// ---- sending ------------------------------------------------------------------------------------

void TcpRingLink::Impl::WriterLoop() {
  std::unique_lock<std::mutex> lock(mu);
  while (true) {
    writer_cv.wait(lock, [&] { return stopping || !queue.empty(); });
    if (stopping) break;
    OutFrame frame = std::move(queue.front());
    queue.pop_front();
    if (frame.epoch != epoch || (broken && frame.epoch == epoch)) {
      ReturnFrame(frame);  // its connection is gone
      continue;
    }
    if (out_fd < 0 || connected_epoch != frame.epoch) {
      CloseConnection(lock);
      absl::Status dialled = Dial(lock, frame);
      if (stopping) break;
      if (!dialled.ok()) {
        MarkBroken(frame.epoch, std::move(dialled));
        ReturnFrame(frame);
        continue;
      }
    }
    const int fd = out_fd;
    const void* payload = frame.lent != nullptr ? static_cast<const void*>(frame.lent)
                                                : static_cast<const void*>(frame.owned.data());
    const size_t bytes = frame.lent != nullptr ? frame.lent_bytes : frame.owned.size();
    lock.unlock();
    absl::Status sent = tcp::SendAll(fd, frame.header, kFrameHeaderBytes, payload, bytes);
    lock.lock();
    if (!sent.ok()) MarkBroken(frame.epoch, std::move(sent));
    ReturnFrame(frame);
  }
  CloseConnection(lock);
  for (const OutFrame& frame : queue) ReturnFrame(frame);
  queue.clear();
}

// Asks the next rank's gRPC service for its data plane, connects and says hello. Unlocks `mu`
// while it waits; wait_for_ready retries a peer that is not up yet until the operation's end.
absl::Status TcpRingLink::Impl::Dial(std::unique_lock<std::mutex>& lock, const OutFrame& first) {
  const std::shared_ptr<v1::Collective::Stub> stub = next_stub;
  const std::string host = next_host;
  const uint32_t sender = static_cast<uint32_t>(rank);
  grpc::ClientContext context;
  // gRPC's deadlines are in the system clock.
  context.set_deadline(std::chrono::system_clock::now() + (first.until - Clock::now()));
  context.set_wait_for_ready(true);
  dialling = &context;
  lock.unlock();
  v1::DataPlaneRequest request;
  request.set_sender(sender);
  v1::DataPlaneOffer offer;
  absl::Status status =
      FromGrpcStatus(stub->DataPlane(&context, request, &offer), "asking for its data plane");
  int fd = -1;
  if (!status.ok()) {
  } else if (offer.port() == 0 || offer.port() > 65535 ||
             offer.ticket().size() != tcp::kTicketBytes) {
    status = absl::InvalidArgumentError(absl::StrCat("its data-plane offer is malformed (port ",
                                                     offer.port(), ", ticket of ",
                                                     offer.ticket().size(), " bytes)"));
  } else {
    const auto remaining =
        std::chrono::duration_cast<std::chrono::milliseconds>(first.until - Clock::now());
    absl::StatusOr<int> dialled = tcp::DialTcp(host, static_cast<int>(offer.port()),
                                               std::max(remaining, std::chrono::milliseconds(1)));
    if (dialled.ok()) {
      fd = *dialled;
      if (options.send_buffer_bytes > 0) {  // best effort: the kernel caps it, never fails it
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &options.send_buffer_bytes,
                   sizeof(options.send_buffer_bytes));
      }
      Ticket ticket;
      std::copy(offer.ticket().begin(), offer.ticket().end(), ticket.begin());
      uint8_t hello[tcp::kHelloBytes];
      tcp_ring::EncodeHello(ticket, sender, hello);
      status = tcp::SendAll(fd, hello, sizeof(hello), nullptr, 0);
    } else {
      status = dialled.status();
    }
  }
  lock.lock();
  dialling = nullptr;
  if (!status.ok() || stopping) {
    if (fd >= 0) close(fd);
    return status;
  }
  out_fd = fd;
  connected_epoch = first.epoch;
  acker = std::thread([this, fd, at = first.epoch] { AckLoop(fd, at); });
  return absl::OkStatus();
}

void TcpRingLink::Impl::CloseConnection(std::unique_lock<std::mutex>& lock) {
  if (out_fd < 0) return;
  shutdown(out_fd, SHUT_RDWR);
  std::thread reader = std::move(acker);
  lock.unlock();
  if (reader.joinable()) reader.join();
  lock.lock();
  close(out_fd);
  out_fd = -1;
}

void TcpRingLink::Impl::AckLoop(int fd, uint64_t at) {
  while (true) {
    uint8_t raw[kFrameHeaderBytes];
    Frame frame;
    absl::Status status = tcp::ReceiveExact(fd, raw, sizeof(raw));
    if (status.ok()) status = tcp_ring::DecodeFrame(raw, &frame);
    if (status.ok() && frame.kind != FrameKind::kAck) {
      status = absl::InvalidArgumentError("the next rank sent a frame that is not an ack");
    }
    std::lock_guard<std::mutex> lock(mu);
    if (!status.ok()) {
      if (absl::IsOutOfRange(status)) status = absl::UnavailableError("closed by the next rank");
      if (!stopping) MarkBroken(at, std::move(status));
      return;
    }
    if (frame.header.operation >= next_operation) acked.insert(frame.header.operation);
    cv.notify_all();
  }
}

// ---- operations ---------------------------------------------------------------------------------

namespace {

class TcpOperation final : public RingLink::Operation {
 public:
  TcpOperation(TcpRingLink::Impl* link, uint64_t operation, std::chrono::milliseconds lifetime,
               std::chrono::milliseconds grace)
      : link_(link), operation_(operation), grace_(grace), until_(Clock::now() + lifetime) {
    std::lock_guard<std::mutex> lock(link_->mu);
    if (link_->broken) {  // the last operation broke the connection: dial again
      ++link_->epoch;
      link_->broken = false;
      link_->send_error = absl::OkStatus();
    }
    epoch_ = link_->epoch;
  }
  ~TcpOperation() override {
    if (!ended_) Abandon();
  }

  void Send(const SegmentHeader& header, const float* data, size_t floats) override {
    OutFrame frame = MakeFrame(FrameKind::kData, header, floats * sizeof(float));
    frame.lent = reinterpret_cast<const uint8_t*>(data);
    frame.lent_bytes = floats * sizeof(float);
    Queue(std::move(frame));
  }
  void SendAbort(const SegmentHeader& header, const std::string& reason) override {
    std::string text = reason.substr(0, tcp_ring::kMaxAbortBytes);
    if (text.size() < reason.size()) {  // cut on a character boundary: the receiver wants UTF-8
      while (!text.empty() && (static_cast<unsigned char>(reason[text.size()]) & 0xC0) == 0x80) {
        text.pop_back();
      }
    }
    OutFrame frame = MakeFrame(FrameKind::kAbort, header, text.size());
    frame.owned = text;
    Queue(std::move(frame));
  }
  void ApplyInPlace(const InPlacePlan& plan) override {
    std::lock_guard<std::mutex> lock(link_->mu);
    link_->place = plan;
    link_->place_operation = operation_;
  }
  void DropUnsent() override {
    std::lock_guard<std::mutex> lock(link_->mu);
    auto& queue = link_->queue;
    for (auto it = queue.begin(); it != queue.end();) {
      if (it->operation != operation_ || it->lent == nullptr) {
        ++it;
        continue;
      }
      link_->ReturnFrame(*it);
      it = queue.erase(it);
    }
  }

  Received Receive(Clock::time_point until, RingSegment* out) override {
    std::unique_lock<std::mutex> lock(link_->mu);
    Inbox& inbox = link_->inboxes[operation_];
    const Received why =
        WaitForSegment(lock, link_->cv, inbox, until, [&] { return SendBroken(); });
    if (why != Received::kSegment) return why;
    link_->GiveBack(std::move(current_.payload));
    current_ = std::move(inbox.segments.front());
    inbox.segments.pop_front();
    link_->queued_bytes -= current_.payload.size;
    lock.unlock();
    out->header = current_.header;
    out->abort = current_.abort;
    out->has_data = current_.has_data;
    out->in_place = current_.in_place;
    out->data_bytes = current_.in_place ? current_.in_place_bytes : current_.payload.size;
    out->pieces.clear();
    if (current_.has_data && !current_.in_place) {
      out->pieces.emplace_back(current_.payload.bytes.get(), out->data_bytes);
    }
    return Received::kSegment;
  }

  bool ReceiveAbort(Clock::time_point until, std::string* reason) override {
    std::unique_lock<std::mutex> lock(link_->mu);
    return TakeNextAbort(lock, link_->cv, link_->inboxes[operation_], until, reason);
  }

  absl::Status SendError() override {
    std::lock_guard<std::mutex> lock(link_->mu);
    if (link_->send_error.ok()) return absl::UnavailableError("the connection broke");
    return link_->send_error;
  }

  Completion Finish(Clock::time_point until) override {
    ended_ = true;
    Queue(MakeFrame(FrameKind::kEnd, Header(), 0));
    Completion completion = Completion::kAcknowledged;
    {
      std::unique_lock<std::mutex> lock(link_->mu);
      const bool over = link_->cv.wait_until(
          lock, until, [&] { return link_->acked.count(operation_) > 0 || SendBroken(); });
      if (!over) {
        completion = Completion::kNotAcknowledged;
      } else if (link_->acked.count(operation_) == 0) {
        completion = Completion::kSendFailed;
      }
    }
    AwaitLentSegments();
    Retire();
    return completion;
  }

  void Abandon() override {
    ended_ = true;
    Queue(MakeFrame(FrameKind::kEnd, Header(), 0));
    AwaitLentSegments();
    Retire();
  }

 private:
  SegmentHeader Header() const {
    SegmentHeader h;
    h.operation = operation_;
    h.sender = static_cast<uint32_t>(link_->rank);
    return h;
  }
  bool SendBroken() const { return link_->broken && link_->epoch == epoch_; }

  void Queue(OutFrame frame) {
    frame.epoch = epoch_;
    frame.until = until_;
    std::lock_guard<std::mutex> lock(link_->mu);
    if (SendBroken() || link_->stopping) return;
    if (frame.lent != nullptr) ++link_->lent[operation_];
    link_->queue.push_back(std::move(frame));
    link_->writer_cv.notify_one();
  }

  // The writer may still hold the caller's floats: of a failed operation, or a peer that reads
  // nothing. After the grace the connection is shut, which makes the writer let go at once.
  void AwaitLentSegments() {
    std::unique_lock<std::mutex> lock(link_->mu);
    const auto returned = [&] { return link_->lent.count(operation_) == 0; };
    if (link_->cv.wait_until(lock, Clock::now() + grace_, returned)) return;
    if (link_->out_fd >= 0) shutdown(link_->out_fd, SHUT_RDWR);
    if (link_->dialling != nullptr) link_->dialling->TryCancel();
    if (link_->cv.wait_until(lock, Clock::now() + std::chrono::seconds(30), returned)) return;
    std::fprintf(stderr,
                 "ring all-reduce operation %llu on rank %d: the TCP writer kept the send buffers "
                 "30 s after its connection was shut; aborting\n",
                 static_cast<unsigned long long>(operation_), link_->rank);
    std::abort();
  }

  // Stops reads into the caller's buffer (waiting for one under way; after the grace its
  // connection is shut) and drops what is left of this operation.
  void Retire() {
    std::unique_lock<std::mutex> lock(link_->mu);
    link_->place = InPlacePlan{};
    const auto idle = [&] { return link_->place_writers == 0; };
    if (!link_->cv.wait_until(lock, Clock::now() + grace_, idle)) {
      if (link_->place_fd >= 0) shutdown(link_->place_fd, SHUT_RDWR);
      if (!link_->cv.wait_until(lock, Clock::now() + std::chrono::seconds(30), idle)) {
        std::fprintf(stderr,
                     "ring all-reduce operation %llu on rank %d: a read into the caller's buffer "
                     "went on 30 s after its connection was shut; aborting\n",
                     static_cast<unsigned long long>(operation_), link_->rank);
        std::abort();
      }
    }
    link_->GiveBack(std::move(current_.payload));
    link_->Retire(operation_);
  }

  TcpRingLink::Impl* link_;
  const uint64_t operation_;
  const std::chrono::milliseconds grace_;
  const Clock::time_point until_;
  uint64_t epoch_ = 0;
  QueuedSegment current_;  // owns the bytes of the segment last handed out by Receive
  bool ended_ = false;
};

}  // namespace

// ---- the link -----------------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<TcpRingLink>> TcpRingLink::Create(
    const TcpRingLinkOptions& options) {
  STRATA_ASSIGN_OR_RETURN(Ticket ticket, tcp::RandomTicket());
  int port = 0;
  absl::StatusOr<int> fd = tcp::ListenTcp(options.listen_host, &port);
  if (!fd.ok()) return Annotate(fd.status(), "ring data plane");
  auto impl = std::make_unique<Impl>(options, *fd, port, ticket);
  Impl* raw = impl.get();
  impl->acceptor = std::thread([raw] { raw->AcceptLoop(); });
  impl->writer = std::thread([raw] { raw->WriterLoop(); });
  return std::unique_ptr<TcpRingLink>(new TcpRingLink(std::move(impl)));
}

TcpRingLink::TcpRingLink(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

TcpRingLink::~TcpRingLink() {
  Impl& l = *impl_;
  {
    std::unique_lock<std::mutex> lock(l.mu);
    // Acknowledge what this rank has finished before closing (gRPC's server shutdown waits for
    // open streams the same way); a previous rank that is gone does not hold this up for long.
    l.cv.wait_for(lock, kDrainLimit,
                  [&] { return l.unended.empty() || *l.unended.begin() >= l.next_operation; });
    l.stopping = true;
    if (l.dialling != nullptr) l.dialling->TryCancel();
    shutdown(l.listen_fd, SHUT_RDWR);  // wakes accept()
    for (Impl::Connection& c : l.connections) shutdown(c.fd, SHUT_RDWR);
    if (l.out_fd >= 0) shutdown(l.out_fd, SHUT_RDWR);
  }
  l.writer_cv.notify_all();
  l.cv.notify_all();
  l.acceptor.join();
  l.writer.join();
  for (Impl::Connection& c : l.connections) {
    c.thread.join();
    close(c.fd);
  }
  close(l.listen_fd);
}

grpc::Service* TcpRingLink::service() { return &impl_->service; }

int TcpRingLink::data_port() const { return impl_->port; }

absl::Status TcpRingLink::Connect(int rank, const std::vector<std::string>& peers) {
  const int world = static_cast<int>(peers.size());
  std::shared_ptr<v1::Collective::Stub> stub;
  const std::string& next = peers[(rank + 1) % world];
  if (world > 1) stub = v1::Collective::NewStub(MakeChannel(next));
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->rank = rank;
  impl_->next_host = tcp::DataPlaneHost(next);
  impl_->next_stub = std::move(stub);
  ++impl_->epoch;  // a new ring: a new connection
  impl_->broken = false;
  impl_->send_error = absl::OkStatus();
  return absl::OkStatus();
}

std::unique_ptr<RingLink::Operation> TcpRingLink::Begin(uint64_t operation,
                                                        std::chrono::milliseconds lifetime,
                                                        std::chrono::milliseconds grace) {
  return std::make_unique<TcpOperation>(impl_.get(), operation, lifetime, grace);
}

}  // namespace strata
