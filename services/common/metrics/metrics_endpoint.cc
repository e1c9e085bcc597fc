#include "services/common/metrics/metrics_endpoint.h"

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>

#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>
#include <prometheus/text_serializer.h>

#include "services/common/base/files.h"
#include "services/common/base/status.h"

namespace strata {
namespace {

constexpr size_t kMaxRequestBytes = 8192;

void SendAll(int fd, const std::string& data) {
  size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return;  // the client went away or stopped reading: its loss
    sent += static_cast<size_t>(n);
  }
}

std::string Response(int status, const char* reason, const std::string& content_type,
                     const std::string& body, const std::string& extra_headers = "") {
  return absl::StrCat("HTTP/1.1 ", status, " ", reason, "\r\nContent-Type: ", content_type,
                      "\r\nContent-Length: ", body.size(), "\r\n", extra_headers,
                      "Connection: close\r\n\r\n", body);
}

std::string Refusal(int status, const char* reason, const std::string& extra_headers = "") {
  return Response(status, reason, "text/plain; charset=utf-8", absl::StrCat(reason, "\n"),
                  extra_headers);
}

}  // namespace

std::string MetricsEndpoint::url() const {
  return absl::StrCat("http://", host_, ":", port_, "/metrics");
}

absl::StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(
    const MetricsEndpointOptions& options) {
  std::unique_ptr<MetricsEndpoint> endpoint(new MetricsEndpoint());
  endpoint->request_timeout_ms_ = options.request_timeout_ms;
  if (options.listen.empty()) return endpoint;
  const size_t colon = options.listen.rfind(':');
  int port = -1;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(options.listen.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("metrics listen address '", options.listen,
                                                   "' is not host:port (port 0 to 65535)"));
  }
  std::string host = options.listen.substr(0, colon);
  endpoint->host_ = host;
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
      rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics listen address '", options.listen, "': ", ::gai_strerror(rc)));
  }
  int fd = -1;
  std::string why = "no address";
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, 16) != 0) {
      why = std::strerror(errno);
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(found);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on ", options.listen, ": ", why));
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  endpoint->listen_fd_ = fd;
  endpoint->port_ = bound.ss_family == AF_INET6
                        ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                        : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  endpoint->thread_ = std::thread([e = endpoint.get()] { e->ServeLoop(); });
  if (!options.port_file.empty()) {
    STRATA_RETURN_IF_ERROR(WriteFileAtomic(options.port_file, absl::StrCat(endpoint->port_, "\n")));
  }
  return endpoint;
}

MetricsEndpoint::~MetricsEndpoint() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

void MetricsEndpoint::Serve(std::shared_ptr<prometheus::Collectable> collectable) {
  std::lock_guard<std::mutex> lock(collectables_mu_);
  collectables_.push_back(std::move(collectable));
}

std::string MetricsEndpoint::Exposition() const {
  std::vector<prometheus::MetricFamily> families = registry_->Collect();
  {
    std::lock_guard<std::mutex> lock(collectables_mu_);
    for (const auto& c : collectables_) {
      for (auto& f : c->Collect()) families.push_back(std::move(f));
    }
  }
  return prometheus::TextSerializer().Serialize(families);
}

void MetricsEndpoint::ServeLoop() {
  while (!stop_) {
    pollfd p{listen_fd_, POLLIN, 0};
    // Wakes up now and then to see whether the endpoint is being destroyed.
    if (::poll(&p, 1, 200) <= 0) continue;
    const int connection = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (connection < 0) continue;
    Answer(connection);
    ::close(connection);
  }
}

void MetricsEndpoint::Answer(int connection) const {
  const auto until =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(request_timeout_ms_);
  timeval send_timeout{request_timeout_ms_ / 1000, (request_timeout_ms_ % 1000) * 1000};
  ::setsockopt(connection, SOL_SOCKET, SO_SNDTIMEO, &send_timeout, sizeof send_timeout);
  // The request head: up to the blank line, within the size limit and the timeout.
  std::string head;
  char buf[2048];
  while (head.find("\r\n\r\n") == std::string::npos) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    if (left.count() <= 0 || head.size() > kMaxRequestBytes) break;
    pollfd p{connection, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
    const ssize_t n = ::recv(connection, buf, sizeof buf, 0);
    if (n <= 0) break;
    head.append(buf, static_cast<size_t>(n));
  }
  if (head.size() > kMaxRequestBytes) {
    SendAll(connection, Refusal(431, "Request Header Fields Too Large"));
    return;
  }
  // "METHOD SP TARGET SP HTTP/x.y" and nothing else on the first line.
  const size_t eol = head.find("\r\n");
  const std::string line = head.substr(0, eol);
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string::npos ? sp1 : line.find(' ', sp1 + 1);
  if (eol == std::string::npos || sp1 == std::string::npos || sp2 == std::string::npos ||
      line.compare(sp2 + 1, 5, "HTTP/") != 0 || line.find(' ', sp2 + 1) != std::string::npos) {
    SendAll(connection, Refusal(400, "Bad Request"));
    return;
  }
  const std::string method = line.substr(0, sp1);
  std::string target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  target = target.substr(0, target.find('?'));  // Prometheus may add parameters; none matter
  if (target != "/metrics") {
    SendAll(connection, Refusal(404, "Not Found"));
    return;
  }
  if (method != "GET") {
    SendAll(connection, Refusal(405, "Method Not Allowed", "Allow: GET\r\n"));
    return;
  }
  SendAll(connection,
          Response(200, "OK", "text/plain; version=0.0.4; charset=utf-8", Exposition()));
}

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  std::vector<double> bounds;
  double bound = start;
  for (int i = 0; i < count; ++i, bound *= factor) bounds.push_back(bound);
  return bounds;
}

}  // namespace strata
