#include "orchestrator/sweep/sweep_results.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>
#include <absl/strings/str_join.h>

namespace strata::sweep {
namespace {

std::optional<double> Number(const nlohmann::json& j, const char* key) {
  if (j.is_object() && j.contains(key) && j[key].is_number()) return j[key].get<double>();
  return std::nullopt;
}

// Numbers in the CSVs: full precision, so that a reader recomputes the same statistics.
std::string Num(std::optional<double> v) {
  if (!v || std::isnan(*v)) return "";
  if (std::isinf(*v)) return *v > 0 ? "inf" : "-inf";
  return absl::StrFormat("%.10g", *v);
}

std::string Short(double v) {
  if (std::isnan(v)) return "--";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return absl::StrFormat("%.4g", v);
}

}  // namespace

std::string CsvField(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

std::optional<double> TimeToTarget(const std::vector<nlohmann::json>& metrics, double target) {
  for (const auto& m : metrics) {
    auto acc = Number(m, "val_acc");
    if (acc && *acc >= target) return Number(m, "wall_s");
  }
  return std::nullopt;
}

RunResult ResultFromRunFiles(const std::string& cell, uint64_t seed, const nlohmann::json& summary,
                             const std::vector<nlohmann::json>& metrics,
                             std::optional<double> target_accuracy) {
  RunResult r;
  r.cell = cell;
  r.seed = seed;
  r.state = summary.is_object() ? summary.value("state", std::string("incomplete")) : "incomplete";
  if (summary.is_object()) {
    r.wall_s = Number(summary, "wall_s");
    r.final_val_acc = Number(summary, "final_val_acc");
    r.final_val_loss = Number(summary, "final_val_loss");
    r.switch_epoch = Number(summary, "switch_epoch");
    r.stream = summary.value("strategy", "") == "stream";
    r.events_per_s = Number(summary, "events_per_s");
    r.prequential_accuracy = Number(summary, "prequential_accuracy");
    if (summary.contains("drift_recovery")) {
      r.drift = true;
      r.events_to_recover = Number(summary["drift_recovery"], "events_to_recover");
    }
    if (summary.contains("samples_per_s")) {
      r.samples_per_s_allreduce = Number(summary["samples_per_s"], "allreduce");
      r.samples_per_s_ps = Number(summary["samples_per_s"], "ps");
    }
  }
  if (target_accuracy) r.time_to_target_s = TimeToTarget(metrics, *target_accuracy);
  for (const auto& m : metrics) {
    auto t = Number(m, "wall_s"), acc = Number(m, "val_acc");
    if (t && acc) r.val_acc_by_wall_s.emplace_back(*t, *acc);
  }
  return r;
}

std::vector<std::string> MetricNames(const std::vector<RunResult>& results) {
  const bool stream =
      std::any_of(results.begin(), results.end(), [](const RunResult& r) { return r.stream; });
  // A run that wrote a summary and is not a stream job's: the epoch-based metrics apply.
  const bool epochs = std::any_of(results.begin(), results.end(), [](const RunResult& r) {
    return !r.stream && r.state != "pending" && r.state != "incomplete";
  });
  std::vector<std::string> names = {"wall_s"};
  if (epochs || !stream) {
    names.insert(names.end(), {"time_to_target_s", "final_val_acc", "final_val_loss",
                               "switch_epoch", "samples_per_s_allreduce", "samples_per_s_ps"});
  }
  if (stream) {
    names.insert(names.end(), {"events_per_s", "prequential_accuracy", "events_to_recover"});
  }
  return names;
}

std::optional<double> MetricValue(const RunResult& r, const std::string& metric) {
  if (metric == "wall_s") return r.wall_s;
  if (metric == "time_to_target_s") return r.time_to_target_s;
  if (metric == "final_val_acc") return r.final_val_acc;
  if (metric == "final_val_loss") return r.final_val_loss;
  if (metric == "switch_epoch") return r.switch_epoch;
  if (metric == "samples_per_s_allreduce") return r.samples_per_s_allreduce;
  if (metric == "samples_per_s_ps") return r.samples_per_s_ps;
  if (metric == "events_per_s") return r.events_per_s;
  if (metric == "prequential_accuracy") return r.prequential_accuracy;
  if (metric == "events_to_recover") return r.events_to_recover;
  return std::nullopt;
}

std::string ResultsCsv(const SweepSpec& spec, const std::vector<RunResult>& results) {
  std::vector<std::string> header = {"cell"};
  for (const std::string& k : spec.override_keys) header.push_back(CsvField(k));
  header.insert(header.end(), {"seed", "state"});
  const std::vector<std::string> metrics = MetricNames(results);
  for (const std::string& m : metrics) header.push_back(m);
  std::string csv = absl::StrJoin(header, ",") + "\n";
  for (const RunResult& r : results) {
    std::vector<std::string> row = {CsvField(r.cell)};
    const Cell* cell = nullptr;
    for (const Cell& c : spec.cells) {
      if (c.name == r.cell) cell = &c;
    }
    for (const std::string& k : spec.override_keys) {
      std::string value;
      if (cell != nullptr) {
        for (const Override& o : cell->overrides) {
          if (o.key == k) value = o.value;
        }
      }
      row.push_back(CsvField(value));
    }
    row.push_back(absl::StrCat(r.seed));
    row.push_back(CsvField(r.state));
    for (const std::string& m : metrics) row.push_back(Num(MetricValue(r, m)));
    csv += absl::StrJoin(row, ",") + "\n";
  }
  return csv;
}

SweepSummary Summarize(const SweepSpec& spec, const std::vector<RunResult>& results,
                       const BootstrapOptions& bootstrap) {
  // The values of one metric over a cell's succeeded runs.
  auto values = [&](const std::string& cell, const std::string& metric) {
    std::vector<double> xs;
    for (const RunResult& r : results) {
      if (r.cell != cell || r.state != "succeeded") continue;
      if (auto v = MetricValue(r, metric); v && std::isfinite(*v)) xs.push_back(*v);
    }
    return xs;
  };
  SweepSummary out;
  out.metrics = MetricNames(results);
  for (const Cell& cell : spec.cells) {
    for (const std::string& metric : out.metrics) {
      CellMetric row;
      row.cell = cell.name;
      row.metric = metric;
      const std::vector<double> xs = values(cell.name, metric);
      row.stats = DescribeSample(xs);
      row.ci95_half_width = MeanCi95HalfWidth(xs);
      const Describe base = DescribeSample(values(spec.baseline, metric));
      if (row.stats.n > 0 && base.n > 0 && base.mean != 0) {
        row.ratio_to_baseline = row.stats.mean / base.mean;
      }
      out.rows.push_back(row);
    }
  }
  // A stream job has no validation set: its accuracy is the one before training.
  const bool stream =
      std::any_of(results.begin(), results.end(), [](const RunResult& r) { return r.stream; });
  const std::string metric = stream ? "prequential_accuracy" : "final_val_acc";
  const std::vector<double> base = values(spec.baseline, metric);
  for (const Cell& cell : spec.cells) {
    if (cell.name == spec.baseline) continue;
    VarianceComparison v;
    v.cell = cell.name;
    v.baseline = spec.baseline;
    v.metric = metric;
    const std::vector<double> xs = values(cell.name, metric);
    v.n = static_cast<int>(xs.size());
    v.n_baseline = static_cast<int>(base.size());
    v.ratio = BootstrapVarianceRatio(xs, base, bootstrap);
    v.test = BrownForsytheTest({xs, base});
    v.few_runs = v.n < kVarianceMinRuns || v.n_baseline < kVarianceMinRuns;
    v.significant =
        v.ratio && v.test && v.test->p < 0.05 && !(v.ratio->ci_low <= 1 && 1 <= v.ratio->ci_high);
    if (!v.ratio) {
      v.verdict = "not computable: each arm needs 2 or more succeeded runs, the baseline's with "
                  "some spread";
    } else if (!v.test) {
      // With 2 runs an arm's deviations from its median are equal: the test has nothing to use.
      v.verdict =
          "not significant at 5%: the Brown-Forsythe test needs 3 or more runs per arm with "
          "some spread";
    } else if (v.significant) {
      v.verdict = absl::StrCat("significant at 5%: ", cell.name, " varies ",
                               v.ratio->ratio < 1 ? "less" : "more", " than ", spec.baseline);
    } else {
      v.verdict = "not significant at 5%";
    }
    if (v.few_runs) {
      absl::StrAppend(&v.verdict, " (warning: ", v.n, " and ", v.n_baseline, " runs; fewer than ",
                      kVarianceMinRuns, " per arm rarely detect even a large variance ratio)");
    }
    out.variance.push_back(v);
  }
  return out;
}

std::string SummaryCsv(const SweepSummary& summary) {
  std::string csv =
      "cell,metric,n,mean,sd,min,max,ratio_to_baseline,ci95_half_width,var_ratio,"
      "var_ratio_ci_low,var_ratio_ci_high,brown_forsythe_f,brown_forsythe_p,verdict\n";
  for (const CellMetric& row : summary.rows) {
    const Describe& d = row.stats;
    std::vector<std::string> fields = {CsvField(row.cell),
                                       row.metric,
                                       absl::StrCat(d.n),
                                       Num(d.mean),
                                       Num(d.sd),
                                       Num(d.min),
                                       Num(d.max),
                                       Num(row.ratio_to_baseline),
                                       Num(row.ci95_half_width)};
    const VarianceComparison* v = nullptr;
    for (const VarianceComparison& c : summary.variance) {
      if (c.cell == row.cell && c.metric == row.metric) v = &c;
    }
    if (v != nullptr && v->ratio) {
      fields.insert(fields.end(),
                    {Num(v->ratio->ratio), Num(v->ratio->ci_low), Num(v->ratio->ci_high)});
    } else {
      fields.insert(fields.end(), 3, "");
    }
    if (v != nullptr && v->test) {
      fields.insert(fields.end(), {Num(v->test->f), Num(v->test->p)});
    } else {
      fields.insert(fields.end(), 2, "");
    }
    fields.push_back(v != nullptr ? CsvField(v->verdict) : "");
    csv += absl::StrJoin(fields, ",") + "\n";
  }
  return csv;
}

std::string SummaryText(const SweepSummary& summary) {
  size_t width = 8;
  for (const CellMetric& row : summary.rows) width = std::max(width, row.cell.size());
  std::string text;
  for (const std::string& metric : summary.metrics) {
    absl::StrAppendFormat(&text, "%s\n  %-*s %4s %11s %11s %11s %11s %9s\n", metric,
                          static_cast<int>(width), "cell", "n", "mean", "sd", "min", "max",
                          "ratio");
    for (const CellMetric& row : summary.rows) {
      if (row.metric != metric) continue;
      const Describe& d = row.stats;
      absl::StrAppendFormat(&text, "  %-*s %4d %11s %11s %11s %11s %9s\n", static_cast<int>(width),
                            row.cell, d.n, Short(d.mean), Short(d.sd), Short(d.min), Short(d.max),
                            row.ratio_to_baseline ? Short(*row.ratio_to_baseline) : "--");
    }
  }
  for (const VarianceComparison& v : summary.variance) {
    absl::StrAppendFormat(&text, "variance of %s, %s vs baseline %s: ", v.metric, v.cell,
                          v.baseline);
    if (v.ratio) {
      absl::StrAppendFormat(&text, "ratio %s (95%% bootstrap CI %s to %s), ", Short(v.ratio->ratio),
                            Short(v.ratio->ci_low), Short(v.ratio->ci_high));
    }
    if (v.test) {
      absl::StrAppendFormat(&text, "Brown-Forsythe F = %s, p = %s, ", Short(v.test->f),
                            Short(v.test->p));
    }
    absl::StrAppend(&text, v.verdict, "\n");
  }
  return text;
}

}  // namespace strata::sweep
