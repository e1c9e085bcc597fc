// The run report and the formatting both reports share: rounding, units, tick choice, human
// labels, and what report.html holds for a made-up run. The browser's view of a real run is
// tests/e2e/report_browser_test.cc.
#include "orchestrator/record/report.h"

#include <stdlib.h>

#include <cmath>
#include <random>
#include <regex>

#include <absl/strings/str_format.h>
#include <filesystem>

#include <gtest/gtest.h>

#include "orchestrator/plan/job_checks.h"
#include "orchestrator/record/report_chart.h"
#include "orchestrator/record/report_format.h"
#include "services/common/base/files.h"

namespace strata {
namespace {

using nlohmann::json;

size_t Count(const std::string& html, const std::string& needle) {
  size_t n = 0;
  for (size_t at = html.find(needle); at != std::string::npos; at = html.find(needle, at + 1)) ++n;
  return n;
}

TEST(ReportFormat, SignificantDigitsWithoutExponentsAndWithThousands) {
  EXPECT_EQ(FormatSignificant(0.36085048217773436), "0.361");
  EXPECT_EQ(FormatSignificant(15.34), "15.3");
  EXPECT_EQ(FormatSignificant(74850.15), "74,900");
  EXPECT_EQ(FormatSignificant(9.996), "10.0");  // the carry does not add a digit
  EXPECT_EQ(FormatSignificant(0.0004321, 2), "0.00043");
  EXPECT_EQ(FormatSignificant(-1234.6, 4), "-1,235");
  EXPECT_EQ(FormatSignificant(0), "0");
  EXPECT_EQ(FormatSignificant(std::nan("")), "--");
  EXPECT_EQ(FormatSignificant(INFINITY), "--");
  EXPECT_EQ(FormatFixed(74850.4, 0), "74,850");
  EXPECT_EQ(FormatFixed(-0.0001, 2), "0.00");  // never "-0.00"
  EXPECT_EQ(FormatFixed(1234567.891, 2), "1,234,567.89");
  EXPECT_EQ(FormatCount(30000), "30,000");
  EXPECT_EQ(FormatCount(-1234567), "-1,234,567");
  EXPECT_EQ(FormatCount(999), "999");
}

TEST(ReportFormat, DurationsCarryTheirUnit) {
  EXPECT_EQ(FormatSeconds(0.0004), "400 us");
  EXPECT_EQ(FormatSeconds(0.0052), "5.2 ms");
  EXPECT_EQ(FormatSeconds(0.017241987), "17 ms");
  EXPECT_EQ(FormatSeconds(1.2345), "1.23 s");
  EXPECT_EQ(FormatSeconds(15.34), "15.3 s");
  EXPECT_EQ(FormatSeconds(59.96), "1 min 00 s");
  EXPECT_EQ(FormatSeconds(125), "2 min 05 s");
  EXPECT_EQ(FormatSeconds(3725), "1 h 02 min");
  EXPECT_EQ(FormatSeconds(-1), "--");
  EXPECT_EQ(FormatSeconds(std::nan("")), "--");
  EXPECT_EQ(FormatPercent(0.8816), "88.16 %");
  EXPECT_EQ(FormatPercent(0.4, 0), "40 %");
  EXPECT_EQ(FormatRate(74850.15), "74,900 samples/s");
}

TEST(ReportFormat, HumanLabels) {
  EXPECT_EQ(PhaseLabel("allreduce"), "all-reduce");
  EXPECT_EQ(PhaseLabel("ps"), "parameter servers");
  EXPECT_EQ(PhaseLabel("starting"), "start-up");
  EXPECT_EQ(PhaseLabel("stream"), "stream");
  EXPECT_EQ(HumanKey("final_val_acc"), "final validation accuracy");
  EXPECT_EQ(HumanKey("val_loss"), "validation loss");
  EXPECT_EQ(HumanKey("wall_s"), "wall time (s)");
  EXPECT_EQ(HumanKey("samples_per_s_ps"), "samples/s with parameter servers");
  EXPECT_EQ(HumanKey("drift_detected"), "drift detected");
}

TEST(ReportFormat, TicksAtOneTwoFiveCoveringTheRange) {
  AxisTicks t = NiceTicks(0.834, 0.884, 8);
  EXPECT_DOUBLE_EQ(t.step, 0.01);
  ASSERT_EQ(t.values.size(), 7u);
  EXPECT_NEAR(t.lo(), 0.83, 1e-12);
  EXPECT_NEAR(t.hi(), 0.89, 1e-12);
  t = NiceTicks(0.834, 0.884, 6);  // 7 ticks are too many: the next step
  EXPECT_DOUBLE_EQ(t.step, 0.02);
  EXPECT_NEAR(t.lo(), 0.82, 1e-12);
  EXPECT_NEAR(t.hi(), 0.90, 1e-12);
  t = NiceTicks(0, 7.44, 9);
  EXPECT_DOUBLE_EQ(t.step, 1);
  EXPECT_EQ(t.values.size(), 9u);
  t = NiceTicks(0, 51500, 6);
  EXPECT_DOUBLE_EQ(t.step, 20000);
  EXPECT_DOUBLE_EQ(t.hi(), 60000);
  // Reversed, degenerate and non-finite ranges still give an axis.
  t = NiceTicks(5, 1, 5);
  EXPECT_LE(t.lo(), 1);
  EXPECT_GE(t.hi(), 5);
  t = NiceTicks(0.85, 0.85, 5);
  EXPECT_LT(t.lo(), 0.85);
  EXPECT_GT(t.hi(), 0.85);
  t = NiceTicks(std::nan(""), 1, 5);
  EXPECT_EQ(t.lo(), 0);
  EXPECT_EQ(t.hi(), 1);
}

TEST(ReportFormat, EveryTickStepIsOneTwoOrFiveTimesAPowerOfTen) {
  std::mt19937 gen(7);
  std::uniform_real_distribution<double> exponent(-4, 6), unit(0, 1);
  for (int i = 0; i < 2000; ++i) {
    const double scale = std::pow(10, exponent(gen));
    const double lo = (unit(gen) - 0.3) * scale, hi = lo + unit(gen) * scale;
    const int max_ticks = 3 + static_cast<int>(unit(gen) * 10);
    const AxisTicks t = NiceTicks(lo, hi, max_ticks);
    ASSERT_GE(t.values.size(), 2u);
    ASSERT_LE(t.values.size(), static_cast<size_t>(max_ticks)) << lo << " " << hi;
    for (size_t k = 1; k < t.values.size(); ++k) {
      EXPECT_NEAR(t.values[k] - t.values[k - 1], t.step, t.step * 1e-9);
    }
    EXPECT_LE(t.lo(), lo + 1e-9 * scale);
    EXPECT_GE(t.hi(), hi - 1e-9 * scale);
    const double mantissa = t.step / std::pow(10, std::floor(std::log10(t.step) + 1e-12));
    EXPECT_TRUE(std::fabs(mantissa - 1) < 1e-9 || std::fabs(mantissa - 2) < 1e-9 ||
                std::fabs(mantissa - 5) < 1e-9)
        << t.step;
  }
}

TEST(ReportFormat, TickLabelsHaveTheDecimalsTheStepNeeds) {
  EXPECT_EQ(TickLabel(0.85, 0.01), "0.85");
  EXPECT_EQ(TickLabel(0.8, 0.02), "0.80");
  EXPECT_EQ(TickLabel(1.5, 0.5), "1.5");
  EXPECT_EQ(TickLabel(3, 0.5), "3.0");
  EXPECT_EQ(TickLabel(6, 2), "6");
  EXPECT_EQ(TickLabel(20000, 10000), "20k");
  EXPECT_EQ(TickLabel(-0.0, 0.1), "0");
  EXPECT_EQ(TickLabel(1e-17, 0.1), "0");  // 0.1 * 3 - 0.3
  EXPECT_EQ(TickLabel(0, 5000), "0");
  EXPECT_EQ(TickLabel(1500, 500), "1,500");
}

TEST(ReportFormat, TextWidthEstimatesAreNoNarrowerThanChromiumDrawsThem) {
  // Widths measured in headless Chromium (Debian's, font-family sans-serif: DejaVu Sans) with
  // getBBox(); the layout relies on the estimate being at least as wide.
  struct Measured {
    const char* text;
    double font_size, width;
  };
  for (const Measured& m : {Measured{"switch to parameter servers", 11, 155.5},
                            Measured{"validation accuracy", 11, 107.8},
                            Measured{"kind=allreduce (baseline)", 11 * 1.1, 159.6},  // bold
                            Measured{"0.787 ± 0.072", 10, 72.0}, Measured{"WWWW MMMM", 11, 85.0},
                            Measured{"seconds since the run started", 11, 163.4},
                            Measured{"50k", 10, 18.7}, Measured{"0.885", 10, 28.6}}) {
    const double estimate = EstimateTextWidth(m.text, m.font_size);
    EXPECT_GE(estimate, m.width) << m.text;
    EXPECT_LE(estimate, m.width * 1.35) << m.text << ": so generous that charts waste room";
  }
  EXPECT_EQ(FitText("short", 10, 100), "short");
  const std::string cut = FitText("a rather long cell name that cannot fit", 10, 80);
  EXPECT_LE(EstimateTextWidth(cut, 10), 80);
  EXPECT_EQ(cut.substr(cut.size() - 3), "...");
}

TEST(ReportChart, LegendWrapsWithinItsWidthAndMarkersStayOutOfThePlotsText) {
  const LegendLayout one_row =
      Legend({{"a", "#000", LegendItem::Swatch::kLine, false}}, 50, 28, 450);
  EXPECT_DOUBLE_EQ(one_row.height, 16);
  std::vector<LegendItem> many;
  for (int i = 0; i < 12; ++i) {
    many.push_back(
        {absl::StrFormat("worker %d", i), PaletteColor(i), LegendItem::Swatch::kLine, false});
  }
  const LegendLayout rows = Legend(many, 50, 28, 450);
  EXPECT_GT(rows.height, 16);
  // Every entry starts inside [50, 450).
  std::regex x_attr("<text x='([0-9.]+)'");
  for (auto it = std::sregex_iterator(rows.svg.begin(), rows.svg.end(), x_attr);
       it != std::sregex_iterator(); ++it) {
    const double x = std::stod((*it)[1]);
    EXPECT_GE(x, 50);
    EXPECT_LT(x, 450);
  }
  // A marker is a line with a hover title and a legend entry; it has no text of its own.
  ChartSeries s;
  s.label = "loss";
  s.color = "#000";
  s.points = {{1, 0.5}, {2, 0.4}, {3, 0.3}};
  LineChartOptions o;
  o.title = "t";
  o.css_class = "k";
  const std::string svg =
      LineChart(o, {s}, {{2.5, "switch to parameter servers", "switch-marker", "#d62728", "h"}});
  EXPECT_EQ(Count(svg, "class='marker switch-marker'"), 1u);
  EXPECT_EQ(Count(svg, ">switch to parameter servers</text>"), 1u);  // the legend's, only
  EXPECT_EQ(Count(svg, "class='legend'"), 2u);
  EXPECT_EQ(Count(svg, "data-points='3'"), 1u);
  EXPECT_EQ(Count(svg, "class='point'"), 3u);
}

// A run of two workers that switched at epoch 14.93, 15.31 s after it started.
ReportInput SwitchedRun() {
  ReportInput in;
  in.title = "run <1>";
  in.run_dir = "runs/a<b>";
  in.job_yaml = "name: a<b>\n";
  for (int epoch = 1; epoch <= 20; ++epoch) {
    in.metrics.push_back({{"epoch", epoch},
                          {"phase", epoch <= 15 ? "allreduce" : "ps"},
                          {"val_loss", 0.5 - epoch * 0.01},
                          {"val_acc", 0.8 + epoch * 0.004},
                          {"train_loss", 0.6 - epoch * 0.02},
                          {"wall_s", 1.0 + epoch},
                          {"samples_per_s", 40000.0},
                          {"worker_samples_per_s", {20000.0, epoch <= 15 ? 20000.0 : 9000.0}}});
  }
  in.events = {
      {{"event", "run_started"},
       {"job", "configs/q.yaml"},
       {"overrides", {"training.epochs=20"}},
       {"wall_s", 0.003}},
      {{"event", "launched"}, {"process", "sharder"}, {"pid", 11}, {"wall_s", 0.004}},
      {{"event", "shards_written"},
       {"train_examples", 30000},
       {"method", "stratified"},
       {"shard_sizes", {15000, 15000}},
       {"seconds", 1.04},
       {"steps_per_epoch", 235},
       {"wall_s", 0.9}},
      {{"event", "launched"},
       {"process", "ps-0"},
       {"pid", 12},
       {"command", "/x/strata-ps --listen 127.0.0.1:0 --port-file p"},
       {"wall_s", 0.9}},
      {{"event", "launched"}, {"process", "worker-0"}, {"pid", 13}, {"wall_s", 0.91}},
      {{"event", "listening"}, {"process", "ps-0"}, {"wall_s", 1.0}},
      {{"event", "listening"}, {"process", "worker-0"}, {"wall_s", 1.1}},
      {{"event", "training_started"},
       {"mode", "allreduce"},
       {"steps_per_epoch", 235},
       {"worker_batch", 64},
       {"wall_s", 1.2}},
      {{"event", "switch_rule"}, {"epoch", 14}, {"s_percent", 0.4423}, {"fire", true}},
      {{"event", "switch_decided"},
       {"trigger", "empirical"},
       {"reason", "empirical rule: s = 0.4423% over the last 5 epochs < threshold 1%"},
       {"at_step", 3509},
       {"wall_s", 15.0}},
      {{"event", "switch_done"},
       {"at_step", 3509},
       {"epoch", 14.93},
       {"handover_s", 0.0172},
       {"wall_s", 15.31},
       {"verification", {{"weights_equal", true}}}},
      {{"event", "process_exited"},
       {"process", "worker-1"},
       {"how", "killed by signal 9"},
       {"wall_s", 17.0}},
      {{"event", "restart"},
       {"process", "worker-1"},
       {"restart", 1},
       {"of", 3},
       {"reason", "killed by signal 9"},
       {"wall_s", 17.1}},
      {{"event", "drift_detected"},
       {"window", 5},
       {"score", 0.4231},
       {"detail", {{"a", 1}}},
       {"wall_s", 18.0}},
      {{"event", "training_finished"}, {"steps", 9400}, {"wall_s", 21.5}},
  };
  in.summary = {{"name", "quickstart"},
                {"state", "succeeded"},
                {"arch", "mlp"},
                {"dataset", "fashion-mnist"},
                {"strategy", "switch (empirical, window 5, threshold 1%)"},
                {"workers", 2},
                {"parameter_servers", 1},
                {"epochs", 20},
                {"epochs_planned", 20},
                {"final_val_acc", 0.8847},
                {"final_val_loss", 0.36085048217773436},
                {"wall_s", 22.04},
                {"training_s", 20.3},
                {"switch_epoch", 14.93},
                {"switch_handover_s", 0.0172},
                {"samples_per_s", {{"allreduce", 45617.2}, {"ps", 48700.9}}},
                {"per_worker",
                 {{{"rank", 0}, {"steps", 4700}, {"samples_per_s", {{"allreduce", 22808.6}}}},
                  {{"rank", 1}, {"steps", 4700}, {"samples_per_s", {{"allreduce", 22808.6}}}}}},
                {"restarts", 1},
                {"resumes", 0},
                {"processes", {{{"name", "ps-0"}, {"pid", 12}, {"exit", "exited with code 0"}}}}};
  return in;
}

TEST(RunReport, TheSummaryIsWordsAndUnitsNotJson) {
  const ReportInput in = SwitchedRun();
  const std::vector<std::string> sentences = SummarySentences(in);
  ASSERT_EQ(sentences.size(), 3u);
  EXPECT_EQ(sentences[0], "Succeeded in 22.0 s (training 20.3 s).");
  EXPECT_EQ(sentences[1], "Final validation accuracy 88.47 % (loss 0.361) after 20 epochs.");
  EXPECT_EQ(sentences[2],
            "Switched to parameter servers at epoch 14.9 after 15.3 s, handover 17 ms.");
  const auto facts = SummaryFacts(in);
  ASSERT_GE(facts.size(), 4u);
  EXPECT_EQ(facts[0], std::make_pair(std::string("Job"),
                                     std::string("mlp on fashion-mnist; 2 workers, 1 parameter "
                                                 "server")));
  EXPECT_EQ(facts[2].second, "all-reduce 45,600 samples/s; parameter servers 48,700 samples/s");
  const std::string html = RenderReportHtml(in);
  EXPECT_EQ(html.find("0.36085048217773436"), std::string::npos);
  EXPECT_EQ(html.find("&quot;mlp&quot;"), std::string::npos);
  EXPECT_EQ(html.find("{&quot;"), std::string::npos);      // no JSON object anywhere
  EXPECT_EQ(html.find("--port-file"), std::string::npos);  // no command line
  EXPECT_NE(html.find("handover 17 ms"), std::string::npos);
}

TEST(RunReport, TheTimelineTellsThePhasesAndEventsInWords) {
  const ReportInput in = SwitchedRun();
  const std::vector<TimelineRow> rows = Timeline(in.events, in.summary);
  std::vector<std::string> what;
  for (const TimelineRow& r : rows) what.push_back(r.what);
  const std::vector<std::string> expected = {
      "Run started from configs/q.yaml with --set training.epochs=20",
      "Started sharder (pid 11)",
      "Sharded 30,000 training examples (stratified) into 2 shards in 1.04 s; 235 steps per "
      "epoch",
      "Started ps-0 and worker-0",
      "ps-0 and worker-0 are listening",
      "Training started in all-reduce: 235 steps per epoch, 64 examples per worker step",
      "Switch decided: empirical rule: s = 0.4423% over the last 5 epochs < threshold 1%; "
      "hand-over at step 3,509",
      "Switched to parameter servers at step 3,509 (epoch 14.9), handover 17 ms; the servers' "
      "weights equal the last all-reduce model",
      "worker-1 killed by signal 9",
      "Restarted worker-1 (restart 1 of 3)",
      "Drift detected: score 0.4231, window 5",  // an event this version does not know
      "Training finished: 9,400 steps over all workers",
      "Run succeeded after 22.0 s",  // from summary.json: the report precedes run_finished
  };
  EXPECT_EQ(what, expected);
  EXPECT_EQ(rows[0].phase, "start-up");
  EXPECT_EQ(rows[5].phase, "all-reduce");  // training started
  EXPECT_EQ(rows[6].phase, "all-reduce");  // the switch decided
  EXPECT_EQ(rows[7].phase, "parameter servers");
  EXPECT_DOUBLE_EQ(rows[7].wall_s, 15.31);
}

TEST(RunReport, FiveChartsWithTheirDataAndTheSwitchOnEach) {
  const std::string html = RenderReportHtml(SwitchedRun());
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_EQ(Count(html, "<svg"), 5u);
  for (const char* kind :
       {"loss-epoch", "accuracy-epoch", "loss-time", "accuracy-time", "throughput-time"}) {
    EXPECT_EQ(Count(html, absl::StrCat("class='chart ", kind, "'")), 1u) << kind;
  }
  EXPECT_EQ(Count(html, "class='marker switch-marker'"), 5u);
  // Restarts and drift marks have no epoch: on the three charts against wall time.
  EXPECT_EQ(Count(html, "class='marker restart-marker'"), 3u);
  EXPECT_EQ(Count(html, "class='marker drift-marker'"), 3u);
  // Loss: validation and training in two charts; accuracy in two; one series per worker.
  EXPECT_EQ(Count(html, "data-series='validation loss' data-points='20'"), 2u);
  EXPECT_EQ(Count(html, "data-series='training loss' data-points='20'"), 2u);
  EXPECT_EQ(Count(html, "data-series='validation accuracy' data-points='20'"), 2u);
  EXPECT_EQ(Count(html, "data-series='worker 0' data-points='20'"), 1u);
  EXPECT_EQ(Count(html, "data-series='worker 1' data-points='20'"), 1u);
  EXPECT_EQ(Count(html, "<script"), 0u);
  EXPECT_EQ(Count(html, "http"), Count(html, "http://www.w3.org/2000/svg"));  // nothing fetched
  // Text from the run is escaped, never markup.
  EXPECT_EQ(html.find("a<b>"), std::string::npos);
  EXPECT_NE(html.find("a&lt;b&gt;"), std::string::npos);
  EXPECT_EQ(html.find("run <1>"), std::string::npos);
}

TEST(RunReport, ItReloadsItselfOnlyWhileTheRunGoesOn) {
  ReportInput running;
  running.status = {{"state", "running"},
                    {"epoch", 3.42},
                    {"epochs", 8},
                    {"phase", "allreduce"},
                    {"samples_per_s", 34012.5},
                    {"wall_s", 4.2},
                    {"last_val_acc", 0.8501},
                    {"last_val_loss", 0.4351}};
  EXPECT_FALSE(RunHasEnded(running));
  std::string html = RenderReportHtml(running);
  EXPECT_NE(
      html.find(absl::StrFormat("<meta http-equiv='refresh' content='%d'>", kReportRefreshSeconds)),
      std::string::npos);
  EXPECT_NE(html.find("Running: epoch 3.42 of 8 in all-reduce, 34,000 samples/s, 4.20 s since "
                      "the start."),
            std::string::npos)
      << html;
  EXPECT_NE(html.find("Last evaluation: validation accuracy 85.01 %, loss 0.435."),
            std::string::npos);

  ReportInput ended = SwitchedRun();
  EXPECT_TRUE(RunHasEnded(ended));
  EXPECT_EQ(RenderReportHtml(ended).find("http-equiv='refresh'"), std::string::npos);
  // A run that ended without a summary (its orchestrator could not write one) stops too.
  ReportInput failed;
  failed.status = {{"state", "failed"}};
  EXPECT_TRUE(RunHasEnded(failed));
  EXPECT_EQ(RenderReportHtml(failed).find("http-equiv='refresh'"), std::string::npos);
}

TEST(RunReport, AResumedRunIsMarkedWhereItWasTakenUpOnEveryChart) {
  ReportInput in;
  in.title = "resumed";
  in.metrics = {
      {{"epoch", 1}, {"phase", "allreduce"}, {"val_loss", 0.5}, {"val_acc", 0.8}, {"wall_s", 3.0}},
      {{"epoch", 4},
       {"phase", "allreduce"},
       {"val_loss", 0.4},
       {"val_acc", 0.85},
       {"wall_s", 9.0}}};
  in.events = {{{"event", "training_started"}, {"steps_per_epoch", 32}, {"wall_s", 1.0}},
               {{"event", "resumed"}, {"steps", {64, 64}}, {"wall_s", 5.0}}};
  const std::string html = RenderReportHtml(in);
  // The four charts with data; the throughput chart has none (no worker_samples_per_s).
  EXPECT_EQ(Count(html, "class='marker resume-marker'"), 4u) << html;
  EXPECT_EQ(Count(html, "class='marker switch-marker'"), 0u);
  EXPECT_NE(html.find("not recorded by this run"), std::string::npos);
  // On the loss chart against epoch the marker is at epoch 2 (64 steps of 32): where the tick
  // labelled 2 is.
  const size_t at = html.find("class='chart loss-epoch'");
  const std::string loss = html.substr(at, html.find("</svg>", at) - at);
  std::smatch tick, marker;
  ASSERT_TRUE(std::regex_search(loss, tick,
                                std::regex("<text x='([0-9.]+)'[^>]*class='tick "
                                           "x-tick'>2(\\.0)?</text>")));
  ASSERT_TRUE(std::regex_search(loss, marker,
                                std::regex("<line x1='([0-9.]+)'[^>]*class='marker "
                                           "resume-marker'")));
  EXPECT_EQ(tick[1], marker[1]);
  EXPECT_NE(html.find("Taken up again by strata resume from step 64"), std::string::npos);
}

TEST(RunReport, ARunWithoutEventsOrMetricsStillRenders) {
  ReportInput in;
  in.title = "empty";
  const std::string html = RenderReportHtml(in);
  EXPECT_EQ(html.find("switch-marker"), std::string::npos);
  EXPECT_NE(html.find("no data yet"), std::string::npos);
  EXPECT_NE(html.find("The run has not written its status yet."), std::string::npos);
  EXPECT_NE(html.find("No evaluation yet."), std::string::npos);
}

TEST(RunReport, ValuesOfUnexpectedTypesAreLeftOutNotTrustedOrFatal) {
  ReportInput in;
  in.metrics = {
      {{"epoch", "one"}, {"worker_samples_per_s", "fast"}},
      {{"epoch", 2}, {"val_acc", 0.8}, {"wall_s", 3.0}, {"worker_samples_per_s", {1.0, "x"}}}};
  in.events = {{{"event", "switch_rule"}, {"epoch", 1}, {"fire", "no"}},
               {{"event", "launched"}, {"process", "ps-0"}, {"pid", "twelve"}},
               {{"event", "switch_done"}, {"verification", "fine"}}};
  in.summary = {{"state", "succeeded"},
                {"per_worker", {{{"rank", "a"}, {"samples_per_s", 3}}}},
                {"processes", {{{"name", "ps-0"}, {"pid", "x"}}}},
                {"switch_epoch", "late"},
                {"samples_per_s", "many"}};
  const std::string html = RenderReportHtml(in);
  EXPECT_NE(html.find("Started ps-0</td>"), std::string::npos);
  EXPECT_NE(html.find("data-series='worker 0' data-points='1'"), std::string::npos);
  EXPECT_EQ(html.find("data-series='worker 1'"), std::string::npos);
}

TEST(RunReport, WriteRunReportRefusesARecordItCannotReadNamingTheRun) {
  std::string dir_template = ::testing::TempDir() + "/report-XXXXXX";
  const std::string dir = ::mkdtemp(dir_template.data());
  EXPECT_EQ(WriteRunReport(dir).code(), absl::StatusCode::kNotFound);  // no job.yaml
  ASSERT_TRUE(WriteFileAtomic(dir + "/job.yaml", "name: x\n").ok());
  ASSERT_TRUE(WriteFileAtomic(dir + "/events.jsonl", "3\n{\"event\": \"run_started\"}\n").ok());
  ASSERT_TRUE(WriteRunReport(dir).ok());  // a line that is no object is left out
  EXPECT_NE(ReadFile(dir + "/report.html")->find("Run started"), std::string::npos);
  // The typed reader of switch_done takes a step of another type for an error: refused, named.
  ASSERT_TRUE(
      WriteFileAtomic(dir + "/events.jsonl", "{\"event\": \"switch_done\", \"at_step\": \"x\"}\n")
          .ok());
  const absl::Status s = WriteRunReport(dir);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(s.message().find(dir), std::string::npos) << s.message();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace strata
