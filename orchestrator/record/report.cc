#include "orchestrator/record/report.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <ctime>
#include <limits>
#include <map>
#include <optional>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>
#include <absl/strings/str_join.h>

#include "orchestrator/record/event_text.h"
#include "orchestrator/record/report_chart.h"
#include "orchestrator/record/stream_report.h"
#include "orchestrator/record/run_record.h"
#include "services/common/base/files.h"
#include "services/common/base/metrics.h"
#include "services/common/base/run_directory.h"

namespace strata {
namespace {

using nlohmann::json;
using record_text::Capitalized;
using record_text::EpochText;
using record_text::Flag;
using record_text::Id;
using record_text::JoinAnd;
using record_text::Member;
using record_text::Number;
using record_text::Plural;
using record_text::Text;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The vertical lines of the charts, from the events: against wall time every switch, resume,
// restart and drift mark; against epoch those whose epoch the record gives.
struct Markers {
  std::vector<ChartMarker> by_epoch, by_time;
};

Markers MarkersOf(const std::vector<json>& events) {
  Markers out;
  double steps_per_epoch = kNaN;
  for (const json& e : events) {
    const std::optional<RunEvent> event = RunEventOf(e);
    const double t = Number(e, "wall_s");
    if (event == RunEvent::kTrainingStarted && !std::isfinite(steps_per_epoch)) {
      steps_per_epoch = Number(e, "steps_per_epoch");
    } else if (event == RunEvent::kSwitchDone) {
      const SwitchDoneEvent done = SwitchDoneEvent::FromJson(e);
      const std::string hover = DescribeEvent(e);
      const double epoch = done.epoch.value_or(kNaN);
      out.by_epoch.push_back(
          {epoch, "switch to parameter servers", "switch-marker", "#d62728", hover});
      out.by_time.push_back({done.wall_s.value_or(kNaN), "switch to parameter servers",
                             "switch-marker", "#d62728", hover});
    } else if (event == RunEvent::kResumed) {
      // Where `strata resume` took the run up: its clock, and the epoch of the steps done before.
      double steps = kNaN;
      if (e.contains("steps") && e["steps"].is_array() && !e["steps"].empty() &&
          e["steps"][0].is_number()) {
        steps = e["steps"][0].get<double>();
      }
      const std::string hover = DescribeEvent(e);
      out.by_epoch.push_back({steps_per_epoch > 0 ? steps / steps_per_epoch : kNaN, "strata resume",
                              "resume-marker", "#9467bd", hover});
      out.by_time.push_back({t, "strata resume", "resume-marker", "#9467bd", hover});
    } else if (event == RunEvent::kRestart) {
      out.by_time.push_back({t, "restart", "restart-marker", "#8c564b", DescribeEvent(e)});
    } else if (event == RunEvent::kDriftDetected ||
               (!event && Text(e, "event").find("drift") != std::string::npos)) {
      out.by_time.push_back({t, "drift", "drift-marker", "#17becf", DescribeEvent(e)});
    }
  }
  return out;
}

// Folds runs of the same kind of event (the launches, the listens) into one row each.
bool Foldable(const std::optional<RunEvent>& e) {
  return e == RunEvent::kLaunched || e == RunEvent::kListening;
}

std::string StateWord(const std::string& state) {
  if (state == "succeeded") return "Succeeded";
  if (state == "failed") return "Failed";
  if (state == "interrupted") return "Interrupted";
  if (state == "running") return "Running";
  return Capitalized(state);
}

const json& SummaryOrStatus(const ReportInput& in) {
  return in.summary.is_object() ? in.summary : in.status;
}

// The switch_done line of the record, if any.
std::optional<SwitchDoneEvent> SwitchOf(const std::vector<json>& events) {
  std::optional<SwitchDoneEvent> out;
  for (const json& e : events) {
    if (RunEventOf(e) == RunEvent::kSwitchDone) out = SwitchDoneEvent::FromJson(e);
  }
  return out;
}

ChartSeries NamedSeries(std::string label, std::string color) {
  ChartSeries s;
  s.label = std::move(label);
  s.color = std::move(color);
  return s;
}

// Each worker's samples/s from metrics.jsonl's worker_samples_per_s, against wall time.
std::vector<ChartSeries> WorkerThroughput(const std::vector<json>& metrics) {
  std::vector<ChartSeries> out;
  for (const json& m : metrics) {
    if (!m.contains("worker_samples_per_s") || !m["worker_samples_per_s"].is_array()) continue;
    const json& rates = m["worker_samples_per_s"];
    for (size_t r = 0; r < rates.size(); ++r) {
      if (out.size() <= r) out.push_back(NamedSeries(absl::StrCat("worker ", r), PaletteColor(r)));
      out[r].points.emplace_back(Number(m, "wall_s"),
                                 rates[r].is_number() ? rates[r].get<double>() : kNaN);
    }
  }
  return out;
}

std::string Table(const std::vector<std::string>& header,
                  const std::vector<std::vector<std::string>>& rows, const std::string& css_class,
                  const std::vector<bool>& numeric = {}) {
  std::string html = absl::StrCat("<table class='", css_class, "'><tr>");
  for (const std::string& h : header) absl::StrAppend(&html, "<th>", HtmlEscape(h), "</th>");
  html += "</tr>";
  for (const auto& row : rows) {
    html += "<tr>";
    for (size_t i = 0; i < row.size(); ++i) {
      const bool n = i < numeric.size() && numeric[i];
      absl::StrAppend(&html, n ? "<td class='n'>" : "<td>", HtmlEscape(row[i]), "</td>");
    }
    html += "</tr>";
  }
  return html + "</table>";
}

std::string PerWorkerTable(const json& summary) {
  if (!summary.is_object() || !summary.contains("per_worker") ||
      !summary["per_worker"].is_array() || summary["per_worker"].empty()) {
    return "";
  }
  std::vector<std::string> phases;
  for (const json& w : summary["per_worker"]) {
    if (!w.contains("samples_per_s") || !w["samples_per_s"].is_object()) continue;
    for (auto it = w["samples_per_s"].begin(); it != w["samples_per_s"].end(); ++it) {
      if (std::find(phases.begin(), phases.end(), it.key()) == phases.end())
        phases.push_back(it.key());
    }
  }
  // All-reduce first: the order training goes through them.
  std::sort(phases.begin(), phases.end(), [](const std::string& a, const std::string& b) {
    return (a == "allreduce") > (b == "allreduce");
  });
  std::vector<std::string> header = {"worker", "steps"};
  for (const std::string& p : phases) header.push_back(absl::StrCat("samples/s, ", PhaseLabel(p)));
  std::vector<std::vector<std::string>> rows;
  for (const json& w : summary["per_worker"]) {
    std::vector<std::string> row = {Id(w, "rank"), FormatFixed(Number(w, "steps"), 0)};
    for (const std::string& p : phases) {
      row.push_back(FormatSignificant(Number(Member(w, "samples_per_s"), p.c_str()), 3));
    }
    rows.push_back(std::move(row));
  }
  return absl::StrCat("<h3>Each worker</h3>",
                      Table(header, rows, "per-worker", std::vector<bool>(header.size(), true)),
                      "<p class='note'>Samples/s as each worker measured it over each phase.</p>");
}

std::string ProcessTable(const json& summary) {
  if (!summary.is_object() || !summary.contains("processes") || !summary["processes"].is_array() ||
      summary["processes"].empty()) {
    return "";
  }
  std::vector<std::vector<std::string>> rows;
  for (const json& p : summary["processes"]) {
    rows.push_back(
        {Text(p, "name"), Id(p, "pid"), Text(p, "exit").empty() ? "--" : Text(p, "exit")});
  }
  return absl::StrCat("<h3>Processes</h3>", Table({"process", "pid", "how it ended"}, rows,
                                                  "processes", {false, true, false}));
}

std::string EvaluationTable(const ReportInput& in) {
  // The empirical rule's s of each epoch, when the job uses it.
  std::map<int64_t, std::string> rule;
  for (const json& e : in.events) {
    if (RunEventOf(e) != RunEvent::kSwitchRule) continue;
    const double epoch = Number(e, "epoch"), s = Number(e, "s_percent");
    std::string text =
        std::isfinite(s) ? absl::StrCat(FormatSignificant(s, 3), " %") : "window not full";
    if (Flag(e, "fire")) absl::StrAppend(&text, " (fires)");
    if (std::isfinite(epoch)) rule[static_cast<int64_t>(epoch)] = text;
  }
  std::vector<std::string> header = {"epoch",      "phase",     "val accuracy", "val loss",
                                     "train loss", "samples/s", "time"};
  if (!rule.empty()) header.push_back("switch rule s");
  std::vector<std::vector<std::string>> rows;
  for (const json& m : in.metrics) {
    const double epoch = Number(m, "epoch");
    std::vector<std::string> row = {FormatFixed(epoch, 0),
                                    PhaseLabel(Text(m, "phase")),
                                    FormatPercent(Number(m, "val_acc")),
                                    FormatSignificant(Number(m, "val_loss"), 4),
                                    FormatSignificant(Number(m, "train_loss"), 4),
                                    FormatSignificant(Number(m, "samples_per_s"), 3),
                                    FormatSeconds(Number(m, "wall_s"))};
    if (!rule.empty()) {
      auto it = std::isfinite(epoch) ? rule.find(static_cast<int64_t>(epoch)) : rule.end();
      row.push_back(it == rule.end() ? "--" : it->second);
    }
    rows.push_back(std::move(row));
  }
  if (rows.empty()) return "<p>No evaluation yet.</p>";
  return Table(header, rows, "evaluations", {true, false, true, true, true, true, true, false});
}

}  // namespace

bool RunHasEnded(const ReportInput& in) {
  if (in.summary.is_object()) return true;
  return in.status.is_object() && in.status.contains("state") && in.status["state"].is_string() &&
         in.status["state"] != "running";
}

std::vector<TimelineRow> Timeline(const std::vector<json>& events, const json& summary) {
  std::vector<TimelineRow> rows;
  std::string phase = "starting";
  bool finished_event = false;
  for (size_t i = 0; i < events.size(); ++i) {
    const json& e = events[i];
    const std::optional<RunEvent> event = RunEventOf(e);
    if (event == RunEvent::kTrainingStarted) phase = Text(e, "mode");
    if (event == RunEvent::kResumed) phase = "starting";
    if (event == RunEvent::kSwitchDone) phase = "ps";
    if (event == RunEvent::kTrainingFinished) phase = "ending";
    if (event == RunEvent::kRunFinished) finished_event = true;
    if (Foldable(event)) {
      // The processes of consecutive lines of one kind, in one sentence.
      std::vector<std::string> names;
      size_t j = i;
      for (; j < events.size() && RunEventOf(events[j]) == event; ++j) {
        names.push_back(Text(events[j], "process"));
      }
      const double t = Number(e, "wall_s");
      std::string what =
          event == RunEvent::kLaunched
              ? absl::StrCat("Started ", JoinAnd(names))
              : absl::StrCat(JoinAnd(names), names.size() == 1 ? " is" : " are", " listening");
      if (names.size() == 1 && event == RunEvent::kLaunched && std::isfinite(Number(e, "pid"))) {
        absl::StrAppend(&what, " (pid ", Id(e, "pid"), ")");
      }
      rows.push_back({t, PhaseLabel(phase), what, Text(e, "event")});
      i = j - 1;
      continue;
    }
    std::string what = DescribeEvent(e);
    if (what.empty()) continue;
    rows.push_back({Number(e, "wall_s"), PhaseLabel(phase), std::move(what), Text(e, "event")});
  }
  // The report is written just before the run_finished line: its end comes from the summary.
  if (!finished_event && summary.is_object() && summary.contains("state")) {
    rows.push_back({Number(summary, "wall_s"), PhaseLabel("ending"),
                    absl::StrCat("Run ", Text(summary, "state"), " after ",
                                 FormatSeconds(Number(summary, "wall_s"))),
                    "run_finished"});
  }
  return rows;
}

std::vector<std::string> SummarySentences(const ReportInput& in) {
  std::vector<std::string> out;
  const json& s = in.summary;
  const std::optional<SwitchDoneEvent> done = SwitchOf(in.events);
  if (s.is_object()) {
    const std::string state = Text(s, "state");
    std::string head = absl::StrCat(StateWord(state), state == "succeeded" ? " in " : " after ",
                                    FormatSeconds(Number(s, "wall_s")));
    if (const double t = Number(s, "training_s"); std::isfinite(t)) {
      absl::StrAppend(&head, " (training ", FormatSeconds(t), ")");
    }
    if (!Text(s, "error").empty()) absl::StrAppend(&head, ": ", Text(s, "error"));
    out.push_back(head + ".");
    const double planned = Number(s, "epochs_planned"), epochs = Number(s, "epochs");
    if (const double acc = Number(s, "final_val_acc"); std::isfinite(acc)) {
      out.push_back(absl::StrCat("Final validation accuracy ", FormatPercent(acc), " (loss ",
                                 FormatSignificant(Number(s, "final_val_loss"), 3), ") after ",
                                 FormatFixed(planned, 0), " epochs."));
    } else if (const double last = Number(s, "last_val_acc"); std::isfinite(last)) {
      out.push_back(absl::StrCat("Last validation accuracy ", FormatPercent(last), " at epoch ",
                                 FormatFixed(epochs, 0), " of ", FormatFixed(planned, 0), "."));
    }
    if (const double epoch = Number(s, "switch_epoch"); std::isfinite(epoch)) {
      std::string sw = absl::StrCat("Switched to parameter servers at epoch ", EpochText(epoch));
      if (done && done->wall_s) absl::StrAppend(&sw, " after ", FormatSeconds(*done->wall_s));
      if (const double h = Number(s, "switch_handover_s"); std::isfinite(h)) {
        absl::StrAppend(&sw, ", handover ", FormatSeconds(h));
      }
      out.push_back(sw + ".");
    } else if (Text(s, "strategy").rfind("switch", 0) == 0) {
      std::string why;
      for (const json& e : in.events) {
        const std::optional<RunEvent> ev = RunEventOf(e);
        if (ev == RunEvent::kSwitchSkipped || ev == RunEvent::kSwitchFailed) why = DescribeEvent(e);
      }
      out.push_back(absl::StrCat("Did not switch to parameter servers",
                                 why.empty() ? "" : absl::StrCat(" (", why, ")"), "."));
    }
    return out;
  }
  const json& st = in.status;
  if (!st.is_object()) {
    out.push_back("The run has not written its status yet.");
    return out;
  }
  std::string head =
      absl::StrCat(StateWord(Text(st, "state")), ": epoch ", FormatFixed(Number(st, "epoch"), 2),
                   " of ", FormatFixed(Number(st, "epochs"), 0));
  if (!Text(st, "phase").empty()) absl::StrAppend(&head, " in ", PhaseLabel(Text(st, "phase")));
  absl::StrAppend(&head, ", ", FormatRate(Number(st, "samples_per_s")), ", ",
                  FormatSeconds(Number(st, "wall_s")), " since the start.");
  out.push_back(head);
  if (const double acc = Number(st, "last_val_acc"); std::isfinite(acc)) {
    out.push_back(absl::StrCat("Last evaluation: validation accuracy ", FormatPercent(acc),
                               ", loss ", FormatSignificant(Number(st, "last_val_loss"), 3), "."));
  }
  if (done) {
    std::string sw = "Switched to parameter servers";
    if (done->epoch) absl::StrAppend(&sw, " at epoch ", EpochText(*done->epoch));
    if (done->wall_s) absl::StrAppend(&sw, " after ", FormatSeconds(*done->wall_s));
    if (done->handover_s) absl::StrAppend(&sw, ", handover ", FormatSeconds(*done->handover_s));
    out.push_back(sw + ".");
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> SummaryFacts(const ReportInput& in) {
  std::vector<std::pair<std::string, std::string>> facts;
  const json& s = SummaryOrStatus(in);
  if (!s.is_object()) return facts;
  if (in.summary.is_object()) {
    const double workers = Number(s, "workers"), servers = Number(s, "parameter_servers");
    std::string job = absl::StrCat(Text(s, "arch"), " on ", Text(s, "dataset"));
    if (std::isfinite(workers)) {
      absl::StrAppend(&job, "; ", Plural(static_cast<int64_t>(workers), "worker", "workers"));
    }
    if (std::isfinite(servers) && servers > 0) {
      absl::StrAppend(
          &job, ", ",
          Plural(static_cast<int64_t>(servers), "parameter server", "parameter servers"));
    }
    facts.emplace_back("Job", job);
  }
  if (!Text(s, "strategy").empty()) facts.emplace_back("Strategy", Text(s, "strategy"));
  if (in.summary.is_object()) {
    std::vector<std::string> rates;
    if (s.contains("samples_per_s") && s["samples_per_s"].is_object()) {
      for (const char* phase : {"allreduce", "ps"}) {
        if (const double r = Number(s["samples_per_s"], phase); std::isfinite(r)) {
          rates.push_back(absl::StrCat(PhaseLabel(phase), " ", FormatRate(r)));
        }
      }
    }
    if (!rates.empty()) facts.emplace_back("Throughput", absl::StrJoin(rates, "; "));
    const double restarts = Number(s, "restarts"), resumes = Number(s, "resumes");
    facts.emplace_back(
        "Restarts",
        restarts > 0 ? absl::StrCat(FormatFixed(restarts, 0), " (see the timeline)") : "none");
    if (resumes > 0)
      facts.emplace_back("Resumed", Plural(static_cast<int64_t>(resumes), "time", "times"));
    if (!Text(s, "failed_process").empty()) {
      facts.emplace_back("Failed process", Text(s, "failed_process"));
    }
    if (s.contains("pdp_rounds") && s["pdp_rounds"].is_object()) {
      const json& p = s["pdp_rounds"];
      facts.emplace_back(
          "PDP rounds",
          absl::StrCat(FormatFixed(Number(p, "rounds"), 0), " rounds, K* ",
                       FormatFixed(Number(p, "k_star"), 0), "; each round's count within ",
                       FormatPercent(Number(p, "count_error_mean"), 1), " of K* on average"));
    }
  }
  return facts;
}

// The charts of an epoch-based run: loss and accuracy against epoch and wall time, each worker's
// samples/s.
std::string AllCharts(const ReportInput& in, const Markers& markers) {
  ChartSeries val_loss = NamedSeries("validation loss", PaletteColor(0));
  ChartSeries train_loss = NamedSeries("training loss", PaletteColor(1));
  ChartSeries val_acc = NamedSeries("validation accuracy", PaletteColor(2));
  ChartSeries val_loss_t = val_loss, train_loss_t = train_loss, val_acc_t = val_acc;
  for (const json& m : in.metrics) {
    const double e = Number(m, "epoch"), t = Number(m, "wall_s");
    val_loss.points.emplace_back(e, Number(m, "val_loss"));
    train_loss.points.emplace_back(e, Number(m, "train_loss"));
    val_acc.points.emplace_back(e, Number(m, "val_acc"));
    val_loss_t.points.emplace_back(t, Number(m, "val_loss"));
    train_loss_t.points.emplace_back(t, Number(m, "train_loss"));
    val_acc_t.points.emplace_back(t, Number(m, "val_acc"));
  }
  std::string html = "<h2>Charts</h2><div class='charts'>";
  LineChartOptions o;
  o.title = "Loss against epoch";
  o.css_class = "loss-epoch";
  o.x_label = "epoch";
  html += LineChart(o, {val_loss, train_loss}, markers.by_epoch);
  o.title = "Validation accuracy against epoch";
  o.css_class = "accuracy-epoch";
  html += LineChart(o, {val_acc}, markers.by_epoch);
  o.title = "Loss against wall time";
  o.css_class = "loss-time";
  o.x_label = "seconds since the run started";
  o.x_from_zero = true;
  html += LineChart(o, {val_loss_t, train_loss_t}, markers.by_time);
  o.title = "Validation accuracy against wall time";
  o.css_class = "accuracy-time";
  html += LineChart(o, {val_acc_t}, markers.by_time);
  o.title = "Samples/s of each worker against wall time";
  o.css_class = "throughput-time";
  o.y_from_zero = true;
  o.empty_text = in.metrics.empty() ? "no data yet" : "not recorded by this run";
  html += LineChart(o, WorkerThroughput(in.metrics), markers.by_time);
  html +=
      "</div><p class='note'>Samples/s of each worker: its steps between two evaluations over the "
      "time between them, so a straggler shows as a lower line once the workers no longer wait "
      "for each other (after the switch to parameter servers).</p>";
  return html;
}

std::string RenderReportHtml(const ReportInput& in) {
  const bool ended = RunHasEnded(in);
  const Markers markers = MarkersOf(in.events);

  std::string html = absl::StrCat(
      "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
      ended ? ""
            : absl::StrFormat("<meta http-equiv='refresh' content='%d'>", kReportRefreshSeconds),
      "<title>", HtmlEscape(in.title), "</title><style>",
      "body{font-family:sans-serif;margin:24px;color:#222;max-width:1000px}"
      "h1{margin-bottom:4px}.sub{color:#555;margin-top:0}"
      "table{border-collapse:collapse;margin:6px 0}td,th{border:1px solid #ccc;padding:3px 8px;"
      "text-align:left;font-size:13px;vertical-align:top}td.n{text-align:right;"
      "white-space:nowrap;font-variant-numeric:tabular-nums}th{background:#f4f4f4}"
      "table.facts th{background:none;font-weight:normal;color:#555}"
      ".headline{font-size:17px;margin:4px 0}.charts{display:flex;flex-wrap:wrap;gap:16px}"
      ".note{color:#555;font-size:13px}.live{color:#a15c00}"
      "pre{background:#f6f6f6;padding:8px;font-size:12px;overflow:auto}"
      "</style></head><body data-state='",
      HtmlEscape(ended ? Text(SummaryOrStatus(in), "state") : "running"), "'><h1>",
      HtmlEscape(in.title), "</h1><p class='sub'>Run directory <code>", HtmlEscape(in.run_dir),
      "</code></p>");

  const bool stream = IsStreamRun(in);
  html += "<h2>Summary</h2>";
  for (const std::string& sentence :
       stream ? StreamSummarySentences(in) : SummarySentences(in)) {
    absl::StrAppend(&html, "<p class='headline'>", HtmlEscape(sentence), "</p>");
  }
  if (!ended) {
    absl::StrAppend(&html, "<p class='live'>The run is going on: this page reloads every ",
                    kReportRefreshSeconds, " s, and stops once the run has ended.</p>");
  }
  const auto facts = SummaryFacts(in);
  if (!facts.empty()) {
    html += "<table class='facts'>";
    for (const auto& [label, value] : facts) {
      absl::StrAppend(&html, "<tr><th>", HtmlEscape(label), "</th><td>", HtmlEscape(value),
                      "</td></tr>");
    }
    html += "</table>";
  }
  html += PerWorkerTable(in.summary);

  if (stream) {
    html += StreamChartsAndReplicas(in, markers.by_time);
  } else {
    html += AllCharts(in, markers);
  }



  html += "<h2>Timeline</h2>";
  const std::vector<TimelineRow> timeline = Timeline(in.events, in.summary);
  if (timeline.empty()) {
    html += "<p>No event yet.</p>";
  } else {
    html += "<table class='timeline'><tr><th>time</th><th>phase</th><th>what happened</th></tr>";
    for (const TimelineRow& r : timeline) {
      absl::StrAppend(&html, "<tr class='event-", HtmlEscape(r.event), "'><td class='n'>",
                      FormatSeconds(r.wall_s), "</td><td>", HtmlEscape(r.phase), "</td><td>",
                      HtmlEscape(r.what), "</td></tr>");
    }
    html += "</table>";
  }
  if (!stream) html += "<h2>Evaluations</h2>" + EvaluationTable(in);
  html += ProcessTable(in.summary);
  absl::StrAppend(&html, "<h2>Job</h2><details><summary>job.yaml</summary><pre>",
                  HtmlEscape(in.job_yaml), "</pre></details>");
  if (!in.written_at.empty()) {
    absl::StrAppend(&html, "<p class='note'>Written ", HtmlEscape(in.written_at),
                    " from the files of the run directory; <code>strata report</code> writes it "
                    "again.</p>");
  }
  return html + "</body></html>\n";
}

absl::Status WriteRunReport(const std::string& run_dir) {
  RunPaths paths(run_dir);
  ReportInput in;
  auto job = ReadFile(paths.job_yaml);
  if (!job.ok())
    return absl::NotFoundError(absl::StrCat(run_dir, " is not a run directory (no job.yaml)"));
  in.job_yaml = *job;
  in.run_dir = run_dir;
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
  auto parse = [](const std::string& path) {
    auto text = ReadFile(path);
    if (!text.ok()) return json(nullptr);
    json j = json::parse(*text, nullptr, /*allow_exceptions=*/false);
    return j.is_object() ? j : json(nullptr);
  };
  in.summary = parse(paths.summary);
  in.status = parse(paths.status);
  const std::string name = Text(SummaryOrStatus(in), "name");
  in.title = absl::StrCat("Strata run ", name.empty() ? run_dir : name);
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  char when[64] = "";
  if (::localtime_r(&now, &local) != nullptr) {
    std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &local);
  }
  in.written_at = when;
  // A line that is not an object is no record of this run (a torn or foreign line): left out.
  for (std::vector<json>* lines : {&in.metrics, &in.events}) {
    lines->erase(
        std::remove_if(lines->begin(), lines->end(), [](const json& j) { return !j.is_object(); }),
        lines->end());
  }
  std::string html;
  try {
    html = RenderReportHtml(in);
  } catch (const json::exception& e) {
    // The readers of the record's typed events take a value of another type for an error.
    return absl::DataLossError(absl::StrCat("cannot write the report of ", run_dir,
                                            ": a record file holds a value of an unexpected type (",
                                            e.what(), ")"));
  }
  return WriteFileAtomic(paths.report, html);
}

}  // namespace strata
