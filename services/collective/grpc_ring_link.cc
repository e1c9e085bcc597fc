#include "services/collective/grpc_ring_link.h"

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <vector>

#include <malloc.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>
#include <grpcpp/create_channel_posix.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include "services/collective/lent_buffers.h"
#include "services/collective/ring_inbox.h"
#include "services/collective/segment_codec.h"
#include "services/collective/tsan_handoff.h"
#include "services/common/base/status.h"
#include "services/common/wire/rpc.h"
#include "strata/v1/collective.grpc.pb.h"

namespace strata {
namespace {

using Clock = RingClock;

constexpr char kRingMethod[] = "/strata.v1.Collective/Ring";

// Segments received for one operation, in stream order.
struct Inbox {
  std::deque<ParsedSegment> segments;
  bool ended = false;  // the sender's stream is over (closed or broken)
};

// State shared by the operation thread and gRPC's callback threads; reactors hold it by
// shared_ptr so that a late callback never touches a destroyed link.
struct SendState;

// What a receiver queues before its operation thread takes it. A peer is never more than an
// operation or two ahead (each operation needs every rank), and an operation's steps wait for
// each other, so these bounds only ever stop a sender that is not a ring peer: without them,
// segments for operations this rank never runs would be kept for ever.
constexpr uint64_t kOperationWindow = 16;  // operations accepted, from this rank's current one on
constexpr size_t kMaxQueuedSegments = size_t{1} << 14;  // per operation

struct Core {
  std::mutex mu;
  std::condition_variable cv;
  std::map<uint64_t, Inbox> inboxes;  // by operation
  uint64_t next_operation = 0;        // lower operations are over: their segments are dropped
  // The highest generation a re-formation announced (AnnounceGeneration), and this rank's place
  // in the ring (world 0 until Connect): only the previous rank sends to it.
  uint32_t announced_generation = 0;
  int rank = 0, world = 0;
  // Sending sides whose call is over, for an operation's thread to destroy (TakeFinished).
  std::vector<std::shared_ptr<SendState>> finished;
};

// Takes the finished sending sides out of `core`; the caller destroys them outside the lock.
std::vector<std::shared_ptr<SendState>> TakeFinished(Core* core) {
  std::vector<std::shared_ptr<SendState>> finished;
  std::lock_guard<std::mutex> lock(core->mu);
  finished.swap(core->finished);
  return finished;
}

// The reactors below mark each hand-off to gRPC (TsanRelease before Start*, Finish and
// RemoveHold) and each callback (TsanCallbackScope, or TsanAcquire in OnDone): gRPC orders them
// inside libgrpc, where ThreadSanitizer cannot see it.

// The receiving end of one stream from the previous rank: queues each segment for its operation.
class RingReceiver final : public grpc::ServerReadReactor<grpc::ByteBuffer> {
 public:
  RingReceiver(std::shared_ptr<Core> core, grpc::ByteBuffer* response)
      : core_(std::move(core)), response_(response) {
    TsanRelease(this);
    StartRead(&incoming_);
  }

