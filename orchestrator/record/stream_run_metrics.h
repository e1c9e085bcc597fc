// The orchestrator's own Prometheus endpoint while `strata run` runs a stream job (strategy.kind
// stream; docs/user-guide.md, "Watching a job", has the table): what only the orchestrator sees of
// the whole run, the broker's backlog first. The replicas serve their own figures (events,
// gradients, staleness, accuracy, each labelled by rank); this one has the stream's: its length,
// what the group has been handed, the lag and the pending entries a platform team alerts on, the
// events trained per second, the worst replica's production-to-training latency, and the predict
// stream's latency when the job has one.
//
// The figures are the run's once-a-second progress line (what metrics.jsonl and status.json get),
// copied into gauges when the line is made; a scrape reads the gauges. Served like the services'
// endpoints: GET /metrics only, on a free loopback port.
#pragma once

#include <memory>
#include <string>

#include <absl/status/statusor.h>
#include <nlohmann/json.hpp>

#include "services/common/metrics/metrics_endpoint.h"

namespace strata {

class StreamRunMetrics {
 public:
  // MetricsEndpoint::Start's errors.
  static absl::StatusOr<std::unique_ptr<StreamRunMetrics>> Start(
      const MetricsEndpointOptions& endpoint);
  ~StreamRunMetrics();
  StreamRunMetrics(const StreamRunMetrics&) = delete;
  StreamRunMetrics& operator=(const StreamRunMetrics&) = delete;

  // The run's latest progress line; a figure the line lacks keeps its last value.
  void Update(const nlohmann::json& line);
  // http://127.0.0.1:PORT/metrics, for status.json.
  std::string url() const;

 private:
  class Gauges;
  StreamRunMetrics(std::unique_ptr<MetricsEndpoint> endpoint, std::unique_ptr<Gauges> gauges);

  std::unique_ptr<MetricsEndpoint> endpoint_;
  std::unique_ptr<Gauges> gauges_;
};

}  // namespace strata
