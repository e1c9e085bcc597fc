#include "services/worker/tcp_frame.h"

#include <cerrno>
#include <cstring>
#include <functional>

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <unistd.h>

#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>

#include "services/common/base/status.h"

namespace strata::tcp_ring {
namespace {

constexpr uint32_t kFrameMagic = 0x46525453;  // "STRF"
constexpr uint32_t kHelloMagic = 0x48525453;  // "STRH"
constexpr uint32_t kVersion = 1;

void Put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void Put64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t Get32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t{p[i]} << (8 * i);
  return v;
}
uint64_t Get64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

absl::Status Errno(const std::string& what) {
  const int code = errno;
  return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(code)));
}

// Layout of the frame header, in bytes from its start.
enum : size_t {
  kMagicAt = 0,
  kKindAt = 4,
  kOperationAt = 8,
  kSenderAt = 16,
  kWorldAt = 20,
  kCountAt = 24,
  kStepAt = 32,
  kOffsetAt = 40,  // 36..40 unused (alignment)
  kPayloadAt = 48,
};
static_assert(kPayloadAt + 8 == kFrameHeaderBytes);

}  // namespace

void EncodeFrame(const Frame& frame, uint8_t out[kFrameHeaderBytes]) {
  std::memset(out, 0, kFrameHeaderBytes);
  Put32(out + kMagicAt, kFrameMagic);
  Put32(out + kKindAt, static_cast<uint32_t>(frame.kind));
  Put64(out + kOperationAt, frame.header.operation);
  Put32(out + kSenderAt, frame.header.sender);
  Put32(out + kWorldAt, frame.header.world);
  Put64(out + kCountAt, frame.header.count);
  Put32(out + kStepAt, frame.header.step);
  Put64(out + kOffsetAt, frame.header.offset);
  Put64(out + kPayloadAt, frame.payload_bytes);
}

absl::Status DecodeFrame(const uint8_t in[kFrameHeaderBytes], Frame* frame) {
  if (Get32(in + kMagicAt) != kFrameMagic) {
    return absl::InvalidArgumentError("not a ring frame (bad magic)");
  }
  const uint32_t kind = Get32(in + kKindAt);
  if (kind < static_cast<uint32_t>(FrameKind::kData) ||
      kind > static_cast<uint32_t>(FrameKind::kAck)) {
    return absl::InvalidArgumentError(absl::StrCat("ring frame of unknown kind ", kind));
  }
  frame->kind = static_cast<FrameKind>(kind);
  frame->header.operation = Get64(in + kOperationAt);
  frame->header.sender = Get32(in + kSenderAt);
  frame->header.world = Get32(in + kWorldAt);
  frame->header.count = Get64(in + kCountAt);
  frame->header.step = Get32(in + kStepAt);
  frame->header.offset = Get64(in + kOffsetAt);
  frame->payload_bytes = Get64(in + kPayloadAt);
  const uint64_t bytes = frame->payload_bytes;
  switch (frame->kind) {
    case FrameKind::kData: {
      const uint64_t count = frame->header.count, offset = frame->header.offset;
      if (bytes == 0 || bytes % sizeof(float) != 0 || bytes > kMaxDataBytes || offset > count ||
          bytes / sizeof(float) > count - offset) {
        return absl::InvalidArgumentError(absl::StrCat(
            "ring data frame of ", bytes, " bytes at offset ", offset, " of a buffer of ", count,
            " floats: not a whole number of floats "
            "inside the buffer, or over ",
            kMaxDataBytes, " bytes"));
      }
      break;
    }
    case FrameKind::kAbort:
      if (bytes > kMaxAbortBytes) {
        return absl::InvalidArgumentError(
            absl::StrCat("ring abort frame of ", bytes, " bytes (at most ", kMaxAbortBytes, ")"));
      }
      break;
    case FrameKind::kEnd:
    case FrameKind::kAck:
      if (bytes != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("ring end or ack frame with a payload of ", bytes, " bytes"));
      }
      break;
  }
  return absl::OkStatus();
}

void EncodeHello(const Ticket& ticket, uint32_t sender, uint8_t out[kHelloBytes]) {
  std::memset(out, 0, kHelloBytes);
  Put32(out, kHelloMagic);
  Put32(out + 4, kVersion);
  Put32(out + 8, sender);
  std::memcpy(out + 16, ticket.data(), ticket.size());
}

absl::Status DecodeHello(const uint8_t in[kHelloBytes], Ticket* ticket, uint32_t* sender) {
  if (Get32(in) != kHelloMagic) return absl::InvalidArgumentError("not a ring hello (bad magic)");
  if (Get32(in + 4) != kVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("ring hello of version ", Get32(in + 4), "; this rank speaks ", kVersion));
  }
  *sender = Get32(in + 8);
  std::memcpy(ticket->data(), in + 16, ticket->size());
  return absl::OkStatus();
}

