// results.csv, summary.csv, the console table and the report, from made-up run files.
#include "orchestrator/sweep/sweep_results.h"

#include <cmath>
#include <limits>

#include <absl/strings/str_cat.h>
#include <gtest/gtest.h>

#include "orchestrator/sweep/sweep_report.h"

namespace strata::sweep {
namespace {

SweepSpec Spec() {
  auto spec = ParseSweepSpec(R"(base: job.yaml
cells:
  - name: ar
    set: { strategy.kind: allreduce }
  - name: ps
    set: { strategy.kind: ps, training.lr: 0.05 }
seeds: [1, 2, 3]
target_accuracy: 0.8
)",
                             "sweep.yaml", {.cores = 2});
  EXPECT_TRUE(spec.ok()) << spec.status().message();
  return *spec;
}

nlohmann::json Summary(double acc, double wall, std::optional<double> switch_epoch = {}) {
  nlohmann::json j = {{"state", "succeeded"},      {"final_val_acc", acc},
                      {"final_val_loss", 1 - acc}, {"wall_s", wall},
                      {"switch_epoch", nullptr},   {"samples_per_s", {{"allreduce", 1000.0}}}};
  if (switch_epoch) {
    j["switch_epoch"] = *switch_epoch;
    j["samples_per_s"]["ps"] = 500.0;
  }
  return j;
}

std::vector<nlohmann::json> Metrics(std::vector<std::pair<double, double>> points) {
  std::vector<nlohmann::json> lines;
  for (size_t i = 0; i < points.size(); ++i) {
    lines.push_back({{"epoch", i + 1}, {"wall_s", points[i].first}, {"val_acc", points[i].second}});
  }
  return lines;
}

std::vector<RunResult> Results() {
  const std::optional<double> target = 0.8;
  return {
      ResultFromRunFiles("ar", 1, Summary(0.80, 10), Metrics({{5, 0.7}, {8, 0.8}}), target),
      ResultFromRunFiles("ar", 2, Summary(0.82, 12), Metrics({{6, 0.75}, {9, 0.82}}), target),
      ResultFromRunFiles("ar", 3, Summary(0.84, 14), Metrics({{7, 0.79}, {11, 0.84}}), target),
      ResultFromRunFiles("ps", 1, Summary(0.70, 5, 1.5), Metrics({{3, 0.6}, {4, 0.7}}), target),
      ResultFromRunFiles("ps", 2, Summary(0.78, 6, 1.6), Metrics({{3, 0.7}, {5, 0.78}}), target),
      ResultFromRunFiles("ps", 3, nlohmann::json{{"state", "failed"}}, {}, target),
  };
}

TEST(SweepResults, ReadsARunsFiles) {
  const std::vector<RunResult> r = Results();
  EXPECT_EQ(r[0].state, "succeeded");
  EXPECT_EQ(r[0].time_to_target_s, 8);  // the first evaluation at or above 0.8
  EXPECT_EQ(r[2].time_to_target_s, 11);
  EXPECT_FALSE(r[3].time_to_target_s.has_value());  // never reached
  EXPECT_EQ(r[3].switch_epoch, 1.5);
  EXPECT_FALSE(r[0].switch_epoch.has_value());
  EXPECT_EQ(r[3].samples_per_s_ps, 500);
  EXPECT_EQ(r[5].state, "failed");
  EXPECT_EQ(ResultFromRunFiles("ar", 1, nullptr, {}, {}).state, "incomplete");
  EXPECT_EQ(r[1].val_acc_by_wall_s.size(), 2u);
}

TEST(SweepResults, ResultsCsvHasOneRowPerRunAndAColumnPerOverrideKey) {
  const std::string csv = ResultsCsv(Spec(), Results());
  EXPECT_EQ(csv.substr(0, csv.find('\n')),
            "cell,strategy.kind,training.lr,seed,state,wall_s,time_to_target_s,final_val_acc,"
            "final_val_loss,switch_epoch,samples_per_s_allreduce,samples_per_s_ps");
  EXPECT_NE(csv.find("\nar,allreduce,,1,succeeded,10,8,0.8,0.2,,1000,\n"), std::string::npos)
      << csv;
  EXPECT_NE(csv.find("\nps,ps,0.05,1,succeeded,5,,0.7,0.3,1.5,1000,500\n"), std::string::npos)
      << csv;
  EXPECT_NE(csv.find("\nps,ps,0.05,3,failed,,,,,,,\n"), std::string::npos) << csv;
  EXPECT_EQ(CsvField("a,b"), "\"a,b\"");
  EXPECT_EQ(CsvField("say \"hi\""), "\"say \"\"hi\"\"\"");
}

TEST(SweepResults, SummaryPerCellAndMetricOverSucceededRuns) {
  const SweepSummary s = Summarize(Spec(), Results());
  auto row = [&](const std::string& cell, const std::string& metric) {
    for (const CellMetric& r : s.rows) {
      if (r.cell == cell && r.metric == metric) return r;
    }
    ADD_FAILURE() << cell << " " << metric;
    return CellMetric{};
  };
  const CellMetric ar_acc = row("ar", "final_val_acc");
  EXPECT_EQ(ar_acc.stats.n, 3);
  EXPECT_NEAR(ar_acc.stats.mean, 0.82, 1e-12);
  EXPECT_NEAR(ar_acc.stats.sd, 0.02, 1e-12);
  EXPECT_NEAR(*ar_acc.ratio_to_baseline, 1, 1e-12);
  EXPECT_NEAR(ar_acc.ci95_half_width, 4.302652729749464 * 0.02 / std::sqrt(3.0), 1e-9);
  const CellMetric ps_acc = row("ps", "final_val_acc");
  EXPECT_EQ(ps_acc.stats.n, 2);  // the failed run does not count
  EXPECT_NEAR(ps_acc.stats.mean, 0.74, 1e-12);
  EXPECT_NEAR(*ps_acc.ratio_to_baseline, 0.74 / 0.82, 1e-12);
  const CellMetric ps_wall = row("ps", "wall_s");
  EXPECT_NEAR(*ps_wall.ratio_to_baseline, 5.5 / 12, 1e-12);
  EXPECT_EQ(row("ps", "time_to_target_s").stats.n, 0);
  EXPECT_EQ(row("ps", "switch_epoch").stats.n, 2);
  EXPECT_EQ(row("ar", "switch_epoch").stats.n, 0);

  ASSERT_EQ(s.variance.size(), 1u);
  const VarianceComparison& v = s.variance[0];
  EXPECT_EQ(v.cell, "ps");
  EXPECT_EQ(v.baseline, "ar");
  EXPECT_EQ(v.n, 2);
  EXPECT_EQ(v.n_baseline, 3);
  ASSERT_TRUE(v.ratio.has_value());
  EXPECT_NEAR(v.ratio->ratio, 0.0032 / 0.0004, 1e-9);
  EXPECT_TRUE(v.few_runs);
  EXPECT_FALSE(v.significant);
  EXPECT_NE(v.verdict.find("not significant at 5%"), std::string::npos) << v.verdict;
  EXPECT_NE(v.verdict.find("warning"), std::string::npos) << v.verdict;
}

TEST(SweepResults, ASignificantDifferenceInSpread) {
  // SciPy's levene example: b spreads ~8x more than a (p = 0.0094), 10 runs each.
  auto spec = ParseSweepSpec(
      "base: j.yaml\ncells: [{name: a}, {name: b, set: {training.lr: 1}}]\n"
      "seeds: {count: 10}\n",
      "s.yaml", {.cores = 2});
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  const std::vector<double> a = {8.88, 9.12, 9.04, 8.98, 9.00, 9.08, 9.01, 8.85, 9.06, 8.99};
  const std::vector<double> b = {8.88, 8.95, 9.29, 9.44, 9.15, 9.58, 8.36, 9.18, 8.67, 9.05};
  std::vector<RunResult> results;
  for (int i = 0; i < 10; ++i) {
    results.push_back(ResultFromRunFiles("a", i + 1, Summary(a[i], 1), {}, {}));
    results.push_back(ResultFromRunFiles("b", i + 1, Summary(b[i], 1), {}, {}));
  }
  const SweepSummary s = Summarize(*spec, results);
  ASSERT_EQ(s.variance.size(), 1u);
  const VarianceComparison& v = s.variance[0];
  ASSERT_TRUE(v.test.has_value());
  EXPECT_NEAR(v.test->p, 0.009364737715584399, 1e-12);
  EXPECT_FALSE(v.few_runs);
  EXPECT_TRUE(v.significant);
  EXPECT_EQ(v.verdict, "significant at 5%: b varies more than a");
}

TEST(SweepResults, TwoRunsPerArmGiveARatioButNoTest) {
  std::vector<RunResult> results = Results();
  results.erase(results.begin() + 2);  // ar keeps seeds 1 and 2
  const SweepSummary s = Summarize(Spec(), results);
  ASSERT_EQ(s.variance.size(), 1u);
  const VarianceComparison& v = s.variance[0];
  ASSERT_TRUE(v.ratio.has_value());
  EXPECT_NEAR(v.ratio->ratio, 0.0032 / 0.0002, 1e-9);
  EXPECT_FALSE(v.test.has_value());  // |x - median| is the same for both runs of an arm
  EXPECT_FALSE(v.significant);
  EXPECT_EQ(v.verdict.rfind("not significant at 5%: the Brown-Forsythe test needs 3", 0), 0u)
      << v.verdict;
  const std::string csv = SummaryCsv(s);
  EXPECT_NE(csv.find("\nps,final_val_acc,2,0.74,"), std::string::npos) << csv;
  EXPECT_NE(csv.find(",16,"), std::string::npos) << csv;  // the ratio is written without a test
}

TEST(SweepResults, SummaryCsvAndText) {
  const SweepSummary s = Summarize(Spec(), Results());
  const std::string csv = SummaryCsv(s);
  EXPECT_EQ(csv.substr(0, csv.find('\n')),
            "cell,metric,n,mean,sd,min,max,ratio_to_baseline,ci95_half_width,var_ratio,"
            "var_ratio_ci_low,var_ratio_ci_high,brown_forsythe_f,brown_forsythe_p,verdict");
  EXPECT_NE(csv.find("\nar,final_val_acc,3,0.82,0.02,0.8,0.84,1,"), std::string::npos) << csv;
  EXPECT_NE(csv.find("\nps,final_val_acc,2,0.74,"), std::string::npos) << csv;
  EXPECT_NE(csv.find("not significant at 5%"), std::string::npos) << csv;
  // 7 metrics x 2 cells, plus the header.
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 15);
  const std::string text = SummaryText(s);
  EXPECT_NE(text.find("final_val_acc"), std::string::npos);
  EXPECT_NE(text.find("variance of final_val_acc, ps vs baseline ar"), std::string::npos) << text;
}

