#include "orchestrator/sweep/sweep_runner.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <thread>

#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>
#include <absl/strings/str_join.h>
#include <absl/strings/str_split.h>

#include "orchestrator/plan/job_checks.h"
#include "orchestrator/sweep/sweep_plan.h"
#include "orchestrator/sweep/sweep_report.h"
#include "orchestrator/sweep/sweep_results.h"
#include "orchestrator/sweep/sweep_spec.h"
#include "services/common/base/files.h"
#include "services/common/base/metrics.h"
#include "services/common/base/run_directory.h"
#include "services/common/process/child_process.h"
#include "services/common/process/interrupt.h"

namespace strata::sweep {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

// metrics.jsonl as far as it is readable: a run writes it while we read, so a torn last line is
// skipped rather than failing the whole file.
std::vector<nlohmann::json> ReadMetrics(const std::string& path) {
  std::vector<nlohmann::json> lines;
  auto text = ReadFile(path);
  if (!text.ok()) return lines;
  for (absl::string_view line : absl::StrSplit(*text, '\n', absl::SkipEmpty())) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_discarded()) lines.push_back(std::move(j));
  }
  return lines;
}

RunDirState ReadRunDir(const std::string& dir) {
  RunDirState state;
  std::error_code ec;
  state.exists = std::filesystem::is_directory(dir, ec) && !std::filesystem::is_empty(dir, ec);
  if (!state.exists) return state;
  nlohmann::json record = ReadJsonFile(absl::StrCat(dir, "/", kRunRecordFile));
  if (record.is_object()) state.record = record;
  nlohmann::json summary = ReadJsonFile(RunPaths(dir).summary);
  if (summary.is_object() && summary.contains("state") && summary["state"].is_string()) {
    state.summary_state = summary["state"].get<std::string>();
  }
  return state;
}

// One run's row, from whatever its directory holds.
RunResult CollectResult(const SweepSpec& spec, const PlannedRun& run,
                        const std::optional<nlohmann::json>& planned_record) {
  const RunDirState found = ReadRunDir(run.dir);
  const std::string& cell = spec.cells[run.cell].name;
  if (!found.exists) {
    RunResult r;
    r.cell = cell;
    r.seed = run.seed;
    r.state = "pending";
    return r;
  }
  RunPaths paths(run.dir);
  RunResult r = ResultFromRunFiles(cell, run.seed, ReadJsonFile(paths.summary),
                                   ReadMetrics(paths.metrics), spec.target_accuracy);
  if (planned_record) {
    const ResumeDecision d = DecideResume(found, *planned_record);
    if (d.action == ResumeAction::kRerun && r.state == "succeeded") r.state = "stale";
  }
  // A run killed without a chance to say so leaves "running" behind.
  if (r.state == "running") r.state = "incomplete";
  return r;
}

std::vector<RunResult> CollectResults(const SweepSpec& spec, const std::vector<PlannedRun>& runs,
                                      const std::vector<nlohmann::json>* planned_records) {
  std::vector<RunResult> results;
  for (size_t i = 0; i < runs.size(); ++i) {
    std::optional<nlohmann::json> planned;
    if (planned_records != nullptr) planned = (*planned_records)[i];
    results.push_back(CollectResult(spec, runs[i], planned));
  }
  return results;
}

// results.csv, summary.csv (and report.html); the summary table on stdout.
absl::Status WriteOutputs(const SweepSpec& spec, const std::string& out_dir,
                          const std::vector<RunResult>& results, bool report, bool print) {
  const SweepSummary summary = Summarize(spec, results);
  const std::string results_csv = absl::StrCat(out_dir, "/results.csv");
  const std::string summary_csv = absl::StrCat(out_dir, "/summary.csv");
  if (auto s = WriteFileAtomic(results_csv, ResultsCsv(spec, results)); !s.ok()) return s;
  if (auto s = WriteFileAtomic(summary_csv, SummaryCsv(summary)); !s.ok()) return s;
  const bool any = std::any_of(results.begin(), results.end(),
                               [](const RunResult& r) { return r.state == "succeeded"; });
  if (print) {
    std::printf("\n%s\n", any ? SummaryText(summary).c_str() : "no run has finished yet");
  }
  std::printf("results: %s\nsummary: %s\n", results_csv.c_str(), summary_csv.c_str());
  if (report) {
    const std::string html = absl::StrCat(out_dir, "/report.html");
    if (auto s = WriteFileAtomic(html, RenderSweepReportHtml(spec, results, summary)); !s.ok()) {
      return s;
    }
    std::printf("report:  %s\n", html.c_str());
  }
  return absl::OkStatus();
}

