// The wire of the ring's plain-TCP data plane (tcp_ring_link.h), and the socket calls it makes.
//
// A connection goes from a rank to the next one and lives as long as both do. It opens with a
// hello: magic, version, the sender's rank and the 32-byte ticket the receiver handed out over
// gRPC (Collective.DataPlane, which carries the run token), so that nobody who could not call the
// receiver's gRPC service can feed it segments. Then frames follow, each a fixed 56-byte
// little-endian header and a payload:
//   data   the segment's floats (SegmentHeader says where they go)       sender -> receiver
//   abort  why the sender gave up on the operation (at most 64 KiB)      sender -> receiver
//   end    the sender has sent all of the operation                      sender -> receiver
//   ack    the receiver has read the operation's end                     receiver -> sender
// A frame that breaks these rules (bad magic or kind, a payload that does not fit its kind or lies
// outside the buffer its header declares) ends the connection.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include <absl/status/status.h>
#include <absl/status/statusor.h>

#include "services/worker/ring_link.h"

namespace strata::tcp_ring {

enum class FrameKind : uint32_t { kData = 1, kAbort = 2, kEnd = 3, kAck = 4 };

constexpr size_t kFrameHeaderBytes = 56;
constexpr size_t kHelloBytes = 48;
constexpr size_t kTicketBytes = 32;
// Bounds on what a header may announce, checked before anything is allocated for it.
constexpr uint64_t kMaxDataBytes = uint64_t{1} << 30;  // one segment
constexpr uint64_t kMaxAbortBytes = 64 << 10;

struct Frame {
  FrameKind kind = FrameKind::kData;
  SegmentHeader header;
  uint64_t payload_bytes = 0;
};

using Ticket = std::array<uint8_t, kTicketBytes>;

void EncodeFrame(const Frame& frame, uint8_t out[kFrameHeaderBytes]);
// Checks the magic, the kind and that the payload fits the kind.
absl::Status DecodeFrame(const uint8_t in[kFrameHeaderBytes], Frame* frame);

void EncodeHello(const Ticket& ticket, uint32_t sender, uint8_t out[kHelloBytes]);
absl::Status DecodeHello(const uint8_t in[kHelloBytes], Ticket* ticket, uint32_t* sender);

// 32 bytes from the kernel's random source.
absl::StatusOr<Ticket> RandomTicket();
// Compares in time independent of where the tickets differ.
bool SameTicket(const Ticket& a, const Ticket& b);

// ---- sockets (errors name the call and carry strerror) ------------------------------------------

// A listening TCP socket on host:0 (IPv4 or IPv6, whatever `host` resolves to first); *port is the
// port the kernel picked.
absl::StatusOr<int> ListenTcp(const std::string& host, int* port);
// A connected TCP socket to host:port, with TCP_NODELAY (acks and headers are small). Each
// address tried may take up to `timeout` to answer.
absl::StatusOr<int> DialTcp(const std::string& host, int port, std::chrono::milliseconds timeout);
// Writes a[0..a_bytes) then b[0..b_bytes) in full (one sendmsg per try, no SIGPIPE).
absl::Status SendAll(int fd, const void* a, size_t a_bytes, const void* b, size_t b_bytes);
// Reads exactly `bytes`. An orderly close before the first byte is OutOfRange ("closed").
absl::Status ReceiveExact(int fd, void* out, size_t bytes);

// Splits "host:port", "[v6]:port" or "unix-abstract:NAME" into the host to reach the data plane
// at: an abstract Unix socket lives on this machine, so its data plane is at 127.0.0.1.
std::string DataPlaneHost(const std::string& peer);

}  // namespace strata::tcp_ring
