#include "orchestrator/record/run_metrics.h"

#include <chrono>
#include <mutex>
#include <utility>
#include <vector>

#include <absl/strings/str_cat.h>
#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

namespace strata {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

// Every phase gets a series, 1 for the one the run is in: `strata_run_phase == 1` names it, and a
// phase the run has not reached yet is 0 rather than absent, so that an alert need not ask
// whether it exists.
constexpr const char* kPhases[] = {"starting", "allreduce", "ps", "done"};

MetricFamily Family(std::string name, std::string help, MetricType type) {
  MetricFamily family;
  family.name = std::move(name);
  family.help = std::move(help);
  family.type = type;
  return family;
}

MetricFamily Gauge(std::string name, std::string help, double value) {
  MetricFamily family = Family(std::move(name), std::move(help), MetricType::Gauge);
  ClientMetric m;
  m.gauge.value = value;
  family.metric.push_back(m);
  return family;
}

double UnixNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

class RunMetrics::Figures final : public prometheus::Collectable {
 public:
  explicit Figures(double run_start_unix) : run_start_unix_(run_start_unix) {}

  void Update(const RunStatusSnapshot& status) {
    std::lock_guard<std::mutex> lock(mu_);
    status_ = status;
    status_.workers.clear();  // the workers' figures are theirs to serve
  }

  std::vector<MetricFamily> Collect() const override {
    RunStatusSnapshot s;
    {
      std::lock_guard<std::mutex> lock(mu_);
      s = status_;
    }
    const bool running = s.state == "running";
    std::vector<MetricFamily> families;
    MetricFamily restarts =
        Family("strata_restarts_total",
               "Times the orchestrator started a dead service again (recovery.restarts)",
               MetricType::Counter);
    int alive = 0;
    for (const ProcessSnapshot& p : s.processes) {
      ClientMetric m;
      m.label.push_back({"process", p.name});
      m.counter.value = p.restarts;
      restarts.metric.push_back(m);
      if (p.running) ++alive;
    }
    families.push_back(std::move(restarts));
    families.push_back(
        Gauge("strata_run_processes_running", "Services of the run whose process is alive", alive));
    MetricFamily phase = Family("strata_run_phase",
                                "1 for the phase the run is in as the orchestrator sees it: "
                                "starting, allreduce, ps (push/pull) or done",
                                MetricType::Gauge);
    const std::string now = running ? s.phase : "done";
    for (const char* name : kPhases) {
      ClientMetric m;
      m.label.push_back({"phase", name});
      m.gauge.value = now == name ? 1 : 0;
      phase.metric.push_back(m);
    }
    families.push_back(std::move(phase));
    MetricFamily switches =
        Family("strata_run_switches_total",
               "Live switches from the ring all-reduce to the parameter servers the run made",
               MetricType::Counter);
    ClientMetric m;
    m.counter.value = s.switched ? 1 : 0;
    switches.metric.push_back(m);
    families.push_back(std::move(switches));
    families.push_back(Gauge("strata_run_epoch",
                             "Global epochs trained, fractional, as the orchestrator counts them",
                             s.epoch));
    families.push_back(Gauge("strata_run_start_time_seconds",
                             "Unix time the run started (a resumed run keeps its first start)",
                             run_start_unix_));
    // Live while the run goes; frozen at the run's wall time once it has ended.
    families.push_back(Gauge("strata_run_seconds", "Seconds since the run started",
                             running ? UnixNow() - run_start_unix_ : s.wall_s));
    return families;
  }

 private:
  const double run_start_unix_;
  mutable std::mutex mu_;
  RunStatusSnapshot status_;
};

absl::StatusOr<std::unique_ptr<RunMetrics>> RunMetrics::Start(
    const MetricsEndpointOptions& endpoint, double run_start_unix) {
  auto served = MetricsEndpoint::Start(endpoint);
  if (!served.ok()) return served.status();
  auto figures = std::make_shared<Figures>(run_start_unix);
  (*served)->Serve(figures);
  return std::unique_ptr<RunMetrics>(new RunMetrics(std::move(*served), std::move(figures)));
}

RunMetrics::RunMetrics(std::unique_ptr<MetricsEndpoint> endpoint, std::shared_ptr<Figures> figures)
    : endpoint_(std::move(endpoint)), figures_(std::move(figures)) {}

RunMetrics::~RunMetrics() = default;

void RunMetrics::Update(const RunStatusSnapshot& status) { figures_->Update(status); }

std::string RunMetrics::url() const {
  return endpoint_->url();
}

}  // namespace strata
