#include "orchestrator/record/report.h"

#include <absl/strings/str_format.h>
#include <gtest/gtest.h>

#include "orchestrator/plan/job_checks.h"

namespace strata {
namespace {

TEST(RenderReportHtml, ChartsTheCurvesAndMarksTheSwitch) {
  ReportInput in;
  in.title = "run <1>";
  in.job_yaml = "name: a<b>\n";
  in.metrics = {{{"epoch", 1},
                 {"phase", "allreduce"},
                 {"val_loss", 0.5},
                 {"val_acc", 0.8},
                 {"train_loss", 0.6},
                 {"wall_s", 3.0}},
                {{"epoch", 2},
                 {"phase", "ps"},
                 {"val_loss", 0.4},
                 {"val_acc", 0.85},
                 {"train_loss", 0.45},
                 {"wall_s", 5.0}}};
  in.events = {{{"event", "switch_done"}, {"epoch", 1.5}, {"wall_s", 4.0}, {"handover_s", 0.05}}};
  in.summary = {{"final_val_acc", 0.85}};
  const std::string html = RenderReportHtml(in);
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  // Four charts: loss and accuracy, against epoch and against wall time, each with the marker.
  size_t charts = 0, markers = 0;
  for (size_t at = html.find("<svg"); at != std::string::npos; at = html.find("<svg", at + 1))
    ++charts;
  for (size_t at = html.find("switch-marker"); at != std::string::npos;
       at = html.find("switch-marker", at + 1)) {
    ++markers;
  }
  EXPECT_EQ(charts, 4u);
  EXPECT_EQ(markers, 4u);
  EXPECT_NE(html.find("Loss vs wall time"), std::string::npos);
  EXPECT_NE(html.find("final_val_acc"), std::string::npos);
  // Text from the run is escaped, never markup.
  EXPECT_EQ(html.find("a<b>"), std::string::npos);
  EXPECT_NE(html.find("a&lt;b&gt;"), std::string::npos);
  EXPECT_EQ(html.find("run <1>"), std::string::npos);
}

// How many chart elements carry `css_class`.
size_t CountClass(const std::string& html, const std::string& css_class) {
  size_t n = 0;
  for (size_t at = html.find("class='" + css_class + "'"); at != std::string::npos;
       at = html.find("class='" + css_class + "'", at + 1)) {
    ++n;
  }
  return n;
}

TEST(RenderReportHtml, AResumedRunIsMarkedWhereItWasTakenUpOnEveryChart) {
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
  EXPECT_EQ(CountClass(html, "resume-marker"), 4u) << html;
  EXPECT_EQ(CountClass(html, "switch-marker"), 0u);
  // On the epoch charts at epoch 2 (64 steps of 32): a third of the way from epoch 1 to 4.
  const double L = 56, W = 460, R = 16;
  const std::string at_epoch_2 = absl::StrFormat("x1='%.1f'", L + (2.0 - 1) / 3 * (W - L - R));
  EXPECT_NE(html.find(at_epoch_2 + " y1="), std::string::npos) << at_epoch_2;
}

TEST(RenderReportHtml, RunWithoutSwitchOrMetricsStillRenders) {
  ReportInput in;
  in.title = "empty";
  const std::string html = RenderReportHtml(in);
  EXPECT_EQ(html.find("switch-marker"), std::string::npos);
  EXPECT_NE(html.find("no data yet"), std::string::npos);
  EXPECT_NE(html.find("still going"), std::string::npos);
}

}  // namespace
}  // namespace strata
