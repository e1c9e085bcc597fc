#include "orchestrator/sweep/sweep_report.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>

#include "orchestrator/record/report_chart.h"
#include "orchestrator/record/report_format.h"

namespace strata::sweep {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Numbers in the tables: four significant digits, thousands separated.
std::string Num(double v) { return FormatSignificant(v, 4); }
std::string Num(const std::optional<double>& v) { return v ? Num(*v) : "--"; }

std::string CellLabel(const SweepSpec& spec, const std::string& cell) {
  return cell == spec.baseline ? absl::StrCat(cell, " (baseline)") : cell;
}

// What a point-and-interval chart shows of one metric. An interval is drawn only within the
// values the metric can take (`lo` to `hi`): with 2 runs a t-based interval of a wall time can
// reach below zero; the chart cuts it there and leaves that end without its cap, the text gives
// the whole interval.
struct ForestView {
  const char* metric;
  const char* title;
  const char* axis;
  const char* unit;  // after a value ("2.22 s"), or ""
  const char* css_class;
  const char* none;  // a cell without a value
  double lo, hi;
};

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr ForestView kAccuracy = {"final_val_acc",
                                  "Final validation accuracy: mean and 95% interval",
                                  "final validation accuracy",
                                  "",
                                  "forest-accuracy",
                                  "no succeeded run",
                                  0,
                                  1};
constexpr ForestView kWall = {"wall_s",      "Wall time: mean and 95% interval",
                              "seconds",     " s",
                              "forest-wall", "no succeeded run",
                              0,             kInf};
constexpr ForestView kTarget = {"time_to_target_s",
                                "Time to the target accuracy: mean and 95% interval",
                                "seconds since the run started",
                                " s",
                                "forest-target",
                                "target not reached",
                                0,
                                kInf};
constexpr ForestView kSwitch = {"switch_epoch",  "Switch epoch: mean and 95% interval",
                                "epoch",         "",
                                "forest-switch", "no switch",
                                0,               kInf};

// A stream sweep's (strategy stream): its jobs have no validation set, epochs or switch.
constexpr ForestView kEventsPerS = {"events_per_s",
                                    "Events trained per second: mean and 95% interval",
                                    "events/s",
                                    "",
                                    "forest-events",
                                    "no succeeded run",
                                    0,
                                    kInf};
constexpr ForestView kPrequential = {"prequential_accuracy",
                                     "Accuracy before training: mean and 95% interval",
                                     "accuracy before training (test-then-train)",
                                     "",
                                     "forest-prequential",
                                     "no succeeded run",
                                     0,
                                     1};
constexpr ForestView kRecovery = {"events_to_recover",
                                  "Events to recover from the drift: mean and 95% interval",
                                  "events after the drift",
                                  "",
                                  "forest-recovery",
                                  "never recovered",
                                  0,
                                  kInf};

// Decimals for values on an axis of ticks `step` apart: one more than the ticks need, so that
// 0.855 and 0.863 read apart on an axis of 0.01 steps.
int ValueDecimals(double step) {
  return std::max(0, static_cast<int>(std::ceil(-std::log10(step) - 1e-9)) + 1);
}

// The runs that count for a metric of a cell: succeeded, with a finite value (as Summarize).
std::vector<const RunResult*> CountedRuns(const std::vector<RunResult>& results,
                                          const std::string& cell, const std::string& metric) {
  std::vector<const RunResult*> out;
  for (const RunResult& r : results) {
    if (r.cell != cell || r.state != "succeeded") continue;
    if (auto v = MetricValue(r, metric); v && std::isfinite(*v)) out.push_back(&r);
  }
  return out;
}

const CellMetric* RowOf(const SweepSummary& summary, const std::string& cell,
                        const std::string& metric) {
  for (const CellMetric& m : summary.rows) {
    if (m.cell == cell && m.metric == metric) return &m;
  }
  return nullptr;
}

// What the value column says of a cell: "0.787 ± 0.072", "0.754 s (n = 1: no interval)", or
// the view's word for a cell without a value.
std::string ValueText(const CellMetric* row, int decimals, const ForestView& view) {
  if (row == nullptr || row->stats.n == 0) return view.none;
  const double mean = row->stats.mean, half = row->ci95_half_width;
  if (!std::isfinite(half)) {
    return absl::StrCat(FormatFixed(mean, decimals), view.unit, " (n = ", row->stats.n,
                        ": no interval)");
  }
  // A half-width below the mean's last decimal still shows as a number, not as 0.
  const std::string half_text = FormatFixed(half, decimals) == FormatFixed(0, decimals)
                                    ? FormatSignificant(half, 1)
                                    : FormatFixed(half, decimals);
  return absl::StrCat(FormatFixed(mean, decimals), " ± ", half_text, view.unit);
}

// One row per cell: every run a ring, the mean a dot, its 95% interval a bar, the value written
// at the right; the baseline's mean a dashed line across.
std::string ForestChart(const SweepSpec& spec, const std::vector<RunResult>& results,
                        const SweepSummary& summary, const ForestView& view) {
  constexpr double W = 600, kRow = 24, kValueMax = 150, kNameMax = 200, kLegendTop = 28;
  const std::string metric = view.metric;
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  auto add = [&](double v) {
    if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
  };
  for (const Cell& cell : spec.cells) {
    for (const RunResult* r : CountedRuns(results, cell.name, metric))
      add(*MetricValue(*r, metric));
    if (const CellMetric* row = RowOf(summary, cell.name, metric); row && row->stats.n > 0) {
      add(row->stats.mean);
      if (std::isfinite(row->ci95_half_width)) {
        add(std::max(view.lo, row->stats.mean - row->ci95_half_width));
        add(std::min(view.hi, row->stats.mean + row->ci95_half_width));
      }
    }
  }
  const std::vector<LegendItem> legend = {
      {"mean", "#444", LegendItem::Swatch::kDot, false},
      {"95% interval of the mean", "#222", LegendItem::Swatch::kLine, false},
      {"one run", "#444", LegendItem::Swatch::kRing, false},
      {"baseline mean", "#555", LegendItem::Swatch::kDashed, false}};
  const LegendLayout legend_layout = Legend(legend, 8, kLegendTop, W - 8);
  const double T = kLegendTop + legend_layout.height + 10;
  const double PB = T + kRow * static_cast<double>(spec.cells.size());
  if (!std::isfinite(lo)) {
    return absl::StrCat(
        ChartOpen(W, T + 40, absl::StrCat("forest ", view.css_class), view.title),
        absl::StrFormat("<text x='8' y='%.0f' font-size='13' fill='#666' "
                        "class='empty'>%s</text></svg>",
                        T + 16, HtmlEscape(absl::StrCat("No cell has a value: ", view.none))));
  }
  std::string svg = ChartOpen(W, PB + 44, absl::StrCat("forest ", view.css_class), view.title);
  svg += legend_layout.svg;
  double name_width = 0;
  for (const Cell& cell : spec.cells) {
    const double font = cell.name == spec.baseline ? 11 * 1.1 : 11;
    name_width = std::max(name_width, EstimateTextWidth(CellLabel(spec, cell.name), font));
  }
  name_width = std::min(name_width, kNameMax);
  const double P0 = 8 + name_width + 12;
  // The value column as wide as its texts need (their decimals follow the ticks, which follow
  // the plot's width: measured once with the widest column, then fitted), the plot the rest.
  double value_width = 0;
  const int first_decimals =
      ValueDecimals(HorizontalAxisTicks(lo, hi, W - kValueMax - 12 - P0, 10).step);
  for (const Cell& cell : spec.cells) {
    value_width = std::max(
        value_width,
        EstimateTextWidth(ValueText(RowOf(summary, cell.name, metric), first_decimals, view), 10));
  }
  // Slack for a decimal more on each number, should the narrower column's ticks be finer.
  value_width = std::min(value_width + 16, kValueMax);
  const double P1 = W - value_width - 12;
  const AxisTicks ticks = HorizontalAxisTicks(lo, hi, P1 - P0, 10);
  const int decimals = ValueDecimals(ticks.step);
  auto px = [&](double v) { return P0 + (v - ticks.lo()) / (ticks.hi() - ticks.lo()) * (P1 - P0); };
  auto value = [&](double v) { return absl::StrCat(FormatFixed(v, decimals), view.unit); };

  for (double v : ticks.values) {
    absl::StrAppendFormat(&svg,
                          "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='#eee'/>"
                          "<text x='%.1f' y='%.1f' font-size='10' text-anchor='middle' "
                          "class='tick x-tick'>%s</text>",
                          px(v), T, px(v), PB, px(v), PB + 18, TickLabel(v, ticks.step));
  }
  absl::StrAppendFormat(&svg,
                        "<rect x='%.1f' y='%.1f' width='%.1f' height='%.1f' fill='none' "
                        "stroke='#999'/><text x='%.1f' y='%.1f' font-size='11' "
                        "text-anchor='middle' class='axis-label'>%s</text>",
                        P0, T, P1 - P0, PB - T, (P0 + P1) / 2, PB + 36, HtmlEscape(view.axis));
  if (const CellMetric* base = RowOf(summary, spec.baseline, metric); base && base->stats.n > 0) {
    absl::StrAppendFormat(&svg,
                          "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='#555' "
                          "stroke-dasharray='5,4' class='baseline-line'><title>baseline %s: "
                          "mean %s</title></line>",
                          px(base->stats.mean), T, px(base->stats.mean), PB,
                          HtmlEscape(spec.baseline), value(base->stats.mean));
  }
  for (size_t i = 0; i < spec.cells.size(); ++i) {
    const std::string& cell = spec.cells[i].name;
    const bool baseline = cell == spec.baseline;
    const std::string& color = PaletteColor(i);
    const double cy = T + kRow * (static_cast<double>(i) + 0.5);
    const std::vector<const RunResult*> runs = CountedRuns(results, cell, metric);
    const CellMetric* row = RowOf(summary, cell, metric);
    const int n = row ? row->stats.n : 0;
    absl::StrAppendFormat(&svg, "<g class='cell-row%s' data-cell='%s' data-n='%d'>",
                          baseline ? " baseline" : "", HtmlEscape(cell), n);
    absl::StrAppendFormat(
        &svg,
        "<text x='8' y='%.1f' font-size='11'%s fill='%s' class='cell-name'>%s<title>%s</title>"
        "</text><line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='#f0f0f0'/>",
        cy + 4, baseline ? " font-weight='bold'" : "", color,
        HtmlEscape(FitText(CellLabel(spec, cell), baseline ? 11 * 1.1 : 11, kNameMax)),
        HtmlEscape(CellLabel(spec, cell)), P0, cy, P1, cy);
    for (size_t k = 0; k < runs.size(); ++k) {
      // Spread up and down a little, so that equal values stay visible.
      const double jitter = (static_cast<double>(k % 3) - 1) * 5;
      const double v = *MetricValue(*runs[k], metric);
      absl::StrAppendFormat(&svg,
                            "<circle cx='%.1f' cy='%.1f' r='3' fill='none' stroke='%s' "
                            "stroke-opacity='0.8' class='run-point'><title>%s seed %d: %s"
                            "</title></circle>",
                            px(v), cy + jitter, color, HtmlEscape(cell), runs[k]->seed, value(v));
    }
    if (n > 0) {
      const double mean = row->stats.mean, half = row->ci95_half_width;
      if (std::isfinite(half)) {
        // An end cut at the edge of the metric's values has no cap.
        const bool cut_low = mean - half < view.lo, cut_high = mean + half > view.hi;
        const double a = px(std::max(view.lo, mean - half));
        const double b = px(std::min(view.hi, mean + half));
        std::string d = absl::StrFormat("M%.1f,%.1f L%.1f,%.1f", a, cy, b, cy);
        if (!cut_low) absl::StrAppendFormat(&d, " M%.1f,%.1f L%.1f,%.1f", a, cy - 4, a, cy + 4);
        if (!cut_high) absl::StrAppendFormat(&d, " M%.1f,%.1f L%.1f,%.1f", b, cy - 4, b, cy + 4);
        absl::StrAppendFormat(&svg,
                              "<path d='%s' stroke='#222' stroke-width='1.5' class='interval'/>",
                              d);
      }
      absl::StrAppendFormat(&svg,
                            "<circle cx='%.1f' cy='%.1f' r='5' fill='%s' stroke='#fff' "
                            "class='mean-point'><title>%s: mean %s, n = %d</title></circle>",
                            px(mean), cy, color, HtmlEscape(cell), value(mean), n);
    }
    absl::StrAppendFormat(
        &svg, "<text x='%.1f' y='%.1f' font-size='10' class='value'>%s</text></g>", P1 + 12, cy + 4,
        HtmlEscape(FitText(ValueText(row, decimals, view), 10, value_width)));
  }
  return svg + "</svg>";
}

std::string AccuracyCurves(const SweepSpec& spec, const std::vector<RunResult>& results) {
  std::vector<ChartSeries> series;
  LineChartOptions o;
  o.title = "Validation accuracy against wall time, one line per run";
  o.css_class = "curves";
  o.x_label = "seconds since the run started";
  o.width = 600;
  o.x_from_zero = true;
  o.empty_text = "no run has an evaluation yet";
  for (size_t c = 0; c < spec.cells.size(); ++c) {
    const bool baseline = spec.cells[c].name == spec.baseline;
    o.extra_legend.push_back({CellLabel(spec, spec.cells[c].name), PaletteColor(c),
                              LegendItem::Swatch::kLine, baseline});
    for (const RunResult& r : results) {
      if (r.cell != spec.cells[c].name || r.val_acc_by_wall_s.empty()) continue;
      ChartSeries s;
      s.label = absl::StrCat(r.cell, " seed ", r.seed);
      s.hover = s.label;
      s.color = PaletteColor(c);
      s.points = r.val_acc_by_wall_s;
      s.dots = false;
      s.stroke_width = baseline ? 1.8 : 1.2;
      s.in_legend = false;
      s.extra_class = "run-curve";
      series.push_back(std::move(s));
    }
  }
  return LineChart(o, series, {});
}

std::string Td(const std::string& text, bool numeric = false) {
  return absl::StrCat(numeric ? "<td class='n'>" : "<td>", HtmlEscape(text), "</td>");
}

}  // namespace

