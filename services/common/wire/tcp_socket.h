// Plain TCP for the bulk data planes (the ring's, services/collective/tcp_ring_link.h, and the
// parameter server's push/pull, services/parameter_server/tcp_push_pull_server.h): the socket
// calls they make, the 32-byte tickets that admit a connection, the hello that presents one, and
// little-endian field helpers for their fixed-size headers.
//
// Trust: gRPC stays the control plane. A service hands out its data plane (a port and a ticket)
// only over an authenticated gRPC call, and the first bytes of every connection must be a hello
// with that ticket, so a caller who could not reach the gRPC service cannot feed the data plane.
// Errors name the call and carry strerror.
#pragma once

#include <sys/uio.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include <absl/status/status.h>
#include <absl/status/statusor.h>

namespace strata::tcp {

constexpr size_t kTicketBytes = 32;
constexpr size_t kHelloBytes = 48;
using Ticket = std::array<uint8_t, kTicketBytes>;

// 32 bytes from the kernel's random source.
absl::StatusOr<Ticket> RandomTicket();
// Compares in time independent of where the tickets differ.
bool SameTicket(const Ticket& a, const Ticket& b);

// The hello: magic, version, the sender (a rank) and the ticket. `magic` tells the data planes
// apart; `what` names the plane in errors ("ring", "push/pull").
void EncodeHello(uint32_t magic, uint32_t version, const Ticket& ticket, uint32_t sender,
                 uint8_t out[kHelloBytes]);
absl::Status DecodeHello(uint32_t magic, uint32_t version, const char* what,
                         const uint8_t in[kHelloBytes], Ticket* ticket, uint32_t* sender);

// A listening TCP socket on host:0 (IPv4 or IPv6, whatever `host` resolves to first); *port is the
// port the kernel picked.
absl::StatusOr<int> ListenTcp(const std::string& host, int* port);
// A connected TCP socket to host:port, with TCP_NODELAY (acks and headers are small). Each
// address tried may take up to `timeout` to answer.
absl::StatusOr<int> DialTcp(const std::string& host, int port, std::chrono::milliseconds timeout);
// Writes every part in full, in order (sendmsg, no SIGPIPE). `parts` is used up as it goes.
absl::Status SendParts(int fd, iovec* parts, size_t count);
// Writes a[0..a_bytes) then b[0..b_bytes) in full.
absl::Status SendAll(int fd, const void* a, size_t a_bytes, const void* b, size_t b_bytes);
// Reads exactly `bytes`. An orderly close before the first byte is OutOfRange ("closed"); a
// receive timeout (SetReceiveTimeout) is DeadlineExceeded.
absl::Status ReceiveExact(int fd, void* out, size_t bytes);
// Bounds each blocking receive on `fd`; zero: no bound.
void SetReceiveTimeout(int fd, std::chrono::milliseconds timeout);
// Bounds each blocking send on `fd` (a peer that stops reading); zero: no bound. A send that
// times out is DeadlineExceeded.
void SetSendTimeout(int fd, std::chrono::milliseconds timeout);
// True once the peer has closed its side (or the connection broke), without consuming anything.
bool PeerClosed(int fd);

// Splits "host:port", "[v6]:port" or "unix-abstract:NAME" into the host to reach the data plane
// at: an abstract Unix socket lives on this machine, so its data plane is at 127.0.0.1.
std::string DataPlaneHost(const std::string& peer);

// Little-endian fields of the data planes' fixed-size headers.
inline void Put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline void Put64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline uint32_t Get32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t{p[i]} << (8 * i);
  return v;
}
inline uint64_t Get64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}
inline void PutDouble(uint8_t* p, double v) {
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(bits));
  Put64(p, bits);
}
inline double GetDouble(const uint8_t* p) {
  const uint64_t bits = Get64(p);
  double v = 0;
  std::memcpy(&v, &bits, sizeof(v));
  return v;
}

}  // namespace strata::tcp