  void OnReadDone(bool ok) override {
    TsanCallbackScope callback(this);
    if (!ok) {
      MarkEnded();
      grpc::Slice empty;  // RingAck has no fields: its encoding is empty
      *response_ = grpc::ByteBuffer(&empty, 1);
      TsanRelease(this);
      Finish(grpc::Status::OK);
      return;
    }
    ParsedSegment seg;
    absl::Status parsed = ParseSegment(incoming_, &seg);
    incoming_.Clear();
    if (!parsed.ok()) {
      MarkEnded();
      TsanRelease(this);
      Finish(ToGrpcStatus(parsed));
      return;
    }
    if (has_operation_ && seg.header.operation != operation_) {
      // One stream carries one operation (GrpcOperation opens a stream per operation).
      MarkEnded();
      TsanRelease(this);
      Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          absl::StrCat("ring segment for operation ", seg.header.operation,
                                       " on the stream of operation ", operation_)));
      return;
    }
    operation_ = seg.header.operation;
    has_operation_ = true;
    grpc::Status refused;
    {
      std::lock_guard<std::mutex> lock(core_->mu);
      // A re-formed ring's operations count in the generation a re-formation announced
      // (AnnounceGeneration, which also drops what is left of the broken one); the next
      // generation's first operations may arrive before this rank heard of it and are queued,
      // retiring nothing; any later generation is refused. Only the previous rank sends here.
      const uint64_t generation = operation_ >> kRingGenerationShift;
      const uint64_t generation_start = generation << kRingGenerationShift;
      const bool next_generation = generation == uint64_t{core_->announced_generation} + 1 &&
                                   operation_ < generation_start + kOperationWindow &&
                                   generation_start > core_->next_operation;
      const uint32_t previous =
          core_->world > 0 ? static_cast<uint32_t>((core_->rank + core_->world - 1) % core_->world)
                           : seg.header.sender;
      if (seg.header.sender != previous) {
        refused =
            grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                         absl::StrCat("ring segment of rank ", seg.header.sender, ": only rank ",
                                      previous, " sends to rank ", core_->rank));
      } else if (generation > core_->announced_generation && !next_generation) {
        refused = grpc::Status(
            grpc::StatusCode::INVALID_ARGUMENT,
            absl::StrCat("ring segment for operation ", operation_, " of generation ", generation,
                         ": this rank is in generation ", core_->announced_generation,
                         " and no re-formation announced a later one"));
      } else if (!next_generation && operation_ >= core_->next_operation + kOperationWindow) {
        refused = grpc::Status(
            grpc::StatusCode::INVALID_ARGUMENT,
            absl::StrCat("ring segment for operation ", operation_, ": this rank is at operation ",
                         core_->next_operation, " and accepts segments up to operation ",
                         core_->next_operation + kOperationWindow - 1));
      } else if (operation_ >= core_->next_operation) {
        Inbox& inbox = core_->inboxes[operation_];
        if (inbox.segments.size() >= kMaxQueuedSegments) {
          refused =
              grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                           absl::StrCat("ring operation ", operation_, ": ", kMaxQueuedSegments,
                                        " segments already queued and not yet consumed"));
        } else {
          inbox.segments.push_back(std::move(seg));
        }
      }
    }
    if (!refused.ok()) {
      MarkEnded();
      TsanRelease(this);
      Finish(refused);
      return;
    }
    core_->cv.notify_all();
    TsanRelease(this);
    StartRead(&incoming_);
  }

  void OnDone() override {
    TsanAcquire(this);
    delete this;
  }

 private:
  void MarkEnded() {
    if (!has_operation_) return;
    {
      std::lock_guard<std::mutex> lock(core_->mu);
      if (operation_ >= core_->next_operation &&
          operation_ < core_->next_operation + kOperationWindow) {
        core_->inboxes[operation_].ended = true;
      }
    }
    core_->cv.notify_all();
  }

  std::shared_ptr<Core> core_;
  grpc::ByteBuffer* response_;
  grpc::ByteBuffer incoming_;
  uint64_t operation_ = 0;
  bool has_operation_ = false;
};

// DataPlane is the TCP link's (tcp_ring_link.h); here its callback default says UNIMPLEMENTED,
// and no method is synchronous, so the server needs no threads of its own for this service.
using CollectiveBase = v1::Collective::WithRawCallbackMethod_Ring<
    v1::Collective::WithCallbackMethod_DataPlane<v1::Collective::Service>>;

class CollectiveService final : public CollectiveBase {
 public:
  explicit CollectiveService(std::shared_ptr<Core> core) : core_(std::move(core)) {
    TsanRelease(this);  // gRPC's threads call Ring() once the server that holds it has started
  }
  using CollectiveBase::Ring;
  grpc::ServerReadReactor<grpc::ByteBuffer>* Ring(grpc::CallbackServerContext* context,
                                                  grpc::ByteBuffer* response) override {
    TsanAcquire(this);
    return new RingReceiver(core_, response);
  }

 private:
  std::shared_ptr<Core> core_;
};

// The sending side of one operation's stream to the next rank. Guarded by core->mu.
struct SendState {
  explicit SendState(std::shared_ptr<Core> c) : core(std::move(c)) {}
  std::shared_ptr<Core> core;
  grpc::ClientContext context;  // outlives the call: the reactor deletes itself, this stays
  std::deque<grpc::ByteBuffer> queue;
  bool writing = false;
  bool close_requested = false, close_started = false;
  bool broken = false;  // a write failed: the stream is over
  bool done = false;
  grpc::Status status;
};