// Every cell's resolved job, checked as `strata validate` and `strata run` check it. A problem
// an override brought is blamed on the override's line in the sweep file; one the base job has
// on its own is reported once, against `base:`.
struct CellCheck {
  std::vector<std::string> errors;
  std::vector<int> epochs;  // per cell, for the progress line
};

CellCheck CheckCells(const SweepSpec& spec) {
  CellCheck out;
  JobCheckOptions base_only;
  base_only.for_run = true;
  std::set<std::string> base_errors;
  std::vector<std::string> errors;
  auto add = [&](const std::string& e) {
    if (std::find(errors.begin(), errors.end(), e) == errors.end()) errors.push_back(e);
  };
  auto base_job = LoadAndCheckJob(spec.base_path, base_only);
  if (!base_job.ok()) {
    if (!Exists(spec.base_path)) {
      out.errors.push_back(absl::StrCat(spec.origin, ":", spec.base_line,
                                        ": base: ", spec.base_path,
                                        " cannot be read: ", base_job.status().message()));
      return out;
    }
    for (absl::string_view line : absl::StrSplit(base_job.status().message(), '\n')) {
      base_errors.insert(std::string(line));
    }
  }
  for (const Cell& cell : spec.cells) {
    JobCheckOptions check;
    check.for_run = true;
    std::map<std::string, const Override*> by_assignment;
    for (const Override& o : cell.overrides) {
      check.overrides.push_back(o.Assignment());
      by_assignment[o.Assignment()] = &o;
    }
    check.overrides.push_back(absl::StrCat("training.seed=", spec.seeds.front()));
    auto job = LoadAndCheckJob(spec.base_path, check);
    out.epochs.push_back(job.ok() ? job->training().epochs() : 0);
    if (job.ok()) continue;
    for (absl::string_view view : absl::StrSplit(job.status().message(), '\n', absl::SkipEmpty())) {
      const std::string line(view);
      constexpr absl::string_view kFromSet = "(from --set ";
      if (absl::StartsWith(line, kFromSet)) {
        // "(from --set KEY=VALUE): key: what": the assignment is ours; values hold no "): ".
        const size_t close = line.find("): ");
        const std::string assignment = line.substr(kFromSet.size(), close - kFromSet.size());
        const std::string what = close == std::string::npos ? line : line.substr(close + 3);
        if (auto it = by_assignment.find(assignment); it != by_assignment.end()) {
          add(absl::StrCat(spec.origin, ":", it->second->line, ": ", it->second->where, ": ",
                           what));
          continue;
        }
      }
      if (base_errors.count(line)) {
        add(absl::StrCat(spec.origin, ":", spec.base_line, ": base: ", line));
      } else {
        add(absl::StrCat(spec.origin, ":", cell.line, ": ", cell.where, " (cell '", cell.name,
                         "'): the base job with this cell's overrides is invalid: ", line));
      }
    }
  }
  SortByLine(spec.origin, errors);
  out.errors = std::move(errors);
  return out;
}

// A run going on in a child `strata run`.
struct ActiveRun {
  size_t index = 0;
  std::unique_ptr<ChildProcess> child;
  Clock::time_point started;
};

class SweepLoop {
 public:
  SweepLoop(const SweepSpec& spec, const SweepOptions& options, std::vector<PlannedRun> runs,
            std::vector<nlohmann::json> records, std::vector<int> epochs)
      : spec_(spec),
        options_(options),
        runs_(std::move(runs)),
        records_(std::move(records)),
        epochs_(std::move(epochs)) {}

