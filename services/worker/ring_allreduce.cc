#include "services/worker/ring_allreduce.h"

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>

#include <malloc.h>

#include <absl/strings/str_cat.h>
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
enum : uint32_t { kOperation = 1, kSender = 2, kWorld = 3, kCount = 4, kStep = 5, kOffset = 6, kData = 7, kAbort = 8 };
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

// The header fields and the tag and length of `data` (or `abort`), as their own small slice.
grpc::Slice EncodeHeader(const SegmentHeader& h, size_t payload_bytes, bool abort) {
  uint8_t head[80];
  uint8_t* p = head;
  p = PutFixed64(kOperation, h.operation, p);
  p = PutFixed32(kSender, h.sender, p);
  p = PutFixed32(kWorld, h.world, p);
  p = PutFixed64(kCount, h.count, p);
  p = PutFixed32(kStep, h.step, p);
  p = PutFixed64(kOffset, h.offset, p);
  p = PutVarint((abort ? kAbort : kData) << 3 | kLengthDelimited, p);
  p = PutVarint(payload_bytes, p);
  return grpc::Slice(head, static_cast<size_t>(p - head));
}

// A segment whose payload is already in a slice gRPC owns (no copy here).
grpc::ByteBuffer EncodeSegment(const SegmentHeader& h, std::vector<grpc::Slice> payload) {
  size_t bytes = 0;
  for (const grpc::Slice& s : payload) bytes += s.size();
  payload.insert(payload.begin(), EncodeHeader(h, bytes, /*abort=*/false));
  return grpc::ByteBuffer(payload.data(), payload.size());
}

// A segment copied from the caller's buffer: the copy is what lets a failed operation return
// without gRPC still pointing into memory the caller may free.
grpc::ByteBuffer EncodeSegment(const SegmentHeader& h, const float* data, size_t floats) {
  std::vector<grpc::Slice> payload;
  payload.emplace_back(data, floats * sizeof(float));
  return EncodeSegment(h, std::move(payload));
}

grpc::ByteBuffer EncodeAbort(const SegmentHeader& h, const std::string& reason) {
  grpc::Slice slices[2] = {EncodeHeader(h, reason.size(), /*abort=*/true), grpc::Slice(reason)};
  return grpc::ByteBuffer(slices, 2);
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

// Calls fn(src, first, count) over the payload in runs of whole floats (src may be unaligned);
// a float straddling two slices is passed alone from a small copy.
template <typename Fn>
void ForEachRun(const Segment& seg, Fn&& fn) {
  uint8_t carry[sizeof(float)];
  size_t carried = 0, left = seg.data_bytes, pos = seg.data_pos, index = 0;
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
      fn(carry, index, 1);
      ++index;
      carried = 0;
    }
    const size_t whole = len / sizeof(float);
    if (whole > 0) fn(p, index, whole);
    index += whole;
    p += whole * sizeof(float);
    len -= whole * sizeof(float);
    std::memcpy(carry, p, len);
    carried = len;
  }
}

inline float Load(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, sizeof(float));  // slices need not be aligned
  return v;
}

// Reduce-scatter, before the last step: the partial sum goes straight into the outgoing slice;
// this rank's copy of the chunk is overwritten by the all-gather anyway.
void SumInto(uint8_t* out, const float* mine, const Segment& seg) {
  ForEachRun(seg, [&](const uint8_t* src, size_t first, size_t count) {
    for (size_t i = 0; i < count; ++i) {
      const float v = mine[first + i] + Load(src + i * sizeof(float));
      std::memcpy(out + (first + i) * sizeof(float), &v, sizeof(float));
    }
  });
}

// The last reduce-scatter step: this rank owns the chunk's final value.
void FinishInPlace(float* mine, const Segment& seg, bool average, float divisor) {
  ForEachRun(seg, [&](const uint8_t* src, size_t first, size_t count) {
    float* d = mine + first;
    if (average) {
      // Division, not multiplication by 1/n: the average of exact integer sums is then exact
      // wherever the quotient is representable.
      for (size_t i = 0; i < count; ++i) d[i] = (d[i] + Load(src + i * sizeof(float))) / divisor;
    } else {
      for (size_t i = 0; i < count; ++i) d[i] += Load(src + i * sizeof(float));
    }
  });
}

