#include "orchestrator/record/stream_report.h"

#include <cmath>
#include <limits>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>
#include <nlohmann/json.hpp>

#include "orchestrator/record/run_record.h"

namespace strata {
namespace {

using nlohmann::json;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double Num(const json& j, const char* key) {
  if (!j.is_object()) return kNaN;
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : kNaN;
}

ChartSeries Series(std::string label, size_t color) {
  ChartSeries s;
  s.label = std::move(label);
  s.color = PaletteColor(color);
  return s;
}

// Events trained at wall time `t`, from the metrics lines before and after it.
double EventsAt(const std::vector<json>& metrics, double t) {
  double before_t = kNaN, before_e = kNaN;
  for (const json& m : metrics) {
    const double mt = Num(m, "wall_s"), me = Num(m, "events_trained");
    if (!std::isfinite(mt) || !std::isfinite(me)) continue;
    if (mt >= t) {
      if (!std::isfinite(before_t) || mt == before_t) return me;
      return before_e + (me - before_e) * (t - before_t) / (mt - before_t);
    }
    before_t = mt;
    before_e = me;
  }
  return before_e;
}

std::string Cell(const std::string& text, bool number) {
  return absl::StrCat(number ? "<td class='n'>" : "<td>", HtmlEscape(text), "</td>");
}

std::string ReplicaTable(const json& summary) {
  if (!summary.is_object() || !summary.contains("per_replica") ||
      !summary["per_replica"].is_array() || summary["per_replica"].empty()) {
    return "";
  }
  std::string html =
      "<h3>Each replica</h3><table class='per-replica'><tr><th>replica</th><th>windows "
      "trained</th><th>events trained</th><th>gradients applied</th><th>malformed "
      "events</th><th>accuracy before training</th><th>drifts</th></tr>";
  for (const json& r : summary["per_replica"]) {
    const double scored = Num(r, "prequential_scored");
    const size_t drifts = r.contains("drifts") && r["drifts"].is_array() ? r["drifts"].size() : 0;
    absl::StrAppend(&html, "<tr>", Cell(FormatFixed(Num(r, "rank"), 0), true),
                    Cell(FormatFixed(Num(r, "windows"), 0), true),
                    Cell(FormatFixed(Num(r, "events_trained"), 0), true),
                    Cell(FormatFixed(Num(r, "applied_total"), 0), true),
                    Cell(FormatFixed(Num(r, "malformed"), 0), true),
                    Cell(scored > 0 ? FormatPercent(Num(r, "prequential_correct") / scored) : "--",
                         true),
                    Cell(std::to_string(drifts), true), "</tr>");
  }
  return html + "</table>";
}

}  // namespace

bool IsStreamRun(const ReportInput& in) {
  for (const json* j : {&in.summary, &in.status}) {
    if (j->is_object() && j->value("strategy", "") == "stream") return true;
  }
  return false;
}

std::vector<std::string> StreamSummarySentences(const ReportInput& in) {
  std::vector<std::string> out;
  const json& s = in.summary;
  if (!s.is_object()) return out;
  const std::string state = s.value("state", "");
  std::string head = absl::StrCat(state == "succeeded" ? "Succeeded" : "Failed", " after ",
                                  FormatSeconds(Num(s, "wall_s")));
  if (s.contains("error") && s["error"].is_string()) {
    absl::StrAppend(&head, ": ", s["error"].get<std::string>());
  }
  out.push_back(head + ".");
  out.push_back(absl::StrCat(
      FormatFixed(Num(s, "events_trained"), 0), " events trained by ",
      FormatFixed(Num(s, "replicas"), 0), " replica(s) in ", FormatSeconds(Num(s, "train_s")), " (",
      FormatSignificant(Num(s, "events_per_s"), 3), " events/s); accuracy before training ",
      FormatPercent(Num(s, "prequential_accuracy")), "."));
  const bool once = s.value("apply_once", false), agree = s.value("agree", false);
  out.push_back(absl::StrCat(
      once ? "Every replica applied every one of the " : "Apply-once failed: not every replica "
                                                         "applied each of the ",
      FormatFixed(Num(s, "gradients"), 0), " gradients ", once ? "once" : "exactly once", "; ",
      agree ? "the replicas' models agree" : "the replicas' models do not agree", " (relative ",
      "difference ", absl::StrFormat("%.1e", Num(s, "agreement_relative")), ")."));
  const size_t drifts = s.contains("drifts") && s["drifts"].is_array() ? s["drifts"].size() : 0;
  if (drifts > 0) {
    out.push_back(absl::StrCat("Drift detected ", drifts, drifts == 1 ? " time" : " times",
                               " (marked on the charts)."));
  }
  if (s.contains("predictions") && s["predictions"].is_object()) {
    const json& p = s["predictions"];
    out.push_back(absl::StrCat(
        "Predict stream: ", FormatFixed(Num(p, "answered"), 0), " of ",
        FormatFixed(Num(p, "sent"), 0), " questions answered (", FormatPercent(Num(p, "share")),
        " of the events, ", FormatFixed(Num(p, "due"), 0), " due), latency p50 ",
        FormatSignificant(Num(p, "p50_ms"), 3), " ms, p99 ", FormatSignificant(Num(p, "p99_ms"), 3),
        " ms, max ", FormatSignificant(Num(p, "max_ms"), 3), " ms; ",
        FormatPercent(Num(p, "accuracy")), " of the answers right."));
  }
  if (const double frozen = Num(s, "events_frozen"); frozen > 0) {
    out.push_back(absl::StrCat(FormatFixed(frozen, 0),
                               " events scored and not trained (stream.freeze_at_event)."));
  }
  if (const double malformed = Num(s, "malformed"); malformed > 0) {
    out.push_back(absl::StrCat(FormatFixed(malformed, 0),
                               " malformed events skipped (acknowledged, never trained)."));
  }
  return out;
}

std::string StreamChartsAndReplicas(const ReportInput& in,
                                    const std::vector<ChartMarker>& by_time) {
  ChartSeries loss = Series("training loss (latest windows)", 1);
  ChartSeries recent = Series("latest events", 2);
  ChartSeries whole = Series("whole stream so far", 0);
  ChartSeries rate = Series("events trained per second", 3);
  ChartSeries lag = Series("lag (not yet handed out)", 4);
  ChartSeries pending = Series("pending (not acknowledged)", 5);
  ChartSeries predict = Series("Predict p99 latency, ms (answers of that second)", 6);
  for (const json& m : in.metrics) {
    const double e = Num(m, "events_trained"), t = Num(m, "wall_s");
    if (!(e > 0)) continue;  // nothing trained yet: no loss or accuracy to show
    // Scored events go on after stream.freeze_at_event, trained ones stop.
    const double scored = Num(m, "events_scored");
    const double at = std::isfinite(scored) ? scored : e;
    loss.points.emplace_back(e, Num(m, "loss"));
    recent.points.emplace_back(at, Num(m, "recent_accuracy"));
    whole.points.emplace_back(at, Num(m, "prequential_accuracy"));
    if (const double p99 = Num(m, "predict_p99_ms"); p99 > 0) predict.points.emplace_back(t, p99);
    rate.points.emplace_back(t, Num(m, "trained_per_s"));
    lag.points.emplace_back(t, Num(m, "lag"));
    pending.points.emplace_back(t, Num(m, "pending"));
  }
  // Drift marks against events: the producer's number of the latest event the replica had
  // trained when it saw the drift (the stream's position), else where the run's events trained
  // stood at the time it was recorded.
  std::vector<ChartMarker> by_events;
  for (const ChartMarker& m : by_time) {
    ChartMarker moved = m;
    moved.x = EventsAt(in.metrics, m.x);
    by_events.push_back(moved);
  }
  size_t drift = 0;
  for (const json& e : in.events) {
    if (RunEventOf(e) != RunEvent::kDriftDetected) continue;
    for (; drift < by_events.size(); ++drift) {
      if (by_events[drift].css_class != "drift-marker") continue;
      if (const double seq = Num(e, "seq"); seq >= 0) by_events[drift].x = seq;
      ++drift;
      break;
    }
  }
  std::string html = "<h2>Charts</h2><div class='charts'>";
  LineChartOptions o;
  o.x_label = "events trained";
  o.x_from_zero = true;
  o.title = "Training loss against events trained";
  o.css_class = "stream-loss";
  html += LineChart(o, {loss}, by_events);
  o.x_label = "events scored (trained, or frozen)";
  o.title = "Accuracy before training against events";
  o.css_class = "stream-accuracy";
  html += LineChart(o, {recent, whole}, by_events);
  o.x_label = "seconds since the run started";
  o.y_from_zero = true;
  o.title = "Events trained per second against wall time";
  o.css_class = "stream-rate";
  html += LineChart(o, {rate}, by_time);
  o.title = "The broker's backlog against wall time";
  o.css_class = "stream-backlog";
  html += LineChart(o, {lag, pending}, by_time);
  if (!predict.points.empty()) {
    o.title = "Predict latency against wall time (stream.predict_rate)";
    o.css_class = "stream-predict";
    html += LineChart(o, {predict}, by_time);
  }
  html +=
      "</div><p class='note'>Accuracy before training: each window of events is scored by its "
      "replica's model before the window's own gradient is applied (test-then-train), over each "
      "replica's latest stream.accuracy_window events and over the whole stream. The training "
      "loss is the mean of the replicas' latest windows.</p>";
  return html + ReplicaTable(in.summary);
}

}  // namespace strata