  // Runs what `todo` lists (indices into runs_); returns false if interrupted.
  bool Run(const std::vector<size_t>& todo, size_t already_done,
           const std::vector<ResumeAction>& actions) {
    done_ = already_done;
    start_ = Clock::now();
    size_t next = 0;
    bool interrupted = false;
    int forwarded = 0;
    Clock::time_point stop_asked;
    std::string last_line;
    Clock::time_point last_print;
    while (true) {
      if (const int count = InterruptCount(); count > forwarded) {
        if (!interrupted) {
          interrupted = true;
          stop_asked = Clock::now();
          std::printf(
              "\ninterrupted: stopping %zu running run(s); finished runs are kept, "
              "unfinished ones run again next time\n",
              active_.size());
          std::fflush(stdout);
        }
        // A second Ctrl-C means now.
        for (auto& a : active_) a.child->Signal(count >= 2 ? SIGKILL : Interrupted());
        forwarded = count;
      }
      if (interrupted && Seconds(stop_asked, Clock::now()) >
                             std::chrono::duration<double>(options_.stop_grace).count()) {
        for (auto& a : active_) a.child->Signal(SIGKILL);
      }
      while (!interrupted && active_.size() < static_cast<size_t>(spec_.parallel) &&
             next < todo.size()) {
        Start(todo[next], actions[todo[next]]);
        ++next;
      }
      for (auto it = active_.begin(); it != active_.end();) {
        if (it->child->Poll()) {
          Finish(*it, interrupted);
          it = active_.erase(it);
        } else {
          ++it;
        }
      }
      if (active_.empty() && (interrupted || next >= todo.size())) break;
      const std::string line = ProgressLine(todo.size() - next);
      const std::string key = line.substr(0, line.find(" | "));
      if (!interrupted && (key != last_line || Seconds(last_print, Clock::now()) > 30)) {
        std::printf("%s\n", line.c_str());
        std::fflush(stdout);
        last_line = key;
        last_print = Clock::now();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));  // polling children and files
    }
    return !interrupted;
  }

  int failed() const { return failed_; }

 private:
  void Start(size_t index, ResumeAction action) {
    const PlannedRun& run = runs_[index];
    std::error_code ec;
    if (action == ResumeAction::kRerun) std::filesystem::remove_all(run.dir, ec);
    nlohmann::json record = records_[index];
    record["complete"] = false;
    absl::Status s = MakeDirs(run.dir);
    if (s.ok()) s = WriteFileAtomic(absl::StrCat(run.dir, "/", kRunRecordFile), record.dump(2));
    SpawnOptions spawn;
    spawn.name = run.name;
    spawn.log_path = absl::StrCat(run.dir, "/strata-run.log");
    spawn.argv = {options_.strata_exe, "run", spec_.base_path};
    for (const std::string& a : run.assignments) spawn.argv.insert(spawn.argv.end(), {"--set", a});
    spawn.argv.insert(spawn.argv.end(), {"--out", run.dir});
    if (!options_.hosts_file.empty()) {
      spawn.argv.insert(spawn.argv.end(), {"--hosts", options_.hosts_file});
    }
    std::unique_ptr<ChildProcess> child;
    if (s.ok()) {
      auto spawned = ChildProcess::Spawn(spawn);
      if (spawned.ok()) {
        child = std::move(*spawned);
      } else {
        s = spawned.status();
      }
    }
    if (!s.ok()) {
      std::printf("run %s could not start: %s\n", run.name.c_str(),
                  std::string(s.message()).c_str());
      ++failed_;
      ++done_;
      return;
    }
    std::printf("start %s\n", run.name.c_str());
    active_.push_back(ActiveRun{index, std::move(child), Clock::now()});
  }

  void Finish(ActiveRun& a, bool interrupted) {
    const PlannedRun& run = runs_[a.index];
    const double took = Seconds(a.started, Clock::now());
    const nlohmann::json summary = ReadJsonFile(RunPaths(run.dir).summary);
    const std::string state = summary.is_object() ? summary.value("state", "") : "";
    if (a.child->exit_code() == 0 && state == "succeeded") {
      nlohmann::json record = records_[a.index];
      record["complete"] = true;
      if (auto s = WriteFileAtomic(absl::StrCat(run.dir, "/", kRunRecordFile), record.dump(2));
          !s.ok()) {
        std::printf("warning: %s: %s (the run will be repeated next time)\n", run.name.c_str(),
                    std::string(s.message()).c_str());
      }
      finished_s_.push_back(took);
      ++done_;
      if (summary.value("strategy", "") == "stream") {
        std::printf("done  %s in %s: %.0f events/s, accuracy before training %.4f\n",
                    run.name.c_str(), FormatDuration(took).c_str(),
                    summary.value("events_per_s", 0.0), summary.value("prequential_accuracy", 0.0));
        return;
      }
      std::printf(
          "done  %s in %s: final val_acc %s\n", run.name.c_str(), FormatDuration(took).c_str(),
          summary.contains("final_val_acc") ? summary["final_val_acc"].dump().c_str() : "--");
      return;
    }
    if (interrupted) {
      std::printf("stopped %s (%s); it runs again next time\n", run.name.c_str(),
                  a.child->ExitDescription().c_str());
      return;
    }
    ++failed_;
    ++done_;
    finished_s_.push_back(took);
    std::printf("FAILED %s (%s): see %s/strata-run.log\n%s\n", run.name.c_str(),
                a.child->ExitDescription().c_str(), run.dir.c_str(),
                LogTail(absl::StrCat(run.dir, "/strata-run.log"), 600).c_str());
  }

  std::string ProgressLine(size_t not_started) {
    std::vector<std::string> running;
    std::vector<double> elapsed;
    for (const ActiveRun& a : active_) {
      const PlannedRun& run = runs_[a.index];
      std::vector<nlohmann::json> metrics = ReadMetrics(RunPaths(run.dir).metrics);
      std::string where = "starting";
      if (!metrics.empty()) {
        const nlohmann::json& m = metrics.back();
        // A stream run's lines count events, not epochs.
        where = m.contains("events_trained")
                    ? absl::StrFormat("%s events", m["events_trained"].dump())
                    : absl::StrFormat("epoch %s/%d", m.contains("epoch") ? m["epoch"].dump() : "?",
                                      epochs_[run.cell]);
        if (m.contains("val_acc") && m["val_acc"].is_number()) {
          absl::StrAppendFormat(&where, " val_acc %.4f", m["val_acc"].get<double>());
        }
      }
      running.push_back(absl::StrCat(run.name, " (", where, ")"));
      elapsed.push_back(Seconds(a.started, Clock::now()));
    }
    const auto eta = EstimateRemainingSeconds(finished_s_, static_cast<int>(not_started), elapsed,
                                              spec_.parallel);
    return absl::StrFormat("[%zu/%zu done] running %s | elapsed %s | ETA %s", done_, runs_.size(),
                           running.empty() ? "-" : absl::StrJoin(running, ", "),
                           FormatDuration(Seconds(start_, Clock::now())),
                           eta ? FormatDuration(*eta) : "after the first run");
  }

  const SweepSpec& spec_;
  const SweepOptions& options_;
  std::vector<PlannedRun> runs_;
  std::vector<nlohmann::json> records_;
  std::vector<int> epochs_;
  std::vector<ActiveRun> active_;
  std::vector<double> finished_s_;
  size_t done_ = 0;
  int failed_ = 0;
  Clock::time_point start_;
};

