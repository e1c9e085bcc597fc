#include "services/collective/ring_allreduce.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>

#include <absl/strings/str_cat.h>

#include "services/collective/grpc_ring_link.h"
#include "services/common/base/status.h"
#include "services/common/wire/half_float.h"

namespace strata {
namespace {

using Clock = RingClock;

// Says that a value was beyond a 16-bit float's range (AllReduceOptions::half_precision). It
// travels in the abort's reason, so that every rank, not only the one that found it, fails with
// OUT_OF_RANGE rather than as if a peer were lost.
constexpr char kBeyondHalfRange[] = "beyond 65,504, the largest 16-bit float";

// The status of an operation a peer gave up with `reason`.
absl::Status AbortStatus(const std::string& reason) {
  if (reason.find(kBeyondHalfRange) != std::string::npos) return absl::OutOfRangeError(reason);
  return absl::UnavailableError(reason);
}

// ---- applying a received payload ---------------------------------------------------------------

enum class Apply { kAdd, kAddThenScale, kCopy };

void AddInto(float* dst, const uint8_t* src, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    float v;
    std::memcpy(&v, src + i * sizeof(float), sizeof(float));  // pieces need not be aligned
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

// Applies the payload to dst[0..data_bytes / 4) in place, reading it where the link received it;
// a float may straddle two pieces.
void ApplySegment(const RingSegment& seg, float* dst, Apply mode, float divisor) {
  if (mode == Apply::kCopy) {
    auto* out = reinterpret_cast<uint8_t*>(dst);
    for (const absl::Span<const uint8_t>& piece : seg.pieces) {
      std::memcpy(out, piece.data(), piece.size());
      out += piece.size();
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
  size_t carried = 0;
  for (const absl::Span<const uint8_t>& piece : seg.pieces) {
    const uint8_t* p = piece.data();
    size_t len = piece.size();
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

// ---- the schedule ------------------------------------------------------------------------------

// Which chunk travels at which step, and what a rank does with what it receives.
struct Schedule {
  size_t n;
  int rank, world;
  size_t segment_floats;

  int steps() const { return 2 * (world - 1); }
  size_t ChunkBegin(int chunk) const { return n * static_cast<size_t>(chunk) / world; }
  int Mod(int x) const { return ((x % world) + world) % world; }
  // The chunk this rank receives at step s; it sends the same chunk at step s + 1.
  int ReceivedChunk(int s) const {
    return s < world - 1 ? Mod(rank - s - 1) : Mod(rank - (s - (world - 1)));
  }
  // Reduce-scatter adds (the last addition also averages); all-gather copies the final values.
  Apply ApplyAt(int s, bool average) const {
    if (s < world - 2) return Apply::kAdd;
    if (s == world - 2) return average ? Apply::kAddThenScale : Apply::kAdd;
    return Apply::kCopy;
  }
};

std::string Ms(std::chrono::milliseconds d) { return absl::StrCat(d.count(), " ms"); }

// After its own deadline a rank waits this much longer for its upstream neighbour's abort,
// which names the rank that really stopped answering (the neighbour's deadline fired a moment
// earlier for the same reason). The link keeps the stream open this much longer too, so the
// abort can still go.
std::chrono::milliseconds GraceFor(std::chrono::milliseconds deadline) {
  return std::clamp(deadline / 10, std::chrono::milliseconds(200), std::chrono::milliseconds(2000));
}

}  // namespace

// ---- the operation -----------------------------------------------------------------------------

struct RingAllReduce::Impl {
  int rank = 0;
  int world = 0;
  std::vector<std::string> peers;
  std::unique_ptr<RingLink> link;
  uint64_t next_operation = 0;
  RingSegment segment;  // reused, so that its pieces keep their capacity
  // Interrupt(): set once, from any thread; the reason is read only after the flag is seen.
  std::atomic<bool> interrupted{false};
  std::mutex interrupt_mu;
  std::string interrupt_reason;

  // One operation in progress on this rank.
  struct Operation {
    RingLink::Operation& link;
    Schedule plan;
    float* data;
    bool average;
    bool half;             // AllReduceOptions::half_precision
    SegmentHeader header;  // of the segment sent last
    Clock::time_point deadline;
    std::chrono::milliseconds timeout, grace;
    std::string name;  // prefixes every error
  };

  int next() const { return (rank + 1) % world; }
  int prev() const { return (rank + world - 1) % world; }
  std::string Name(int r) const { return absl::StrCat("rank ", r, " (", peers[r], ")"); }

  absl::Status Run(float* data, size_t n, const AllReduceOptions& options, bool average);
  absl::Status Exchange(Operation& op);
  absl::Status ReceiveSegment(Operation& op, int step, size_t offset, size_t floats);
  absl::Status GiveUp(Operation& op, absl::Status status);
  absl::Status Complete(Operation& op);
  absl::Status SendError(Operation& op) {
    return Annotate(Annotate(op.link.SendError(), absl::StrCat("sending to ", Name(next()))),
                    op.name);
  }
};

absl::Status RingAllReduce::Impl::Run(float* data, size_t n, const AllReduceOptions& options,
                                      bool average) {
  if (world == 0) return absl::FailedPreconditionError("ring all-reduce: Connect() first");
  if (world == 1 || n == 0) return absl::OkStatus();
  if (data == nullptr) return absl::InvalidArgumentError("ring all-reduce: null buffer");

  const uint64_t number = next_operation++;
  const auto grace = GraceFor(options.deadline);
  const size_t segment_bytes =
      options.segment_bytes > 0 ? options.segment_bytes : AutoSegmentBytes(n, world);
  std::unique_ptr<RingLink::Operation> link_op =
      link->Begin(number, options.deadline + grace, grace);
  Operation op{*link_op,
               Schedule{n, rank, world, std::max<size_t>(1, segment_bytes / sizeof(float))},
               data,
               average,
               options.half_precision,
               SegmentHeader{},
               Clock::now() + options.deadline,
               options.deadline,
               grace,
               absl::StrCat("all-reduce operation ", number, " on rank ", rank)};
  op.header.operation = number;
  op.header.sender = static_cast<uint32_t>(rank);
  op.header.world = static_cast<uint32_t>(world);
  op.header.count = n;
  absl::Status status = Exchange(op);
  if (!status.ok()) return GiveUp(op, std::move(status));
  // Everything received; the operation is complete once the next rank acknowledges the stream.
  return Complete(op);
}

absl::Status RingAllReduce::Impl::Exchange(Operation& op) {
  const Schedule& plan = op.plan;
  const size_t seg = plan.segment_floats;
  // A link may add and copy the payloads into place as they arrive (InPlacePlan, ring_link.h).
  op.link.ApplyInPlace(InPlacePlan{op.data, plan.n, static_cast<uint32_t>(world - 1),
                                   op.average ? static_cast<float>(world) : 0.0f});
  if (op.half) op.link.SendInHalfPrecision();
  // What is sent is rounded where it lies first: the rank that owns a chunk's average then keeps
  // the very values the others receive (a range is sent only once it is complete here).
  // A value beyond a half's range would reach every rank as infinity: the operation fails.
  const auto send = [&](size_t offset, size_t floats) -> absl::Status {
    if (op.half && RoundToHalves(op.data + offset, floats) > 0) {
      return absl::OutOfRangeError(absl::StrCat(
          op.name, ": a value ", kBeyondHalfRange, ", in floats ", offset, " to ", offset + floats,
          " (strategy.ring_compression fp16 cannot carry it; lower training.lr or use none)"));
    }
    op.header.offset = offset;
    op.link.Send(op.header, op.data + offset, floats);
    return absl::OkStatus();
  };
  op.header.step = 0;
  for (size_t b = plan.ChunkBegin(rank), e = plan.ChunkBegin(rank + 1); b < e; b += seg) {
    STRATA_RETURN_IF_ERROR(send(b, std::min(seg, e - b)));
  }
  for (int step = 0; step < plan.steps(); ++step) {
    const int chunk = plan.ReceivedChunk(step);
    const Apply mode = plan.ApplyAt(step, op.average);
    for (size_t b = plan.ChunkBegin(chunk), e = plan.ChunkBegin(chunk + 1); b < e; b += seg) {
      const size_t len = std::min(seg, e - b);
      STRATA_RETURN_IF_ERROR(ReceiveSegment(op, step, b, len));
      if (!segment.in_place) ApplySegment(segment, op.data + b, mode, static_cast<float>(world));
      if (step + 1 < plan.steps()) {
        op.header.step = static_cast<uint32_t>(step + 1);
        STRATA_RETURN_IF_ERROR(send(b, len));
      }
    }
  }
  return absl::OkStatus();
}

// Takes the next segment into `segment` and checks that it is the one this step expects.
absl::Status RingAllReduce::Impl::ReceiveSegment(Operation& op, int step, size_t offset,
                                                 size_t floats) {
  const int steps = op.plan.steps();
  // Waits in slices of at most 100 ms, so that an interrupt from another thread is seen soon.
  RingLink::Operation::Received received;
  for (;;) {
    if (interrupted.load()) {
      std::lock_guard<std::mutex> lock(interrupt_mu);
      return absl::UnavailableError(absl::StrCat(op.name, ": interrupted: ", interrupt_reason));
    }
    const auto slice = std::min(op.deadline, Clock::now() + std::chrono::milliseconds(100));
    received = op.link.Receive(slice, &segment);
    if (received != RingLink::Operation::Received::kTimedOut || slice >= op.deadline) break;
  }
  switch (received) {
    case RingLink::Operation::Received::kSegment:
      break;
    case RingLink::Operation::Received::kSendFailed:
      return SendError(op);
    case RingLink::Operation::Received::kPreviousEnded:
      return absl::UnavailableError(absl::StrCat(op.name, ": the stream from ", Name(prev()),
                                                 " ended at step ", step + 1, " of ", steps,
                                                 " (that rank failed or left)"));
    case RingLink::Operation::Received::kTimedOut:
      return absl::DeadlineExceededError(absl::StrCat(op.name, ": no data from ", Name(prev()),
                                                      " within ", Ms(op.timeout), " (step ",
                                                      step + 1, " of ", steps, ")"));
  }
  // The previous rank gave up; its reason names the culprit. Pass it on unchanged.
  if (!segment.abort.empty()) return AbortStatus(segment.abort);
  const SegmentHeader& h = segment.header;
  if (h.sender != static_cast<uint32_t>(prev()) || h.world != static_cast<uint32_t>(world) ||
      h.count != op.plan.n || h.step != static_cast<uint32_t>(step) || h.offset != offset ||
      !segment.has_data || segment.data_bytes != floats * sizeof(float)) {
    return absl::InvalidArgumentError(absl::StrCat(
        op.name, ": ", Name(prev()), " sent a segment (sender ", h.sender, ", world ", h.world,
        ", buffer of ", h.count, " floats, step ", h.step, ", offset ", h.offset, ", ",
        segment.data_bytes, " bytes) where this rank expected (sender ", prev(), ", world ", world,
        ", buffer of ", op.plan.n, " floats, step ", step, ", offset ", offset, ", ",
        floats * sizeof(float),
        " bytes); every rank must reduce the same number of floats in the same order"));
  }
  return absl::OkStatus();
}

// Tells the next rank at once. Then, for a short while, takes any later abort from the previous
// rank: it comes from further up the ring, so it is closer to the rank that really stopped (a rank
// that times out first blames its own neighbour, which was only waiting too).
absl::Status RingAllReduce::Impl::GiveUp(Operation& op, absl::Status status) {
  op.link.DropUnsent();  // data segments the next rank cannot use any more
  op.link.SendAbort(op.header, std::string(status.message()));
  // Interrupted, the culprit is already named: no later abort could say more.
  const auto until = interrupted.load() ? Clock::now() : Clock::now() + op.grace;
  std::string reason;
  while (op.link.ReceiveAbort(until, &reason)) {
    status = AbortStatus(reason);
    op.link.SendAbort(op.header, reason);
  }
  op.link.Abandon();
  return status;
}

absl::Status RingAllReduce::Impl::Complete(Operation& op) {
  switch (op.link.Finish(op.deadline + op.grace)) {
    case RingLink::Operation::Completion::kAcknowledged:
      return absl::OkStatus();
    case RingLink::Operation::Completion::kNotAcknowledged:
      return absl::DeadlineExceededError(absl::StrCat(
          op.name, ": ", Name(next()), " did not acknowledge within ", Ms(op.timeout)));
    case RingLink::Operation::Completion::kSendFailed:
      break;
  }
  return SendError(op);
}

bool BeyondHalfRange(const absl::Status& status) {
  return absl::IsOutOfRange(status) &&
         status.message().find(kBeyondHalfRange) != std::string_view::npos;
}

size_t AutoSegmentBytes(size_t floats, int world) {
  const size_t chunk_bytes = floats * sizeof(float) / static_cast<size_t>(std::max(1, world));
  return std::clamp<size_t>((chunk_bytes + 1) / 2, 1 << 20, 8 << 20);
}

RingAllReduce::RingAllReduce(int rank) : RingAllReduce(rank, std::make_unique<GrpcRingLink>()) {}

RingAllReduce::RingAllReduce(int rank, std::unique_ptr<RingLink> link)
    : impl_(std::make_unique<Impl>()) {
  impl_->rank = rank;
  impl_->link = std::move(link);
}

RingAllReduce::~RingAllReduce() = default;

grpc::Service* RingAllReduce::service() { return impl_->link->service(); }

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
  STRATA_RETURN_IF_ERROR(impl_->link->Connect(impl_->rank, peers));
  impl_->peers = peers;
  impl_->world = static_cast<int>(peers.size());
  return absl::OkStatus();
}

absl::Status RingAllReduce::AllReduceAverage(float* data, size_t n,
                                             const AllReduceOptions& options) {
  return impl_->Run(data, n, options, /*average=*/true);
}

absl::Status RingAllReduce::AllReduceSum(float* data, size_t n, const AllReduceOptions& options) {
  return impl_->Run(data, n, options, /*average=*/false);
}

absl::Status RingAllReduce::Reform(const std::vector<std::string>& peers, uint32_t generation) {
  const uint64_t first = uint64_t{generation} << kRingGenerationShift;
  if (generation <= this->generation()) {
    return absl::InvalidArgumentError(absl::StrCat("ring all-reduce: generation ", generation,
                                                   " is not above this ring's generation ",
                                                   this->generation()));
  }
  STRATA_RETURN_IF_ERROR(Connect(peers));
  impl_->link->AnnounceGeneration(generation);
  impl_->next_operation = first;
  {
    std::lock_guard<std::mutex> lock(impl_->interrupt_mu);
    impl_->interrupt_reason.clear();
  }
  impl_->interrupted.store(false);
  return absl::OkStatus();
}

uint32_t RingAllReduce::generation() const {
  return static_cast<uint32_t>(impl_->next_operation >> kRingGenerationShift);
}

int RingAllReduce::rank() const { return impl_->rank; }
void RingAllReduce::Interrupt(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(impl_->interrupt_mu);
    impl_->interrupt_reason = reason;
  }
  impl_->interrupted.store(true);
}

int RingAllReduce::world() const { return impl_->world; }

}  // namespace strata
