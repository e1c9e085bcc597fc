#include "services/common/wire/tcp_socket.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>

#include "services/common/base/status.h"

namespace strata::tcp {
namespace {

absl::Status Errno(const std::string& what) {
  const int code = errno;
  return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(code)));
}

}  // namespace

void EncodeHello(uint32_t magic, uint32_t version, const Ticket& ticket, uint32_t sender,
                 uint8_t out[kHelloBytes]) {
  std::memset(out, 0, kHelloBytes);
  Put32(out, magic);
  Put32(out + 4, version);
  Put32(out + 8, sender);
  std::memcpy(out + 16, ticket.data(), ticket.size());
}

absl::Status DecodeHello(uint32_t magic, uint32_t version, const char* what,
                         const uint8_t in[kHelloBytes], Ticket* ticket, uint32_t* sender) {
  if (Get32(in) != magic) {
    return absl::InvalidArgumentError(absl::StrCat("not a ", what, " hello (bad magic)"));
  }
  if (Get32(in + 4) != version) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " hello of version ", Get32(in + 4), "; this end speaks ", version));
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

absl::Status SendParts(int fd, iovec* parts, size_t count) {
  size_t first = 0;
  while (first < count && parts[first].iov_len == 0) ++first;
  while (first < count) {
    msghdr message{};
    message.msg_iov = parts + first;
    // IOV_MAX bounds one call; the loop sends the rest.
    message.msg_iovlen = std::min<size_t>(count - first, 1024);
    const ssize_t n = sendmsg(fd, &message, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        return absl::DeadlineExceededError("send: the peer took nothing in time");
      }
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

// No allocation: the ring's writer sends every frame through here.
absl::Status SendAll(int fd, const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  iovec parts[2] = {{const_cast<void*>(a), a_bytes}, {const_cast<void*>(b), b_bytes}};
  return SendParts(fd, parts, b_bytes > 0 ? 2 : 1);
}

absl::Status ReceiveExact(int fd, void* out, size_t bytes) {
  auto* p = static_cast<uint8_t*>(out);
  size_t got = 0;
  while (got < bytes) {
    const ssize_t n = recv(fd, p + got, bytes - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        return absl::DeadlineExceededError(
            absl::StrCat("receive: nothing arrived in time (", got, " of ", bytes, " bytes)"));
      }
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

namespace {
void SetTimeout(int fd, int option, std::chrono::milliseconds timeout) {
  const timeval limit{static_cast<time_t>(timeout.count() / 1000),
                      static_cast<suseconds_t>(timeout.count() % 1000 * 1000)};
  setsockopt(fd, SOL_SOCKET, option, &limit, sizeof(limit));
}
}  // namespace

void SetReceiveTimeout(int fd, std::chrono::milliseconds timeout) {
  SetTimeout(fd, SO_RCVTIMEO, timeout);
}

void SetSendTimeout(int fd, std::chrono::milliseconds timeout) {
  SetTimeout(fd, SO_SNDTIMEO, timeout);
}

bool PeerClosed(int fd) {
  char byte = 0;
  for (;;) {
    const ssize_t n = recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0) return false;
    if (n == 0) return true;
    if (errno == EINTR) continue;
    return errno != EAGAIN && errno != EWOULDBLOCK;
  }
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

}  // namespace strata::tcp