absl::StatusOr<Ticket> RandomTicket() {
  Ticket ticket;
  size_t filled = 0;
  while (filled < ticket.size()) {
    const ssize_t n = getrandom(ticket.data() + filled, ticket.size() - filled, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno("getrandom");
    }
    filled += static_cast<size_t>(n);
  }
  return ticket;
}

bool SameTicket(const Ticket& a, const Ticket& b) {
  uint8_t diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<uint8_t>(a[i] ^ b[i]);
  return diff == 0;
}

namespace {

// Resolves host:service and tries each address on a fresh socket until `ready` (bind and
// listen, or connect) succeeds; the error names `what` and the last failure.
absl::StatusOr<int> OpenFirst(const std::string& host, const std::string& service, bool passive,
                              const std::string& what,
                              const std::function<bool(int fd, const addrinfo& a)>& ready) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* found = nullptr;
  const int rc =
      getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &found);
  if (rc != 0)
    return absl::UnavailableError(absl::StrCat("resolving ", host, ": ", gai_strerror(rc)));
  absl::Status last = absl::UnavailableError(absl::StrCat("no address for ", host));
  int fd = -1;
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      last = Errno("socket");
    } else if (!ready(fd, *a)) {
      last = Errno(what);
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  if (fd < 0) return last;
  return fd;
}

}  // namespace

absl::StatusOr<int> ListenTcp(const std::string& host, int* port) {
  STRATA_ASSIGN_OR_RETURN(
      const int fd, OpenFirst(host, "0", /*passive=*/true, absl::StrCat("listening on ", host),
                              [](int s, const addrinfo& a) {
                                return bind(s, a.ai_addr, a.ai_addrlen) == 0 && listen(s, 16) == 0;
                              }));
  sockaddr_storage bound{};
  socklen_t length = sizeof(bound);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length) != 0) {
    absl::Status status = Errno("getsockname");
    close(fd);
    return status;
  }
  *port = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                            : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  return fd;
}

absl::StatusOr<int> DialTcp(const std::string& host, int port, std::chrono::milliseconds timeout) {
  // Linux bounds a blocking connect by the send timeout (a dropped SYN would take minutes).
  const timeval limit{static_cast<time_t>(timeout.count() / 1000),
                      static_cast<suseconds_t>(timeout.count() % 1000 * 1000)};
  STRATA_ASSIGN_OR_RETURN(
      const int fd,
      OpenFirst(host, std::to_string(port), /*passive=*/false,
                absl::StrCat("connecting to ", host, ":", port), [&](int s, const addrinfo& a) {
                  setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof(limit));
                  return connect(s, a.ai_addr, a.ai_addrlen) == 0;
                }));
  const timeval none{0, 0};  // sends block for as long as the receiver needs
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &none, sizeof(none));
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

absl::Status SendAll(int fd, const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  iovec parts[2] = {{const_cast<void*>(a), a_bytes}, {const_cast<void*>(b), b_bytes}};
  int first = 0;
  const int count = b_bytes > 0 ? 2 : 1;
  while (first < count) {
    msghdr message{};
    message.msg_iov = parts + first;
    message.msg_iovlen = static_cast<size_t>(count - first);
    const ssize_t n = sendmsg(fd, &message, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno("send");
    }
    auto sent = static_cast<size_t>(n);
    while (first < count && sent >= parts[first].iov_len) {
      sent -= parts[first].iov_len;
      ++first;
    }
    if (first < count) {
      parts[first].iov_base = static_cast<uint8_t*>(parts[first].iov_base) + sent;
      parts[first].iov_len -= sent;
    }
  }
  return absl::OkStatus();
}

absl::Status ReceiveExact(int fd, void* out, size_t bytes) {
  auto* p = static_cast<uint8_t*>(out);
  size_t got = 0;
  while (got < bytes) {
    const ssize_t n = recv(fd, p + got, bytes - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno("receive");
    }
    if (n == 0) {
      return got == 0 ? absl::OutOfRangeError("closed")
                      : absl::UnavailableError(
                            absl::StrCat("closed after ", got, " of ", bytes, " bytes of a frame"));
    }
    got += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

std::string DataPlaneHost(const std::string& peer) {
  if (absl::StartsWith(peer, "unix-abstract:") || absl::StartsWith(peer, "unix:")) {
    return "127.0.0.1";
  }
  std::string address = peer;
  for (const char* scheme : {"dns:///", "ipv4:", "ipv6:"}) {
    if (absl::StartsWith(address, scheme)) address = address.substr(std::strlen(scheme));
  }
  if (!address.empty() && address.front() == '[') {  // [v6]:port
    const size_t close = address.find(']');
    return close == std::string::npos ? address : address.substr(1, close - 1);
  }
  const size_t colon = address.find(':');
  if (colon != std::string::npos && address.rfind(':') == colon) address.resize(colon);
  return address;
}

}  // namespace strata::tcp_ring
