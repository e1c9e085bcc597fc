// A TCP port held for one service of a local run from its first start to the run's end, so that
// a service restarted after a crash listens at the address every peer and the orchestrator know.
//
// Without it, the port a dead service leaves is free for anyone until the restart, and another
// process's outgoing connection may take it as its source port (ports picked for a listener with
// port 0 come from the same ephemeral range): the restarted service then fails to bind. The
// reservation is a socket bound to the port with SO_REUSEADDR and SO_REUSEPORT that never
// listens. The kernel skips a port with such a socket when it picks a source port for a
// connection or a free port for a bind to port 0, while the service's own gRPC server, which
// binds with both options under the same user, shares it; connections reach only the listening
// socket. (A program that binds this very port number explicitly with SO_REUSEADDR could still
// take it; nothing picks it by chance.)
#pragma once

#include <string>

#include <absl/status/statusor.h>

namespace strata {

class PortReservation {
 public:
  // A free port on `host` (an IPv4 address), inside the network namespace at `network_namespace`
  // when one is given (an emulated host's, entered by a short-lived thread).
  static absl::StatusOr<PortReservation> Reserve(const std::string& host,
                                                 const std::string& network_namespace = "");

  PortReservation(PortReservation&& other) noexcept;
  PortReservation& operator=(PortReservation&& other) noexcept;
  PortReservation(const PortReservation&) = delete;
  PortReservation& operator=(const PortReservation&) = delete;
  ~PortReservation();

  int port() const { return port_; }

 private:
  PortReservation(int fd, int port) : fd_(fd), port_(port) {}
  int fd_ = -1;
  int port_ = 0;
};

}  // namespace strata
