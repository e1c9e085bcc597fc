#include "services/worker/ring_allreduce.h"

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>

#include <malloc.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>
#include <grpcpp/create_channel_posix.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include "services/common/rpc.h"
#include "services/common/status.h"
#include "strata/v1/collective.grpc.pb.h"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;

constexpr char kRingMethod[] = "/strata.v1.Collective/Ring";

// RingSegment field numbers (proto/strata/v1/collective.proto) and protobuf wire types.
enum : uint32_t {
  kOperation = 1,
  kSender = 2,
  kWorld = 3,
  kCount = 4,
  kStep = 5,
  kOffset = 6,
  kData = 7,
  kAbort = 8
};
enum : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

struct SegmentHeader {
  uint64_t operation = 0;
  uint32_t sender = 0;
  uint32_t world = 0;
  uint64_t count = 0;
  uint32_t step = 0;
  uint64_t offset = 0;
};

// A received segment. The payload is not copied out of the received gRPC slices: the reducing
// thread reads it where it landed.
struct Segment {
  SegmentHeader header;
  std::string abort;
  std::vector<grpc::Slice> slices;
  size_t data_slice = 0, data_pos = 0, data_bytes = 0;
  bool has_data = false;
};

// ---- wire format -------------------------------------------------------------------------------

uint8_t* PutVarint(uint64_t v, uint8_t* p) {
  while (v >= 0x80) {
    *p++ = static_cast<uint8_t>(v | 0x80);
    v >>= 7;
  }
  *p++ = static_cast<uint8_t>(v);
  return p;
}
uint8_t* PutFixed64(uint32_t field, uint64_t v, uint8_t* p) {
  p = PutVarint(field << 3 | kFixed64, p);
  std::memcpy(p, &v, 8);  // x86/ARM little-endian, as protobuf's fixed64
  return p + 8;
}
uint8_t* PutFixed32(uint32_t field, uint32_t v, uint8_t* p) {
  p = PutVarint(field << 3 | kFixed32, p);
  std::memcpy(p, &v, 4);
  return p + 4;
}

// Counts the payload slices that gRPC still holds. Segments are sent straight from the caller's
// buffer (no copy: on a loaded machine the copy cost ~10% of an operation's CPU), so an operation
// may return only when gRPC has let go of every one of them; the ledger tells it when.
class LoanLedger {
 public:
  // A slice over data[0..bytes) that gRPC will read when it writes the message; it is counted
  // until gRPC releases it. The caller's data must not change until the bytes are sent: the ring
  // only writes into a range again after a causally later message arrived from another rank.
  grpc::Slice Lend(std::shared_ptr<LoanLedger> self, const void* data, size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++outstanding_;
    }
    auto* owner = new std::shared_ptr<LoanLedger>(std::move(self));
    return grpc::Slice(const_cast<void*>(data), bytes, &LoanLedger::Return, owner);
  }

  // True when every lent slice is back; false if some are still out at `until`.
  bool WaitAllReturned(Clock::time_point until) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_until(lock, until, [&] { return outstanding_ == 0; });
  }

 private:
  static void Return(void* owner) {
    auto* ledger = static_cast<std::shared_ptr<LoanLedger>*>(owner);
    {
      std::lock_guard<std::mutex> lock((*ledger)->mu_);
      --(*ledger)->outstanding_;
    }
    (*ledger)->cv_.notify_all();
    delete ledger;
  }

  std::mutex mu_;
  std::condition_variable cv_;
  int outstanding_ = 0;
};

// One message: the header fields in a small slice of their own, then `data` lent from the caller's
// buffer (or `abort`, copied).
grpc::ByteBuffer EncodeSegment(const SegmentHeader& h, const float* data, size_t floats,
                               const std::shared_ptr<LoanLedger>& ledger,
                               const std::string& abort = {}) {
  uint8_t head[80];
  uint8_t* p = head;
  p = PutFixed64(kOperation, h.operation, p);
  p = PutFixed32(kSender, h.sender, p);
  p = PutFixed32(kWorld, h.world, p);
  p = PutFixed64(kCount, h.count, p);
  p = PutFixed32(kStep, h.step, p);
  p = PutFixed64(kOffset, h.offset, p);
  const size_t payload = abort.empty() ? floats * sizeof(float) : abort.size();
  p = PutVarint((abort.empty() ? kData : kAbort) << 3 | kLengthDelimited, p);
  p = PutVarint(payload, p);
  grpc::Slice slices[2] = {grpc::Slice(head, static_cast<size_t>(p - head)), grpc::Slice()};
  if (!abort.empty()) {
    slices[1] = grpc::Slice(abort);
  } else if (payload > 0) {
    slices[1] = ledger->Lend(ledger, data, payload);
  }
  return grpc::ByteBuffer(slices, payload > 0 ? 2 : 1);
}