void CopyInto(float* mine, const Segment& seg) {
  auto* out = reinterpret_cast<uint8_t*>(mine);
  size_t left = seg.data_bytes, pos = seg.data_pos;
  for (size_t i = seg.data_slice; left > 0; ++i, pos = 0) {
    const size_t take = std::min(left, seg.slices[i].size() - pos);
    std::memcpy(out, seg.slices[i].begin() + pos, take);
    out += take;
    left -= take;
  }
}

// The payload's bytes as slices that share the received memory (for forwarding without a copy).
std::vector<grpc::Slice> PayloadSlices(const Segment& seg) {
  std::vector<grpc::Slice> out;
  size_t left = seg.data_bytes, pos = seg.data_pos;
  for (size_t i = seg.data_slice; left > 0; ++i, pos = 0) {
    const size_t take = std::min(left, seg.slices[i].size() - pos);
    out.push_back(seg.slices[i].sub(pos, pos + take));
    left -= take;
  }
  return out;
}

// ---- shared state --------------------------------------------------------------------------

// Segments received for one operation, in stream order, that nobody has processed yet.
struct Inbox {
  std::deque<Segment> segments;
  bool ended = false;  // the sender's stream is over (closed or broken)
};

// One operation in progress: validates each segment from the previous rank, reduces or copies it
// into the caller's buffer and forwards the result to the next rank. Exactly one thread runs
// Process() at a time (Core::busy): the gRPC thread that received the segment, or the operation's
// own thread for segments that arrived before the operation started.
class OpRunner;

// State shared by the operation thread and gRPC's callback threads; reactors hold it by
// shared_ptr so that a late callback never touches a destroyed RingAllReduce.
struct Core {
  std::mutex mu;
  std::condition_variable cv;
  std::map<uint64_t, Inbox> inboxes;  // by operation
  uint64_t next_operation = 0;        // lower operations are over: their segments are dropped
  OpRunner* active = nullptr;         // the operation in progress
  uint64_t active_operation = 0;
  bool busy = false;                  // some thread is inside active->Process()
};

void ProcessOutsideLock(OpRunner* runner, Segment seg);

// The receiving end of one stream from the previous rank. A segment of the running operation is
// processed right here, on gRPC's thread, so the data path costs no thread hand-off; others wait
// in the inbox of their operation.
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
      std::unique_lock<std::mutex> lock(core_->mu);
      if (operation_ >= core_->next_operation) {
        Inbox& inbox = core_->inboxes[operation_];
        if (core_->active != nullptr && core_->active_operation == operation_ && !core_->busy &&
            inbox.segments.empty()) {
          core_->busy = true;
          OpRunner* runner = core_->active;
          lock.unlock();
          ProcessOutsideLock(runner, std::move(seg));
          lock.lock();
          core_->busy = false;
        } else {
          inbox.segments.push_back(std::move(seg));
        }
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
    {
      std::lock_guard<std::mutex> lock(state_->core->mu);
      state_->done = true;
      state_->status = status;
    }
    state_->core->cv.notify_all();
    delete this;
  }

 private:
  std::shared_ptr<SendState> state_;
  grpc::ByteBuffer current_;
  grpc::ByteBuffer ack_;
};

std::string Ms(std::chrono::milliseconds d) { return absl::StrCat(d.count(), " ms"); }

// Reduce-scatter steps 0 .. world-2, then all-gather steps world-1 .. 2(world-1)-1. At step s
// this rank receives chunk recv(s) and sends at step s+1 what it made of it, so one segment can be
// forwarded as soon as it has been added: the segments of consecutive steps overlap on the ring.
class OpRunner {
 public:
  OpRunner(float* data, size_t n, int rank, int world, bool average, size_t seg_floats, uint64_t op,
           RingSender* sender, std::string op_name, std::string prev_name)
      : data_(data), n_(n), rank_(rank), world_(world), steps_(2 * (world - 1)), average_(average),
        seg_floats_(seg_floats), sender_(sender), op_name_(std::move(op_name)), prev_name_(std::move(prev_name)) {
    header_.operation = op;
    header_.sender = static_cast<uint32_t>(rank);
    header_.world = static_cast<uint32_t>(world);
    header_.count = n;
    offset_ = ChunkBegin(RecvChunk(0));
    Settle();
  }

  // Step 0: this rank's own chunk, as it is.
  void SendFirst() {
    header_.step = 0;
    for (size_t b = ChunkBegin(rank_), e = ChunkBegin(rank_ + 1); b < e; b += seg_floats_) {
      header_.offset = b;
      sender_->Send(EncodeSegment(header_, data_ + b, std::min(seg_floats_, e - b)));
    }
  }

