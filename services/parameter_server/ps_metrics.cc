#include "services/parameter_server/ps_metrics.h"

#include <cstdint>
#include <limits>
#include <string>

namespace strata {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

MetricFamily One(std::string name, std::string help, MetricType type, const ClientMetric& metric) {
  MetricFamily family;
  family.name = std::move(name);
  family.help = std::move(help);
  family.type = type;
  family.metric.push_back(metric);
  return family;
}

}  // namespace

PartitionMetrics::PartitionMetrics(const PartitionStore& store, int partition)
    : store_(store), partition_(partition) {}

std::vector<MetricFamily> PartitionMetrics::Collect() const {
  const PartitionStatus status = store_.Status();
  ClientMetric labelled;
  labelled.label.push_back({"partition", std::to_string(partition_)});

  std::vector<MetricFamily> families;
  ClientMetric m = labelled;
  m.gauge.value = static_cast<double>(status.version);
  families.push_back(One("strata_ps_model_version",
                         "Version of the partition's model: one more per applied update",
                         MetricType::Gauge, m));
  m = labelled;
  m.counter.value = static_cast<double>(status.pushes);
  families.push_back(One("strata_ps_updates_applied_total",
                         "Pushes the partition applied (or gathered into a round)",
                         MetricType::Counter, m));
  m = labelled;
  m.counter.value = static_cast<double>(status.samples);
  families.push_back(One("strata_ps_samples_applied_total",
                         "Training examples behind the applied pushes", MetricType::Counter, m));
  m = labelled;
  m.counter.value = static_cast<double>(status.rejected_pushes);
  families.push_back(One("strata_ps_pushes_rejected_total",
                         "Pushes refused by the consistency policy", MetricType::Counter, m));
  m = labelled;
  m.gauge.value = status.loaded ? 1 : 0;
  families.push_back(
      One("strata_ps_loaded", "1 once the partition holds a model", MetricType::Gauge, m));

  // The store counts staleness 0, 1, ... exactly, its last bucket holding "that many or more":
  // Prometheus buckets le=0, le=1, ... and +Inf. The sum takes the last bucket at its lower
  // bound, so it is a lower bound when pushes were that stale.
  m = labelled;
  uint64_t cumulative = 0;
  double sum = 0;
  const std::vector<int64_t>& counts = status.staleness_histogram;
  for (size_t s = 0; s < counts.size(); ++s) {
    cumulative += static_cast<uint64_t>(counts[s]);
    sum += static_cast<double>(s) * static_cast<double>(counts[s]);
    if (s + 1 < counts.size()) {
      m.histogram.bucket.push_back({cumulative, static_cast<double>(s)});
    }
  }
  m.histogram.bucket.push_back({cumulative, std::numeric_limits<double>::infinity()});
  m.histogram.sample_count = cumulative;
  m.histogram.sample_sum = sum;
  families.push_back(One("strata_ps_staleness_versions",
                         "Versions the model had moved on between a worker's pull and its push",
                         MetricType::Histogram, m));
  return families;
}

}  // namespace strata
