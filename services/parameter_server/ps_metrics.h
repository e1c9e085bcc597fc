// What a parameter server shows Prometheus (docs/user-guide.md, "Watching a job", has the table):
// its partition's model version, the updates it applied, the samples they carried, the pushes it
// refused, and how stale the applied pushes were. The figures are read from the partition when
// Prometheus scrapes (PartitionStore::Status, under the store's own lock), so the push path pays
// nothing for them and the partition's code does not know they exist. Every series carries the
// partition's index.
#pragma once

#include <vector>

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include "services/parameter_server/partition_store.h"

namespace strata {

class PartitionMetrics final : public prometheus::Collectable {
 public:
  // `store` is borrowed and must outlive every scrape (unregister first, or outlive the
  // endpoint).
  PartitionMetrics(const PartitionStore& store, int partition);

  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const PartitionStore& store_;
  const int partition_;
};

}  // namespace strata
