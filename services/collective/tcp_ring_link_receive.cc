// The plain-TCP ring link's receiving side (tcp_ring_link_impl.h): admitting a connection whose
// hello the HelloGate (services/common/wire/tcp_hello_gate.h) has read, and per connection the
// thread that reads frames, checks that they come from the previous rank, files them in the
// operations' inboxes, applies data in place when the operation allows it, and acknowledges each
// operation's end.
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "services/collective/segment_codec.h"
#include "services/collective/tcp_ring_link_impl.h"
#include "services/common/base/status.h"
#include "services/common/wire/half_float.h"

namespace strata {
namespace {

using tcp_ring::kMaxConnections;
using tcp_ring::kMaxQueuedBytes;
using tcp_ring::kMaxQueuedSegments;
using tcp_ring::kOperationWindow;

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

}  // namespace

bool TcpRingLink::Impl::Admit(int fd, const uint8_t* hello) {
  Ticket presented;
  uint32_t sender = 0;
  if (!tcp_ring::DecodeHello(hello, &presented, &sender).ok() ||
      !tcp::SameTicket(presented, ticket)) {
    return false;  // closed unread by the gate
  }
  std::list<Connection> finished;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (stopping) return false;
    for (auto it = connections.begin(); it != connections.end();) {
      auto here = it++;
      if (here->done) finished.splice(finished.end(), connections, here);
    }
    // A newer connection ends the oldest beyond the bound (a previous rank that reconnected).
    size_t live = 0;
    for (auto it = connections.rbegin(); it != connections.rend(); ++it) {
      if (++live >= kMaxConnections) shutdown(it->fd, SHUT_RDWR);
    }
    connections.emplace_back();
    Connection* c = &connections.back();
    c->fd = fd;
    c->sender = sender;
    c->thread = std::thread([this, c] {
      ReceiveLoop(c->fd, c->sender);
      // Tells the peer now; the descriptor is closed when the thread is joined, so that its
      // number cannot be reused while the destructor may still shut it down.
      shutdown(c->fd, SHUT_RDWR);
      std::lock_guard<std::mutex> done(mu);
      c->done = true;
    });
  }
  for (Connection& c : finished) {
    c.thread.join();
    close(c.fd);
  }
  return true;
}

void TcpRingLink::Impl::ReceiveLoop(int fd, uint32_t sender) {
  // A ring peer may stay quiet for as long as it likes (between operations).
  Incoming in;
  while (Receive(fd, sender, &in).ok()) {
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
  const bool half = frame.kind == FrameKind::kHalfData;
  const size_t floats = frame.payload_bytes / tcp_ring::ValueBytes(frame.kind);
  InPlacePlan plan;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (place.buffer != nullptr && h.operation == place_operation && h.world >= 2 &&
        h.step < 2 * (h.world - 1) && h.count == place.count && h.offset + floats <= place.count) {
      plan = place;
      ++place_writers;
      place_fd = fd;
    } else {
      out->payload = TakeBuffer(floats * sizeof(float));
    }
  }
  out->has_data = true;
  // Reads `n` values of the payload as floats into `to`: straight, or as halves through a small
  // buffer and converted.
  const auto read_floats = [&](float* to, size_t n) {
    if (!half) return tcp::ReceiveExact(fd, to, n * sizeof(float));
    in->halves.resize(std::min(kScratchFloats, floats));
    absl::Status read;
    for (size_t done = 0; done < n && read.ok();) {
      const size_t k = std::min(in->halves.size(), n - done);
      read = tcp::ReceiveExact(fd, in->halves.data(), k * sizeof(uint16_t));
      if (read.ok()) HalvesToFloats(in->halves.data(), k, to + done);
      done += k;
    }
    return read;
  };
  if (plan.buffer == nullptr) {
    absl::Status read = read_floats(reinterpret_cast<float*>(out->payload.bytes.get()), floats);
    if (!read.ok()) {
      std::lock_guard<std::mutex> lock(mu);
      GiveBack(std::move(out->payload));
    }
    return read;
  }
  out->in_place = true;
  out->in_place_bytes = floats * sizeof(float);
  float* dst = plan.buffer + h.offset;
  absl::Status read;
  if (h.step >= plan.copy_from_step) {
    read = read_floats(dst, floats);
  } else {
    // Through a small buffer that stays in cache between the read and the addition.
    const float divisor = h.step + 1 == plan.copy_from_step ? plan.divisor : 0.0f;
    in->scratch.resize(kScratchFloats);
    for (size_t done = 0; done < floats && read.ok();) {
      const size_t n = std::min(kScratchFloats, floats - done);
      read = read_floats(in->scratch.data(), n);
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
absl::Status TcpRingLink::Impl::CheckSender(uint32_t rank) const {
  if (world <= 0) return absl::OkStatus();
  const uint32_t previous = static_cast<uint32_t>((this->rank + world - 1) % world);
  if (rank == previous) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("a connection of rank ", rank, ": only rank ",
                                                 previous, " sends to rank ", this->rank));
}

absl::Status TcpRingLink::Impl::Receive(int fd, uint32_t sender, Incoming* in) {
  uint8_t raw[kFrameHeaderBytes];
  Frame frame;
  STRATA_RETURN_IF_ERROR(tcp::ReceiveExact(fd, raw, sizeof(raw)));
  STRATA_RETURN_IF_ERROR(tcp_ring::DecodeFrame(raw, &frame));
  if (frame.kind == FrameKind::kAck) return absl::InvalidArgumentError("ack from the sender");
  // A frame speaks for the rank whose hello opened its connection, and only the previous rank
  // sends to this one: a frame naming another rank would make this rank blame the wrong peer.
  if (frame.header.sender != sender) {
    return absl::InvalidArgumentError(absl::StrCat("a frame of rank ", frame.header.sender,
                                                   " on the connection of rank ", sender));
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    STRATA_RETURN_IF_ERROR(CheckSender(sender));
  }
  QueuedSegment r;
  r.header = frame.header;
  if (frame.kind == FrameKind::kData || frame.kind == FrameKind::kHalfData) {
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
    // A re-formed ring's operations (RingAllReduce::Reform) count in the generation the
    // orchestrator's ReformRing (or a replacement's Start) announced (AnnounceGeneration), which
    // is also where what is left of the broken generation is dropped. The next generation's
    // first operations may arrive before this rank has heard of it: they are queued, and retire
    // nothing. Any later generation is refused.
    const uint64_t generation = op >> kRingGenerationShift;
    const uint64_t generation_start = generation << kRingGenerationShift;
    const bool next_generation = generation == uint64_t{announced_generation} + 1 &&
                                 op < generation_start + kOperationWindow &&
                                 generation_start > next_operation;
    if (generation > announced_generation && !next_generation) {
      GiveBack(std::move(r.payload));
      return absl::InvalidArgumentError(absl::StrCat("frame for operation ", op, " of generation ",
                                                     generation, ": this rank is in generation ",
                                                     announced_generation,
                                                     " and no re-formation announced a later one"));
    }
    if (!next_generation && op >= next_operation + kOperationWindow) {
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

}  // namespace strata
