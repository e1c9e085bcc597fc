#include "orchestrator/plan/shard_stats.h"

#include <cmath>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>
#include <nlohmann/json.hpp>

#include "services/common/base/files.h"

namespace strata::shard {
namespace {

absl::Status Bad(const std::string& origin, const std::string& what) {
  return absl::DataLossError(absl::StrCat(origin, ": ", what));
}

double Percent(double part, double whole) { return whole > 0 ? 100.0 * part / whole : 0.0; }

}  // namespace

absl::StatusOr<ShardBalance> ComputeShardBalance(const std::string& text,
                                                 const std::string& origin) {
  nlohmann::json m = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (m.is_discarded() || !m.is_object()) return Bad(origin, "not valid JSON");
  ShardBalance b;
  try {
    if (m.value("format", "") != "strata-shard-plan")
      return Bad(origin, "not a strata shard plan manifest");
    b.method = m.at("method").get<std::string>();
    b.dataset = m.at("dataset").at("name").get<std::string>();
    b.examples = m.at("examples").get<int64_t>();
    b.class_totals = m.at("class_counts").get<std::vector<int64_t>>();
    for (const auto& s : m.at("shards")) {
      b.shard_counts.push_back(s.at("count").get<int64_t>());
      b.class_counts.push_back(s.at("class_counts").get<std::vector<int64_t>>());
      if (b.class_counts.back().size() != b.class_totals.size()) {
        return Bad(origin, absl::StrCat("shard ", b.shard_counts.size() - 1, " has ",
                                        b.class_counts.back().size(), " class counts, expected ",
                                        b.class_totals.size()));
      }
    }
  } catch (const nlohmann::json::exception& e) {
    return Bad(origin, absl::StrCat("missing or mistyped field: ", e.what()));
  }
  if (b.examples <= 0 || b.shard_counts.empty()) return Bad(origin, "no examples or no shards");
  const size_t workers = b.shard_counts.size(), classes = b.class_totals.size();
  b.deviation.assign(workers, std::vector<double>(classes, 0));
  b.worker_max.assign(workers, 0);
  b.worker_max_class.assign(workers, 0);
  b.class_max.assign(classes, 0);
  b.class_max_worker.assign(classes, 0);
  for (size_t w = 0; w < workers; ++w) {
    for (size_t c = 0; c < classes; ++c) {
      const double ideal = static_cast<double>(b.shard_counts[w]) * b.class_totals[c] / b.examples;
      const double d = b.class_counts[w][c] - ideal;
      b.deviation[w][c] = d;
      if (std::abs(d) > std::abs(b.worker_max[w])) {
        b.worker_max[w] = d;
        b.worker_max_class[w] = static_cast<int>(c);
      }
      if (std::abs(d) > std::abs(b.class_max[c])) {
        b.class_max[c] = d;
        b.class_max_worker[c] = static_cast<int>(w);
      }
      if (std::abs(d) > std::abs(b.overall_max)) {
        b.overall_max = d;
        b.overall_worker = static_cast<int>(w);
        b.overall_class = static_cast<int>(c);
      }
    }
  }
  return b;
}

std::string FormatShardBalance(const ShardBalance& b) {
  const size_t workers = b.shard_counts.size(), classes = b.class_totals.size();
  std::string out = absl::StrFormat(
      "%s plan of %d %s examples over %d workers, %d classes\n"
      "ideal share of class c in a shard = shard count x (class c total / examples)\n\n",
      b.method, b.examples, b.dataset, workers, classes);
  absl::StrAppend(
      &out, absl::StrFormat("%6s %9s %22s %6s\n", "worker", "count", "largest deviation", "class"));
  for (size_t w = 0; w < workers; ++w) {
    const double ideal =
        static_cast<double>(b.shard_counts[w]) * b.class_totals[b.worker_max_class[w]] / b.examples;
    absl::StrAppend(&out, absl::StrFormat("%6d %9d %+10.1f (%+7.2f%%) %6d\n", w, b.shard_counts[w],
                                          b.worker_max[w], Percent(b.worker_max[w], ideal),
                                          b.worker_max_class[w]));
  }
  absl::StrAppend(&out, absl::StrFormat("\n%6s %9s %22s %6s\n", "class", "total",
                                        "largest deviation", "worker"));
  for (size_t c = 0; c < classes; ++c) {
    const int w = b.class_max_worker[c];
    const double ideal = static_cast<double>(b.shard_counts[w]) * b.class_totals[c] / b.examples;
    absl::StrAppend(&out, absl::StrFormat("%6d %9d %+10.1f (%+7.2f%%) %6d\n", c, b.class_totals[c],
                                          b.class_max[c], Percent(b.class_max[c], ideal), w));
  }
  const double ideal = static_cast<double>(b.shard_counts[b.overall_worker]) *
                       b.class_totals[b.overall_class] / b.examples;
  absl::StrAppend(
      &out, absl::StrFormat(
                "\noverall largest deviation: %+.1f examples (%+.2f%% of the ideal share), "
                "class %d in worker %d\n",
                b.overall_max, Percent(b.overall_max, ideal), b.overall_class, b.overall_worker));
  return out;
}

absl::StatusOr<std::string> ShardStats(const std::string& plan_dir) {
  const std::string path = plan_dir + "/manifest.json";
  auto text = ReadFile(path);
  if (!text.ok()) return text.status();
  auto balance = ComputeShardBalance(*text, path);
  if (!balance.ok()) return balance.status();
  return FormatShardBalance(*balance);
}

}  // namespace strata::shard