// Reads bytes across the slices of a received message.
class SliceCursor {
 public:
  explicit SliceCursor(const std::vector<grpc::Slice>& slices) : slices_(slices) { Settle(); }
  bool AtEnd() const { return i_ == slices_.size(); }
  size_t slice() const { return i_; }
  size_t pos() const { return p_; }
  bool Read(void* out, size_t n) {
    auto* o = static_cast<uint8_t*>(out);
    while (n > 0) {
      if (AtEnd()) return false;
      const size_t take = std::min(n, slices_[i_].size() - p_);
      std::memcpy(o, slices_[i_].begin() + p_, take);
      o += take;
      n -= take;
      p_ += take;
      Settle();
    }
    return true;
  }
  bool Skip(size_t n) {
    while (n > 0) {
      if (AtEnd()) return false;
      const size_t take = std::min(n, slices_[i_].size() - p_);
      n -= take;
      p_ += take;
      Settle();
    }
    return true;
  }
  bool ReadVarint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      uint8_t b;
      if (!Read(&b, 1)) return false;
      *v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return true;
    }
    return false;
  }

 private:
  void Settle() {
    while (i_ < slices_.size() && p_ == slices_[i_].size()) {
      ++i_;
      p_ = 0;
    }
  }
  const std::vector<grpc::Slice>& slices_;
  size_t i_ = 0, p_ = 0;
};

// Parses a RingSegment in any field order; unknown fields are skipped as protobuf does.
absl::Status ParseSegment(const grpc::ByteBuffer& buffer, Segment* seg) {
  grpc::Status dumped = buffer.Dump(&seg->slices);
  if (!dumped.ok()) return absl::InvalidArgumentError("unreadable ring segment");
  SliceCursor c(seg->slices);
  const auto bad = [] { return absl::InvalidArgumentError("malformed ring segment"); };
  while (!c.AtEnd()) {
    uint64_t tag;
    if (!c.ReadVarint(&tag)) return bad();
    const uint32_t field = static_cast<uint32_t>(tag >> 3), wire = static_cast<uint32_t>(tag & 7);
    if (wire == kVarint) {
      uint64_t ignored;
      if (!c.ReadVarint(&ignored)) return bad();
    } else if (wire == kFixed64) {
      uint64_t v;
      if (!c.Read(&v, 8)) return bad();
      if (field == kOperation) seg->header.operation = v;
      if (field == kCount) seg->header.count = v;
      if (field == kOffset) seg->header.offset = v;
    } else if (wire == kFixed32) {
      uint32_t v;
      if (!c.Read(&v, 4)) return bad();
      if (field == kSender) seg->header.sender = v;
      if (field == kWorld) seg->header.world = v;
      if (field == kStep) seg->header.step = v;
    } else if (wire == kLengthDelimited) {
      uint64_t len;
      if (!c.ReadVarint(&len)) return bad();
      if (field == kData) {
        seg->has_data = true;
        seg->data_slice = c.slice();
        seg->data_pos = c.pos();
        seg->data_bytes = len;
        if (!c.Skip(len)) return bad();
      } else if (field == kAbort) {
        if (len > (1 << 16)) return bad();
        seg->abort.resize(len);
        if (!c.Read(seg->abort.data(), len)) return bad();
      } else if (!c.Skip(len)) {
        return bad();
      }
    } else {
      return bad();
    }
  }
  return absl::OkStatus();
}

// ---- applying a received payload ---------------------------------------------------------------

enum class Apply { kAdd, kAddThenScale, kCopy };

