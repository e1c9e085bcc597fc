// The door of a plain-TCP data plane (the ring's, services/collective/tcp_ring_link.h, and the
// parameter server's, services/parameter_server/tcp_push_pull_server.h): accepts connections and
// holds them until they have sent their whole hello, then hands each to the plane to admit or
// refuse.
//
// Anyone who can reach the port can connect, token or not. So a connection that has not yet
// presented a hello costs the plane nothing it needs: all of them wait on one thread (poll), in
// a pool of their own apart from the admitted connections, each with one deadline for the whole
// hello from the moment it was accepted (a byte every few seconds does not extend it). When the
// pool is full, the connection that has waited longest is closed to make room: a real peer sends
// its hello at once after connecting, so it is read long before it would be the oldest.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <absl/status/statusor.h>

#include "services/common/wire/tcp_socket.h"

namespace strata::tcp {

struct HelloGateOptions {
  // Connections without a complete hello held at once (a pool apart from the admitted ones).
  size_t max_pending = 64;
  // From accept to the hello's last byte.
  std::chrono::milliseconds handshake_timeout{10000};
  // Names the plane in log lines ("ring data plane").
  std::string what = "data plane";
};

class HelloGate {
 public:
  // Called on the gate's thread with a connection's complete hello, the descriptor back in
  // blocking mode. Returns true if it took the descriptor (it is then the callee's to close),
  // false to have the gate close it. Must not block: the other pending connections wait for it.
  using Admit = std::function<bool(int fd, const uint8_t* hello)>;

  // Serves `listen_fd` (a listening socket, which the gate now owns) until Stop.
  static absl::StatusOr<std::unique_ptr<HelloGate>> Start(int listen_fd, HelloGateOptions options,
                                                          Admit admit);
  ~HelloGate();  // Stop()

  // Stops accepting, closes every pending connection and the listening socket, and joins the
  // thread. Admitted connections are not the gate's.
  void Stop();

  // Connections closed without being handed on: the handshake timed out, the pool was full, or
  // the peer went away first.
  int64_t dropped() const;

 private:
  struct State;
  explicit HelloGate(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace strata::tcp
