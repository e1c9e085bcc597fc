#include "orchestrator/record/stream_run_metrics.h"

#include <string>
#include <utility>
#include <vector>

#include <absl/strings/str_cat.h>
#include <prometheus/gauge.h>

namespace strata {

// One gauge per figure of the progress line: the line's key, and the factor that turns its unit
// into Prometheus's (milliseconds into seconds).
class StreamRunMetrics::Gauges {
 public:
  explicit Gauges(prometheus::Registry& registry) {
    Add(registry, "strata_stream_run_events_in_stream", "Entries in the stream now (XLEN)",
        "stream_length");
    Add(registry, "strata_stream_run_events_handed_out",
        "Events the replicas' consumer group has been handed", "handed_out");
    Add(registry, "strata_stream_run_lag",
        "Events in the stream not yet handed to the replicas (the group's lag)", "lag");
    Add(registry, "strata_stream_run_pending",
        "Events handed to a replica and not yet acknowledged (trained)", "pending");
    Add(registry, "strata_stream_run_events_trained", "Events trained, all replicas together",
        "events_trained");
    Add(registry, "strata_stream_run_trained_per_second",
        "Events trained per second over the latest progress interval", "trained_per_s");
    Add(registry, "strata_stream_run_recent_accuracy",
        "Test-then-train accuracy over the replicas' latest stream.accuracy_window events",
        "recent_accuracy");
    Add(registry, "strata_stream_run_latency_p99_seconds",
        "p99 of the time from an event's production to its training, the latest second, the "
        "worst replica's",
        "latency_p99_ms", 1e-3);
    Add(registry, "strata_stream_run_predict_p99_seconds",
        "p99 of the predict stream's answers of the latest second (stream.predict_rate), as the "
        "orchestrator saw them",
        "predict_p99_ms", 1e-3);
  }

  void Update(const nlohmann::json& line) {
    for (const Figure& f : figures_) {
      auto it = line.find(f.key);
      if (it != line.end() && it->is_number()) f.gauge->Set(it->get<double>() * f.scale);
    }
  }

 private:
  struct Figure {
    std::string key;
    double scale;
    prometheus::Gauge* gauge;
  };

  void Add(prometheus::Registry& registry, const std::string& name, const std::string& help,
           const std::string& key, double scale = 1) {
    figures_.push_back(
        {key, scale, &prometheus::BuildGauge().Name(name).Help(help).Register(registry).Add({})});
  }

  std::vector<Figure> figures_;
};

absl::StatusOr<std::unique_ptr<StreamRunMetrics>> StreamRunMetrics::Start(
    const MetricsEndpointOptions& endpoint) {
  auto served = MetricsEndpoint::Start(endpoint);
  if (!served.ok()) return served.status();
  auto gauges = std::make_unique<Gauges>((*served)->registry());
  return std::unique_ptr<StreamRunMetrics>(
      new StreamRunMetrics(*std::move(served), std::move(gauges)));
}

StreamRunMetrics::StreamRunMetrics(std::unique_ptr<MetricsEndpoint> endpoint,
                                   std::unique_ptr<Gauges> gauges)
    : endpoint_(std::move(endpoint)), gauges_(std::move(gauges)) {}

StreamRunMetrics::~StreamRunMetrics() = default;

void StreamRunMetrics::Update(const nlohmann::json& line) { gauges_->Update(line); }

std::string StreamRunMetrics::url() const {
  return endpoint_->url();
}

}  // namespace strata