void AddInto(float* dst, const uint8_t* src, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    float v;
    std::memcpy(&v, src + i * sizeof(float), sizeof(float));  // slices need not be aligned
    dst[i] += v;
  }
}
void AddScaleInto(float* dst, const uint8_t* src, size_t count, float divisor) {
  for (size_t i = 0; i < count; ++i) {
    float v;
    std::memcpy(&v, src + i * sizeof(float), sizeof(float));
    // Division, not multiplication by 1/n: the average of exact integer sums is then exact
    // wherever the quotient is representable.
    dst[i] = (dst[i] + v) / divisor;
  }
}

// Applies the payload to dst[0..floats) in place; a float may straddle two slices.
void ApplySegment(const Segment& seg, float* dst, Apply mode, float divisor) {
  if (mode == Apply::kCopy) {
    auto* out = reinterpret_cast<uint8_t*>(dst);
    size_t left = seg.data_bytes, pos = seg.data_pos;
    for (size_t i = seg.data_slice; left > 0; ++i, pos = 0) {
      const size_t take = std::min(left, seg.slices[i].size() - pos);
      std::memcpy(out, seg.slices[i].begin() + pos, take);
      out += take;
      left -= take;
    }
    return;
  }
  const auto run = [&](const uint8_t* src, size_t count) {
    if (mode == Apply::kAdd) {
      AddInto(dst, src, count);
    } else {
      AddScaleInto(dst, src, count, divisor);
    }
    dst += count;
  };
  uint8_t carry[sizeof(float)];
  size_t carried = 0, left = seg.data_bytes, pos = seg.data_pos;
  for (size_t i = seg.data_slice; left > 0; ++i, pos = 0) {
    const uint8_t* p = seg.slices[i].begin() + pos;
    size_t len = std::min(left, seg.slices[i].size() - pos);
    left -= len;
    if (carried > 0) {
      const size_t take = std::min(sizeof(float) - carried, len);
      std::memcpy(carry + carried, p, take);
      carried += take;
      p += take;
      len -= take;
      if (carried < sizeof(float)) continue;
      run(carry, 1);
      carried = 0;
    }
    const size_t whole = len / sizeof(float);
    run(p, whole);
    p += whole * sizeof(float);
    len -= whole * sizeof(float);
    std::memcpy(carry, p, len);
    carried = len;
  }
}

// ---- shared state --------------------------------------------------------------------------

// Segments received for one operation, in stream order.
struct Inbox {
  std::deque<Segment> segments;
  bool ended = false;  // the sender's stream is over (closed or broken)
};

// State shared by the operation thread and gRPC's callback threads; reactors hold it by
// shared_ptr so that a late callback never touches a destroyed RingAllReduce.
struct Core {
  std::mutex mu;
  std::condition_variable cv;
  std::map<uint64_t, Inbox> inboxes;  // by operation
  uint64_t next_operation = 0;        // lower operations are over: their segments are dropped
};

// The receiving end of one stream from the previous rank: queues each segment for its operation.
class RingReceiver final : public grpc::ServerReadReactor<grpc::ByteBuffer> {
 public:
  RingReceiver(std::shared_ptr<Core> core, grpc::ByteBuffer* response)
      : core_(std::move(core)), response_(response) {
    StartRead(&incoming_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      MarkEnded();
      grpc::Slice empty;  // RingAck has no fields: its encoding is empty
      *response_ = grpc::ByteBuffer(&empty, 1);
      Finish(grpc::Status::OK);
      return;
    }
    Segment seg;
    absl::Status parsed = ParseSegment(incoming_, &seg);
    incoming_.Clear();
    if (!parsed.ok()) {
      MarkEnded();
      Finish(ToGrpcStatus(parsed));
      return;
    }
    operation_ = seg.header.operation;
    has_operation_ = true;
    {
      std::lock_guard<std::mutex> lock(core_->mu);
      if (operation_ >= core_->next_operation) {
        core_->inboxes[operation_].segments.push_back(std::move(seg));
      }
    }
    core_->cv.notify_all();
    StartRead(&incoming_);
  }

  void OnDone() override { delete this; }

