// A service's Prometheus endpoint: a registry the service's own metrics live in (prometheus-cpp's
// core), served over HTTP at /metrics in the text exposition format by a small server of its own
// on one thread. It answers GET /metrics and nothing else: other paths are 404, other methods 405,
// what is not HTTP 400, a request may be 8 KiB at most and must arrive within the timeout, and
// nothing a request says changes what it holds (docs/security.md, "Metrics endpoints").
//
// Not prometheus-cpp's Exposer: its civetweb starts threads with 100 KiB stacks, and in a process
// that has loaded LibTorch the static TLS alone is larger, so pthread_create fails with EINVAL
// and the worker and the evaluator could not serve (measured with Debian's civetweb 1.15).
//
// The registry exists whether or not the endpoint is served, so that instrumentation never asks
// whether metrics are on; with no listen address nothing listens and the figures go nowhere.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <absl/status/statusor.h>
#include <prometheus/collectable.h>
#include <prometheus/registry.h>

namespace strata {

struct MetricsEndpointOptions {
  // host:port; port 0 binds a free one (the local launcher's way). Empty: no endpoint.
  std::string listen;
  // Once serving, the bound port goes here (a decimal number and a newline, written atomically),
  // as the services' main port does, so that the launcher reads both the same way. Empty: none.
  std::string port_file;
  // A client gets this long to send its request and take the answer; requests are served one at
  // a time, so a silent client delays a scrape by this much at most.
  int request_timeout_ms = 5000;
};

class MetricsEndpoint {
 public:
  // INVALID_ARGUMENT for a malformed `listen`, UNAVAILABLE when it cannot be bound, each naming
  // the address; an error writing the port file names the file.
  static absl::StatusOr<std::unique_ptr<MetricsEndpoint>> Start(
      const MetricsEndpointOptions& options);
  ~MetricsEndpoint();  // stops serving
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;

  prometheus::Registry& registry() { return *registry_; }
  // Also serves what `collectable` reports, read at each scrape: for figures a service already
  // keeps under its own lock. Call before the first scrape matters; kept alive by the endpoint.
  void Serve(std::shared_ptr<prometheus::Collectable> collectable);
  int port() const { return port_; }  // 0: not served
  // http://<listen host>:<port>/metrics, what a scraper on the listening host dials.
  std::string url() const;

  // The exposition a scrape gets now.
  std::string Exposition() const;

 private:
  MetricsEndpoint() = default;
  void ServeLoop();
  void Answer(int connection) const;

  std::shared_ptr<prometheus::Registry> registry_ = std::make_shared<prometheus::Registry>();
  std::vector<std::shared_ptr<prometheus::Collectable>> collectables_;
  mutable std::mutex collectables_mu_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::string host_;  // as `listen` gave it ("[::1]" for IPv6)
  int request_timeout_ms_ = 5000;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// `count` bucket bounds start, start * factor, ... (Prometheus's ExponentialBuckets).
std::vector<double> ExponentialBuckets(double start, double factor, int count);

}  // namespace strata