  void Process(Segment seg) {
    if (finished()) return;
    if (!seg.abort.empty()) {
      // The previous rank gave up; its reason names the culprit. Pass it on unchanged.
      status_ = absl::UnavailableError(seg.abort);
      return;
    }
    const size_t end = ChunkBegin(RecvChunk(step_) + 1);
    const size_t len = std::min(seg_floats_, end - offset_);
    const SegmentHeader& h = seg.header;
    if (h.sender != static_cast<uint32_t>((rank_ + world_ - 1) % world_) || h.world != static_cast<uint32_t>(world_) ||
        h.count != n_ || h.step != static_cast<uint32_t>(step_) || h.offset != offset_ || !seg.has_data ||
        seg.data_bytes != len * sizeof(float)) {
      status_ = absl::InvalidArgumentError(absl::StrCat(
          op_name_, ": ", prev_name_, " sent a segment (sender ", h.sender, ", world ", h.world, ", buffer of ",
          h.count, " floats, step ", h.step, ", offset ", h.offset, ", ", seg.data_bytes,
          " bytes) where this rank expected (sender ", (rank_ + world_ - 1) % world_, ", world ", world_,
          ", buffer of ", n_, " floats, step ", step_, ", offset ", offset_, ", ", len * sizeof(float),
          " bytes); every rank must reduce the same number of floats in the same order"));
      return;
    }
    float* mine = data_ + offset_;
    header_.step = static_cast<uint32_t>(step_ + 1);
    header_.offset = offset_;
    if (step_ < world_ - 2) {
      grpc::Slice out(len * sizeof(float));  // freshly allocated, ours until sent
      SumInto(const_cast<uint8_t*>(out.begin()), mine, seg);
      std::vector<grpc::Slice> payload;
      payload.push_back(std::move(out));
      sender_->Send(EncodeSegment(header_, std::move(payload)));
    } else if (step_ == world_ - 2) {
      FinishInPlace(mine, seg, average_, static_cast<float>(world_));
      sender_->Send(EncodeSegment(header_, mine, len));
    } else {
      CopyInto(mine, seg);
      // The final values travel on as they arrived: the received slices are shared, not copied.
      if (step_ + 1 < steps_) sender_->Send(EncodeSegment(header_, PayloadSlices(seg)));
    }
    offset_ += len;
    Settle();
  }

  bool finished() const { return step_ == steps_ || !status_.ok(); }
  const absl::Status& status() const { return status_; }
  int step() const { return step_; }
  int steps() const { return steps_; }
  const SegmentHeader& header() const { return header_; }

 private:
  size_t ChunkBegin(int c) const { return n_ * static_cast<size_t>(c) / world_; }
  int Mod(int x) const { return ((x % world_) + world_) % world_; }
  int RecvChunk(int s) const { return s < world_ - 1 ? Mod(rank_ - s - 1) : Mod(rank_ - (s - (world_ - 1))); }
  // Moves to the next step once the current chunk is done (empty chunks carry no segments).
  void Settle() {
    while (step_ < steps_ && offset_ >= ChunkBegin(RecvChunk(step_) + 1)) {
      ++step_;
      if (step_ < steps_) offset_ = ChunkBegin(RecvChunk(step_));
    }
  }

  float* data_;
  size_t n_;
  int rank_, world_, steps_;
  bool average_;
  size_t seg_floats_;
  RingSender* sender_;
  std::string op_name_, prev_name_;
  SegmentHeader header_;
  int step_ = 0;
  size_t offset_ = 0;
  absl::Status status_;
};

