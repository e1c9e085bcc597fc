// Plain HTTP on loopback, spoken by hand: what a test needs to talk to the services' /metrics
// endpoints (and to send them what no HTTP client would). Bytes go out as given and whatever comes
// back is returned, so a test sees exactly what the server said.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>

namespace strata::testing {

// Sends `request` to 127.0.0.1:`port` as it is and returns what comes back until the server
// closes the connection (or 30 s pass without a byte); empty when it cannot connect.
inline std::string ExchangeOnLoopback(int port, const std::string& request) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  timeval timeout{30, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string response;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    size_t sent = 0;
    while (sent < request.size()) {
      const ssize_t n = ::send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) break;
      sent += static_cast<size_t>(n);
    }
    char buf[8192];
    ssize_t n;
    while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) response.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return response;
}

struct HttpResponse {
  int status = 0;  // 0: no HTTP answer
  std::string body;
};

inline HttpResponse ParseHttpResponse(const std::string& raw) {
  HttpResponse r;
  if (raw.compare(0, 5, "HTTP/") != 0) return r;
  const size_t space = raw.find(' ');
  if (space != std::string::npos) r.status = std::atoi(raw.c_str() + space + 1);
  const size_t body = raw.find("\r\n\r\n");
  if (body != std::string::npos) r.body = raw.substr(body + 4);
  return r;
}

inline HttpResponse HttpGetOnLoopback(int port, const std::string& target) {
  return ParseHttpResponse(
      ExchangeOnLoopback(port, "GET " + target + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n"));
}

}  // namespace strata::testing