 private:
  void MarkEnded() {
    if (!has_operation_) return;
    {
      std::lock_guard<std::mutex> lock(core_->mu);
      if (operation_ >= core_->next_operation) core_->inboxes[operation_].ended = true;
    }
    core_->cv.notify_all();
  }

  std::shared_ptr<Core> core_;
  grpc::ByteBuffer* response_;
  grpc::ByteBuffer incoming_;
  uint64_t operation_ = 0;
  bool has_operation_ = false;
};

class CollectiveService final
    : public v1::Collective::WithRawCallbackMethod_Ring<v1::Collective::Service> {
 public:
  explicit CollectiveService(std::shared_ptr<Core> core) : core_(std::move(core)) {}
  using v1::Collective::WithRawCallbackMethod_Ring<v1::Collective::Service>::Ring;
  grpc::ServerReadReactor<grpc::ByteBuffer>* Ring(grpc::CallbackServerContext* context,
                                                  grpc::ByteBuffer* response) override {
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
    StartWritesDone();
  }

  // The operation thread's last call.
  void Release() { RemoveHold(); }

  void OnWriteDone(bool ok) override {
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
      StartWrite(&current_);
      return;
    }
    state_->writing = false;
    if (state_->close_requested && !state_->close_started) {
      state_->close_started = true;
      lock.unlock();
      StartWritesDone();
    }
  }

  void OnReadDone(bool ok) override {}

  void OnDone(const grpc::Status& status) override {
    // Nothing of the call may outlive the operation on gRPC's thread: the reactor goes first, and
    // this thread lets go of the state (its ClientContext holds a reference to the call) before
    // the operation can see `done`, so the operation's thread destroys the context, not a gRPC
    // thread that might still run while the process exits.
    std::shared_ptr<Core> core;  // outlives the lock: the state may hold the last reference
    {
      std::lock_guard<std::mutex> lock(state_->core->mu);
      std::shared_ptr<SendState> state = std::move(state_);
      core = state->core;
      delete this;
      state->done = true;
      state->status = status;
      state.reset();
      core->cv.notify_all();
    }
  }

 private:
  std::shared_ptr<SendState> state_;
  grpc::ByteBuffer current_;
  grpc::ByteBuffer ack_;
};

std::string Ms(std::chrono::milliseconds d) { return absl::StrCat(d.count(), " ms"); }

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

// ---- the operation -----------------------------------------------------------------------------

struct RingAllReduce::Impl {
  int rank = 0;
  int world = 0;
  std::vector<std::string> peers;
  std::shared_ptr<Core> core = std::make_shared<Core>();
  CollectiveService service{core};
  std::unique_ptr<grpc::GenericStub> next_stub;
  std::vector<std::weak_ptr<SendState>> lingering;  // streams of failed operations

  int next() const { return (rank + 1) % world; }
  int prev() const { return (rank + world - 1) % world; }
  std::string Name(int r) const { return absl::StrCat("rank ", r, " (", peers[r], ")"); }

  absl::Status Run(float* data, size_t n, const AllReduceOptions& options, bool average);
};

namespace {

// After its own deadline a rank waits this much longer for its upstream neighbour's abort,
// which names the rank that really stopped answering (the neighbour's deadline fired a moment
// earlier for the same reason). The stream's gRPC deadline includes it so the abort can still go.
std::chrono::milliseconds GraceFor(std::chrono::milliseconds deadline) {
  return std::clamp(deadline / 10, std::chrono::milliseconds(200), std::chrono::milliseconds(2000));
}

}  // namespace

