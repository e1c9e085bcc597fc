// The port the local launcher holds for a service (launch/port_reservation.h), with real sockets
// on loopback: the service's listener binds it, listens and takes connections, again after it
// closed (a restart); nobody else's bind gets it meanwhile; it is free once the reservation ends.
// (Seen to fail: with the reservation's SO_REUSEADDR and SO_REUSEPORT both left out, the
// service's bind was refused with "Address already in use". Either one is enough for a service
// that sets both, as gRPC's servers do; the reservation sets both for one that sets only one.)
#include "orchestrator/launch/port_reservation.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>

#include <gtest/gtest.h>

namespace strata {
namespace {

sockaddr_in Loopback(int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

// A socket bound to 127.0.0.1:port, with the options a gRPC server sets when `as_service`; the
// errno of a refused bind in *error.
int BindTo(int port, bool as_service, int* error) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  const int one = 1;
  if (as_service) {
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
  }
  const sockaddr_in a = Loopback(port);
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0) {
    *error = errno;
    ::close(fd);
    return -1;
  }
  *error = 0;
  return fd;
}

// A service's listener on `port` takes a connection.
void ExpectAServiceListensOn(int port) {
  int error = 0;
  const int listener = BindTo(port, /*as_service=*/true, &error);
  ASSERT_GE(listener, 0) << "the service's bind was refused: " << std::strerror(error);
  ASSERT_EQ(::listen(listener, 4), 0);
  const int client = ::socket(AF_INET, SOCK_STREAM, 0);
  const sockaddr_in a = Loopback(port);
  EXPECT_EQ(::connect(client, reinterpret_cast<const sockaddr*>(&a), sizeof a), 0)
      << std::strerror(errno);
  const int accepted = ::accept(listener, nullptr, nullptr);
  EXPECT_GE(accepted, 0) << "the connection did not reach the listener";
  // The client closes first and the service sees its end of stream before closing, so that the
  // TIME_WAIT is on the client's side, not on `port`.
  ::close(client);
  char byte = 0;
  EXPECT_EQ(::recv(accepted, &byte, 1, 0), 0);
  ::close(accepted);
  ::close(listener);
}

TEST(PortReservationTest, TheServiceListensThereAgainAfterARestartAndNobodyElseBindsItMeanwhile) {
  std::optional<PortReservation> reserved = PortReservation::Reserve("127.0.0.1").value();
  const int port = reserved->port();
  ASSERT_GT(port, 0);
  ExpectAServiceListensOn(port);
  // The service is gone: another program's bind is refused, with or without SO_REUSEADDR.
  int error = 0;
  EXPECT_LT(BindTo(port, /*as_service=*/false, &error), 0);
  EXPECT_EQ(error, EADDRINUSE);
  ExpectAServiceListensOn(port);  // the restart
  reserved.reset();
  const int after = BindTo(port, /*as_service=*/false, &error);
  EXPECT_GE(after, 0) << "the port stayed held after the reservation ended: "
                      << std::strerror(error);
  if (after >= 0) ::close(after);
}

TEST(PortReservationTest, AnAddressThatIsNotIpv4OrANamespaceThatIsNotThereIsRefused) {
  auto v6 = PortReservation::Reserve("::1");
  EXPECT_EQ(v6.status().code(), absl::StatusCode::kInvalidArgument) << v6.status();
  auto ns = PortReservation::Reserve("127.0.0.1", "/nonexistent/netns");
  EXPECT_EQ(ns.status().code(), absl::StatusCode::kFailedPrecondition) << ns.status();
  EXPECT_NE(ns.status().message().find("/nonexistent/netns"), std::string::npos) << ns.status();
}

}  // namespace
}  // namespace strata
