// `strata sweep`: the I/O around the pure sweep layers. It checks the sweep file and every cell's
// resolved job (by the code `strata validate` uses) before anything runs, then runs each cell x
// seed as a child `strata run BASE --set ... --out OUT/runs/<cell>/seed-<s>` (at most `parallel`
// at a time), shows progress from the running child's metrics.jsonl, and writes OUT/results.csv,
// OUT/summary.csv and, when asked, OUT/report.html. Ctrl-C (SIGINT or SIGTERM) is forwarded to
// the running children, which end their runs; their directories stay marked incomplete and are
// run again by the next invocation, while every finished run is kept.
#pragma once

#include <chrono>
#include <string>

namespace strata::sweep {

struct SweepOptions {
  std::string sweep_path;
  std::string out_dir;      // empty: the file's `out:`, else runs/sweep-<name>
  bool report = false;      // also write OUT/report.html
  bool check_only = false;  // check the file and every cell's job, list the runs, run nothing
  std::string strata_exe;   // the `strata` binary the runs use (this one: /proc/self/exe)
  // `--hosts FILE` for every run: each spreads its processes over these emulated hosts
  // (docs/user-guide.md, "On emulated hosts"); the sweep runs on the head, as `strata run` must.
  std::string hosts_file;
  // How long a run may take to stop after Ctrl-C has been forwarded before it is killed.
  std::chrono::milliseconds stop_grace{120000};
};

// Returns the exit code: 0 every run succeeded, 1 some run failed, 2 the sweep file (or a cell's
// job) is invalid and nothing ran, 130 interrupted.
int RunSweep(const SweepOptions& options);

// `strata sweep --report OUT`: rebuilds results.csv, summary.csv and report.html of an existing
// sweep directory without running anything. 0 on success, 2 if OUT holds no sweep.
int ReportSweep(const std::string& out_dir);

// The running executable's path (readlink of /proc/self/exe), "" if unknown.
std::string SelfExecutable();

}  // namespace strata::sweep