absl::Status RingAllReduce::Impl::Run(float* data, size_t n, const AllReduceOptions& options,
                                      bool average) {
  if (world == 0) return absl::FailedPreconditionError("ring all-reduce: Connect() first");
  if (world == 1 || n == 0) return absl::OkStatus();
  if (data == nullptr) return absl::InvalidArgumentError("ring all-reduce: null buffer");

  uint64_t op;
  {
    std::lock_guard<std::mutex> lock(core->mu);
    op = core->next_operation;
  }
  const auto start = Clock::now();
  const auto deadline = start + options.deadline;
  const auto grace = GraceFor(options.deadline);
  const size_t segment_bytes =
      options.segment_bytes > 0 ? options.segment_bytes : AutoSegmentBytes(n, world);
  const size_t seg_floats = std::max<size_t>(1, segment_bytes / sizeof(float));
  const int steps = 2 * (world - 1);
  const auto chunk_begin = [&](int c) { return n * static_cast<size_t>(c) / world; };
  const auto mod = [&](int x) { return ((x % world) + world) % world; };
  // The chunk this rank receives at step s; it sends the same chunk at step s + 1.
  const auto recv_chunk = [&](int s) {
    return s < world - 1 ? mod(rank - s - 1) : mod(rank - (s - (world - 1)));
  };

  auto ledger = std::make_shared<LoanLedger>();
  auto state = std::make_shared<SendState>(core);
  state->context.set_deadline(std::chrono::system_clock::now() + options.deadline + grace);
  // A connection that fails transiently (a loaded peer slow to finish the HTTP/2 handshake) is
  // retried until the deadline instead of failing the operation; a dead peer is then reported
  // at the deadline, by name, like a silent one.
  state->context.set_wait_for_ready(true);
  auto* sender = new RingSender(state);
  sender->Start(next_stub.get());

  SegmentHeader header;
  header.operation = op;
  header.sender = static_cast<uint32_t>(rank);
  header.world = static_cast<uint32_t>(world);
  header.count = n;
  const auto send_chunk = [&](int step, int chunk) {
    header.step = static_cast<uint32_t>(step);
    for (size_t b = chunk_begin(chunk), e = chunk_begin(chunk + 1); b < e; b += seg_floats) {
      header.offset = b;
      sender->Send(EncodeSegment(header, data + b, std::min(seg_floats, e - b), ledger));
    }
  };

  // Waits for the next segment of this operation from the previous rank. Errors name the rank
  // that did not answer.
  const auto op_name = absl::StrCat("all-reduce operation ", op, " on rank ", rank);
  // Called with core->mu held. A failed write is followed by the call's status; wait briefly for
  // it so the error says why (refused, reset, deadline) rather than only that the stream broke.
  const auto downstream_error = [&](std::unique_lock<std::mutex>& lock) -> absl::Status {
    core->cv.wait_for(lock, std::chrono::seconds(2), [&] { return state->done; });
    return Annotate(FromGrpcStatus(state->status.ok()
                                       ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "stream broke")
                                       : state->status,
                                   absl::StrCat("sending to ", Name(next()))),
                    op_name);
  };
  const auto next_segment = [&](int s, Segment* out) -> absl::Status {
    std::unique_lock<std::mutex> lock(core->mu);
    Inbox& inbox = core->inboxes[op];
    while (true) {
      if (!inbox.segments.empty()) {
        *out = std::move(inbox.segments.front());
        inbox.segments.pop_front();
        return absl::OkStatus();
      }
      if (state->broken || (state->done && !state->status.ok())) return downstream_error(lock);
      if (inbox.ended) {
        return absl::UnavailableError(absl::StrCat(op_name, ": the stream from ", Name(prev()),
                                                   " ended at step ", s + 1, " of ", steps,
                                                   " (that rank failed or left)"));
      }
      if (core->cv.wait_until(lock, deadline) == std::cv_status::timeout &&
          inbox.segments.empty() && !inbox.ended) {
        return absl::DeadlineExceededError(absl::StrCat(op_name, ": no data from ", Name(prev()),
                                                        " within ", Ms(options.deadline), " (step ",
                                                        s + 1, " of ", steps, ")"));
      }
    }
  };

  absl::Status status;
  int step = 0;
  send_chunk(0, rank);
  for (; step < steps && status.ok(); ++step) {
    const int chunk = recv_chunk(step);
    const Apply mode = step < world - 2    ? Apply::kAdd
                       : step == world - 2 ? (average ? Apply::kAddThenScale : Apply::kAdd)
                                           : Apply::kCopy;
    for (size_t b = chunk_begin(chunk), e = chunk_begin(chunk + 1); b < e && status.ok();
         b += seg_floats) {
      const size_t len = std::min(seg_floats, e - b);
      Segment seg;
      status = next_segment(step, &seg);
      if (!status.ok()) break;
      if (!seg.abort.empty()) {
        // The previous rank gave up; its reason names the culprit. Pass it on unchanged.
        status = absl::UnavailableError(seg.abort);
        break;
      }
      const SegmentHeader& h = seg.header;
      if (h.sender != static_cast<uint32_t>(prev()) || h.world != static_cast<uint32_t>(world) ||
          h.count != n || h.step != static_cast<uint32_t>(step) || h.offset != b || !seg.has_data ||
          seg.data_bytes != len * sizeof(float)) {
        status = absl::InvalidArgumentError(absl::StrCat(
            op_name, ": ", Name(prev()), " sent a segment (sender ", h.sender, ", world ", h.world,
            ", buffer of ", h.count, " floats, step ", h.step, ", offset ", h.offset, ", ",
            seg.data_bytes, " bytes) where this rank expected (sender ", prev(), ", world ", world,
            ", buffer of ", n, " floats, step ", step, ", offset ", b, ", ", len * sizeof(float),
            " bytes); every rank must reduce the same number of floats in the same order"));
        break;
      }
      ApplySegment(seg, data + b, mode, static_cast<float>(world));
      if (step + 1 < steps) {
        header.step = static_cast<uint32_t>(step + 1);
        header.offset = b;
        sender->Send(EncodeSegment(header, data + b, len, ledger));
      }
    }
  }

  if (!status.ok()) {
    // Tell the next rank at once. Then, for a short while, take any later abort from the previous
    // rank: it comes from further up the ring, so it is closer to the rank that really stopped
    // (a rank that times out first blames its own neighbour, which was only waiting too).
    sender->DropQueued();  // data segments not yet handed to gRPC: the next rank cannot use them
    sender->Send(EncodeSegment(header, nullptr, 0, ledger, std::string(status.message())));
    const auto until = Clock::now() + grace;
    while (true) {
      std::vector<std::string> later;
      bool over = false;
      {
        std::unique_lock<std::mutex> lock(core->mu);
        Inbox& inbox = core->inboxes[op];
        for (auto it = inbox.segments.begin(); it != inbox.segments.end();) {
          if (it->abort.empty()) {
            ++it;
          } else {
            later.push_back(std::move(it->abort));
            it = inbox.segments.erase(it);
          }
        }
        if (later.empty()) {
          over = inbox.ended || core->cv.wait_until(lock, until) == std::cv_status::timeout;
        }
      }
      for (const std::string& reason : later) {
        status = absl::UnavailableError(reason);
        sender->Send(EncodeSegment(header, nullptr, 0, ledger, reason));
      }
      if (over) break;
    }
    sender->CloseWrites();
    sender->Release();
    lingering.push_back(state);
  } else {
    // Everything received; the operation is complete once the next rank acknowledges the stream.
    sender->CloseWrites();
    sender->Release();
    std::unique_lock<std::mutex> lock(core->mu);
    while (!state->done) {
      if (core->cv.wait_until(lock, deadline + grace) == std::cv_status::timeout && !state->done) {
        state->context.TryCancel();
        lingering.push_back(state);
        status = absl::DeadlineExceededError(absl::StrCat(
            op_name, ": ", Name(next()), " did not acknowledge within ", Ms(options.deadline)));
        break;
      }
    }
    if (status.ok() && !state->status.ok()) status = downstream_error(lock);
  }

  // gRPC may still hold slices of the caller's buffer: of a failed operation, or briefly after the
  // last write of a good one. A peer that reads nothing keeps them until the call is cancelled.
  if (!ledger->WaitAllReturned(Clock::now() + grace)) {
    state->context.TryCancel();
    if (!ledger->WaitAllReturned(Clock::now() + std::chrono::seconds(30))) {
      // Not seen in practice: gRPC releases a cancelled call's messages at once. Returning would
      // let gRPC read memory the caller may free, so stop here, loudly.
      std::fprintf(stderr, "%s: gRPC kept the send buffers 30 s after cancelling; aborting\n",
                   op_name.c_str());
      std::abort();
    }
  }

  {
    std::lock_guard<std::mutex> lock(core->mu);
    core->inboxes.erase(core->inboxes.begin(), core->inboxes.upper_bound(op));
    core->next_operation = op + 1;
  }
  lingering.erase(std::remove_if(lingering.begin(), lingering.end(),
                                 [](const std::weak_ptr<SendState>& w) { return w.expired(); }),
                  lingering.end());
  return status;
}

