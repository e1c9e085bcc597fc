#include "orchestrator/record/report.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>

#include "orchestrator/record/run_record.h"
#include "services/common/base/files.h"
#include "services/common/base/metrics.h"
#include "services/common/base/run_directory.h"

namespace strata {
namespace {

struct Series {
  std::string label, color;
  std::vector<std::pair<double, double>> points;
};

double Number(const nlohmann::json& j, const char* key) {
  if (j.contains(key) && j[key].is_number()) return j[key].get<double>();
  return std::numeric_limits<double>::quiet_NaN();
}

// A vertical line across a chart at `x`: the switch, a `strata resume`.
struct Marker {
  double x = std::numeric_limits<double>::quiet_NaN();  // NaN: not drawn
  std::string label;
  const char* css_class;  // what a reader (or a test) finds it by
  const char* color;
};

// One line chart with axes, ticks, a legend and its vertical markers.
std::string Chart(const std::string& title, const std::string& x_label,
                  const std::vector<Series>& series, const std::vector<Marker>& markers) {
  const double W = 460, H = 280, L = 56, R = 16, T = 28, B = 44;
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;
  for (const Series& s : series) {
    for (auto [x, y] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
    }
  }
  std::string svg = absl::StrFormat(
      "<svg xmlns='http://www.w3.org/2000/svg' width='%.0f' height='%.0f' class='chart'>"
      "<text x='%.0f' y='18' font-size='14' font-weight='bold'>%s</text>",
      W, H, L, HtmlEscape(title));
  if (!std::isfinite(x0)) return svg + "<text x='60' y='140'>no data yet</text></svg>";
  for (const Marker& m : markers) {
    if (std::isfinite(m.x)) x0 = std::min(x0, m.x), x1 = std::max(x1, m.x);
  }
  if (x1 - x0 < 1e-12) x0 -= 0.5, x1 += 0.5;
  const double pad = (y1 - y0) * 0.05 + 1e-9;
  y0 -= pad, y1 += pad;
  auto px = [&](double x) { return L + (x - x0) / (x1 - x0) * (W - L - R); };
  auto py = [&](double y) { return T + (1 - (y - y0) / (y1 - y0)) * (H - T - B); };
  absl::StrAppendFormat(
      &svg, "<rect x='%.1f' y='%.1f' width='%.1f' height='%.1f' fill='none' stroke='#999'/>", L, T,
      W - L - R, H - T - B);
  for (int i = 0; i <= 4; ++i) {
    const double yv = y0 + (y1 - y0) * i / 4, xv = x0 + (x1 - x0) * i / 4;
    absl::StrAppendFormat(&svg,
                          "<text x='%.1f' y='%.1f' font-size='10' text-anchor='end'>%.3g</text>"
                          "<text x='%.1f' y='%.1f' font-size='10' text-anchor='middle'>%.3g</text>",
                          L - 4, py(yv) + 3, yv, px(xv), H - B + 14, xv);
  }
  absl::StrAppendFormat(&svg,
                        "<text x='%.1f' y='%.1f' font-size='11' text-anchor='middle'>%s</text>",
                        (L + W - R) / 2, H - 8, HtmlEscape(x_label));
  for (size_t i = 0; i < markers.size(); ++i) {
    const Marker& m = markers[i];
    if (!std::isfinite(m.x)) continue;
    absl::StrAppendFormat(&svg,
                          "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='%s' "
                          "stroke-dasharray='5,4' class='%s'/>"
                          "<text x='%.1f' y='%.1f' font-size='10' fill='%s'>%s</text>",
                          px(m.x), T, px(m.x), H - B, m.color, m.css_class, px(m.x) + 3,
                          T + 12 + 12 * static_cast<double>(i), m.color, HtmlEscape(m.label));
  }
  int legend = 0;
  for (const Series& s : series) {
    std::string path;
    for (auto [x, y] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      absl::StrAppendFormat(&path, "%s%.1f,%.1f", path.empty() ? "M" : " L", px(x), py(y));
    }
    if (path.empty()) continue;
    absl::StrAppendFormat(&svg, "<path d='%s' fill='none' stroke='%s' stroke-width='2'/>", path,
                          s.color);
    for (auto [x, y] : s.points) {
      if (std::isfinite(x) && std::isfinite(y)) {
        absl::StrAppendFormat(&svg, "<circle cx='%.1f' cy='%.1f' r='2.5' fill='%s'/>", px(x), py(y),
                              s.color);
      }
    }
    absl::StrAppendFormat(&svg,
                          "<rect x='%.1f' y='%.1f' width='10' height='3' fill='%s'/>"
                          "<text x='%.1f' y='%.1f' font-size='10'>%s</text>",
                          W - R - 110, T + 10 + legend * 14, s.color, W - R - 96,
                          T + 14 + legend * 14, HtmlEscape(s.label));
    ++legend;
  }
  return svg + "</svg>";
}

}  // namespace

std::string RenderReportHtml(const ReportInput& in) {
  Series val_loss{"val loss", "#1f77b4", {}}, train_loss{"train loss", "#ff7f0e", {}};
  Series val_acc{"val accuracy", "#2ca02c", {}};
  Series val_loss_t = val_loss, train_loss_t = train_loss, val_acc_t = val_acc;
  for (const auto& m : in.metrics) {
    const double e = Number(m, "epoch"), t = Number(m, "wall_s");
    val_loss.points.emplace_back(e, Number(m, "val_loss"));
    train_loss.points.emplace_back(e, Number(m, "train_loss"));
    val_acc.points.emplace_back(e, Number(m, "val_acc"));
    val_loss_t.points.emplace_back(t, Number(m, "val_loss"));
    train_loss_t.points.emplace_back(t, Number(m, "train_loss"));
    val_acc_t.points.emplace_back(t, Number(m, "val_acc"));
  }
  double switch_epoch = std::numeric_limits<double>::quiet_NaN(), switch_time = switch_epoch;
  for (const auto& e : in.events) {
    if (RunEventOf(e) == RunEvent::kSwitchDone) {
      const SwitchDoneEvent done = SwitchDoneEvent::FromJson(e);
      switch_epoch = done.epoch.value_or(std::numeric_limits<double>::quiet_NaN());
      switch_time = done.wall_s.value_or(std::numeric_limits<double>::quiet_NaN());
    }
  }
  // Where `strata resume` took the run up: its clock, and the epoch of the steps done before.
  double steps_per_epoch = std::numeric_limits<double>::quiet_NaN();
  std::vector<Marker> resumed_epoch, resumed_time;
  for (const auto& e : in.events) {
    const std::optional<RunEvent> event = RunEventOf(e);
    if (event == RunEvent::kTrainingStarted && !std::isfinite(steps_per_epoch)) {
      steps_per_epoch = Number(e, "steps_per_epoch");
    } else if (event == RunEvent::kResumed) {
      double steps = std::numeric_limits<double>::quiet_NaN();
      if (e.contains("steps") && e["steps"].is_array() && !e["steps"].empty() &&
          e["steps"][0].is_number()) {
        steps = e["steps"][0].get<double>();
      }
      resumed_epoch.push_back(
          {steps_per_epoch > 0 ? steps / steps_per_epoch : std::numeric_limits<double>::quiet_NaN(),
           "resumed", "resume-marker", "#9467bd"});
      resumed_time.push_back({Number(e, "wall_s"), "resumed", "resume-marker", "#9467bd"});
    }
  }
  std::vector<Marker> by_epoch = {{switch_epoch, "switch to PS", "switch-marker", "#d62728"}};
  std::vector<Marker> by_time = {{switch_time, "switch to PS", "switch-marker", "#d62728"}};
  by_epoch.insert(by_epoch.end(), resumed_epoch.begin(), resumed_epoch.end());
  by_time.insert(by_time.end(), resumed_time.begin(), resumed_time.end());
  std::string html = absl::StrCat(
      "<!DOCTYPE html><html><head><meta charset='utf-8'><title>", HtmlEscape(in.title),
      "</title><style>body{font-family:sans-serif;margin:24px;color:#222}"
      "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;"
      "font-size:13px}.charts{display:flex;flex-wrap:wrap;gap:12px}pre{background:#f6f6f6;padding:"
      "8px;"
      "font-size:12px}</style></head><body><h1>",
      HtmlEscape(in.title), "</h1>");
  if (!in.summary.is_null()) {
    html += "<h2>Summary</h2><table>";
    for (auto it = in.summary.begin(); it != in.summary.end(); ++it) {
      absl::StrAppend(&html, "<tr><th>", HtmlEscape(it.key()), "</th><td>",
                      HtmlEscape(it.value().dump()), "</td></tr>");
    }
    html += "</table>";
  } else {
    html +=
        "<p><b>The run is still going</b>; run <code>strata report RUN_DIR</code> again to "
        "refresh.</p>";
  }
  html += "<h2>Curves</h2><div class='charts'>";
  html += Chart("Loss vs epoch", "epoch", {val_loss, train_loss}, by_epoch);
  html += Chart("Validation accuracy vs epoch", "epoch", {val_acc}, by_epoch);
  html += Chart("Loss vs wall time", "seconds", {val_loss_t, train_loss_t}, by_time);
  html += Chart("Validation accuracy vs wall time", "seconds", {val_acc_t}, by_time);
  html +=
      "</div><h2>Evaluations</h2><table><tr><th>epoch</th><th>phase</th><th>val loss</th>"
      "<th>val acc</th><th>train loss</th><th>wall s</th></tr>";
  for (const auto& m : in.metrics) {
    absl::StrAppendFormat(
        &html,
        "<tr><td>%.0f</td><td>%s</td><td>%.4f</td><td>%.4f</td><td>%.4f</td><td>%.1f</td></tr>",
        Number(m, "epoch"), HtmlEscape(m.value("phase", "")), Number(m, "val_loss"),
        Number(m, "val_acc"), Number(m, "train_loss"), Number(m, "wall_s"));
  }
  html += "</table><h2>Events</h2><pre>";
  for (const auto& e : in.events) absl::StrAppend(&html, HtmlEscape(e.dump()), "\n");
  absl::StrAppend(&html, "</pre><h2>Job</h2><pre>", HtmlEscape(in.job_yaml),
                  "</pre></body></html>\n");
  return html;
}

absl::Status WriteRunReport(const std::string& run_dir) {
  RunPaths paths(run_dir);
  ReportInput in;
  auto job = ReadFile(paths.job_yaml);
  if (!job.ok())
    return absl::NotFoundError(absl::StrCat(run_dir, " is not a run directory (no job.yaml)"));
  in.job_yaml = *job;
  in.title = absl::StrCat("Strata run ", run_dir);
  struct stat st;
  if (::stat(paths.metrics.c_str(), &st) == 0) {
    auto m = ReadJsonLines(paths.metrics);
    if (!m.ok()) return m.status();
    in.metrics = std::move(*m);
  }
  if (::stat(paths.events.c_str(), &st) == 0) {
    auto e = ReadJsonLines(paths.events);
    if (!e.ok()) return e.status();
    in.events = std::move(*e);
  }
  if (auto s = ReadFile(paths.summary); s.ok()) {
    in.summary = nlohmann::json::parse(*s, nullptr, /*allow_exceptions=*/false);
    if (in.summary.is_discarded()) in.summary = nullptr;
  }
  return WriteFileAtomic(paths.report, RenderReportHtml(in));
}

std::string HtmlEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace strata