std::string MeanIntervalText(const CellMetric& row) {
  if (row.stats.n == 0) return "no runs";
  if (!std::isfinite(row.ci95_half_width))
    return absl::StrCat("n = ", row.stats.n, ": no interval");
  return absl::StrCat(Num(row.stats.mean - row.ci95_half_width), " to ",
                      Num(row.stats.mean + row.ci95_half_width));
}

std::string BootstrapIntervalText(const VarianceComparison& v) {
  if (!v.ratio) {
    if (v.n < 2) return absl::StrCat("n = ", v.n, " in ", v.cell, ": no interval");
    if (v.n_baseline < 2) {
      return absl::StrCat("n = ", v.n_baseline, " in the baseline: no interval");
    }
    return "no interval: the baseline's runs are all equal";
  }
  auto end = [](double x) { return std::isinf(x) ? std::string("infinity") : Num(x); };
  std::string text = absl::StrCat(end(v.ratio->ci_low), " to ", end(v.ratio->ci_high));
  if (std::isinf(v.ratio->ci_high)) {
    absl::StrAppend(&text,
                    " (unbounded: in some resamples the baseline's runs were all equal; more "
                    "runs narrow it)");
  }
  return text;
}

std::string RenderSweepReportHtml(const SweepSpec& spec, const std::vector<RunResult>& results,
                                  const SweepSummary& summary) {
  int succeeded = 0;
  for (const RunResult& r : results) succeeded += r.state == "succeeded";
  std::string html = absl::StrCat(
      "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>Strata sweep ",
      HtmlEscape(spec.name),
      "</title><style>body{font-family:sans-serif;margin:24px;color:#222;max-width:1240px}"
      "table{border-collapse:collapse;margin:6px 0}td,th{border:1px solid #ccc;padding:3px 8px;"
      "text-align:left;font-size:13px;vertical-align:top}th{background:#f4f4f4}"
      "td.n{text-align:right;white-space:nowrap;font-variant-numeric:tabular-nums}tr.baseline "
      "td{font-weight:bold}"
      ".charts{display:flex;flex-wrap:wrap;gap:16px}"
      ".note{color:#555;font-size:13px;max-width:60em}</style></head><body><h1>Strata sweep ",
      HtmlEscape(spec.name), "</h1>");
  absl::StrAppendFormat(
      &html,
      "<p>Base job <code>%s</code>; %d cell(s) x %d seed(s); %d of %d run(s) succeeded. Baseline "
      "cell: <b>%s</b>.%s</p>",
      HtmlEscape(spec.base_path), spec.cells.size(), spec.seeds.size(), succeeded, results.size(),
      HtmlEscape(spec.baseline),
      spec.target_accuracy ? absl::StrCat(" Target accuracy ", *spec.target_accuracy, ".") : "");
  html += "<h2>Charts</h2><div class='charts'>";
  const bool stream =
      std::any_of(results.begin(), results.end(), [](const RunResult& r) { return r.stream; });
  if (stream) {
    html += ForestChart(spec, results, summary, kPrequential);
    html += ForestChart(spec, results, summary, kEventsPerS);
    html += ForestChart(spec, results, summary, kWall);
    // Only where the base job produces a drift: a run without one has no recovery to show.
    if (std::any_of(results.begin(), results.end(),
                    [](const RunResult& r) { return r.events_to_recover.has_value(); })) {
      html += ForestChart(spec, results, summary, kRecovery);
    }
  } else {
    html += AccuracyCurves(spec, results);
    html += ForestChart(spec, results, summary, kAccuracy);
    html += ForestChart(spec, results, summary, kWall);
    if (spec.target_accuracy) html += ForestChart(spec, results, summary, kTarget);
    html += ForestChart(spec, results, summary, kSwitch);
  }
  html +=
      "</div><p class='note'>Dots: the mean of a cell's succeeded runs; bars: its t-based 95% "
      "confidence interval (none with fewer than 2 runs), cut where the values end (a time below "
      "0, an accuracy above 1) and then without its cap; rings: the runs themselves. The axes "
      "are fitted to the values, not drawn from zero.</p>";

  html +=
      "<h2>Summary</h2><table class='summary'><tr><th>metric</th><th>cell</th><th>n</th>"
      "<th>mean</th><th>95% interval of the mean</th><th>sd</th><th>min</th><th>max</th>"
      "<th>ratio to baseline</th></tr>";
  for (const std::string& metric : summary.metrics) {
    for (const CellMetric& row : summary.rows) {
      if (row.metric != metric) continue;
      const bool n = row.stats.n > 0;
      absl::StrAppend(
          &html, row.cell == spec.baseline ? "<tr class='baseline'>" : "<tr>", Td(HumanKey(metric)),
          Td(CellLabel(spec, row.cell)), Td(absl::StrCat(row.stats.n), true),
          Td(n ? Num(row.stats.mean) : "--", true), Td(MeanIntervalText(row), true),
          Td(row.stats.n > 1 ? Num(row.stats.sd) : "--", true),
          Td(n ? Num(row.stats.min) : "--", true), Td(n ? Num(row.stats.max) : "--", true),
          Td(Num(row.ratio_to_baseline), true), "</tr>");
    }
  }
  html += "</table><h2>Variance against the baseline</h2>";
  if (summary.variance.empty()) {
    html += "<p>Only one cell: nothing to compare.</p>";
  } else {
    html +=
        "<table class='variance'><tr><th>cell</th><th>metric</th><th>runs (cell / baseline)</th>"
        "<th>variance ratio</th><th>95% bootstrap interval</th><th>Brown-Forsythe F</th>"
        "<th>p</th><th>verdict</th></tr>";
    for (const VarianceComparison& v : summary.variance) {
      absl::StrAppend(&html, "<tr>", Td(v.cell), Td(HumanKey(v.metric)),
                      Td(absl::StrCat(v.n, " / ", v.n_baseline), true),
                      Td(v.ratio ? Num(v.ratio->ratio) : "--", true), Td(BootstrapIntervalText(v)),
                      Td(v.test ? Num(v.test->f) : "--", true),
                      Td(v.test ? Num(v.test->p) : "--", true), Td(v.verdict), "</tr>");
    }
    html += "</table>";
  }
  absl::StrAppend(
      &html, "<p class='note'>Variance ratio = Var(cell) / Var(baseline) of the ",
      stream ? "accuracy before training" : "final validation accuracy",
      "; below 1 the cell varies less. With 5 runs per arm a classic F test only flags "
      "ratios beyond about 9.6 (F<sub>0.975; 4, 4</sub>); with 10 runs, beyond about 4.0; with "
      "20, beyond about 2.5.</p>");

  html += "<h2>Runs</h2><table class='runs'><tr><th>cell</th><th>seed</th><th>state</th>"
          "<th>wall time</th>";
  html += stream ? "<th>events/s</th><th>accuracy before training</th><th>events to recover</th>"
                   "</tr>"
                 : "<th>final val accuracy</th><th>time to target</th><th>switch epoch</th></tr>";
  for (const RunResult& r : results) {
    auto seconds = [](const std::optional<double>& v, const char* none) {
      return v ? FormatSeconds(*v) : std::string(none);
    };
    absl::StrAppend(&html, "<tr>", Td(CellLabel(spec, r.cell)), Td(absl::StrCat(r.seed), true),
                    Td(r.state), Td(seconds(r.wall_s, "--"), true));
    if (stream) {
      const bool done = r.state == "succeeded";
      absl::StrAppend(
          &html, Td(r.events_per_s ? FormatFixed(*r.events_per_s, 0) : "--", true),
          Td(Num(r.prequential_accuracy), true),
          Td(r.events_to_recover ? FormatFixed(*r.events_to_recover, 0)
             : done && r.drift  ? "never"
                                : "--",
             true),
          "</tr>");
    } else {
      absl::StrAppend(
          &html, Td(Num(r.final_val_acc), true),
          Td(spec.target_accuracy ? seconds(r.time_to_target_s, "not reached") : "--", true),
          Td(r.switch_epoch ? FormatFixed(*r.switch_epoch, 2) : "no switch", true), "</tr>");
    }
  }
  html += "</table></body></html>\n";
  return html;
}

}  // namespace strata::sweep