size_t Count(const std::string& html, const std::string& needle) {
  size_t n = 0;
  for (size_t at = html.find(needle); at != std::string::npos; at = html.find(needle, at + 1)) ++n;
  return n;
}

TEST(SweepReport, DrawsEveryChartWithMeansIntervalsAndTheBaseline) {
  const SweepSpec spec = Spec();
  const std::vector<RunResult> results = Results();
  const std::string html = RenderSweepReportHtml(spec, results, Summarize(spec, results));
  EXPECT_NE(html.find("Validation accuracy against wall time"), std::string::npos);
  // One thin line per run with metrics (5).
  EXPECT_EQ(Count(html, "run-curve"), 5u);
  // Point-and-interval charts of accuracy, wall time, time to target (the spec has a target)
  // and switch epoch: a ring per counted run, a dot per cell with runs, a bar per cell with 2+.
  //   accuracy and wall time: ar 3 runs, ps 2 (its third failed)
  //   time to 0.8: ar 3, ps 0 ("target not reached")
  //   switch epoch: ar 0 ("no switch"), ps 2
  for (const char* kind : {"forest-accuracy", "forest-wall", "forest-target", "forest-switch"}) {
    EXPECT_EQ(Count(html, absl::StrCat("class='chart forest ", kind, "'")), 1u) << kind;
  }
  EXPECT_EQ(Count(html, "class='run-point'"), 5u + 5u + 3u + 2u);
  EXPECT_EQ(Count(html, "class='mean-point'"), 2u + 2u + 1u + 1u);
  EXPECT_EQ(Count(html, "class='interval'"), 2u + 2u + 1u + 1u);
  EXPECT_NE(html.find(">target not reached</text>"), std::string::npos);
  EXPECT_NE(html.find(">no switch</text>"), std::string::npos);
  // The baseline: named in bold on each chart, its mean a dashed line where it has one.
  EXPECT_EQ(Count(html, "class='cell-row baseline' data-cell='ar'"), 4u);
  EXPECT_EQ(Count(html, "class='baseline-line'"), 3u);
  EXPECT_NE(html.find(">ar (baseline)</text>"), std::string::npos);
  // The accuracy axis is fitted to the values (0.7 to 0.84, and ps's wide interval cut at 1),
  // not drawn from 0.
  const std::string accuracy = html.substr(html.find("class='chart forest forest-accuracy'"));
  const size_t first_tick = accuracy.find("class='tick x-tick'>");
  ASSERT_NE(first_tick, std::string::npos);
  EXPECT_EQ(accuracy.substr(first_tick + 20, 4), "0.2<") << accuracy.substr(first_tick, 40);
  EXPECT_NE(html.find("not significant at 5%"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find(" to --"), std::string::npos);
}

// A sweep of stream jobs: no validation set, epochs or switch, so its metrics are the stream's
// (events/s, accuracy before training, events to recover from the produced drift), its
// variance comparison is of the accuracy before training, and its report draws those.
TEST(SweepResults, AStreamSweepSummarisesTheStreamsFigures) {
  auto spec = ParseSweepSpec(R"(base: job.yaml
grid: { stream.on_drift: [continue, reset_lr] }
seeds: [1, 2, 3]
)",
                             "sweep.yaml", {.cores = 2});
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  auto stream = [](double events_per_s, double accuracy, std::optional<double> recover) {
    nlohmann::json j = {{"state", "succeeded"},       {"strategy", "stream"},
                        {"wall_s", 20.0},             {"events_per_s", events_per_s},
                        {"prequential_accuracy", accuracy}};
    j["drift_recovery"] = {{"events_to_recover",
                            recover ? nlohmann::json(*recover) : nlohmann::json(nullptr)}};
    return j;
  };
  const std::vector<RunResult> results = {
      ResultFromRunFiles("on_drift=continue", 1, stream(30000, 0.80, 60000), {}, {}),
      ResultFromRunFiles("on_drift=continue", 2, stream(32000, 0.81, 50000), {}, {}),
      ResultFromRunFiles("on_drift=continue", 3, stream(31000, 0.79, std::nullopt), {}, {}),
      ResultFromRunFiles("on_drift=reset_lr", 1, stream(30500, 0.83, 20000), {}, {}),
      ResultFromRunFiles("on_drift=reset_lr", 2, stream(31500, 0.84, 22000), {}, {}),
      ResultFromRunFiles("on_drift=reset_lr", 3, stream(30000, 0.83, 21000), {}, {}),
  };
  EXPECT_TRUE(results[0].stream);
  EXPECT_EQ(results[0].events_to_recover, 60000);
  EXPECT_FALSE(results[2].events_to_recover.has_value());  // never recovered
  const std::string csv = ResultsCsv(*spec, results);
  EXPECT_EQ(csv.substr(0, csv.find('\n')),
            "cell,stream.on_drift,seed,state,wall_s,events_per_s,prequential_accuracy,"
            "events_to_recover");
  EXPECT_NE(csv.find("\non_drift=reset_lr,reset_lr,1,succeeded,20,30500,0.83,20000\n"),
            std::string::npos)
      << csv;
  const SweepSummary s = Summarize(*spec, results);
  bool found = false;
  for (const CellMetric& row : s.rows) {
    if (row.cell != "on_drift=reset_lr" || row.metric != "events_to_recover") continue;
    found = true;
    EXPECT_EQ(row.stats.n, 3);
    EXPECT_DOUBLE_EQ(row.stats.mean, 21000);
    ASSERT_TRUE(row.ratio_to_baseline.has_value());
    EXPECT_DOUBLE_EQ(*row.ratio_to_baseline, 21000.0 / 55000.0);  // the baseline's 2 recoveries
  }
  EXPECT_TRUE(found);
  ASSERT_EQ(s.variance.size(), 1u);
  EXPECT_EQ(s.variance[0].metric, "prequential_accuracy");
  EXPECT_EQ(s.variance[0].n, 3);
  EXPECT_NE(SummaryText(s).find("events_to_recover"), std::string::npos);
  EXPECT_EQ(SummaryText(s).find("final_val_acc"), std::string::npos);  // no validation set
  const std::string html = RenderSweepReportHtml(*spec, results, s);
  for (const char* kind : {"forest-prequential", "forest-events", "forest-wall", "forest-recovery"}) {
    EXPECT_EQ(Count(html, absl::StrCat("class='chart forest ", kind, "'")), 1u) << kind;
  }
  EXPECT_EQ(Count(html, "class='chart forest forest-accuracy'"), 0u);
  EXPECT_NE(html.find("of the accuracy before training"), std::string::npos);
  // The runs table says what a stream run has: its events/s, accuracy and recovery.
  EXPECT_NE(html.find("<th>events to recover</th>"), std::string::npos);
  EXPECT_NE(html.find(">never<"), std::string::npos);  // continue, seed 3
  EXPECT_EQ(html.find("no switch"), std::string::npos);
  // A sweep of other jobs has none of the stream's columns.
  EXPECT_EQ(ResultsCsv(Spec(), Results()).find("events_per_s"), std::string::npos);
}

