// The orchestrator's own Prometheus endpoint while `strata run` or `strata resume` runs a job on
// this machine (docs/user-guide.md, "Watching a job", has the table): what only the orchestrator
// knows of the run, as it writes it to status.json. The restarts it made of each service, the
// run's phase (starting, all-reduce, push/pull, done), the switches, the services alive, the
// run's start time and age, its epochs. The services' endpoints show how each trains; this one
// shows the run a platform team alerts on (a restart loop, a run stuck before training).
//
// The figures are a copy of the last RunStatusSnapshot, taken each time status.json is written
// (about once a second) and read when Prometheus scrapes, so a scrape sees what status.json says
// and the supervisor's loop pays one copy a second. Served by services/common/metrics (the same
// one-thread HTTP server as the services'): GET /metrics only, on a free loopback port.
#pragma once

#include <memory>
#include <string>

#include <absl/status/statusor.h>

#include "orchestrator/record/run_files.h"
#include "services/common/metrics/metrics_endpoint.h"

namespace strata {

class RunMetrics {
 public:
  // Serves at `endpoint.listen` and writes the bound port to `endpoint.port_file`, as the
  // services do (MetricsEndpoint::Start's errors). `run_start_unix` is the zero of the run's
  // clock in seconds since the Unix epoch (a resumed run's goes on from its first start).
  static absl::StatusOr<std::unique_ptr<RunMetrics>> Start(const MetricsEndpointOptions& endpoint,
                                                           double run_start_unix);
  ~RunMetrics();
  RunMetrics(const RunMetrics&) = delete;
  RunMetrics& operator=(const RunMetrics&) = delete;

  // What the next scrape reports: the run as status.json has it now.
  void Update(const RunStatusSnapshot& status);
  // http://127.0.0.1:PORT/metrics, for status.json and `strata status`.
  std::string url() const;
  // The exposition a scrape gets now (tests).
  std::string Exposition() const { return endpoint_->Exposition(); }

 private:
  class Figures;
  RunMetrics(std::unique_ptr<MetricsEndpoint> endpoint, std::shared_ptr<Figures> figures);

  std::unique_ptr<MetricsEndpoint> endpoint_;
  std::shared_ptr<Figures> figures_;
};

}  // namespace strata