void ProcessOutsideLock(OpRunner* runner, Segment seg) { runner->Process(std::move(seg)); }

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
  const auto deadline = Clock::now() + options.deadline;
  const auto grace = GraceFor(options.deadline);
  const size_t seg_floats = std::max<size_t>(1, options.segment_bytes / sizeof(float));
  const std::string op_name = absl::StrCat("all-reduce operation ", op, " on rank ", rank);

  auto state = std::make_shared<SendState>(core);
  state->context.set_deadline(std::chrono::system_clock::now() + options.deadline + grace);
  // A connection that fails transiently (a loaded peer slow to finish the HTTP/2 handshake) is
  // retried until the deadline instead of failing the operation; a dead peer is then reported
  // at the deadline, by name, like a silent one.
  state->context.set_wait_for_ready(true);
  auto* sender = new RingSender(state);
  sender->Start(next_stub.get());
  // Called with core->mu held. A failed write is followed by the call's status; wait briefly for
  // it so the error says why (refused, reset, deadline) rather than only that the stream broke.
  const auto downstream_error = [&](std::unique_lock<std::mutex>& lock) -> absl::Status {
    core->cv.wait_for(lock, std::chrono::seconds(2), [&] { return state->done; });
    return Annotate(FromGrpcStatus(state->status.ok() ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "stream broke")
                                                      : state->status,
                                   absl::StrCat("sending to ", Name(next()))),
                    op_name);
  };

  OpRunner runner(data, n, rank, world, average, seg_floats, op, sender, op_name, Name(prev()));
  runner.SendFirst();  // before the runner is visible: forwarded segments must come after these

  absl::Status status;
  {
    std::unique_lock<std::mutex> lock(core->mu);
    core->active = &runner;
    core->active_operation = op;
    Inbox& inbox = core->inboxes[op];
    while (true) {
      if (core->busy) {  // a gRPC thread is processing a segment; it notifies when done
        core->cv.wait(lock);
        continue;
      }
      if (runner.finished()) break;
      if (!inbox.segments.empty()) {  // arrived before this operation started
        Segment seg = std::move(inbox.segments.front());
        inbox.segments.pop_front();
        core->busy = true;
        lock.unlock();
        runner.Process(std::move(seg));
        lock.lock();
        core->busy = false;
        continue;
      }
      if (state->broken || (state->done && !state->status.ok())) {
        status = downstream_error(lock);
        break;
      }
      if (inbox.ended) {
        status = absl::UnavailableError(absl::StrCat(op_name, ": the stream from ", Name(prev()), " ended at step ",
                                                     runner.step() + 1, " of ", runner.steps(),
                                                     " (that rank failed or left)"));
        break;
      }
      if (Clock::now() >= deadline) {
        status = absl::DeadlineExceededError(absl::StrCat(op_name, ": no data from ", Name(prev()), " within ",
                                                          Ms(options.deadline), " (step ", runner.step() + 1,
                                                          " of ", runner.steps(), ")"));
        break;
      }
      core->cv.wait_until(lock, deadline);
    }
    core->active = nullptr;
    while (core->busy) core->cv.wait(lock);
    if (status.ok()) status = runner.status();
  }

  if (!status.ok()) {
    // Tell the next rank at once. Then, for a short while, take any later abort from the previous
    // rank: it comes from further up the ring, so it is closer to the rank that really stopped
    // (a rank that times out first blames its own neighbour, which was only waiting too).
    sender->Send(EncodeAbort(runner.header(), std::string(status.message())));
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
        sender->Send(EncodeAbort(runner.header(), reason));
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
        status = absl::DeadlineExceededError(
            absl::StrCat(op_name, ": ", Name(next()), " did not acknowledge within ", Ms(options.deadline)));
        break;
      }
    }
    if (status.ok() && !state->status.ok()) status = downstream_error(lock);
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

RingAllReduce::RingAllReduce(int rank) : impl_(std::make_unique<Impl>()) {
  impl_->rank = rank;
  // Every operation allocates and frees buffers of a few hundred KiB (our segments, gRPC's
  // receive buffers). Above glibc's default 128 KiB threshold each one is a fresh mmap whose pages
  // fault in one by one (zeroed), and freed heap tops are trimmed back to the kernel: measured as
  // ~10% of the CPU time of an operation and up to 30% lower bandwidth. Keep them on the heap.
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
    return absl::InvalidArgumentError(absl::StrCat("ring all-reduce: rank ", impl_->rank,
                                                   " outside a world of ", peers.size()));
  }
  for (size_t r = 0; r < peers.size(); ++r) {
    if (peers[r].empty()) return absl::InvalidArgumentError(absl::StrCat("ring all-reduce: empty address for rank ", r));
  }
  impl_->peers = peers;
  impl_->world = static_cast<int>(peers.size());
  if (impl_->world > 1) {
    impl_->next_stub = std::make_unique<grpc::GenericStub>(MakeChannel(peers[impl_->next()]));
  }
  return absl::OkStatus();
}

absl::Status RingAllReduce::AllReduceAverage(float* data, size_t n, const AllReduceOptions& options) {
  return impl_->Run(data, n, options, /*average=*/true);
}

absl::Status RingAllReduce::AllReduceSum(float* data, size_t n, const AllReduceOptions& options) {
  return impl_->Run(data, n, options, /*average=*/false);
}

int RingAllReduce::rank() const { return impl_->rank; }
int RingAllReduce::world() const { return impl_->world; }

}  // namespace strata