// One write in flight at a time (the callback API's rule); later segments wait in a queue. The
// operation thread holds the reactor (AddHold) until it has made its last call, so the reactor
// cannot finish and delete itself under it.
class RingSender final : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  explicit RingSender(std::shared_ptr<SendState> state) : state_(std::move(state)) {}

  void Start(grpc::GenericStub* stub) {
    stub->PrepareBidiStreamingCall(&state_->context, kRingMethod, grpc::StubOptions(), this);
    AddHold();
    TsanRelease(this);
    StartRead(&ack_);
    StartCall();
  }

  void Send(grpc::ByteBuffer message) {
    {
      std::lock_guard<std::mutex> lock(state_->core->mu);
      if (state_->broken || state_->close_requested) return;
      if (state_->writing) {
        state_->queue.push_back(std::move(message));
        return;
      }
      state_->writing = true;
    }
    current_ = std::move(message);
    TsanRelease(this);
    StartWrite(&current_);
  }

  // Forgets the messages not yet handed to gRPC.
  void DropQueued() {
    std::lock_guard<std::mutex> lock(state_->core->mu);
    state_->queue.clear();
  }

  void CloseWrites() {
    {
      std::lock_guard<std::mutex> lock(state_->core->mu);
      if (state_->close_requested) return;
      state_->close_requested = true;
      if (state_->writing || state_->broken) return;
      state_->close_started = true;
    }
    TsanRelease(this);
    StartWritesDone();
  }

  // The operation thread's last call.
  void Release() {
    TsanRelease(this);
    TsanIgnoreReads reads_after_the_hand_off;
    RemoveHold();
  }

  void OnWriteDone(bool ok) override {
    TsanCallbackScope callback(this);
    current_.Clear();  // gives back the lent payload now, not when the next write replaces it
    std::unique_lock<std::mutex> lock(state_->core->mu);
    if (!ok) {
      state_->broken = true;
      state_->writing = false;
      state_->queue.clear();
      lock.unlock();
      state_->core->cv.notify_all();
      return;
    }
    if (!state_->queue.empty()) {
      current_ = std::move(state_->queue.front());
      state_->queue.pop_front();
      lock.unlock();
      TsanRelease(this);
      StartWrite(&current_);
      return;
    }
    state_->writing = false;
    if (state_->close_requested && !state_->close_started) {
      state_->close_started = true;
      lock.unlock();
      TsanRelease(this);
      StartWritesDone();
    }
  }

  void OnReadDone(bool ok) override { TsanCallbackScope callback(this); }

  void OnDone(const grpc::Status& status) override {
    TsanAcquire(this);
    // Nothing of the call may outlive the operation on gRPC's thread: the reactor goes first, and
    // the state (its ClientContext holds references to the call and the channel) is left to an
    // operation's thread, even when its operation has returned already (a failed one), so that
    // no gRPC thread destroys it while the process exits.
    const std::shared_ptr<Core> core = state_->core;  // outlives the lock
    std::lock_guard<std::mutex> lock(core->mu);
    std::shared_ptr<SendState> state = std::move(state_);
    delete this;
    state->done = true;
    state->status = status;
    core->finished.push_back(std::move(state));
    core->cv.notify_all();
  }

 private:
  std::shared_ptr<SendState> state_;
  grpc::ByteBuffer current_;
  grpc::ByteBuffer ack_;
};

constexpr char kAbstractUnixScheme[] = "unix-abstract:";

// A Unix stream socket's writer may queue only its send buffer's worth (net.core.wmem_default,
// 208 KiB on Debian) before it must wait for the reader: a 1 MiB segment then costs several
// sleeps and wake-ups on both sides. With 4 MiB (the kernel caps it at net.core.wmem_max) the
// ring ran at 810 instead of 700-720 MB/s busbw with 4 ranks and 25 MiB, and made a quarter of
// the context switches (docs/algorithms.md).
constexpr int kUnixSendBufferBytes = 4 << 20;

