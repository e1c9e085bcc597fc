#include "services/collective/tcp_ring_link.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include <absl/strings/str_cat.h>

#include "services/collective/lent_buffers.h"
#include "services/collective/ring_inbox.h"
#include "services/collective/tcp_ring_link_impl.h"
#include "services/common/base/status.h"
#include "services/common/wire/rpc.h"

namespace strata {
namespace {

using Clock = RingClock;
using tcp::Ticket;
using tcp_ring::FrameKind;
using tcp_ring::kDrainLimit;
using tcp_ring::kHelloTimeout;
using tcp_ring::kMaxPendingConnections;
using tcp_ring::kOperationWindow;
using tcp_ring::kSpareBuffers;
using tcp_ring::MakeFrame;
using tcp_ring::OutFrame;
using tcp_ring::QueuedSegment;

}  // namespace

// ---- the state's bookkeeping, under its mutex -------------------------------------------------

tcp_ring::Buffer TcpRingLink::Impl::TakeBuffer(size_t bytes) {
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

void TcpRingLink::Impl::GiveBack(Buffer b) {
  if (b.bytes && spare.size() < kSpareBuffers) spare.push_back(std::move(b));
}

void TcpRingLink::Impl::ReturnFrame(const OutFrame& f) {
  if (f.lent == nullptr) return;
  auto it = lent.find(f.operation);
  if (it == lent.end() || --it->second > 0) return;
  lent.erase(it);
  cv.notify_all();
}

void TcpRingLink::Impl::MarkBroken(uint64_t at, absl::Status why) {
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

void TcpRingLink::Impl::Retire(uint64_t operation) {
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

// ---- operations: the ledger of what each has queued, lent and had acknowledged -----------------

namespace {

class TcpOperation final : public NetworkOperation {
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
  ~TcpOperation() override { AbandonIfOpen(); }

  void Send(const SegmentHeader& header, const float* data, size_t floats) override {
    OutFrame frame = halves_ ? MakeFrame(FrameKind::kHalfData, header, floats * sizeof(uint16_t))
                             : MakeFrame(FrameKind::kData, header, floats * sizeof(float));
    frame.lent = reinterpret_cast<const uint8_t*>(data);
    frame.lent_bytes = floats * sizeof(float);
    frame.half = halves_;
    Queue(std::move(frame));
  }
  void SendInHalfPrecision() override { halves_ = true; }
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
    tcp_ring::Inbox& inbox = link_->inboxes[operation_];
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
    return ReceiveAbortFrom(link_->mu, link_->cv, link_->inboxes, operation_, until, reason);
  }

  absl::Status SendError() override {
    std::lock_guard<std::mutex> lock(link_->mu);
    return SendErrorOr(link_->send_error, "the connection broke");
  }

  // The end frame goes behind what is queued; its ack is the next rank having read it all.
  void CloseStream(bool finishing) override { Queue(MakeFrame(FrameKind::kEnd, Header(), 0)); }

  Completion AwaitAcknowledgement(Clock::time_point until) override {
    std::unique_lock<std::mutex> lock(link_->mu);
    const auto acked = [&] { return link_->acked.count(operation_) > 0; };
    if (!link_->cv.wait_until(lock, until, [&] { return acked() || SendBroken(); })) {
      return Completion::kNotAcknowledged;
    }
    return acked() ? Completion::kAcknowledged : Completion::kSendFailed;
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
  void AwaitLentSegments() override {
    std::unique_lock<std::mutex> lock(link_->mu);
    AwaitLentBuffers(
        {operation_, link_->rank, "the TCP writer kept the send buffers",
         "its connection was shut"},
        grace_,
        [&](Clock::time_point until) {
          return link_->cv.wait_until(lock, until,
                                      [&] { return link_->lent.count(operation_) == 0; });
        },
        [&] {
          if (link_->out_fd >= 0) shutdown(link_->out_fd, SHUT_RDWR);
          if (link_->dialling != nullptr) link_->dialling->TryCancel();
        });
  }

  // Stops reads into the caller's buffer (waiting for one under way; after the grace its
  // connection is shut) and drops what is left of this operation.
  void Retire() override {
    std::unique_lock<std::mutex> lock(link_->mu);
    link_->place = InPlacePlan{};
    AwaitLentBuffers(
        {operation_, link_->rank, "a read into the caller's buffer went on",
         "its connection was shut"},
        grace_,
        [&](Clock::time_point until) {
          return link_->cv.wait_until(lock, until, [&] { return link_->place_writers == 0; });
        },
        [&] {
          if (link_->place_fd >= 0) shutdown(link_->place_fd, SHUT_RDWR);
        });
    link_->GiveBack(std::move(current_.payload));
    link_->Retire(operation_);
  }

  TcpRingLink::Impl* link_;
  const uint64_t operation_;
  const std::chrono::milliseconds grace_;
  const Clock::time_point until_;
  uint64_t epoch_ = 0;
  bool halves_ = false;    // SendInHalfPrecision
  QueuedSegment current_;  // owns the bytes of the segment last handed out by Receive
};

}  // namespace

// ---- the link -----------------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<TcpRingLink>> TcpRingLink::Create(
    const TcpRingLinkOptions& options) {
  STRATA_ASSIGN_OR_RETURN(Ticket ticket, tcp::RandomTicket());
  int port = 0;
  absl::StatusOr<int> fd = tcp::ListenTcp(options.listen_host, &port);
  if (!fd.ok()) return Annotate(fd.status(), "ring data plane");
  auto impl = std::make_unique<Impl>(options, port, ticket);
  Impl* raw = impl.get();
  tcp::HelloGateOptions gate;
  gate.max_pending = kMaxPendingConnections;
  gate.handshake_timeout = kHelloTimeout;
  gate.what = "ring data plane";
  absl::StatusOr<std::unique_ptr<tcp::HelloGate>> started = tcp::HelloGate::Start(
      *fd, gate,
      [raw](int connection, const uint8_t* hello) { return raw->Admit(connection, hello); });
  if (!started.ok()) return Annotate(started.status(), "ring data plane");
  impl->gate = std::move(*started);
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
    if (l.out_fd >= 0) shutdown(l.out_fd, SHUT_RDWR);
  }
  // No connection is admitted once the gate has stopped (and Admit sees `stopping` before).
  l.gate->Stop();
  {
    std::lock_guard<std::mutex> lock(l.mu);
    for (Impl::Connection& c : l.connections) shutdown(c.fd, SHUT_RDWR);
  }
  l.writer_cv.notify_all();
  l.cv.notify_all();
  l.writer.join();
  for (Impl::Connection& c : l.connections) {
    c.thread.join();
    close(c.fd);
  }
}

grpc::Service* TcpRingLink::service() { return &impl_->service; }

void TcpRingLink::AnnounceGeneration(uint32_t generation) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (generation <= impl_->announced_generation) return;
  impl_->announced_generation = generation;
  const uint64_t start = uint64_t{generation} << kRingGenerationShift;
  if (start > impl_->next_operation) impl_->Retire(start - 1);
  impl_->cv.notify_all();
}

int TcpRingLink::data_port() const { return impl_->port; }

absl::Status TcpRingLink::Connect(int rank, const std::vector<std::string>& peers) {
  const int world = static_cast<int>(peers.size());
  std::shared_ptr<v1::Collective::Stub> stub;
  const std::string& next = peers[(rank + 1) % world];
  if (world > 1) stub = v1::Collective::NewStub(MakeChannel(next));
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->rank = rank;
  impl_->world = world;
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