size_t AutoSegmentBytes(size_t floats, int world) {
  const size_t chunk_bytes = floats * sizeof(float) / static_cast<size_t>(std::max(1, world));
  return std::clamp<size_t>((chunk_bytes + 1) / 2, 1 << 20, 8 << 20);
}

RingAllReduce::RingAllReduce(int rank) : impl_(std::make_unique<Impl>()) {
  impl_->rank = rank;
  // Every operation makes gRPC allocate and free receive buffers of a few hundred KiB. Above
  // glibc's default 128 KiB threshold each one is a fresh mmap whose pages fault in one by one
  // (zeroed), and freed heap tops are trimmed back to the kernel: measured (when segments were
  // still copied into fresh buffers too) as ~10% of the CPU time of an operation and up to 30%
  // lower bandwidth. Keep them on the heap.
  static const bool tuned = [] {
    mallopt(M_MMAP_THRESHOLD, 64 << 20);
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
    return true;
  }();
  (void)tuned;
}

RingAllReduce::~RingAllReduce() {
  // Streams of failed operations may still be open: cancel them and wait for gRPC to finish
  // with them, so no callback runs after the process starts tearing gRPC down.
  for (auto& weak : impl_->lingering) {
    if (auto state = weak.lock()) state->context.TryCancel();
  }
  for (auto& weak : impl_->lingering) {
    auto state = weak.lock();
    if (!state) continue;
    std::unique_lock<std::mutex> lock(state->core->mu);
    state->core->cv.wait_for(lock, std::chrono::seconds(10), [&] { return state->done; });
  }
}