TEST(SweepReport, ACellOfOneRunHasNoIntervalAndSaysSo) {
  const SweepSpec spec = Spec();
  std::vector<RunResult> results = Results();
  results.erase(results.begin() + 4);  // ps keeps seed 1 only
  const SweepSummary summary = Summarize(spec, results);
  const std::string html = RenderSweepReportHtml(spec, results, summary);
  EXPECT_NE(html.find("(n = 1: no interval)</text>"), std::string::npos);
  for (const CellMetric& row : summary.rows) {
    if (row.cell == "ps" && row.metric == "final_val_acc") {
      EXPECT_EQ(MeanIntervalText(row), "n = 1: no interval");
    }
  }
  EXPECT_NE(html.find("<td class='n'>n = 1: no interval</td>"), std::string::npos);
}

TEST(SweepReport, IntervalsAreNumbersOrTheReasonThereAreNone) {
  CellMetric row;
  row.stats.n = 0;
  EXPECT_EQ(MeanIntervalText(row), "no runs");
  row.stats = {3, 0.82, 0.02, 0.80, 0.84};
  row.ci95_half_width = 0.0497;
  EXPECT_EQ(MeanIntervalText(row), "0.7703 to 0.8697");

  VarianceComparison v;
  v.cell = "ps";
  v.n = 1;
  v.n_baseline = 3;
  EXPECT_EQ(BootstrapIntervalText(v), "n = 1 in ps: no interval");
  v.n = 3;
  v.n_baseline = 1;
  EXPECT_EQ(BootstrapIntervalText(v), "n = 1 in the baseline: no interval");
  v.n_baseline = 3;
  EXPECT_EQ(BootstrapIntervalText(v), "no interval: the baseline's runs are all equal");
  v.ratio = VarianceRatio{0.5, 0.1, 2.5, 2000};
  EXPECT_EQ(BootstrapIntervalText(v), "0.1000 to 2.500");
  // Where the report used to print "0 to --".
  v.ratio = VarianceRatio{0.04459, 0, std::numeric_limits<double>::infinity(), 2000};
  EXPECT_EQ(BootstrapIntervalText(v).rfind("0 to infinity (unbounded: in some resamples the "
                                           "baseline's runs were all equal",
                                           0),
            0u)
      << BootstrapIntervalText(v);
}

}  // namespace
}  // namespace strata::sweep
