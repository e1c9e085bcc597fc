#include "orchestrator/launch/port_reservation.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>
#include <thread>
#include <utility>

#include <absl/strings/str_cat.h>

namespace strata {
namespace {

// The bound socket's descriptor and port, in the calling thread's network namespace.
absl::StatusOr<std::pair<int, int>> BindReserved(const std::string& host) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  if (::inet_pton(AF_INET, host.c_str(), &address.sin_addr) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot reserve a port on ", host, ": not an IPv4 address"));
  }
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  const int one = 1;
  socklen_t length = sizeof address;
  if (::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
      ::setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) != 0 ||
      ::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    const int err = errno;
    ::close(fd);
    return absl::UnavailableError(
        absl::StrCat("cannot reserve a port on ", host, ": ", std::strerror(err)));
  }
  return std::make_pair(fd, static_cast<int>(ntohs(address.sin_port)));
}

}  // namespace

absl::StatusOr<PortReservation> PortReservation::Reserve(const std::string& host,
                                                         const std::string& network_namespace) {
  absl::StatusOr<std::pair<int, int>> bound;
  if (network_namespace.empty()) {
    bound = BindReserved(host);
  } else {
    // setns moves only the calling thread; a socket keeps the namespace it was made in.
    try {
      std::thread([&] {
        const int ns = ::open(network_namespace.c_str(), O_RDONLY | O_CLOEXEC);
        if (ns < 0 || ::setns(ns, CLONE_NEWNET) != 0) {
          const int err = errno;
          if (ns >= 0) ::close(ns);
          bound = absl::FailedPreconditionError(absl::StrCat(
              "cannot enter the network namespace ", network_namespace, ": ", std::strerror(err)));
          return;
        }
        ::close(ns);
        bound = BindReserved(host);
      }).join();
    } catch (const std::system_error& e) {
      return absl::ResourceExhaustedError(absl::StrCat("cannot reserve a port on ", host,
                                                       ": no thread to enter its namespace (",
                                                       e.what(), ")"));
    }
  }
  if (!bound.ok()) return bound.status();
  return PortReservation(bound->first, bound->second);
}

PortReservation::PortReservation(PortReservation&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), port_(other.port_) {}

PortReservation& PortReservation::operator=(PortReservation&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    port_ = other.port_;
  }
  return *this;
}

PortReservation::~PortReservation() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace strata