// Connects to the abstract Unix socket `name`; returns the descriptor, or -1.
int ConnectAbstractUnix(const std::string& name) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (name.empty() || name.size() + 1 > sizeof(address.sun_path)) return -1;
  std::memcpy(address.sun_path + 1, name.data(), name.size());  // sun_path[0] = 0: abstract
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  int bytes = kUnixSendBufferBytes;
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes));  // best effort: capped, not failed
  const auto length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  if (connect(fd, reinterpret_cast<const sockaddr*>(&address), length) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

struct GrpcRingLink::Impl {
  int rank = 0;
  std::shared_ptr<Core> core = std::make_shared<Core>();
  CollectiveService service{core};
  std::unique_ptr<grpc::GenericStub> next_stub;
  std::vector<std::weak_ptr<SendState>> lingering;  // streams of failed operations
};

namespace {

class GrpcOperation final : public NetworkOperation {
 public:
  GrpcOperation(GrpcRingLink::Impl* link, uint64_t operation, std::chrono::milliseconds lifetime,
                std::chrono::milliseconds grace)
      : link_(link),
        core_(link->core.get()),
        operation_(operation),
        grace_(grace),
        state_(std::make_shared<SendState>(link->core)) {
    state_->context.set_deadline(std::chrono::system_clock::now() + lifetime);
    // A connection that fails transiently (a loaded peer slow to finish the HTTP/2 handshake) is
    // retried until the deadline instead of failing the operation; a dead peer is then reported
    // at the deadline, by name, like a silent one.
    state_->context.set_wait_for_ready(true);
    sender_ = new RingSender(state_);
    sender_->Start(link->next_stub.get());
  }

  ~GrpcOperation() override { AbandonIfOpen(); }

  void Send(const SegmentHeader& header, const float* data, size_t floats) override {
    sender_->Send(EncodeSegment(header, data, floats, ledger_));
  }
  void SendAbort(const SegmentHeader& header, const std::string& reason) override {
    sender_->Send(EncodeAbort(header, reason));
  }
  void DropUnsent() override { sender_->DropQueued(); }

  Received Receive(Clock::time_point until, RingSegment* out) override {
    std::unique_lock<std::mutex> lock(core_->mu);
    Inbox& inbox = core_->inboxes[operation_];
    const Received why = WaitForSegment(lock, core_->cv, inbox, until, [&] {
      return state_->broken || (state_->done && !state_->status.ok());
    });
    if (why != Received::kSegment) return why;
    ParsedSegment next = std::move(inbox.segments.front());
    inbox.segments.pop_front();
    lock.unlock();
    current_ = std::move(next);  // releases the previous segment's bytes outside the lock
    ExposeSegment(&current_, out);
    return Received::kSegment;
  }

  bool ReceiveAbort(Clock::time_point until, std::string* reason) override {
    return ReceiveAbortFrom(core_->mu, core_->cv, core_->inboxes, operation_, until, reason);
  }

  absl::Status SendError() override {
    std::unique_lock<std::mutex> lock(core_->mu);
    // A failed write is followed by the call's status; wait briefly for it so the error says why
    // (refused, reset, deadline) rather than only that the stream broke.
    core_->cv.wait_for(lock, std::chrono::seconds(2), [&] { return state_->done; });
    return SendErrorOr(absl::Status(static_cast<absl::StatusCode>(state_->status.error_code()),
                                    state_->status.error_message()),
                       "stream broke");
  }

  // RingSender::Release is the operation thread's last call on the reactor.
  void CloseStream(bool finishing) override {
    sender_->CloseWrites();
    sender_->Release();
    if (!finishing) link_->lingering.push_back(state_);
  }

  Completion AwaitAcknowledgement(Clock::time_point until) override {
    std::unique_lock<std::mutex> lock(core_->mu);
    if (!core_->cv.wait_until(lock, until, [&] { return state_->done; })) {
      state_->context.TryCancel();
      link_->lingering.push_back(state_);
      return Completion::kNotAcknowledged;
    }
    return state_->status.ok() ? Completion::kAcknowledged : Completion::kSendFailed;
  }

 private:
  // gRPC may still hold slices of the caller's buffer: of a failed operation, or briefly after the
  // last write of a good one. A peer that reads nothing keeps them until the call is cancelled.
  void AwaitLentSegments() override {
    AwaitLentBuffers(
        {operation_, link_->rank, "gRPC kept the send buffers", "cancelling"}, grace_,
        [&](Clock::time_point until) { return ledger_->WaitAllReturned(until); },
        [&] { state_->context.TryCancel(); });
  }

  // Drops what is left of this and earlier operations; their late segments are dropped on
  // arrival from now on.
  void Retire() override {
    {
      std::lock_guard<std::mutex> lock(core_->mu);
      core_->inboxes.erase(core_->inboxes.begin(), core_->inboxes.upper_bound(operation_));
      core_->next_operation = operation_ + 1;
    }
    TakeFinished(core_);  // destroys the sending sides of calls that are over, here
    auto& lingering = link_->lingering;
    lingering.erase(std::remove_if(lingering.begin(), lingering.end(),
                                   [](const std::weak_ptr<SendState>& w) { return w.expired(); }),
                    lingering.end());
  }

  GrpcRingLink::Impl* link_;
  Core* core_;
  const uint64_t operation_;
  const std::chrono::milliseconds grace_;
  std::shared_ptr<LoanLedger> ledger_ = std::make_shared<LoanLedger>();
  std::shared_ptr<SendState> state_;
  RingSender* sender_;     // deletes itself in OnDone, after Release()
  ParsedSegment current_;  // owns the bytes of the segment last handed out by Receive
};

}  // namespace

GrpcRingLink::GrpcRingLink() : impl_(std::make_unique<Impl>()) {}

GrpcRingLink::~GrpcRingLink() {
  for (auto& weak : impl_->lingering) {
    if (auto state = weak.lock()) state->context.TryCancel();
  }
  for (auto& weak : impl_->lingering) {
    auto state = weak.lock();
    if (!state) continue;
    std::unique_lock<std::mutex> lock(state->core->mu);
    state->core->cv.wait_for(lock, std::chrono::seconds(10), [&] { return state->done; });
  }
  TakeFinished(impl_->core.get());
}

grpc::Service* GrpcRingLink::service() { return &impl_->service; }

void GrpcRingLink::AnnounceGeneration(uint32_t generation) {
  std::lock_guard<std::mutex> lock(impl_->core->mu);
  Core& core = *impl_->core;
  if (generation <= core.announced_generation) return;
  core.announced_generation = generation;
  const uint64_t start = uint64_t{generation} << kRingGenerationShift;
  if (start > core.next_operation) {
    core.inboxes.erase(core.inboxes.begin(), core.inboxes.lower_bound(start));
    core.next_operation = start;
  }
  core.cv.notify_all();
}

absl::Status GrpcRingLink::Connect(int rank, const std::vector<std::string>& peers) {
  impl_->rank = rank;
  const int world = static_cast<int>(peers.size());
  {
    std::lock_guard<std::mutex> lock(impl_->core->mu);
    impl_->core->rank = rank;
    impl_->core->world = world;
  }
  if (world == 1) return absl::OkStatus();
  grpc::ChannelArguments args = DefaultChannelArguments();
  // The retry layer keeps a reference to every message sent until the call is destroyed. Ring
  // segments are lent from the caller's buffer and must come back when the operation ends; a
  // failed operation is retried by the caller, never by gRPC.
  args.SetInt(GRPC_ARG_ENABLE_RETRIES, 0);
  const std::string& target = peers[(rank + 1) % world];
  std::shared_ptr<grpc::Channel> channel;
  // With TLS on, gRPC connects by itself (it can wrap a socket of ours only in plaintext), so the
  // ring over a Unix socket is encrypted and its server authenticated too, at the default send
  // buffer: anyone on the machine may connect to an abstract socket, or bind its name first.
  if (absl::StartsWith(target, kAbstractUnixScheme) && !ChannelsUseTls()) {
    // Our own connection, to give it a large send buffer (gRPC's own would keep the default).
    // If the peer is not there yet, the usual channel below reports it at the first operation.
    const int fd = ConnectAbstractUnix(target.substr(strlen(kAbstractUnixScheme)));
    if (fd >= 0) channel = MakeChannelFromFd(target, fd, args);  // with the run token
  }
  if (!channel) channel = MakeChannel(target, args);
  impl_->next_stub = std::make_unique<grpc::GenericStub>(std::move(channel));
  return absl::OkStatus();
}

std::unique_ptr<RingLink::Operation> GrpcRingLink::Begin(uint64_t operation,
                                                         std::chrono::milliseconds lifetime,
                                                         std::chrono::milliseconds grace) {
  return std::make_unique<GrpcOperation>(impl_.get(), operation, lifetime, grace);
}

void TuneAllocatorForRing() {
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
}

}  // namespace strata
