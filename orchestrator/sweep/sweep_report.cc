#include "orchestrator/sweep/sweep_report.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>

#include "orchestrator/record/report.h"

namespace strata::sweep {
namespace {

constexpr double kW = 520, kH = 300, kL = 60, kR = 16, kT = 28, kB = 64;

// One colour per cell (the tab10 palette of the run report), repeating after ten.
std::string CellColor(size_t i) {
  static const char* kPalette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                   "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
  return kPalette[i % 10];
}

std::string Short(double v) {
  if (!std::isfinite(v)) return "--";
  return absl::StrFormat("%.4g", v);
}

// A value range padded for drawing; `from_zero` keeps 0 in it (bars start at 0).
struct Range {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  void Add(double v) {
    if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
  }
  bool Empty() const { return !(lo <= hi); }
  void Pad(bool from_zero) {
    if (from_zero) lo = std::min(lo, 0.0), hi = std::max(hi, 0.0);
    if (hi - lo < 1e-12) lo -= 0.5, hi += 0.5;
    const double pad = (hi - lo) * 0.05;
    if (!(from_zero && lo == 0)) lo -= pad;
    hi += pad;
  }
};

// The frame of a chart: title, plot box, y ticks; x ticks when the x axis is numeric.
struct Frame {
  Range x, y;
  double PX(double v) const { return kL + (v - x.lo) / (x.hi - x.lo) * (kW - kL - kR); }
  double PY(double v) const { return kT + (1 - (v - y.lo) / (y.hi - y.lo)) * (kH - kT - kB); }
};

std::string Open(const std::string& title, const std::string& css_class) {
  return absl::StrFormat(
      "<svg xmlns='http://www.w3.org/2000/svg' width='%.0f' height='%.0f' class='chart %s'>"
      "<text x='%.0f' y='18' font-size='14' font-weight='bold'>%s</text>",
      kW, kH, css_class, kL, HtmlEscape(title));
}

std::string Axes(const Frame& f, const std::string& x_label, const std::string& y_label,
                 bool x_ticks) {
  std::string svg = absl::StrFormat(
      "<rect x='%.1f' y='%.1f' width='%.1f' height='%.1f' fill='none' stroke='#999'/>", kL, kT,
      kW - kL - kR, kH - kT - kB);
  for (int i = 0; i <= 4; ++i) {
    const double yv = f.y.lo + (f.y.hi - f.y.lo) * i / 4;
    absl::StrAppendFormat(&svg,
                          "<text x='%.1f' y='%.1f' font-size='10' text-anchor='end'>%.3g</text>",
                          kL - 4, f.PY(yv) + 3, yv);
    if (x_ticks) {
      const double xv = f.x.lo + (f.x.hi - f.x.lo) * i / 4;
      absl::StrAppendFormat(
          &svg, "<text x='%.1f' y='%.1f' font-size='10' text-anchor='middle'>%.3g</text>", f.PX(xv),
          kH - kB + 14, xv);
    }
  }
  absl::StrAppendFormat(&svg,
                        "<text x='%.1f' y='%.1f' font-size='11' text-anchor='middle'>%s</text>"
                        "<text x='12' y='%.1f' font-size='11' text-anchor='middle' "
                        "transform='rotate(-90 12 %.1f)'>%s</text>",
                        (kL + kW - kR) / 2, kH - 6, HtmlEscape(x_label), (kT + kH - kB) / 2,
                        (kT + kH - kB) / 2, HtmlEscape(y_label));
  return svg;
}

std::string NoData(const std::string& svg) {
  return svg + "<text x='60' y='140'>no finished runs yet</text></svg>";
}

// Category labels under the plot box, one per cell, coloured like the cell.
std::string CategoryLabels(const SweepSpec& spec, double slot) {
  std::string svg;
  for (size_t i = 0; i < spec.cells.size(); ++i) {
    const double cx = kL + slot * (i + 0.5);
    absl::StrAppendFormat(&svg,
                          "<text x='%.1f' y='%.1f' font-size='10' text-anchor='end' fill='%s' "
                          "transform='rotate(-30 %.1f %.1f)'>%s</text>",
                          cx, kH - kB + 14, CellColor(i), cx, kH - kB + 14,
                          HtmlEscape(spec.cells[i].name));
  }
  return svg;
}

std::string AccuracyCurves(const SweepSpec& spec, const std::vector<RunResult>& results) {
  std::string svg = Open("Validation accuracy vs wall time (one line per run)", "curves");
  Frame f;
  for (const RunResult& r : results) {
    for (auto [t, acc] : r.val_acc_by_wall_s) f.x.Add(t), f.y.Add(acc);
  }
  if (f.x.Empty()) return NoData(svg);
  f.x.Pad(false), f.y.Pad(false);
  svg += Axes(f, "seconds since the run started", "val accuracy", true);
  for (size_t c = 0; c < spec.cells.size(); ++c) {
    for (const RunResult& r : results) {
      if (r.cell != spec.cells[c].name || r.val_acc_by_wall_s.empty()) continue;
      std::string path;
      for (auto [t, acc] : r.val_acc_by_wall_s) {
        absl::StrAppendFormat(&path, "%s%.1f,%.1f", path.empty() ? "M" : " L", f.PX(t), f.PY(acc));
      }
      absl::StrAppendFormat(
          &svg,
          "<path d='%s' fill='none' stroke='%s' stroke-width='1' "
          "stroke-opacity='0.8' class='run-curve'><title>%s seed %d</title></path>",
          path, CellColor(c), HtmlEscape(r.cell), r.seed);
    }
    absl::StrAppendFormat(&svg,
                          "<rect x='%.1f' y='%.1f' width='10' height='3' fill='%s'/>"
                          "<text x='%.1f' y='%.1f' font-size='10'>%s</text>",
                          kW - kR - 150, kH - kB - 10 - 14.0 * (spec.cells.size() - 1 - c),
                          CellColor(c), kW - kR - 136,
                          kH - kB - 6 - 14.0 * (spec.cells.size() - 1 - c),
                          HtmlEscape(spec.cells[c].name));
  }
  return svg + "</svg>";
}

// Bars of a metric's mean per cell with t-based 95% CI whiskers.
std::string MeanBars(const SweepSpec& spec, const SweepSummary& summary, const std::string& metric,
                     const std::string& title, const std::string& y_label) {
  std::string svg = Open(title, "bars");
  std::vector<const CellMetric*> rows;
  Frame f;
  for (const Cell& cell : spec.cells) {
    const CellMetric* row = nullptr;
    for (const CellMetric& m : summary.rows) {
      if (m.cell == cell.name && m.metric == metric) row = &m;
    }
    rows.push_back(row);
    if (row != nullptr && row->stats.n > 0) {
      const double half = std::isfinite(row->ci95_half_width) ? row->ci95_half_width : 0;
      f.y.Add(row->stats.mean - half), f.y.Add(row->stats.mean + half);
    }
  }
  if (f.y.Empty()) return NoData(svg);
  f.y.Pad(true);
  f.y.hi += (f.y.hi - f.y.lo) * 0.06;  // room for the value above the top whisker
  f.x = {0, 1};
  svg += Axes(f, "", y_label, false);
  const double slot = (kW - kL - kR) / std::max<size_t>(1, spec.cells.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    const CellMetric* row = rows[i];
    if (row == nullptr || row->stats.n == 0) continue;
    const double cx = kL + slot * (i + 0.5), bw = std::min(60.0, slot * 0.6);
    const double top = f.PY(row->stats.mean), zero = f.PY(std::max(f.y.lo, 0.0));
    absl::StrAppendFormat(&svg,
                          "<rect x='%.1f' y='%.1f' width='%.1f' height='%.1f' fill='%s' "
                          "fill-opacity='0.7' class='bar'><title>%s: mean %s, n %d</title></rect>",
                          cx - bw / 2, std::min(top, zero), bw, std::fabs(zero - top), CellColor(i),
                          HtmlEscape(row->cell), Short(row->stats.mean), row->stats.n);
    double label_y = std::min(top, zero) - 4;
    if (std::isfinite(row->ci95_half_width)) {
      const double y0 = f.PY(row->stats.mean - row->ci95_half_width);
      const double y1 = f.PY(row->stats.mean + row->ci95_half_width);
      absl::StrAppendFormat(&svg,
                            "<path d='M%.1f,%.1f L%.1f,%.1f M%.1f,%.1f L%.1f,%.1f M%.1f,%.1f "
                            "L%.1f,%.1f' stroke='#222' stroke-width='1.5' class='whisker'/>",
                            cx, y0, cx, y1, cx - 6, y0, cx + 6, y0, cx - 6, y1, cx + 6, y1);
      label_y = std::min(label_y, std::min(y0, y1) - 4);
    }
    absl::StrAppendFormat(&svg,
                          "<text x='%.1f' y='%.1f' font-size='10' text-anchor='middle'>%s</text>",
                          cx, label_y, Short(row->stats.mean));
  }
  svg += CategoryLabels(spec, slot);
  return svg + "</svg>";
}

// The switch epoch of every run, one column of dots per cell (spread sideways by seed so that
// equal epochs stay visible).
std::string SwitchDots(const SweepSpec& spec, const std::vector<RunResult>& results) {
  std::string svg = Open("Switch epoch per run", "dots");
  Frame f;
  for (const RunResult& r : results) {
    if (r.switch_epoch) f.y.Add(*r.switch_epoch);
  }
  if (f.y.Empty()) {
    return svg + "<text x='60' y='140'>no run switched to parameter servers</text></svg>";
  }
  f.y.Pad(false);
  f.x = {0, 1};
  svg += Axes(f, "", "epoch of the switch", false);
  const double slot = (kW - kL - kR) / std::max<size_t>(1, spec.cells.size());
  for (size_t i = 0; i < spec.cells.size(); ++i) {
    std::vector<const RunResult*> runs;
    for (const RunResult& r : results) {
      if (r.cell == spec.cells[i].name && r.switch_epoch) runs.push_back(&r);
    }
    const double cx = kL + slot * (i + 0.5);
    if (runs.empty()) {
      absl::StrAppendFormat(&svg,
                            "<text x='%.1f' y='%.1f' font-size='10' text-anchor='middle' "
                            "fill='#777'>no switch</text>",
                            cx, (kT + kH - kB) / 2);
    }
    for (size_t k = 0; k < runs.size(); ++k) {
      const double spread = std::min(slot * 0.5, 40.0);
      const double dx =
          runs.size() == 1 ? 0 : spread * (static_cast<double>(k) / (runs.size() - 1) - 0.5);
      absl::StrAppendFormat(&svg,
                            "<circle cx='%.1f' cy='%.1f' r='4' fill='%s' class='switch-dot'>"
                            "<title>%s seed %d: epoch %s</title></circle>",
                            cx + dx, f.PY(*runs[k]->switch_epoch), CellColor(i),
                            HtmlEscape(runs[k]->cell), runs[k]->seed,
                            Short(*runs[k]->switch_epoch));
    }
  }
  svg += CategoryLabels(spec, slot);
  return svg + "</svg>";
}

}  // namespace

std::string RenderSweepReportHtml(const SweepSpec& spec, const std::vector<RunResult>& results,
                                  const SweepSummary& summary) {
  int succeeded = 0;
  for (const RunResult& r : results) succeeded += r.state == "succeeded";
  std::string html = absl::StrCat(
      "<!DOCTYPE html><html><head><meta charset='utf-8'><title>Strata sweep ",
      HtmlEscape(spec.name),
      "</title><style>body{font-family:sans-serif;margin:24px;color:#222}"
      "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;"
      "font-size:13px}td.n{text-align:right}.charts{display:flex;flex-wrap:wrap;gap:12px}"
      ".note{color:#555;font-size:13px;max-width:60em}</style></head><body><h1>Strata sweep ",
      HtmlEscape(spec.name), "</h1>");
  absl::StrAppendFormat(
      &html,
      "<p>Base job <code>%s</code>; %d cell(s) x %d seed(s); %d of %d run(s) "
      "succeeded. Baseline cell: <b>%s</b>.%s</p>",
      HtmlEscape(spec.base_path), spec.cells.size(), spec.seeds.size(), succeeded, results.size(),
      HtmlEscape(spec.baseline),
      spec.target_accuracy ? absl::StrFormat(" Target accuracy %.4g.", *spec.target_accuracy) : "");
  html += "<h2>Charts</h2><div class='charts'>";
  html += AccuracyCurves(spec, results);
  html += MeanBars(spec, summary, "final_val_acc", "Mean final val accuracy (95% CI)",
                   "final val accuracy");
  html += MeanBars(spec, summary, "wall_s", "Mean wall time (95% CI)", "seconds");
  html += SwitchDots(spec, results);
  html +=
      "</div><p class='note'>Whiskers: t-based 95% confidence intervals of the mean over the "
      "seeds (none with fewer than 2 runs). Only succeeded runs count.</p>";

  html +=
      "<h2>Summary</h2><table><tr><th>metric</th><th>cell</th><th>n</th><th>mean</th>"
      "<th>sd</th><th>min</th><th>max</th><th>ratio to baseline</th></tr>";
  for (const std::string& metric : MetricNames()) {
    for (const CellMetric& row : summary.rows) {
      if (row.metric != metric) continue;
      absl::StrAppendFormat(&html,
                            "<tr><td>%s</td><td>%s</td><td class='n'>%d</td><td class='n'>%s</td>"
                            "<td class='n'>%s</td><td class='n'>%s</td><td class='n'>%s</td>"
                            "<td class='n'>%s</td></tr>",
                            metric, HtmlEscape(row.cell), row.stats.n, Short(row.stats.mean),
                            Short(row.stats.sd), Short(row.stats.min), Short(row.stats.max),
                            row.ratio_to_baseline ? Short(*row.ratio_to_baseline) : "--");
    }
  }
  html += "</table><h2>Variance against the baseline</h2>";
  if (summary.variance.empty()) {
    html += "<p>Only one cell: nothing to compare.</p>";
  } else {
    html +=
        "<table><tr><th>cell</th><th>metric</th><th>n / n baseline</th><th>variance ratio</th>"
        "<th>95% bootstrap CI</th><th>Brown-Forsythe F</th><th>p</th><th>verdict</th></tr>";
    for (const VarianceComparison& v : summary.variance) {
      absl::StrAppendFormat(
          &html,
          "<tr><td>%s</td><td>%s</td><td class='n'>%d / %d</td><td class='n'>%s</td>"
          "<td class='n'>%s</td><td class='n'>%s</td><td class='n'>%s</td><td>%s</td></tr>",
          HtmlEscape(v.cell), v.metric, v.n, v.n_baseline, v.ratio ? Short(v.ratio->ratio) : "--",
          v.ratio ? absl::StrCat(Short(v.ratio->ci_low), " to ", Short(v.ratio->ci_high)) : "--",
          v.test ? Short(v.test->f) : "--", v.test ? Short(v.test->p) : "--",
          HtmlEscape(v.verdict));
    }
    html += "</table>";
  }
  html +=
      "<p class='note'>Variance ratio = Var(cell) / Var(baseline) of the final validation "
      "accuracy; below 1 the cell varies less. With 5 runs per arm a classic F test only flags "
      "ratios beyond about 9.6 (F<sub>0.975; 4, 4</sub>); with 10 runs, beyond about 4.0; with "
      "20, beyond about 2.5.</p>";

  html +=
      "<h2>Runs</h2><table><tr><th>cell</th><th>seed</th><th>state</th><th>wall s</th>"
      "<th>final val acc</th><th>time to target s</th><th>switch epoch</th></tr>";
  for (const RunResult& r : results) {
    auto cell = [](std::optional<double> v) { return v ? Short(*v) : std::string("--"); };
    absl::StrAppendFormat(&html,
                          "<tr><td>%s</td><td class='n'>%d</td><td>%s</td><td class='n'>%s</td>"
                          "<td class='n'>%s</td><td class='n'>%s</td><td class='n'>%s</td></tr>",
                          HtmlEscape(r.cell), r.seed, HtmlEscape(r.state), cell(r.wall_s),
                          cell(r.final_val_acc), cell(r.time_to_target_s), cell(r.switch_epoch));
  }
  html += "</table></body></html>\n";
  return html;
}

}  // namespace strata::sweep