grpc::Service* RingAllReduce::service() { return &impl_->service; }

absl::Status RingAllReduce::Connect(const std::vector<std::string>& peers) {
  if (peers.empty()) return absl::InvalidArgumentError("ring all-reduce: no peers");
  if (impl_->rank < 0 || static_cast<size_t>(impl_->rank) >= peers.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ring all-reduce: rank ", impl_->rank, " outside a world of ", peers.size()));
  }
  for (size_t r = 0; r < peers.size(); ++r) {
    if (peers[r].empty())
      return absl::InvalidArgumentError(
          absl::StrCat("ring all-reduce: empty address for rank ", r));
  }
  impl_->peers = peers;
  impl_->world = static_cast<int>(peers.size());
  if (impl_->world > 1) {
    grpc::ChannelArguments args = DefaultChannelArguments();
    // The retry layer keeps a reference to every message sent until the call is destroyed. Ring
    // segments are lent from the caller's buffer and must come back when the operation ends; a
    // failed operation is retried by the caller, never by gRPC.
    args.SetInt(GRPC_ARG_ENABLE_RETRIES, 0);
    const std::string& target = peers[impl_->next()];
    std::shared_ptr<grpc::Channel> channel;
    if (absl::StartsWith(target, kAbstractUnixScheme)) {
      // Our own connection, to give it a large send buffer (gRPC's own would keep the default).
      // If the peer is not there yet, the usual channel below reports it at the first operation.
      const int fd = ConnectAbstractUnix(target.substr(strlen(kAbstractUnixScheme)));
      if (fd >= 0) channel = grpc::CreateCustomInsecureChannelFromFd(target, fd, args);
    }
    if (!channel) channel = MakeChannel(target, args);
    impl_->next_stub = std::make_unique<grpc::GenericStub>(std::move(channel));
  }
  return absl::OkStatus();
}

absl::Status RingAllReduce::AllReduceAverage(float* data, size_t n,
                                             const AllReduceOptions& options) {
  return impl_->Run(data, n, options, /*average=*/true);
}

absl::Status RingAllReduce::AllReduceSum(float* data, size_t n, const AllReduceOptions& options) {
  return impl_->Run(data, n, options, /*average=*/false);
}

int RingAllReduce::rank() const { return impl_->rank; }
int RingAllReduce::world() const { return impl_->world; }

}  // namespace strata
