// `strata shard --stats DIR`: how far each shard's class mix is from the data set's. Reads
// manifest.json only (no data set, no LibTorch).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <absl/status/statusor.h>

namespace strata::shard {

// The ideal share of class c in shard w is count(w) x total(c) / examples: the shard has the data
// set's class proportions. Deviations are in examples (signed: count - ideal).
struct ShardBalance {
  std::string method, dataset;
  int64_t examples = 0;
  std::vector<int64_t> class_totals;
  std::vector<int64_t> shard_counts;
  std::vector<std::vector<int64_t>> class_counts;  // [worker][class]
  std::vector<std::vector<double>> deviation;      // [worker][class]
  // Largest |deviation| per worker, per class and overall, with where it happens.
  std::vector<double> worker_max;
  std::vector<int> worker_max_class;
  std::vector<double> class_max;
  std::vector<int> class_max_worker;
  double overall_max = 0;
  int overall_worker = 0, overall_class = 0;
};

absl::StatusOr<ShardBalance> ComputeShardBalance(const std::string& manifest_json,
                                                 const std::string& origin);

std::string FormatShardBalance(const ShardBalance& balance);

// Reads DIR/manifest.json and formats the table.
absl::StatusOr<std::string> ShardStats(const std::string& plan_dir);

}  // namespace strata::shard