int CoreCount() {
  const long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

}  // namespace

std::string SelfExecutable() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

int RunSweep(const SweepOptions& options) {
  auto text = ReadFile(options.sweep_path);
  if (!text.ok()) {
    std::fprintf(stderr, "strata sweep: %s\n", std::string(text.status().message()).c_str());
    return 2;
  }
  auto parsed = ParseSweepSpec(*text, options.sweep_path, {.cores = CoreCount()});
  if (!parsed.ok()) {
    std::fprintf(stderr, "strata sweep: %s is not a valid sweep; nothing was run:\n%s\n",
                 options.sweep_path.c_str(), std::string(parsed.status().message()).c_str());
    return 2;
  }
  const SweepSpec& spec = *parsed;
  CellCheck check = CheckCells(spec);
  if (!check.errors.empty()) {
    std::fprintf(stderr, "strata sweep: %s is not a valid sweep; nothing was run:\n%s\n",
                 options.sweep_path.c_str(), absl::StrJoin(check.errors, "\n").c_str());
    return 2;
  }
  const std::string out_dir = !options.out_dir.empty() ? options.out_dir
                              : !spec.out.empty()      ? spec.out
                                                       : absl::StrCat("runs/sweep-", spec.name);
  auto base_text = ReadFile(spec.base_path);
  if (!base_text.ok()) {
    std::fprintf(stderr, "strata sweep: %s\n", std::string(base_text.status().message()).c_str());
    return 2;
  }
  const std::vector<PlannedRun> runs = PlanRuns(spec, out_dir);
  const uint64_t fingerprint = Fingerprint(*base_text);
  std::vector<nlohmann::json> records;
  std::vector<ResumeAction> actions;
  std::vector<size_t> todo;
  size_t kept = 0;
  for (size_t i = 0; i < runs.size(); ++i) {
    records.push_back(RunRecordJson(runs[i], spec.base_path, fingerprint, /*complete=*/true));
    const ResumeDecision d = DecideResume(ReadRunDir(runs[i].dir), records.back());
    actions.push_back(d.action);
    if (d.action == ResumeAction::kSkip) {
      ++kept;
      continue;
    }
    if (d.action == ResumeAction::kRerun && !options.check_only) {
      std::printf("%s %s\n", runs[i].name.c_str(), d.reason.c_str());
    }
    todo.push_back(i);
  }
  if (options.check_only) {
    std::printf("%s: ok: %zu cell(s) x %zu seed(s) = %zu run(s) into %s, %zu finished already\n",
                options.sweep_path.c_str(), spec.cells.size(), spec.seeds.size(), runs.size(),
                out_dir.c_str(), kept);
    for (const PlannedRun& run : runs) {
      std::printf("  %s: --set %s\n", run.name.c_str(),
                  absl::StrJoin(run.assignments, " --set ").c_str());
    }
    return 0;
  }
  if (auto s = MakeDirs(out_dir); !s.ok()) {
    std::fprintf(stderr, "strata sweep: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  if (auto s = WriteFileAtomic(absl::StrCat(out_dir, "/sweep.json"), SweepSpecToJson(spec).dump(2));
      !s.ok()) {
    std::fprintf(stderr, "strata sweep: %s\n", std::string(s.message()).c_str());
    return 2;
  }

  std::printf(
      "strata sweep: %s: %zu cell(s) x %zu seed(s) = %zu run(s), %zu finished earlier, "
      "%zu to run, %d at a time; base %s; out %s\n",
      spec.name.c_str(), spec.cells.size(), spec.seeds.size(), runs.size(), kept, todo.size(),
      spec.parallel, spec.base_path.c_str(), out_dir.c_str());
  std::fflush(stdout);

  InterruptOptions interrupt;
  interrupt.signals = {SIGINT, SIGTERM};
  InstallInterruptHandlers(interrupt);
  SweepOptions run_options = options;
  if (run_options.strata_exe.empty()) run_options.strata_exe = SelfExecutable();
  SweepLoop loop(spec, run_options, runs, records, check.epochs);
  const bool completed = loop.Run(todo, kept, actions);

  const std::vector<RunResult> results = CollectResults(spec, runs, &records);
  if (auto s = WriteOutputs(spec, out_dir, results, options.report, /*print=*/true); !s.ok()) {
    std::fprintf(stderr, "strata sweep: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  if (!completed) return 130;
  return loop.failed() > 0 ? 1 : 0;
}

int ReportSweep(const std::string& out_dir) {
  nlohmann::json j = ReadJsonFile(absl::StrCat(out_dir, "/sweep.json"));
  if (!j.is_object()) {
    std::fprintf(stderr,
                 "strata sweep --report: %s holds no sweep (no readable sweep.json); give the "
                 "sweep's output directory\n",
                 out_dir.c_str());
    return 2;
  }
  auto spec = SweepSpecFromJson(j);
  if (!spec.ok()) {
    std::fprintf(stderr, "strata sweep --report: %s/sweep.json: %s\n", out_dir.c_str(),
                 std::string(spec.status().message()).c_str());
    return 2;
  }
  const std::vector<PlannedRun> runs = PlanRuns(*spec, out_dir);
  const std::vector<RunResult> results = CollectResults(*spec, runs, nullptr);
  if (auto s = WriteOutputs(*spec, out_dir, results, /*report=*/true, /*print=*/true); !s.ok()) {
    std::fprintf(stderr, "strata sweep --report: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}

}  // namespace strata::sweep
