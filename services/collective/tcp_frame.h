// The wire of the ring's plain-TCP data plane (tcp_ring_link.h); the socket calls, tickets and
// hello are shared with the parameter server's (services/common/wire/tcp_socket.h).
//
// A connection goes from a rank to the next one and lives as long as both do. It opens with a
// hello: magic, version, the sender's rank and the 32-byte ticket the receiver handed out over
// gRPC (Collective.DataPlane, which carries the run token), so that nobody who could not call the
// receiver's gRPC service can feed it segments. Then frames follow, each a fixed 56-byte
// little-endian header and a payload:
//   data   the segment's floats (SegmentHeader says where they go)       sender -> receiver
//   half   the same as 16-bit floats (the ring's half-precision wire)    sender -> receiver
//   abort  why the sender gave up on the operation (at most 64 KiB)      sender -> receiver
//   end    the sender has sent all of the operation                      sender -> receiver
//   ack    the receiver has read the operation's end                     receiver -> sender
// A frame that breaks these rules (bad magic or kind, a payload that does not fit its kind or lies
// outside the buffer its header declares) ends the connection.
#pragma once

#include <cstddef>
#include <cstdint>

#include <absl/status/status.h>
#include <absl/status/statusor.h>

#include "services/collective/ring_link.h"
#include "services/common/wire/tcp_socket.h"

namespace strata::tcp_ring {

enum class FrameKind : uint32_t { kData = 1, kAbort = 2, kEnd = 3, kAck = 4, kHalfData = 5 };

// Bytes per value in a data frame's payload: 4 for kData, 2 for kHalfData.
inline size_t ValueBytes(FrameKind kind) { return kind == FrameKind::kHalfData ? 2 : 4; }

constexpr size_t kFrameHeaderBytes = 56;
// Bounds on what a header may announce, checked before anything is allocated for it.
constexpr uint64_t kMaxDataBytes = uint64_t{1} << 30;  // one segment, as floats
constexpr uint64_t kMaxAbortBytes = 64 << 10;

struct Frame {
  FrameKind kind = FrameKind::kData;
  SegmentHeader header;
  uint64_t payload_bytes = 0;
};

void EncodeFrame(const Frame& frame, uint8_t out[kFrameHeaderBytes]);
// Checks the magic, the kind and that the payload fits the kind.
absl::Status DecodeFrame(const uint8_t in[kFrameHeaderBytes], Frame* frame);

// The ring's hello (tcp::EncodeHello with the ring's magic); the sender is a rank.
void EncodeHello(const tcp::Ticket& ticket, uint32_t sender, uint8_t out[tcp::kHelloBytes]);
absl::Status DecodeHello(const uint8_t in[tcp::kHelloBytes], tcp::Ticket* ticket, uint32_t* sender);

}  // namespace strata::tcp_ring
